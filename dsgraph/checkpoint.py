"""Checkpoints of a run: model, optimizer, epoch and every rank's RNG state, written atomically.

Randomness has two sources. Python, numpy and torch generators are captured per rank at the end
of every epoch and restored on resume, so a resumed run draws what an uninterrupted one would.
DGL's sampler generator cannot be read back, so modes that sample with DGL reseed it per epoch
from :func:`epoch_seed`.
"""
from __future__ import annotations

import dataclasses
import io
import random
import sys
from pathlib import Path
from typing import Any

import numpy as np
import torch

from dsgraph.config import Config
from dsgraph.errors import UserError
from dsgraph.fsutil import atomic_write_bytes

CHECKPOINT = "checkpoint.pt"
BEST = "best.pt"


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
    """Python, numpy and torch RNG states of this process, as types ``weights_only`` loads."""
    name, keys, pos, has_gauss, gauss = np.random.get_state()
    return {"python": random.getstate(),
            "numpy": [name, torch.from_numpy(keys.astype(np.int64)), pos, has_gauss, gauss],
            "torch": torch.get_rng_state()}


def set_rng_state(state: dict[str, Any]) -> None:
    """Restore what :func:`rng_state` captured."""
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    name, keys, pos, has_gauss, gauss_np = state["numpy"]
    np.random.set_state((name, keys.numpy().astype(np.uint32), pos, has_gauss, gauss_np))
    torch.set_rng_state(state["torch"])


def save(run_dir: str | Path, epoch: int, model: torch.nn.Module,
         optimizer: torch.optim.Optimizer, rng_states: list[dict[str, Any]],
         meta: dict[str, Any], best: bool = False) -> None:
    """Write the checkpoint of ``epoch`` (``rng_states``: one per rank, in rank order); with
    ``best``, the model is also kept as the run's best (``best.pt``).

    ``meta`` (:func:`run_fingerprint`) names the model and data the weights belong to.
    """
    run_dir = Path(run_dir)
    weights = model.state_dict()
    _write(run_dir / CHECKPOINT, {"epoch": epoch, "model": weights, "meta": meta,
                                  "optimizer": optimizer.state_dict(), "rng": rng_states})
    if best:
        _write(run_dir / BEST, {"epoch": epoch, "model": weights, "meta": meta})


def _write(path: Path, payload: dict[str, Any]) -> None:
    buf = io.BytesIO()
    torch.save(payload, buf)
    atomic_write_bytes(path, buf.getvalue())


def load(run_dir: str | Path, which: str = "last") -> dict[str, Any] | None:
    """The run's last (``checkpoint.pt``) or best (``best.pt``) checkpoint, or None.

    Loaded with ``weights_only``: a checkpoint holds tensors and plain values, so a crafted file
    cannot run code; a corrupt or foreign file is a one-line error.
    """
    path = Path(run_dir) / (BEST if which == "best" else CHECKPOINT)
    if not path.exists():
        return None
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - unpickling errors have no common base class
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UserError(f"{path}: not a readable dsgraph checkpoint ({reason[:200]})") from None
    if not isinstance(ckpt, dict) or not {"epoch", "model"} <= set(ckpt):
        raise UserError(f"{path}: not a dsgraph checkpoint (expected a dict with epoch, model)")
    return ckpt


def load_weights(run_dir: str | Path, model: torch.nn.Module, which: str = "best") -> int:
    """Load the run's ``best`` (falling back to ``last`` when no best was kept) or ``last``
    weights into ``model``; return the epoch they come from."""
    ckpt = (load(run_dir, "best") if which == "best" else None) or load(run_dir, "last")
    if ckpt is None:
        raise UserError(f"{run_dir}: no checkpoint (is it a finished dsgraph run folder?)")
    _load_model_state(run_dir, model, ckpt)
    return int(ckpt["epoch"])


def _load_model_state(run_dir: str | Path, model: torch.nn.Module, ckpt: dict[str, Any]) -> None:
    """Load the checkpoint's weights; a model whose parameters differ is a one-line error."""
    try:
        model.load_state_dict(ckpt["model"])
    except RuntimeError as exc:
        first = str(exc).strip().splitlines()
        raise UserError(f"{run_dir}: the checkpoint does not fit the configured model "
                        f"({first[0] if first else exc})") from None


def run_fingerprint(cfg: Config, data: str | None = None) -> dict[str, Any]:
    """What a checkpoint's weights belong to: the settings a resumed run must keep (model, data,
    mode, precision, worker count) and ``data``, a fingerprint of the partitioned graph."""
    keep = {key: value for section in _FINGERPRINT_SECTIONS
            for key, value in _flatten(section, dataclasses.asdict(getattr(cfg, section)))
            if key not in _NOT_FINGERPRINTED}
    keep.update({"train.mode": cfg.train.mode, "train.dtype": cfg.train.dtype,
                 "num_workers": cfg.num_workers})
    if data is not None:
        keep["data"] = data
    return {k: repr(v) for k, v in sorted(keep.items())}


def _flatten(prefix: str, data: dict[str, Any]) -> list[tuple[str, Any]]:
    """``(dotted.key, value)`` of nested dicts (``model.args.hidden``, say)."""
    items = []
    for key, value in data.items():
        if isinstance(value, dict):  # an empty dict adds no key: args={} means all defaults
            items += _flatten(f"{prefix}.{key}", value)
        else:
            items.append((f"{prefix}.{key}", value))
    return items


_FINGERPRINT_SECTIONS = ("model", "dataset", "partition", "physics")
# Where a file lives, or how a cache is named, does not change what the weights mean.
_NOT_FINGERPRINTED = ("dataset.cache_dir", "partition.out_dir", "partition.graph_name",
                      "physics.gen_workers", "physics.infer_repeats", "physics.infer_passes",
                      # evaluation data only: the weights do not depend on them
                      "dataset.test_path", "dataset.transfer_path", "physics.test_resolution",
                      "physics.test_points")


def check_fingerprint(run_dir: str | Path, fingerprint: dict[str, Any], action: str) -> None:
    """Refuse ``action`` (``--resume``, ``predict``) on ``run_dir`` with settings its last
    checkpoint was not trained with, naming the first differing setting."""
    ckpt = load(run_dir, "last")
    if ckpt is None:
        raise UserError(f"{run_dir}: {action}: no checkpoint to load")
    recorded = ckpt.get("meta") or {}
    # A setting the checkpoint lacks was added to dsgraph later: it trained with the default.
    defaults = run_fingerprint(Config())
    for key in sorted(set(recorded) | set(fingerprint)):
        trained = recorded.get(key, defaults.get(key))
        if trained != fingerprint.get(key, trained):
            raise UserError(f"{Path(run_dir) / CHECKPOINT}: {action}: the checkpoint was trained "
                            f"with {key}={recorded.get(key, '(default)')}, now "
                            f"{fingerprint.get(key, '(default)')}")


def restore(run_dir: str | Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
            rank: int) -> int:
    """Load the last checkpoint into ``model``, ``optimizer`` and this rank's RNG; return the
    next epoch (1 without a checkpoint)."""
    ckpt = load(run_dir)
    if ckpt is None:
        return 1
    _load_model_state(run_dir, model, ckpt)
    optimizer.load_state_dict(ckpt["optimizer"])
    states = ckpt.get("rng") or []
    if rank < len(states):
        set_rng_state(states[rank])
    return int(ckpt["epoch"]) + 1
