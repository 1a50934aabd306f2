"""Checkpoint files: model, optimizer, epoch and every rank's RNG state, written atomically
(which files a run keeps, and what they must match: :class:`dsgraph.runs.RunFolder`).

A file holds ``{"dsgraph_checkpoint": 2, "sha256": ..., "data": <uint8 tensor>}``, ``data`` being
the ``torch.save`` bytes of the checkpoint itself and ``sha256`` their digest: a byte changed on
disk is found on load (:func:`read`), not trained on or predicted from. Read one yourself with
:func:`read`.

Randomness has two sources. Python, numpy and torch generators are captured per rank at the end
of every epoch and restored on resume, so a resumed run draws what an uninterrupted one would.
DGL's sampler generator cannot be read back, so modes that sample with DGL reseed it per epoch
from :func:`epoch_seed`.
"""
from __future__ import annotations

import hashlib
import io
import random
import sys
from pathlib import Path
from typing import Any, Optional

import numpy as np
import torch

from dsgraph.errors import IntegrityError, UserError
from dsgraph.fsutil import atomic_write_bytes


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


FORMAT = 2  # the checksummed layout; files without the key are read as written before it


def write(path: Path, epoch: int, model: torch.nn.Module, meta: dict[str, Any],
          optimizer: Optional[torch.optim.Optimizer] = None,
          rng_states: Optional[list[dict[str, Any]]] = None,
          record: Optional[dict[str, Any]] = None) -> None:
    """Write ``epoch``'s checkpoint file atomically, checksummed: the model, ``meta`` (the run's
    fingerprint), and, for a resumable checkpoint, the optimizer, every rank's RNG (in rank
    order) and the epoch's metrics ``record``."""
    payload: dict[str, Any] = {"epoch": epoch, "model": model.state_dict(), "meta": meta}
    if optimizer is not None:
        payload.update(optimizer=optimizer.state_dict(), rng=rng_states or [])
    if record is not None:
        payload["record"] = record
    data = _saved(payload)
    atomic_write_bytes(path, _saved({"dsgraph_checkpoint": FORMAT,
                                     "sha256": hashlib.sha256(data).hexdigest(),
                                     "data": torch.frombuffer(bytearray(data), dtype=torch.uint8)}))


def read(path: Path) -> dict[str, Any] | None:
    """The checkpoint in ``path``, or None where there is none.

    Loaded with ``weights_only``: a checkpoint holds tensors and plain values, so a crafted file
    cannot run code; a corrupt or foreign file is a one-line error, a checksum mismatch an
    :class:`IntegrityError`.
    """
    if not path.exists():
        return None
    ckpt = _loaded(path, path)
    if isinstance(ckpt, dict) and "dsgraph_checkpoint" in ckpt:
        data = ckpt.get("data")
        if not isinstance(data, torch.Tensor) or data.dtype != torch.uint8:
            raise UserError(f"{path}: not a dsgraph checkpoint (no data bytes)")
        raw = data.numpy().tobytes()
        if hashlib.sha256(raw).hexdigest() != ckpt.get("sha256"):
            raise IntegrityError(f"{path}: checksum mismatch: the file changed after dsgraph "
                                 f"wrote it (corrupt storage or an edit); not using it")
        ckpt = _loaded(io.BytesIO(raw), path)
    if not isinstance(ckpt, dict) or not {"epoch", "model"} <= set(ckpt):
        raise UserError(f"{path}: not a dsgraph checkpoint (expected a dict with epoch, model)")
    return ckpt


def _saved(obj: Any) -> bytes:
    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


def _loaded(source: Any, path: Path) -> Any:
    """``torch.load`` with ``weights_only``; any failure is one line naming ``path``."""
    try:
        return torch.load(source, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - unpickling errors have no common base class
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UserError(f"{path}: not a readable dsgraph checkpoint ({reason[:200]})") from None


def load_model_state(path: Path, model: torch.nn.Module, ckpt: dict[str, Any]) -> None:
    """Load the checkpoint's weights; a model whose parameters differ is a one-line error."""
    try:
        model.load_state_dict(ckpt["model"])
    except RuntimeError as exc:
        first = str(exc).strip().splitlines()
        raise UserError(f"{path}: the checkpoint does not fit the configured model "
                        f"({first[0] if first else exc})") from None


def restore(ckpt: dict[str, Any], path: Path, model: torch.nn.Module,
            optimizer: torch.optim.Optimizer, rank: int) -> int:
    """Load a resumable checkpoint into ``model``, ``optimizer`` and this rank's RNG; return
    the next epoch."""
    load_model_state(path, model, ckpt)
    optimizer.load_state_dict(ckpt["optimizer"])
    states = ckpt.get("rng") or []
    if rank < len(states):
        set_rng_state(states[rank])
    return int(ckpt["epoch"]) + 1
