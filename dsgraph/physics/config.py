"""The ``physics`` config section (DS-MPNN data, sampling, decomposition)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from dsgraph.configfields import bound


@dataclass
class PhysicsConfig:
    """DS-MPNN physics data, graph sampling and domain decomposition."""

    resolution: int = bound(64, ge=8, le=421)
    train_samples: int = bound(100, ge=1)
    test_samples: int = bound(20, ge=1)
    points: int = bound(5000, ge=100)  # airfoil points per sample
    sampled_nodes: int = bound(1000, ge=2)
    radius: float = bound(0.1, gt=0)
    max_edges: int = bound(16, ge=1)
    workers: int = bound(1, ge=1)
    decomposition: Literal["bisection", "metis"] = "bisection"
    gen_workers: int = bound(2, ge=1)
