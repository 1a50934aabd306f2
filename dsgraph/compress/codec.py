"""Block-wise (i-EXACT) and row-wise (EXACT) b-bit quantization with unbiased stochastic rounding.

A tensor is flattened and cut into blocks of G values (row-wise mode: one block per leading-dim
row); the last block is padded by repeating its last value so padding never widens its range.
Each block stores its minimum and range in fp16/bf16, rounded *before* quantizing (minimum down,
range up) so every value lies inside the stored range and the dequantization grid is exactly the
one used for rounding: that keeps E[dequantize(quantize(x))] = x. Codes are clamped to
[0, 2^bits - 1] and packed 8/bits per uint8.

Two implementations write the same format. Float32 CPU tensors go through
fused C kernels (``native.py``: one pass per block, randomness from a hash of (seed, index) with
the seed drawn from the caller's generator; rounding probability exact to 2^-25 of a step). Other
tensors (CUDA, no C compiler, ``DSGRAPH_NATIVE=0``) use the vectorized pure-torch
path, whose random numbers come from the caller-supplied ``torch.Generator`` as 16-bit uniforms
(four per int64 draw: about half the cost of float ``torch.rand``), exact to 2^-17 of a step. Both
are far below the statistical noise of any test or training run.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Callable, Optional

import torch
import torch.nn.functional as F

from dsgraph.compress import native
from dsgraph.compress.levels import int2_levels, stochastic_round_levels

STATS_DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16}
BITS = (1, 2, 4, 8)


@dataclass(frozen=True)
class QuantSpec:
    """How to quantize: bits, block length (0 = per row), levels, stats dtype, projection."""

    bits: int = 2
    block_size: int = 256
    levels: str = "uniform"  # or "optimal" (INT2 only)
    stats_dtype: torch.dtype = torch.bfloat16
    projection: float = 1.0  # kept fraction of columns for EXACT's random projection (1 = off)

    def __post_init__(self) -> None:
        if self.bits not in BITS:
            raise ValueError(f"bits must be one of {BITS}, got {self.bits}")
        if self.block_size != 0 and not 1 <= self.block_size <= 1 << 20:
            raise ValueError(f"block_size must be 0 (per row) or positive, got {self.block_size}")
        if self.levels not in ("uniform", "optimal"):
            raise ValueError(f"levels must be 'uniform' or 'optimal', got {self.levels!r}")
        if self.levels == "optimal" and self.bits != 2:
            raise ValueError("optimal (non-uniform) levels are defined for bits=2 only")
        if not 0 < self.projection <= 1:
            raise ValueError(f"projection must be in (0, 1], got {self.projection}")


@dataclass
class QTensor:
    """A quantized tensor: packed codes plus per-block minimum and range."""

    codes: torch.Tensor  # uint8, ceil(n * bits / 8) bytes
    mn: torch.Tensor  # per-block minimum (stats dtype), rounded down
    rng: torch.Tensor  # per-block range (stats dtype), rounded up
    numel: int  # values quantized (after projection)
    group: int  # block length G (row length in row-wise mode)
    bits: int
    levels: Optional[tuple]  # normalised levels in [0, 2^bits - 1]; None = uniform
    shape: torch.Size  # shape returned by dequantize
    dtype: torch.dtype  # dtype returned by dequantize
    proj: Optional[tuple] = None  # (seed, rows, in_dim, kept_dim) when randomly projected

    @property
    def nbytes(self) -> int:
        """Bytes held: packed codes plus block statistics (the projection is stored as a seed)."""
        return (self.codes.numel() + self.mn.numel() * self.mn.element_size()
                + self.rng.numel() * self.rng.element_size())


def packed_nbytes(numel: int, bits: int, group: int, stats_bytes: int = 2) -> int:
    """Exact bytes of a QTensor of ``numel`` values: ceil(n*bits/8) + 2*stats_bytes*ceil(n/G)."""
    return -(-numel * bits // 8) + 2 * stats_bytes * -(-numel // group)


def random_u16(n: int, generator: torch.Generator, device: torch.device) -> torch.Tensor:
    """``n`` uniform int16 values in [-2^15, 2^15) drawn four per int64 (fast on CPU)."""
    words = torch.empty(-(-n // 4), dtype=torch.int64, device=device)
    words.random_(-(2 ** 63), 2 ** 63 - 1, generator=generator)
    return words.view(torch.int16)[:n]


def _next_toward(x: torch.Tensor, cond: torch.Tensor, direction: float) -> torch.Tensor:
    """Step the entries of ``x`` where ``cond`` holds by one ulp towards ``direction``."""
    return torch.where(cond, torch.nextafter(x, torch.full_like(x, direction)), x)


def _round_bf16(x: torch.Tensor, down: bool) -> torch.Tensor:
    """fp32 -> the bf16 value next below (``down``) or above, computed on the fp32 bit pattern.

    bf16 is the top half of an fp32 word: truncating the low 16 bits rounds towards zero, and
    one unit of the kept half is one bf16 ulp (bf16 ops on CPU are slow; int32 ops are not).
    """
    bits = x.view(torch.int32)
    kept = bits & -65536
    inexact = (bits & 65535) != 0
    # Truncation moved a value towards zero: step one ulp away from zero where that was wrong.
    away = inexact & ((x < 0) if down else (x > 0))
    return (kept + away.int() * 65536).view(torch.float32).to(torch.bfloat16)


def round_stats(mn: torch.Tensor, mx: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """Block minimum rounded down and range rounded up to ``dtype`` so [mn, mn+rng] covers [mn, mx]."""
    if dtype == torch.bfloat16:
        mn_s = _round_bf16(mn.contiguous(), down=True)
        r_s = _round_bf16((mx - mn_s.float()).contiguous(), down=False)
    else:
        mn_s = mn.to(dtype)
        mn_s = _next_toward(mn_s, mn_s.float() > mn, -math.inf)
        r = mx - mn_s.float()
        r_s = r.to(dtype)
        r_s = _next_toward(r_s, r_s.float() < r, math.inf)
    for _ in range(2):  # fp32 rounding of mn + rng may still fall an ulp short of mx
        r_s = _next_toward(r_s, (mn_s.float() + r_s.float()) < mx, math.inf)
    return mn_s, r_s


def _quant_blocks(blocks: torch.Tensor, bits: int, levels: Optional[tuple], stats_dtype: torch.dtype,
                  generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Quantize a (blocks, G) float32 matrix; returns (uint8 codes (blocks, G), mn, rng)."""
    top = (1 << bits) - 1
    mn, mx = torch.aminmax(blocks, dim=1)
    mn_s, r_s = round_stats(mn, mx, stats_dtype)
    rf = r_s.float().unsqueeze(1)
    # Constant blocks have range 0: scale 0 maps every value to code 0 (= mn), no inf/NaN.
    inv = torch.where(rf > 0, top / rf.clamp_min(torch.finfo(torch.float32).tiny), torch.zeros_like(rf))
    mnf = mn_s.float().unsqueeze(1)
    r16 = random_u16(blocks.numel(), generator, blocks.device).view(blocks.shape)
    if levels is None:
        # code = floor(s + u), s = (x - mn) * inv, u ~ U[0,1), computed in two passes as
        # trunc(x * inv + (0.5 + 2^-17 - mn * inv) + r / 2^16) with r ~ U{-2^15 .. 2^15 - 1}.
        # The fused form loses ~2^-24 * |x| / range of a step to cancellation (negligible for
        # activations); a result in (-1, 0) still truncates to code 0 and overflow is clamped.
        s = torch.add(mnf * -inv + (0.5 + 2.0 ** -17), r16, alpha=2.0 ** -16)
        s.addcmul_(blocks, inv)
        codes = s.to(torch.uint8)
    else:
        s = torch.sub(blocks, mnf).mul_(inv)  # >= 0 exactly: mn <= every value
        u = r16.float().add_(32768.5).mul_(2.0 ** -16)
        codes = stochastic_round_levels(s, levels, u)
    return codes.clamp_(max=top), mn_s, r_s


