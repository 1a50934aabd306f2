"""Run folders (:class:`RunFolder`): the resolved config workers read, a marker with the run's
fingerprint, the checkpoints, and the one rule for what interrupted writes leave behind.

A folder dsgraph creates carries a marker (:data:`MARKER`) holding the run's fingerprint; only
such a folder, holding nothing but what dsgraph writes, is ever replaced by ``--force``, so a
mistyped ``--out`` cannot delete a user's files, and never through a symbolic link.

One job at a time: the launcher (``python -m train``, ``python -m predict``) holds the folder's
lock (:class:`dsgraph.runlock.RunLock`) for the job's life, so ``--force``, ``--resume`` or
``predict`` on a folder a live job uses is refused, naming that job. Files dsgraph reads back carry a checksum of their
own bytes (checkpoints: :mod:`dsgraph.checkpoint`; ``metrics.json``: :mod:`dsgraph.metrics`;
``config.yaml``: recorded in the marker), so a changed byte is an error, never a prediction.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import time
from pathlib import Path
from typing import Any, Iterator, Optional

import torch

from dsgraph import checkpoint, runlock
from dsgraph import config as config_mod
from dsgraph.errors import IntegrityError, UserError
from dsgraph.metrics import read_summary
from dsgraph.fsutil import (
    atomic_write_text,
    check_free_space,
    is_temp_name,
    remove_orphaned_temps_in,
    storage_errors,
)

MARKER = ".dsgraph-run.json"
LOCK = ".dsgraph-lock"  # held (flock) by the launcher of the job using the folder; names it
CONFIG = "config.yaml"
CHECKPOINT = "checkpoint.pt"  # the last epoch's: model, optimizer, every rank's RNG
BEST = "best.pt"  # the best validation epoch's model
# What a run folder may hold besides the marker; anything else is the user's and stops --force.
RUN_FILES = (CONFIG, "logs", "metrics.jsonl", "metrics.json", CHECKPOINT, BEST, "curves.png",
             "ip_config.txt", "parts")
RUN_PREFIXES = ("predictions", "embeddings")


class RunFolder:
    """One run's folder and everything dsgraph keeps in it."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    # --- opening ------------------------------------------------------------------------------

    @classmethod
    def create(cls, cfg: config_mod.Config, out: Optional[str | Path] = None,
               resume: bool = False, force: bool = False,
               fingerprint: Optional[dict[str, Any]] = None) -> "RunFolder":
        """Create (or reopen with ``resume``) the folder ``out`` (default ``train.out_dir``)
        and write the resolved config.yaml and the marker.

        Every check comes before the first change: ``resume`` must match the checkpoint's
        ``fingerprint`` (:func:`run_fingerprint`), ``force`` replaces only a dsgraph run
        folder, and any other existing, non-empty folder is a user error.
        """
        run = cls(out or cfg.train.out_dir)
        fingerprint = fingerprint or run_fingerprint(cfg)
        action = "--resume" if resume else "--force" if force else "train"
        run.refuse_link(action)
        if run.path.exists() and not run.path.is_dir():
            raise UserError(f"{run.path}: exists and is not a folder; choose another --out")
        existing = run.path.exists() and any(p.name != LOCK for p in run.path.iterdir())
        if existing and not resume:
            foreign = run.foreign_entry()
            if foreign is not None:
                raise UserError(f"{run.path}: holds {foreign!r}, which dsgraph did not write; "
                                f"not using or replacing it: choose another --out")
            if not force:
                raise UserError(f"{run.path}: run folder already exists; pass --resume to "
                                f"continue it or --force to replace it")
        if resume and not existing:
            raise UserError(f"{run.path}: --resume: no checkpoint to load")
        with storage_errors(run.path / CONFIG, "the run folder"):
            run.path.mkdir(parents=True, exist_ok=True)
        run.lock(action)  # before any change: a live job's folder is refused here
        try:
            if resume:
                run.check_fingerprint(fingerprint, "--resume")
                run.remove_temp_files()
            elif existing:
                run.clear()
            with storage_errors(run.path / CONFIG, "the run folder"):
                run.logs.mkdir(parents=True, exist_ok=True)
            config_mod.dump(cfg, run.path / CONFIG)
            atomic_write_text(run.path / MARKER, json.dumps(
                {"created": run.marker().get("created", time.time()),
                 "fingerprint": fingerprint, "config_sha256": _sha256(run.path / CONFIG)},
                indent=1))
        except BaseException:
            run.unlock()
            raise
        return run

    @classmethod
    def finished(cls, path: Path, action: str = "predict") -> "RunFolder":
        """The run folder ``path`` whose training finished and left a checkpoint (``--run``),
        locked for ``action`` (release it with :meth:`unlock`)."""
        run = cls(path)
        run.refuse_link(action)
        if not path.is_dir():
            raise UserError(f"--run {path}: no such folder")
        run.lock(action)  # a training job still writing the folder is refused here
        try:
            run._check_finished()
        except BaseException:
            run.unlock()
            raise
        return run

    def _check_finished(self) -> None:
        path = self.path
        if not (path / CONFIG).is_file():
            raise UserError(f"--run {path}: not a dsgraph run folder (no {CONFIG})")
        if not (path / "metrics.json").is_file():
            raise UserError(f"--run {path}: training has not finished (no metrics.json); "
                            f"finish it with `python -m train --config {path / CONFIG} --out "
                            f"{path} --resume`")
        read_summary(path)  # its checksum
        if not (path / CHECKPOINT).is_file():  # read (and verified) once, by the caller
            raise UserError(f"--run {path}: no {CHECKPOINT} to load the model from")

    # --- what it holds ------------------------------------------------------------------------

    @property
    def logs(self) -> Path:
        """The job's per-process logs."""
        return self.path / "logs"

    def config(self) -> config_mod.Config:
        """The resolved config every process of the run reads (checked against the checksum the
        marker recorded when the launcher wrote it)."""
        path = self.path / CONFIG
        recorded = self.marker().get("config_sha256")
        if recorded is not None and path.is_file() and _sha256(path) != recorded:
            raise IntegrityError(f"{path}: checksum mismatch: the file changed after dsgraph "
                                 f"wrote it (an edit or corrupt storage); not using it")
        return config_mod.load(path, resolved=True)

    def marker(self) -> dict[str, Any]:
        """The marker's content (empty if there is none or it is unreadable)."""
        try:
            data = json.loads((self.path / MARKER).read_text())
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    def fingerprint(self, cfg: config_mod.Config) -> dict[str, Any]:
        """What the run's weights belong to: what the launcher recorded in the marker (with the
        partitions' fingerprint), else ``cfg``'s alone (a folder made without a launcher)."""
        return self.marker().get("fingerprint") or run_fingerprint(cfg)

    def foreign_entry(self) -> Optional[str]:
        """The first entry dsgraph would not have written (None: a run folder).

        A folder without the marker counts as a run only if it holds ``config.yaml`` (run
        folders from before the marker existed).
        """
        names = sorted(p.name for p in self.path.iterdir() if p.name != LOCK)
        if MARKER not in names and CONFIG not in names:
            return names[0] if names else None
        for name in names:
            if name != MARKER and name not in RUN_FILES and not name.startswith(RUN_PREFIXES) \
                    and not is_temp_name(name):
                return name
        return None

    def refuse_link(self, action: str) -> None:
        """Refuse a run folder that is a symbolic link: replacing or writing through it would
        reach a folder the user did not name."""
        if self.path.is_symlink():
            raise UserError(f"{self.path}: {action}: is a symbolic link (to "
                            f"{os.readlink(self.path)}); dsgraph does not use or replace a "
                            f"linked run folder: give the real path")

    def clear(self) -> None:
        """Delete everything in the folder but its lock (``--force``; the caller holds it)."""
        with storage_errors(self.path / MARKER, "the old run"):
            for entry in self.path.iterdir():
                if entry.name == LOCK:
                    continue
                if entry.is_dir() and not entry.is_symlink():
                    shutil.rmtree(entry)
                else:
                    entry.unlink()

    def lock(self, action: str) -> None:
        """Take the folder's lock for this process's job (:func:`dsgraph.runlock.hold`)."""
        runlock.hold(self.path / LOCK, action)

    def unlock(self) -> None:
        """Undo one :meth:`lock` (a killed job's lock goes with its process)."""
        runlock.let_go(self.path / LOCK)

    def job_dir(self, name: str) -> Path:
        """A fresh folder ``name`` (a name in :data:`RUN_PREFIXES`) for a later job's logs, the
        previous one's removed."""
        job = self.path.resolve() / name
        with storage_errors(job / "logs", f"the {name} folder"):
            if job.is_symlink() or job.is_file():  # never follow a link into deletion
                job.unlink()
            shutil.rmtree(job, ignore_errors=True)
            job.mkdir()
        return job

    def remove_temp_files(self) -> list[Path]:
        """Delete what interrupted atomic writes left anywhere in the folder (writers that are
        gone; a live writer's temporary file stays): on ``--resume`` and when a job ends."""
        return remove_orphaned_temps_in(self.path)

    # --- checkpoints ----------------------------------------------------------------------------

    def checkpoint(self, which: str = "last") -> Optional[dict[str, Any]]:
        """The last (``checkpoint.pt``) or best (``best.pt``) checkpoint, or None."""
        return checkpoint.read(self.path / (BEST if which == "best" else CHECKPOINT))

    def save(self, epoch: int, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
             rng_states: list[dict[str, Any]], meta: dict[str, Any], best: bool = False,
             record: Optional[dict[str, Any]] = None) -> None:
        """Write ``epoch``'s resumable checkpoint (``rng_states``: one per rank; ``record``: the
        epoch's metrics line, restored if metrics.jsonl lost it); with ``best`` the model is
        also kept as the run's best. ``meta``: :meth:`fingerprint`."""
        checkpoint.write(self.path / CHECKPOINT, epoch, model, meta, optimizer, rng_states,
                         record)
        if best:
            checkpoint.write(self.path / BEST, epoch, model, meta)

    def check_space(self, model: torch.nn.Module) -> None:
        """Refuse, before the first epoch, a run whose checkpoints cannot fit: the last one
        (weights and Adam's two moments), the best model, and the new copy written beside the
        old before it replaces it."""
        weights = sum(t.numel() * t.element_size() for t in tensors(model.state_dict()))
        check_free_space(self.path, 2 * 3 * weights + weights + (1 << 20), "the checkpoints")

    def restore(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
                rank: int) -> tuple[int, Optional[dict[str, Any]]]:
        """Load the last checkpoint into ``model``, ``optimizer`` and this rank's RNG; return
        the next epoch (1 without a checkpoint) and the checkpointed epoch's metrics record."""
        ckpt = self.checkpoint("last")
        if ckpt is None:
            return 1, None
        return (checkpoint.restore(ckpt, self.path / CHECKPOINT, model, optimizer, rank),
                ckpt.get("record"))

    def load_weights(self, model: torch.nn.Module, which: str = "best") -> int:
        """Load the ``best`` (falling back to ``last`` when no best was kept) or ``last``
        weights into ``model``; return the epoch they come from."""
        best = self.checkpoint("best") if which == "best" else None
        ckpt = best or self.checkpoint("last")
        if ckpt is None:
            raise UserError(f"{self.path}: no checkpoint (is it a finished dsgraph run folder?)")
        checkpoint.load_model_state(self.path / (BEST if best else CHECKPOINT), model, ckpt)
        return int(ckpt["epoch"])

    def check_fingerprint(self, fingerprint: dict[str, Any], action: str) -> None:
        """Refuse ``action`` (``--resume``, ``predict``) with settings the last checkpoint was
        not trained with, naming the first differing setting."""
        ckpt = self.checkpoint("last")
        if ckpt is None:
            raise UserError(f"{self.path}: {action}: no checkpoint to load")
        recorded = ckpt.get("meta") or {}
        # A setting the checkpoint lacks was added to dsgraph later: it trained with the default.
        defaults = run_fingerprint(config_mod.Config())
        for key in sorted(set(recorded) | set(fingerprint)):
            trained = recorded.get(key, defaults.get(key))
            if trained != fingerprint.get(key, trained):
                raise UserError(f"{self.path / CHECKPOINT}: {action}: the checkpoint was "
                                f"trained with {key}={recorded.get(key, '(default)')}, now "
                                f"{fingerprint.get(key, '(default)')}")


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def run_fingerprint(cfg: config_mod.Config, prepared: Any = None) -> dict[str, Any]:
    """What a run's weights belong to: the settings a resumed run must keep (model, data, mode,
    task, precision, worker count) and, when the mode trains on partition files (the JSON path
    its ``prepare`` returns), the partitions' fingerprint."""
    from dsgraph.partition import partition_fingerprint  # reads JSON only; DGL not needed

    keep = {key: value for section in _FINGERPRINT_SECTIONS
            for key, value in _flatten(section, dataclasses.asdict(getattr(cfg, section)))
            if key not in _NOT_FINGERPRINTED}
    keep.update({"train.mode": cfg.train.mode, "train.dtype": cfg.train.dtype,
                 "num_workers": cfg.num_workers})
    # under its first name (train.task), so that runs fingerprinted before it moved still match
    if cfg.task.name != "auto":
        keep["train.task"] = cfg.task.name
    keep["task.class_weights"] = cfg.task.class_weights
    if isinstance(prepared, Path):
        keep["data"] = partition_fingerprint(prepared)
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


def tensors(state: Any) -> Iterator[torch.Tensor]:
    """Every tensor of a state dict, including those nested in a module's extra state."""
    if isinstance(state, torch.Tensor):
        yield state
    elif isinstance(state, dict):
        for value in state.values():
            yield from tensors(value)
