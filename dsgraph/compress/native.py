"""Fused C kernels of the codec for contiguous CPU tensors (``kernels.c``, built and loaded by
:class:`dsgraph.native.CLibrary`: compiled on first use into a cache folder, ``$DSGRAPH_KERNEL_CACHE``
to move it). Large tensors are split over ``torch.get_num_threads()`` threads. ``available()`` is
False when there is no compiler or ``DSGRAPH_NATIVE=0``; the codec then uses its pure-torch path
(also the path for CUDA tensors). Both paths write the same format: same statistics bit for bit,
same packing, codes from independent (differently generated) stochastic rounding.
"""
from __future__ import annotations

import ctypes
from pathlib import Path
from typing import Optional

import torch

from dsgraph.native import CLibrary, cache_dir, parallel as _parallel

SOURCE = Path(__file__).with_name("kernels.c")

_i64, _u64, _int, _ptr, _f32 = ctypes.c_int64, ctypes.c_uint64, ctypes.c_int, ctypes.c_void_p, ctypes.c_float
_SIGNATURES = {
    "dsq_quantize": (None, [_ptr, _i64, _i64, _int, _int, _ptr, _u64, _i64, _i64, _ptr, _ptr, _ptr]),
    "dsq_dequantize": (None, [_ptr, _i64, _i64, _int, _int, _ptr, _ptr, _ptr, _i64, _i64, _ptr]),
    "dsq_pack_positive": (None, [_ptr, _i64, _i64, _i64, _ptr]),
    "dsq_pack_nonzero": (_int, [_ptr, _i64, _i64, _i64, _ptr, ctypes.POINTER(_f32)]),
    "dsq_unpack_mask": (None, [_ptr, _i64, _i64, _i64, _f32, _ptr]),
    "dsq_relu_bits": (None, [_ptr, _i64, _i64, _i64, _ptr, _ptr]),
    "dsq_dropout_bits": (None, [_ptr, _i64, _i64, _i64, _u64, ctypes.c_uint32, _f32, _ptr, _ptr]),
    "dsq_mask_mul": (None, [_ptr, _ptr, _i64, _i64, _i64, _f32, _ptr]),
}
_LIB = CLibrary(SOURCE, "dsq", _SIGNATURES)
library, available, disabled, failure = _LIB.library, _LIB.available, _LIB.disabled, _LIB.failure
_build = _LIB.build
__all__ = ["available", "cache_dir", "dequantize", "disabled", "dropout_bits", "failure",
           "library", "mask_mul", "pack_nonzero", "pack_positive", "quantize", "relu_bits",
           "unpack_mask", "usable"]


def usable(t: torch.Tensor) -> bool:
    """True if ``t`` can go through the kernels: a float32 CPU tensor, kernels available."""
    return t.device.type == "cpu" and t.dtype == torch.float32 and available()


def _levels(levels: Optional[tuple], bits: int) -> Optional[ctypes.Array]:
    """Normalised levels as a C float array (None = uniform grid)."""
    if levels is None:
        return None
    assert len(levels) == 1 << bits
    return (ctypes.c_float * len(levels))(*levels)


