"""The ``compression`` config section."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from dsgraph.configfields import bound


@dataclass
class CompressionConfig:
    """Activation compression of tensors saved for backward (EXACT / i-EXACT)."""

    enabled: bool = False
    bits: Literal[1, 2, 4, 8] = 2
    block_size: int = bound(256, ge=32, le=4096)  # flat block length G
    granularity: Literal["block", "row"] = "block"  # row = EXACT-style per-node statistics
    levels: Literal["uniform", "optimal"] = "uniform"
    stats_dtype: Literal["float16", "bfloat16"] = "bfloat16"
    projection: float = bound(1.0, gt=0, le=1)  # kept fraction for EXACT's random projection
    min_numel: int = bound(4096, ge=0)
    seed: int = 0
