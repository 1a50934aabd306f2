"""The ``physics`` config section (DS-MPNN data, sampling, decomposition)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from dsgraph.configfields import bound


@dataclass
class PhysicsConfig:
    """DS-MPNN physics data, graph sampling and domain decomposition."""

    resolution: int = bound(64, ge=8, le=421)  # Darcy grid nodes per side
    train_samples: int = bound(100, ge=1)
    test_samples: int = bound(20, ge=1)
    points: int = bound(5000, ge=100)  # airfoil points per sample
    sampled_nodes: int = bound(1000, ge=2)  # s: nodes drawn per sample (resampled every epoch)
    radius: float = bound(0.1, gt=0)  # neighbourhood radius (dataset coordinates)
    max_edges: int = bound(16, ge=1)  # n_e: cap on incoming edges per node
    workers: int = bound(1, ge=1)  # P: subdomains = worker processes
    decomposition: Literal["bisection", "metis"] = "bisection"
    gen_workers: int = bound(2, ge=1)  # processes generating the dataset
    infer_repeats: int = bound(2, ge=1)  # full-field inference: random covers averaged
    lr_schedule: Literal["cosine", "constant"] = "cosine"  # per-epoch learning-rate decay
    eval_every: int = bound(0, ge=0)  # test metrics every k epochs (0: only after training)
    grad_clip: float = bound(0.0, ge=0)  # clip the summed gradient's norm to this (0: off)
