"""A row table of float32 features stored as block-wise 8- or 4-bit codes (a trainer's feature cache).

Format. Each row of ``width`` values is cut into ``ceil(width / block)`` blocks of ``block`` values;
the last block of a row may be shorter. Every block stores an fp16 minimum ``mn`` and an fp16
range ``rng``; value ``j`` of a block decodes to ``mn + code_j * (rng / (2^bits - 1))``. Codes are
packed 8/bits per byte (first code in the low bits, ``codec.pack_codes``), each row starting on a
byte boundary. Storage: ``codes`` uint8 [num_rows, ceil(width * bits / 8)], ``mn`` and ``rng``
fp16 [num_rows, blocks], so one row costs :func:`row_nbytes` bytes.

Why these choices:

* Blocks never straddle rows, so a row is self-contained: ``gather`` is three ``index_select`` calls
  (code rows, minimum rows, range rows) and a decode of only the gathered rows; writes of one chunk touch only
  that chunk's rows, so filling the table costs ~one chunk of transient memory.
* Rows start on a byte boundary (a 4-bit row of odd width wastes half a byte) so rows can be
  gathered as whole byte rows without bit shifting.
* A short last block is padded (for the statistics only) by repeating the row's last value, so
  padding never widens a block's range, and padded codes are not stored.
* fp16 rather than bf16 statistics: features are normally scaled (|x| and block ranges well below
  65504), and fp16's 11-bit significand makes the stat rounding ~2^-11 of the range, far below one
  8-bit step (2^-8); bf16's ~2^-8 rounding would cost up to a whole 8-bit step. Values or block
  ranges outside fp16 are refused (``ValueError``) instead of silently turning into inf.
* Minimum rounded down and range rounded up (``codec.round_stats``): every value lies inside the
  stored range, so codes never clip and the rounding grid is exactly the decode grid. A block
  whose value is representable in fp16 (0, 1, -2.5, ...) gets range 0 and decodes exactly; any
  other constant is off by less than one fp16 ulp of it.
* block=64 by default: 4 bytes of stats per 64 values (0.5 bit/value: +6% at 8 bits, +12.5% at 4),
  while an outlier only coarsens the step of its own 64 values.
* Rounding: 'nearest' (deterministic, |error| <= half a step) or 'stochastic' (unbiased over
  encodings, |error| < one step, ~2x the squared error). A cache encoded once and read every epoch
  keeps one fixed error per value, so stochastic rounding's unbiasedness never averages out there:
  'nearest' is the default; 'stochastic' only pays off if rows are re-encoded (refreshed) often.
* Decode is vectorized torch (uint8 -> float copy, or two strided nibble copies at 4 bits, then
  an in-place multiply and add per block). When ``stream_group()`` is nonzero the gathered rows
  are also a valid ``codec``/``native.dequantize`` stream, but that C kernel's scalar table loop
  measured 2-4x slower than this path on one thread, so it is not used.
"""
from __future__ import annotations

from typing import Optional

import torch

from dsgraph.compress.codec import pack_codes, round_stats

ROW_BITS = (4, 8)
ROUNDINGS = ("nearest", "stochastic")
MAX_WIDTH = 4096


