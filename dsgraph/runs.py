"""Run folders: resolved config, metrics.jsonl / metrics.json, atomic checkpoints, RNG state."""
from __future__ import annotations

import io
import json
import random
import resource
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch

from dsgraph import config as config_mod
from dsgraph.errors import UserError
from dsgraph.fsutil import atomic_write_bytes, atomic_write_text

CHECKPOINT = "checkpoint.pt"


def prepare_run_dir(cfg: config_mod.Config, out: str | None, resume: bool,
                    force: bool = False) -> Path:
    """Create (or reopen with ``resume``) the run folder and write the resolved config.yaml.

    An existing folder that holds a run is never reused silently: ``resume`` continues it,
    ``force`` replaces it, anything else is a user error.
    """
    run_dir = Path(out or cfg.train.out_dir)
    has_run = (run_dir / "config.yaml").exists()
    if resume:
        if not (run_dir / CHECKPOINT).exists():
            raise UserError(f"{run_dir}: --resume: no checkpoint to resume from")
    elif has_run:
        if not force:
            raise UserError(f"{run_dir}: run folder already exists; pass --resume to continue it "
                            f"or --force to replace it")
        shutil.rmtree(run_dir)
    (run_dir / "logs").mkdir(parents=True, exist_ok=True)
    config_mod.dump(cfg, run_dir / "config.yaml")
    return run_dir


def load_run_config(run_dir: str | Path) -> config_mod.Config:
    """The resolved config a worker process runs with."""
    return config_mod.load(Path(run_dir) / "config.yaml")


def peak_rss_mb() -> float:
    """Peak resident set size of this process in MiB (VmHWM)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def rss_mb() -> float:
    """Current resident set size of this process in MiB (VmRSS)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024.0
    return 0.0


class MetricsLog:
    """Appends one JSON line per epoch to metrics.jsonl; writes the metrics.json summary."""

    def __init__(self, run_dir: str | Path, resume_epoch: int = 0) -> None:
        self.path = Path(run_dir) / "metrics.jsonl"
        self.summary_path = Path(run_dir) / "metrics.json"
        # On resume, drop lines of epochs after the checkpoint so the log matches an
        # uninterrupted run line for line.
        if self.path.exists():
            kept = [ln for ln in self.path.read_text().splitlines()
                    if ln.strip() and json.loads(ln)["epoch"] <= resume_epoch]
            atomic_write_text(self.path, "".join(ln + "\n" for ln in kept))

    def epoch(self, record: dict[str, Any]) -> None:
        """Append one epoch's record."""
        with self.path.open("a") as fh:
            fh.write(json.dumps(record) + "\n")

    def summary(self, record: dict[str, Any]) -> None:
        """Write the run summary (atomically)."""
        atomic_write_text(self.summary_path, json.dumps(record, indent=1))

    def records(self) -> list[dict[str, Any]]:
        """All epoch records written so far."""
        if not self.path.exists():
            return []
        return [json.loads(ln) for ln in self.path.read_text().splitlines() if ln.strip()]


def save_checkpoint(run_dir: str | Path, state: dict[str, Any]) -> None:
    """Write ``state`` (model, optimizer, epoch, RNG...) to checkpoint.pt atomically."""
    buf = io.BytesIO()
    torch.save(state, buf)
    atomic_write_bytes(Path(run_dir) / CHECKPOINT, buf.getvalue())


def end_epoch(run_dir: str | Path, log: MetricsLog, record: dict[str, Any],
              model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
    """Rank 0 at the end of an epoch: append its metrics line, then checkpoint model,
    optimizer, epoch and RNG state (what :func:`restore` reads back)."""
    log.epoch(record)
    save_checkpoint(run_dir, {"epoch": record["epoch"], "model": model.state_dict(),
                              "optimizer": optimizer.state_dict(), "rng": rng_state()})


def load_checkpoint(run_dir: str | Path) -> dict[str, Any] | None:
    """The last checkpoint of a run, or None."""
    path = Path(run_dir) / CHECKPOINT
    if not path.exists():
        return None
    return torch.load(path, map_location="cpu")


def restore(run_dir: str | Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> int:
    """Load the last checkpoint (if any) into ``model`` and ``optimizer``; return the next epoch."""
    ckpt = load_checkpoint(run_dir)
    if ckpt is None:
        return 1
    model.load_state_dict(ckpt["model"])
    optimizer.load_state_dict(ckpt["optimizer"])
    return ckpt["epoch"] + 1


def epoch_seed(seed: int, epoch: int, rank: int) -> int:
    """The seed of one epoch on one worker: a resumed run draws what an uninterrupted one would."""
    return seed * 1_000_003 + epoch * 1009 + rank


def rng_state() -> dict[str, Any]:
    """Python, numpy and torch RNG states."""
    return {"python": random.getstate(), "numpy": np.random.get_state(),
            "torch": torch.get_rng_state()}


def set_rng_state(state: dict[str, Any]) -> None:
    """Restore what :func:`rng_state` captured."""
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])


def seed_everything(seed: int) -> None:
    """Seed python, numpy, torch (and DGL's sampler RNG when DGL is loaded)."""
    import sys
    random.seed(seed)
    np.random.seed(seed % (2 ** 32))
    torch.manual_seed(seed)
    if "dgl" in sys.modules:
        sys.modules["dgl"].seed(seed)