_WORD = {2: torch.int16, 4: torch.int32, 8: torch.int64}


def pack_codes(codes: torch.Tensor, bits: int) -> torch.Tensor:
    """Pack a flat uint8 tensor of ``bits``-bit codes, 8/bits per byte (first code in low bits).

    The 8/bits code bytes of one output byte are read as one little-endian integer word and
    gathered with a single multiply: byte i is shifted to bit 8*(per-1) + bits*i, the partial
    products never overlap (so nothing carries), and the top byte of the word is the result.
    """
    per = 8 // bits
    if per == 1:
        return codes.contiguous()
    pad = (-codes.numel()) % per
    if pad:
        codes = torch.cat([codes, codes.new_zeros(pad)])
    top = 8 * (per - 1)
    magic = sum(1 << (top + bits * i - 8 * i) for i in range(per))
    if per == 8:  # the int64 product wraps; write the magic as the signed int64 it stands for
        magic -= (1 << 64) if magic >= 1 << 63 else 0
    words = codes.contiguous().view(_WORD[per])
    return ((words * magic) >> top).to(torch.uint8)


@functools.lru_cache(maxsize=64)
def _lut(bits: int, values: tuple, device: str, dtype: torch.dtype) -> torch.Tensor:
    """(256, 8/bits) table: byte -> the level values of the codes it holds."""
    per = 8 // bits
    byte = torch.arange(256).unsqueeze(1)
    codes = (byte >> (torch.arange(per) * bits)) & ((1 << bits) - 1)
    return torch.tensor(values, dtype=torch.float64)[codes].to(device=device, dtype=dtype)