def row_nbytes(width: int, bits: int, block: int = 64) -> int:
    """Bytes one row costs in the table (codes + fp16 stats); bits=32 means plain float32."""
    if bits == 32:
        return width * 4
    if bits not in ROW_BITS:
        raise ValueError(f"bits must be one of {ROW_BITS} or 32, got {bits}")
    if block < 1:
        raise ValueError(f"block must be positive, got {block}")
    return -(-width * bits // 8) + 4 * -(-width // block)


class QuantizedRows:
    """Rows of a float32 matrix, each row cut into blocks of `block` values (last block of a row may be shorter / padded within the row), stored as `bits`-bit codes with a per-block minimum and scale."""

    def __init__(self, num_rows: int, width: int, bits: int, block: int = 64,
                 rounding: str = "nearest") -> None:
        """Allocate an (all-zero, decoding to 0.0) table of ``num_rows`` rows of ``width`` values."""
        if bits not in ROW_BITS:
            raise ValueError(f"bits must be one of {ROW_BITS}, got {bits}")
        if not 1 <= width <= MAX_WIDTH:
            raise ValueError(f"width must be in 1..{MAX_WIDTH}, got {width}")
        if block < 1:
            raise ValueError(f"block must be positive, got {block}")
        if num_rows < 0:
            raise ValueError(f"num_rows must be >= 0, got {num_rows}")
        if rounding not in ROUNDINGS:
            raise ValueError(f"rounding must be one of {ROUNDINGS}, got {rounding!r}")
        self.num_rows, self.width, self.bits, self.block, self.rounding = num_rows, width, bits, block, rounding
        self.blocks = -(-width // block)
        self.row_bytes = -(-width * bits // 8)
        self.codes = torch.zeros(num_rows, self.row_bytes, dtype=torch.uint8)
        self.mn = torch.zeros(num_rows, self.blocks, dtype=torch.float16)
        self.rng = torch.zeros(num_rows, self.blocks, dtype=torch.float16)

    @property
    def nbytes(self) -> int:
        """Bytes held: packed codes plus fp16 minimum and range per block."""
        return self.codes.numel() + 2 * (self.mn.numel() + self.rng.numel())

    def write(self, start: int, rows: torch.Tensor, generator: Optional[torch.Generator] = None) -> None:
        """Encode float32 ``rows`` [k, width] into table rows start..start+k (stochastic uses ``generator``)."""
        if rows.dim() != 2 or rows.shape[1] != self.width:
            raise ValueError(f"rows must be [k, {self.width}], got {tuple(rows.shape)}")
        k = rows.shape[0]
        if start < 0 or start + k > self.num_rows:
            raise IndexError(f"rows {start}..{start + k} outside a table of {self.num_rows} rows")
        if k == 0:
            return
        x = rows.detach().to(device="cpu", dtype=torch.float32)
        finite = torch.isfinite(x).all(dim=1)
        if not bool(finite.all()):
            bad = int((~finite).nonzero()[0, 0])
            raise ValueError(f"row {start + bad} (rows[{bad}]) holds NaN or inf; refusing to cache it")
        padded_width = self.blocks * self.block
        if padded_width > self.width:  # repeat the last value: padding never widens a block's range
            x = torch.cat([x, x[:, -1:].expand(k, padded_width - self.width)], dim=1)
        blocks = x.view(k * self.blocks, self.block)
        mn, mx = torch.aminmax(blocks, dim=1)
        mn_s, r_s = round_stats(mn, mx, torch.float16)
        ok = (torch.isfinite(mn_s) & torch.isfinite(r_s)).view(k, self.blocks).all(dim=1)
        if not bool(ok.all()):
            bad = int((~ok).nonzero()[0, 0])
            raise ValueError(f"row {start + bad} (rows[{bad}]) has a value or block range beyond fp16 "
                             f"(65504); rescale the features before caching them")
        top = (1 << self.bits) - 1
        rf = r_s.float().unsqueeze(1)
        # Range-0 blocks (fp16-representable constants) get scale 0: code 0 decodes to mn exactly.
        inv = torch.where(rf > 0, top / rf.clamp_min(torch.finfo(torch.float32).tiny), torch.zeros_like(rf))
        s = (blocks - mn_s.float().unsqueeze(1)).mul_(inv)  # in [0, top] up to fp32 rounding
        if self.rounding == "nearest":
            s.add_(0.5)
        else:
            s.add_(torch.rand(s.shape, generator=generator))
        codes = s.floor_().clamp_(0, top).to(torch.uint8).view(k, padded_width)
        per = 8 // self.bits
        stored = self.row_bytes * per  # codes per row including the sub-byte tail
        if stored != padded_width:
            codes = codes[:, :stored] if stored < padded_width else torch.cat(
                [codes, codes.new_zeros(k, stored - padded_width)], dim=1)
        self.codes[start:start + k] = pack_codes(codes.reshape(-1), self.bits).view(k, self.row_bytes)
        self.mn[start:start + k] = mn_s.view(k, self.blocks)
        self.rng[start:start + k] = r_s.view(k, self.blocks)

    def stream_group(self) -> int:
        """Block length if gathered code rows form one codec stream of equal blocks, else 0."""
        if (self.width * self.bits) % 8:
            return 0
        if self.width % self.block == 0:
            return self.block
        return self.width if self.blocks == 1 else 0

    def gather(self, pos: torch.Tensor) -> torch.Tensor:
        """float32 [len(pos), width]: decoded rows at positions ``pos`` (int64)."""
        pos = pos.reshape(-1).long()
        k = pos.numel()
        if k == 0:
            return torch.empty(0, self.width, dtype=torch.float32)
        codes = self.codes.index_select(0, pos)
        mn = self.mn.index_select(0, pos)
        rng = self.rng.index_select(0, pos)
        return decode_rows(codes, mn, rng, self.width, self.bits, self.block)


def decode_rows(codes: torch.Tensor, mn: torch.Tensor, rng: torch.Tensor, width: int, bits: int,
                block: int) -> torch.Tensor:
    """Vectorized torch decode of gathered rows (codes [k, row_bytes], stats [k, blocks]) to [k, width]."""
    k, blocks = mn.shape
    top = (1 << bits) - 1
    if bits == 8:
        vals = codes.to(torch.float32)
    else:  # low nibble first; two strided copies beat codec.unpack_values' byte lookup ~3x
        vals = torch.empty(k, codes.shape[1], 2)
        vals[:, :, 0].copy_(codes & 15)
        vals[:, :, 1].copy_(codes >> 4)
        vals = vals.view(k, -1)
    if vals.shape[1] != width:  # a 4-bit row of odd width carries one padding nibble
        vals = vals[:, :width].contiguous()
    # In-place multiply and add per block (~2x faster than one broadcast addcmul on CPU); the
    # full blocks as a [k, full, block] view, a short last block separately: no padding copies.
    step, mnf = rng.float().div_(top), mn.float()
    full = width // block
    if full:
        body = vals[:, :full * block].view(k, full, block)
        body.mul_(step[:, :full].unsqueeze(2)).add_(mnf[:, :full].unsqueeze(2))
    if full < blocks:
        vals[:, full * block:].mul_(step[:, full:]).add_(mnf[:, full:])
    return vals