def quantize(flat: torch.Tensor, group: int, bits: int, fp16: bool, seed: int,
             levels: Optional[tuple] = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Block-quantize a contiguous float32 CPU vector: (packed codes, mn bits, rng bits as int16)."""
    lib = library()
    assert lib is not None and flat.is_contiguous() and flat.dtype == torch.float32
    n = flat.numel()
    blocks = -(-n // group)
    codes = torch.zeros(-(-n * bits // 8), dtype=torch.uint8)
    mn = torch.empty(blocks, dtype=torch.int16)
    rng = torch.empty(blocks, dtype=torch.int16)
    args = (flat.data_ptr(), n, group, bits, int(fp16), _levels(levels, bits), seed & ((1 << 64) - 1))
    outs = (codes.data_ptr(), mn.data_ptr(), rng.data_ptr())
    # Threads must not share an output byte: split only where block starts are byte-aligned.
    align = 1 if (group * bits) % 8 == 0 else blocks
    _parallel(n, blocks, align, lambda b0, b1: lib.dsq_quantize(*args, b0, b1, *outs))
    return codes, mn, rng


def dequantize(codes: torch.Tensor, n: int, group: int, bits: int, fp16: bool, mn: torch.Tensor,
               rng: torch.Tensor, out: Optional[torch.Tensor] = None,
               levels: Optional[tuple] = None) -> torch.Tensor:
    """Inverse of :func:`quantize`: a float32 vector of ``n`` values (written to ``out`` if given)."""
    lib = library()
    assert lib is not None
    blocks = -(-n // group)
    out = torch.empty(n, dtype=torch.float32) if out is None else out
    assert out.is_contiguous() and out.numel() == n and out.dtype == torch.float32
    mn, rng = mn.contiguous(), rng.contiguous()
    args = (codes.data_ptr(), n, group, bits, int(fp16), _levels(levels, bits), mn.data_ptr(), rng.data_ptr())
    _parallel(n, blocks, 1, lambda b0, b1: lib.dsq_dequantize(*args, b0, b1, out.data_ptr()))
    return out


def pack_positive(x: torch.Tensor) -> torch.Tensor:
    """Bits of ``x > 0`` for a contiguous float32 CPU tensor (first value in the low bit)."""
    lib = library()
    assert lib is not None and x.is_contiguous()
    n = x.numel()
    out = torch.empty(-(-n // 8), dtype=torch.uint8)
    _parallel(n, out.numel(), 1, lambda q0, q1: lib.dsq_pack_positive(x.data_ptr(), n, q0, q1, out.data_ptr()))
    return out


def pack_nonzero(x: torch.Tensor) -> Optional[tuple[torch.Tensor, float]]:
    """(bits of ``x != 0``, c) if every nonzero value of ``x`` equals one c, else None."""
    lib = library()
    assert lib is not None and x.is_contiguous()
    n = x.numel()
    out = torch.empty(-(-n // 8), dtype=torch.uint8)

    def part(q0: int, q1: int) -> tuple[int, float]:
        value = ctypes.c_float(0.0)
        ok = lib.dsq_pack_nonzero(x.data_ptr(), n, q0, q1, out.data_ptr(), ctypes.byref(value))
        return ok, value.value

    parts = _parallel(n, out.numel(), 1, part)
    values = {v for ok, v in parts if v != 0.0}
    if not all(ok for ok, _ in parts) or len(values) > 1:
        return None
    return out, (values.pop() if values else 0.0)


def unpack_mask(bits: torch.Tensor, n: int, value: float, out: Optional[torch.Tensor] = None
                ) -> torch.Tensor:
    """float32 vector of ``n`` values: ``value`` where the bit is set, 0 elsewhere."""
    lib = library()
    assert lib is not None
    out = torch.empty(n, dtype=torch.float32) if out is None else out
    assert out.is_contiguous() and out.numel() == n and out.dtype == torch.float32
    _parallel(n, bits.numel(), 1,
              lambda q0, q1: lib.dsq_unpack_mask(bits.data_ptr(), n, q0, q1, value, out.data_ptr()))
    return out


def relu_bits(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(max(x, 0), bits of x > 0) of a contiguous float32 CPU tensor, in one pass."""
    lib = library()
    assert lib is not None and x.is_contiguous() and x.dtype == torch.float32
    n = x.numel()
    out = torch.empty_like(x)
    bits = torch.empty(-(-n // 8), dtype=torch.uint8)
    _parallel(n, bits.numel(), 1,
              lambda q0, q1: lib.dsq_relu_bits(x.data_ptr(), n, q0, q1, out.data_ptr(), bits.data_ptr()))
    return out, bits


def dropout_bits(x: torch.Tensor, p: float, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Inverted dropout of a contiguous float32 CPU tensor: (output, keep bits), in one pass."""
    lib = library()
    assert lib is not None and x.is_contiguous() and x.dtype == torch.float32 and 0 < p < 1
    n = x.numel()
    out = torch.empty_like(x)
    bits = torch.empty(-(-n // 8), dtype=torch.uint8)
    threshold = min(int(round(p * 2 ** 32)), 2 ** 32 - 1)
    scale = 1.0 / (1.0 - p)
    _parallel(n, bits.numel(), 1,
              lambda q0, q1: lib.dsq_dropout_bits(x.data_ptr(), n, q0, q1, seed & ((1 << 64) - 1),
                                                  threshold, scale, out.data_ptr(), bits.data_ptr()))
    return out, bits


def mask_mul(g: torch.Tensor, bits: torch.Tensor, scale: float) -> torch.Tensor:
    """``g * scale`` where the bit is set and 0 elsewhere (backward of relu_bits/dropout_bits)."""
    lib = library()
    assert lib is not None
    g = g.contiguous()
    n = g.numel()
    out = torch.empty_like(g)
    _parallel(n, bits.numel(), 1,
              lambda q0, q1: lib.dsq_mask_mul(g.data_ptr(), bits.data_ptr(), n, q0, q1, scale, out.data_ptr()))
    return out