def unpack_values(packed: torch.Tensor, bits: int, values: tuple, n: int,
                  dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Decode ``n`` codes from ``packed`` straight to ``values[code]`` (one table lookup per byte)."""
    lut = _lut(bits, tuple(values), str(packed.device), dtype)
    return F.embedding(packed.int(), lut).view(-1)[:n]


def projection_matrix(seed: int, in_dim: int, kept: int, device: torch.device) -> torch.Tensor:
    """EXACT's Rademacher projection: entries +-1/sqrt(kept), so E[P P^T] = I; rebuilt from the seed."""
    gen = torch.Generator(device=device)
    gen.manual_seed(seed)
    signs = torch.randint(0, 2, (in_dim, kept), generator=gen, device=device, dtype=torch.int8)
    return signs.float().mul_(2.0 / math.sqrt(kept)).sub_(1.0 / math.sqrt(kept))


def quantize(x: torch.Tensor, spec: QuantSpec, generator: torch.Generator) -> QTensor:
    """Quantize ``x`` (any float dtype/device) per ``spec`` with randomness from ``generator``."""
    shape, dtype = x.shape, x.dtype
    rows = shape[0] if x.dim() >= 2 else 1
    width = x.numel() // max(rows, 1)
    flat = x.detach()
    proj = None
    kept = math.ceil(spec.projection * width)
    if spec.projection < 1 and x.dim() >= 2 and width >= 16 and kept < width:
        seed = int(torch.randint(0, 2 ** 62, (1,), generator=generator, device=generator.device).item())
        flat = flat.reshape(rows, width).float() @ projection_matrix(seed, width, kept, x.device)
        proj, width = (seed, rows, width, kept), kept
    flat = flat.reshape(-1)
    if flat.dtype != torch.float32:
        flat = flat.float()
    n = flat.numel()
    group = width if spec.block_size == 0 else spec.block_size
    group = max(min(group, n), 1)
    levels = None
    if spec.levels == "optimal":
        levels = int2_levels(group)
    if native.usable(flat):
        seed = int(torch.randint(-(2 ** 63), 2 ** 63 - 1, (1,), generator=generator).item())
        codes, mn16, rng16 = native.quantize(flat.contiguous(), group, spec.bits,
                                             spec.stats_dtype == torch.float16, seed, levels)
        return QTensor(codes, mn16.view(spec.stats_dtype), rng16.view(spec.stats_dtype), n, group,
                       spec.bits, levels, shape, dtype, proj)
    full = n // group
    parts, mns, rngs = [], [], []
    if full:
        c, m, r = _quant_blocks(flat[: full * group].view(full, group), spec.bits, levels,
                                spec.stats_dtype, generator)
        parts.append(c.view(-1))
        mns.append(m)
        rngs.append(r)
    if n > full * group:
        tail = flat[full * group:]
        padded = torch.cat([tail, tail[-1:].expand(group - tail.numel())]).view(1, group)
        c, m, r = _quant_blocks(padded, spec.bits, levels, spec.stats_dtype, generator)
        parts.append(c.view(-1)[: tail.numel()])
        mns.append(m)
        rngs.append(r)
    codes = parts[0] if len(parts) == 1 else torch.cat(parts)
    mn = mns[0] if len(mns) == 1 else torch.cat(mns)
    rng = rngs[0] if len(rngs) == 1 else torch.cat(rngs)
    return QTensor(pack_codes(codes, spec.bits), mn, rng, n, group, spec.bits, levels, shape, dtype, proj)


# Supplies a float32 CPU vector of n values to decode into (a buffer pool); None = allocate.
Buffer = Optional[Callable[[int], torch.Tensor]]


def dequantize(q: QTensor, buffer: Buffer = None) -> torch.Tensor:
    """Reconstruct an unbiased estimate of the quantized tensor (shape and dtype of the original)."""
    top = (1 << q.bits) - 1
    if q.codes.device.type == "cpu" and native.available():
        out = native.dequantize(q.codes, q.numel, q.group, q.bits, q.mn.dtype == torch.float16,
                                q.mn.view(torch.int16), q.rng.view(torch.int16),
                                None if buffer is None else buffer(q.numel), q.levels)
        return _finish(out, q)
    values = q.levels if q.levels is not None else tuple(float(i) for i in range(top + 1))
    vals = unpack_values(q.codes, q.bits, values, q.numel)
    mn = q.mn.float().unsqueeze(1)
    step = q.rng.float().unsqueeze(1) / top
    out = torch.empty(q.numel, dtype=torch.float32, device=q.codes.device)
    full = q.numel // q.group
    body = full * q.group
    if full:
        torch.addcmul(mn[:full], vals[:body].view(full, q.group), step[:full],
                      out=out[:body].view(full, q.group))
    if q.numel > body:
        torch.addcmul(mn[full:], vals[body:].view(1, -1), step[full:], out=out[body:].view(1, -1))
    return _finish(out, q)


def _finish(out: torch.Tensor, q: QTensor) -> torch.Tensor:
    """Undo the projection of a dequantized flat vector and restore shape and dtype."""
    if q.proj is not None:
        seed, rows, in_dim, kept = q.proj
        out = out.view(rows, kept) @ projection_matrix(seed, in_dim, kept, out.device).t()
    out = out.view(q.shape)
    return out if q.dtype == torch.float32 else out.to(q.dtype)


@dataclass
class PackedMask:
    """A tensor with values in {0, c} stored as 1 bit per element plus the scalar c."""

    bits: torch.Tensor  # uint8, ceil(n / 8)
    numel: int
    value: float
    shape: torch.Size
    dtype: torch.dtype

    @property
    def nbytes(self) -> int:
        """Bytes held: the packed bits (the scalar is a Python float)."""
        return self.bits.numel()


def pack_mask(mask: torch.Tensor, value: float, dtype: torch.dtype) -> PackedMask:
    """Pack a bool tensor losslessly as bits; unpacking yields ``value`` where true, 0 elsewhere."""
    flat = mask.reshape(-1)
    return PackedMask(pack_codes(flat.view(torch.uint8), 1), flat.numel(), float(value), mask.shape, dtype)


def pack_positive(t: torch.Tensor) -> PackedMask:
    """Lossless 1-bit mask of ``t > 0`` (unpacks to 1.0 / 0.0 in ``t``'s dtype)."""
    if native.usable(t):
        return PackedMask(native.pack_positive(t.contiguous()), t.numel(), 1.0, t.shape, t.dtype)
    return pack_mask(t > 0, 1.0, t.dtype)


def pack_two_valued(t: torch.Tensor) -> Optional[PackedMask]:
    """A lossless 1-bit PackedMask if ``t`` holds only {0, c} with one c > 0 (a dropout mask), else None."""
    flat = t.reshape(-1)
    head = flat[:4096]
    hmax = head.abs().amax()
    if not bool(((head == 0) | (head.abs() == hmax)).all()):
        return None  # cheap rejection of ordinary activations
    if native.usable(t):  # test and pack in one pass
        res = native.pack_nonzero(t.contiguous())
        if res is None or not 0 < res[1] < math.inf:
            return None
        return PackedMask(res[0], t.numel(), res[1], t.shape, t.dtype)
    c = flat.amax()
    if not bool(c > 0) or not bool(((flat == 0) | (flat == c)).all()):
        return None
    return pack_mask(t != 0, float(c), t.dtype)


def unpack_mask(p: PackedMask, buffer: Buffer = None) -> torch.Tensor:
    """The {0, value} tensor a PackedMask stores (bool dtype gives the mask itself)."""
    if p.dtype == torch.float32 and p.bits.device.type == "cpu" and native.available():
        out = None if buffer is None else buffer(p.numel)
        return native.unpack_mask(p.bits, p.numel, p.value, out).view(p.shape)
    if p.dtype == torch.bool:
        return unpack_values(p.bits, 1, (0.0, 1.0), p.numel, torch.uint8).view(p.shape).bool()
    return unpack_values(p.bits, 1, (0.0, p.value), p.numel, p.dtype).view(p.shape)
