"""Train/validation/test masks drawn by fractions (``dataset.split``) for files that carry none."""
from __future__ import annotations

from typing import Optional, Sequence

import numpy as np

MASKS = ("train_mask", "val_mask", "test_mask")


def random_split(n: int, fractions: Sequence[float], seed: int,
                 eligible: Optional[np.ndarray] = None) -> dict[str, np.ndarray]:
    """Disjoint boolean masks over ``n`` nodes holding ``fractions`` (train, val, test) of the
    ``eligible`` nodes (default: all), drawn by a permutation seeded with ``seed``.

    Counts are differences of the rounded cumulative fractions, so they never add up to more
    than the eligible nodes and the same arguments always give the same masks.
    """
    ids = np.arange(n) if eligible is None else np.flatnonzero(eligible)
    order = np.random.default_rng(seed).permutation(ids)
    bounds = np.minimum(np.rint(np.cumsum([0.0, *fractions]) * ids.size).astype(np.int64),
                        ids.size)
    masks = {}
    for key, lo, hi in zip(MASKS, bounds[:-1], bounds[1:]):
        mask = np.zeros(n, dtype=bool)
        mask[order[lo:hi]] = True
        masks[key] = mask
    return masks
