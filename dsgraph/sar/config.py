"""The ``sar`` config section."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from dsgraph.configfields import bound


@dataclass
class SarConfig:
    """Full-batch sequential aggregation and rematerialization.

    ``mode``: ``sar`` fetches one remote partition at a time and rematerializes non-linear
    aggregations in backward; ``sa`` keeps the fetched pieces for backward (more memory, no
    recompute); ``one_shot`` fetches every halo row of a layer at once (the naive baseline).
    """

    mode: Literal["sar", "sa", "one_shot"] = "sar"
    # Post the next ring round's transfers before aggregating this one (and let a gradient
    # round finish during the next shard): one more remote block alive; no faster on 2 cores.
    prefetch: bool = False
    eval_every: int = bound(1, ge=1)  # epochs between val/test accuracy evaluations
    timeout_s: float = bound(600.0, gt=0)  # gloo operation timeout: a dead peer fails, never hangs
