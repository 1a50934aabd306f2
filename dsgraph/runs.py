"""Run folders: created (or reopened to resume) with the resolved config.yaml workers read.

A folder dsgraph creates carries a marker (:data:`MARKER`) holding the run's fingerprint; only
such a folder, holding nothing but what dsgraph writes, is ever replaced by ``--force``, so a
mistyped ``--out`` cannot delete a user's files.
"""
from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Any, Optional

from dsgraph import checkpoint
from dsgraph import config as config_mod
from dsgraph.errors import UserError
from dsgraph.fsutil import atomic_write_text

MARKER = ".dsgraph-run.json"
# What a run folder may hold besides the marker; anything else is the user's and stops --force.
RUN_FILES = ("config.yaml", "logs", "metrics.jsonl", "metrics.json", checkpoint.CHECKPOINT,
             checkpoint.BEST, "curves.png", "ip_config.txt", "parts")
RUN_PREFIXES = ("predictions", "embeddings")


def prepare_run_dir(cfg: config_mod.Config, out: str | None, resume: bool,
                    force: bool = False, fingerprint: Optional[dict[str, Any]] = None) -> Path:
    """Create (or reopen with ``resume``) the run folder and write the resolved config.yaml.

    Every check comes before the first change: ``resume`` must match the checkpoint's
    ``fingerprint`` (:func:`dsgraph.checkpoint.run_fingerprint`), ``force`` replaces only a
    dsgraph run folder, and any other existing, non-empty folder is a user error.
    """
    run_dir = Path(out or cfg.train.out_dir)
    fingerprint = fingerprint or checkpoint.run_fingerprint(cfg)
    if run_dir.exists() and not run_dir.is_dir():
        raise UserError(f"{run_dir}: exists and is not a folder; choose another --out")
    if resume:
        checkpoint.check_fingerprint(run_dir, fingerprint, "--resume")
        remove_stale_temp_files(run_dir)
    elif run_dir.exists() and any(run_dir.iterdir()):
        foreign = foreign_entry(run_dir)
        if foreign is not None:
            raise UserError(f"{run_dir}: holds {foreign!r}, which dsgraph did not write; not "
                            f"using or replacing it: choose another --out")
        if not force:
            raise UserError(f"{run_dir}: run folder already exists; pass --resume to continue it "
                            f"or --force to replace it")
        shutil.rmtree(run_dir)
    (run_dir / "logs").mkdir(parents=True, exist_ok=True)
    config_mod.dump(cfg, run_dir / "config.yaml")
    atomic_write_text(run_dir / MARKER, json.dumps(
        {"created": read_marker(run_dir).get("created", time.time()),
         "fingerprint": fingerprint}, indent=1))
    return run_dir


def run_fingerprint(cfg: config_mod.Config, prepared: Any) -> dict[str, Any]:
    """The fingerprint of a run of ``cfg``: its settings, plus the partitions' fingerprint when
    the mode trains on partition files (the JSON path the graph modes' ``prepare`` returns)."""
    from dsgraph.partition import partition_fingerprint  # reads JSON only; DGL not needed

    data = partition_fingerprint(prepared) if isinstance(prepared, Path) else None
    return checkpoint.run_fingerprint(cfg, data)


def foreign_entry(run_dir: Path) -> Optional[str]:
    """The first entry of ``run_dir`` dsgraph would not have written (None: a run folder).

    A folder without the marker counts as a run only if it holds ``config.yaml`` (run folders
    from before the marker existed).
    """
    names = sorted(p.name for p in run_dir.iterdir())
    if MARKER not in names and "config.yaml" not in names:
        return names[0] if names else None
    for name in names:
        if name != MARKER and name not in RUN_FILES and not name.startswith(RUN_PREFIXES) \
                and not _is_temp_file(name):
            return name
    return None


def read_marker(run_dir: str | Path) -> dict[str, Any]:
    """The run folder's marker (empty if there is none or it is unreadable)."""
    try:
        data = json.loads((Path(run_dir) / MARKER).read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def remove_stale_temp_files(run_dir: Path) -> list[Path]:
    """Delete what interrupted atomic writes left (``.NAME.*.tmp``) in the run folder."""
    stale = [p for folder in (run_dir, run_dir / "logs") if folder.is_dir()
             for p in folder.iterdir() if _is_temp_file(p.name)]
    for path in stale:
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
    return stale


def _is_temp_file(name: str) -> bool:
    """Names :mod:`dsgraph.fsutil` gives its temporary files and folders."""
    return name.startswith(".") and name.endswith(".tmp")


def load_run_config(run_dir: str | Path) -> config_mod.Config:
    """The resolved config a worker process runs with."""
    return config_mod.load(Path(run_dir) / "config.yaml")
