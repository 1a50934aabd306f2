"""Byte and call counts of a compressed (or measured) forward pass."""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any


@dataclass
class SavedStats:
    """Byte and call counts of one compressed (or measured) forward pass."""

    saved_bytes: int = 0  # held for backward after packing, de-duplicated by storage
    fp32_bytes: int = 0  # what autograd would hold without packing (same tensors, same dedup)
    quantized: int = 0  # tensors stored as INT-b codes
    quantized_bytes: int = 0  # bytes of those codes and their statistics
    masks: int = 0  # tensors stored as lossless 1-bit masks
    exact: int = 0  # tensors kept as they are (small, integer, per-node scalars)
    parameters: int = 0  # saves of parameters (not counted in bytes)
    pack_calls: int = 0
    cache_hits: int = 0
    pack_s: float = 0.0  # seconds spent in pack (CPU clock; asynchronous on CUDA)
    unpack_s: float = 0.0

    @property
    def ratio(self) -> float:
        """fp32 bytes / bytes held (1.0 when nothing was saved)."""
        return self.fp32_bytes / self.saved_bytes if self.saved_bytes else 1.0

    def as_dict(self) -> dict[str, Any]:
        """Plain-data view (for metrics files and reports)."""
        return {**asdict(self), "ratio": self.ratio}
