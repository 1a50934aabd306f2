"""Run folders: created (or reopened to resume) with the resolved config.yaml workers read."""
from __future__ import annotations

import shutil
from pathlib import Path

from dsgraph import config as config_mod
from dsgraph.checkpoint import CHECKPOINT
from dsgraph.errors import UserError


def prepare_run_dir(cfg: config_mod.Config, out: str | None, resume: bool,
                    force: bool = False) -> Path:
    """Create (or reopen with ``resume``) the run folder and write the resolved config.yaml.

    An existing folder that holds a run is never reused silently: ``resume`` continues it,
    ``force`` replaces it, anything else is a user error.
    """
    run_dir = Path(out or cfg.train.out_dir)
    if resume:
        if not (run_dir / CHECKPOINT).exists():
            raise UserError(f"{run_dir}: --resume: no checkpoint to resume from")
    elif (run_dir / "config.yaml").exists():
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
