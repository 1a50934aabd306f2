"""Checkpoints of a run: model, optimizer, epoch and every rank's RNG state, written atomically.

Randomness has two sources. Python, numpy and torch generators are captured per rank at the end
of every epoch and restored on resume, so a resumed run draws what an uninterrupted one would.
DGL's sampler generator cannot be read back, so modes that sample with DGL reseed it per epoch
from :func:`epoch_seed`.
"""
from __future__ import annotations

import io
import random
import sys
from pathlib import Path
from typing import Any

import numpy as np
import torch

from dsgraph.fsutil import atomic_write_bytes

CHECKPOINT = "checkpoint.pt"


def epoch_seed(seed: int, epoch: int, rank: int) -> int:
    """The seed of one epoch on one rank (epoch 0: the rank's stream before the first epoch)."""
    return seed * 1_000_003 + epoch * 1009 + rank


def seed_everything(seed: int) -> None:
    """Seed python, numpy, torch (and DGL's sampler RNG when DGL is loaded)."""
    random.seed(seed)
    np.random.seed(seed % (2 ** 32))
    torch.manual_seed(seed)
    if "dgl" in sys.modules:  # never import DGL just to seed it
        sys.modules["dgl"].seed(seed)


def rng_state() -> dict[str, Any]:
    """Python, numpy and torch RNG states of this process."""
    return {"python": random.getstate(), "numpy": np.random.get_state(),
            "torch": torch.get_rng_state()}


def set_rng_state(state: dict[str, Any]) -> None:
    """Restore what :func:`rng_state` captured."""
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])


def save(run_dir: str | Path, epoch: int, model: torch.nn.Module,
         optimizer: torch.optim.Optimizer, rng_states: list[dict[str, Any]]) -> None:
    """Write the checkpoint of ``epoch`` (``rng_states``: one per rank, in rank order)."""
    buf = io.BytesIO()
    torch.save({"epoch": epoch, "model": model.state_dict(), "optimizer": optimizer.state_dict(),
                "rng": rng_states}, buf)
    atomic_write_bytes(Path(run_dir) / CHECKPOINT, buf.getvalue())


def load(run_dir: str | Path) -> dict[str, Any] | None:
    """The last checkpoint of a run, or None."""
    path = Path(run_dir) / CHECKPOINT
    if not path.exists():
        return None
    return torch.load(path, map_location="cpu")


def restore(run_dir: str | Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
            rank: int) -> int:
    """Load the last checkpoint into ``model``, ``optimizer`` and this rank's RNG; return the
    next epoch (1 without a checkpoint)."""
    ckpt = load(run_dir)
    if ckpt is None:
        return 1
    model.load_state_dict(ckpt["model"])
    optimizer.load_state_dict(ckpt["optimizer"])
    states = ckpt.get("rng") or []
    if rank < len(states):
        set_rng_state(states[rank])
    return int(ckpt["epoch"]) + 1
