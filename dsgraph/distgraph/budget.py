"""How many bytes of remote feature rows one trainer may hold (``sampled.feature_memory_mb``).

The default is a quarter of the trainer's share of its partition's feature bytes: the job's
memory is then at most ~1/4 of the feature bytes above stock DistDGL's, whose trainers hold no
rows at all (the servers hold each row once), and quantized rows (``feature_cache_bits``) fill it
4-8x more densely. One function, so the trainer and the memory plan agree.
"""
from __future__ import annotations

from typing import Optional

MB = 1 << 20
DEFAULT_SHARE = 0.25  # of the trainer's share of its partition's feature bytes


def feature_budget_bytes(memory_mb: Optional[float], own_rows: int, row_bytes: int,
                         trainers_per_machine: int) -> int:
    """Bytes of cached remote rows per trainer: ``memory_mb`` MiB when set, else
    :data:`DEFAULT_SHARE` of ``own_rows`` rows of ``row_bytes`` bytes split over the machine's
    trainers."""
    if memory_mb is not None:
        return int(memory_mb * MB)
    return int(DEFAULT_SHARE * own_rows * row_bytes / max(trainers_per_machine, 1))
