"""Fused C kernels of the codec for contiguous CPU tensors, compiled with the system C compiler.

``kernels.c`` is compiled on first use into a cache folder (``$DSGRAPH_KERNEL_CACHE``, else
``$XDG_CACHE_HOME/dsgraph/kernels`` or ``~/.cache/dsgraph/kernels``), named by a hash of the
source, the flags, the compiler and the CPU, written atomically so concurrent workers can build
it at the same time. It is called through ctypes, which releases the GIL, so large tensors are
split over ``torch.get_num_threads()`` Python threads. ``available()`` is False when there is no
compiler or ``DSGRAPH_NATIVE=0``; the codec then uses its pure-torch path (also the path for CUDA
tensors). Both paths write the same format: same statistics bit for bit, same packing, codes
from independent (differently generated) stochastic rounding.
"""
from __future__ import annotations

import contextlib
import ctypes
import hashlib
import os
import platform
import shutil
import subprocess
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable, Iterator, Optional

import torch

from dsgraph.fsutil import atomic_write_with

SOURCE = Path(__file__).with_name("kernels.c")
FLAGS = ["-O3", "-march=native", "-fPIC", "-shared", "-std=gnu11"]
# Below this many values a tensor is not split over threads (thread hand-off costs ~50 us).
_PARALLEL_MIN = 1 << 18

_lock = threading.Lock()
_lib: Optional[ctypes.CDLL] = None
_failed: Optional[str] = None
_pool: Optional[ThreadPoolExecutor] = None
_pool_size = 0
_pool_pid = 0
_disabled = 0  # > 0 inside disabled(): callers take the pure-torch path

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


def cache_dir() -> Path:
    """Folder holding compiled kernels."""
    env = os.environ.get("DSGRAPH_KERNEL_CACHE")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "dsgraph" / "kernels"


def _cpu_id() -> str:
    """The CPU's flags line: -march=native code must not run on another CPU sharing the cache."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return line
    except OSError:
        pass
    return platform.processor()


def _compiler() -> Optional[str]:
    return os.environ.get("CC") or shutil.which("gcc") or shutil.which("cc")


def _build() -> ctypes.CDLL:
    """Compile (or reuse) the shared library and load it."""
    cc = _compiler()
    if cc is None:
        raise RuntimeError("no C compiler (gcc/cc) on PATH")
    src = SOURCE.read_bytes()
    version = subprocess.run([cc, "--version"], capture_output=True, text=True, check=False).stdout
    key = hashlib.sha256(b"\0".join([src, " ".join(FLAGS).encode(), version.encode(),
                                     platform.machine().encode(), _cpu_id().encode()])).hexdigest()[:16]
    out = cache_dir() / f"dsq-{key}.so"
    if not out.exists():
        def compile_to(tmp: str) -> None:
            res = subprocess.run([cc, *FLAGS, "-o", tmp, str(SOURCE)], capture_output=True, text=True,
                                 check=False)
            if res.returncode != 0:
                raise RuntimeError(f"{cc} failed on {SOURCE}: {res.stderr.strip()[:500]}")

        # Atomic: a concurrent build of the same key writes the same bytes.
        atomic_write_with(out, compile_to, mode=0o755)
    lib = ctypes.CDLL(str(out))
    for name, (res_type, args) in _SIGNATURES.items():
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = res_type, args
    return lib


def library() -> Optional[ctypes.CDLL]:
    """The loaded kernels, building them on first call; None if disabled or the build failed."""
    global _lib, _failed
    if _lib is not None or _failed is not None:
        return _lib
    with _lock:
        if _lib is None and _failed is None:
            if os.environ.get("DSGRAPH_NATIVE", "1") == "0":
                _failed = "disabled by DSGRAPH_NATIVE=0"
            else:
                try:
                    _lib = _build()
                except (OSError, RuntimeError) as exc:
                    _failed = str(exc)
    return _lib


def available() -> bool:
    """True if the C kernels can be used (compiler present, not disabled)."""
    return _disabled == 0 and library() is not None


@contextlib.contextmanager
def disabled() -> Iterator[None]:
    """Inside this block the codec uses its pure-torch path (tests and profiles compare both)."""
    global _disabled
    _disabled += 1
    try:
        yield
    finally:
        _disabled -= 1


def failure() -> Optional[str]:
    """Why the kernels are unavailable (None if they are available or not tried yet)."""
    return _failed


def usable(t: torch.Tensor) -> bool:
    """True if ``t`` can go through the kernels: a float32 CPU tensor, kernels available."""
    return t.device.type == "cpu" and t.dtype == torch.float32 and available()


def _parallel(total: int, units: int, align: int, fn: Callable[[int, int], object]) -> list:
    """Run ``fn(u0, u1)`` over [0, units) split into chunks (boundaries multiples of ``align``)."""
    global _pool, _pool_size, _pool_pid
    threads = max(1, torch.get_num_threads())
    if threads == 1 or total < _PARALLEL_MIN or units < 2 * align:
        return [fn(0, units)]
    # A forked child inherits the pool object but not its threads: make a new one there.
    if _pool is None or _pool_size != threads or _pool_pid != os.getpid():
        with _lock:
            if _pool is None or _pool_size != threads or _pool_pid != os.getpid():
                _pool = ThreadPoolExecutor(threads, thread_name_prefix="dsq")
                _pool_size, _pool_pid = threads, os.getpid()
    step = -(-units // threads)
    step = -(-step // align) * align
    bounds = [(a, min(a + step, units)) for a in range(0, units, step)]
    futures = [_pool.submit(fn, a, b) for a, b in bounds[1:]]
    first = fn(*bounds[0])  # the calling thread takes a share too
    return [first] + [f.result() for f in futures]


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
