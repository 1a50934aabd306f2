"""How many bytes of remote feature rows one trainer may hold (``sampled.feature_memory_mb``).

The default is a quarter of the trainer's share of its partition's feature bytes: the job's
memory is then at most ~1/4 of the feature bytes above stock DistDGL's, whose trainers hold no
rows at all (the servers hold each row once), and quantized rows (``feature_cache_bits``) fill it
4-8x more densely. One function, so the trainer and the memory plan agree.
"""
from __future__ import annotations

from typing import Optional

from dsgraph.compress.rows import row_nbytes

MB = 1 << 20
ID_BYTES = 8  # the cache's sorted int64 id per row, counted in the budget
DEFAULT_SHARE = 0.25  # of the trainer's share of its partition's feature bytes


def feature_budget_bytes(memory_mb: Optional[float], own_rows: int, row_bytes: int,
                         trainers_per_machine: int) -> int:
    """Bytes of cached remote rows per trainer: ``memory_mb`` MiB when set, else
    :data:`DEFAULT_SHARE` of ``own_rows`` rows of ``row_bytes`` bytes split over the machine's
    trainers."""
    if memory_mb is not None:
        return int(memory_mb * MB)
    return int(DEFAULT_SHARE * own_rows * row_bytes / max(trainers_per_machine, 1))


def cache_row_bytes(width: int, bits: int, value_bytes: int = 4) -> int:
    """Bytes one cached row of ``width`` values costs, its id included: ``value_bytes`` per
    value kept exact (``bits`` 32), else the quantized row (:func:`row_nbytes`)."""
    return (width * value_bytes if bits == 32 else row_nbytes(width, bits)) + ID_BYTES
