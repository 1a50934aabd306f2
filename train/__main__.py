"""``python -m train --config C [--out RUN] [--set ...] [--resume] [--force]``: train one run."""
from __future__ import annotations

import argparse
import importlib
import sys

from dsgraph import config as config_mod
from dsgraph.errors import cli_main
from dsgraph.runs import prepare_run_dir

# train.mode -> the module whose ``launch(cfg, run_dir, resume)`` runs that mode.
MODES = {"sampled": "train.sampled", "sar": "train.fullbatch", "dsmpnn": "train.dsmpnn"}


@cli_main
def main(argv: list[str] | None = None) -> None:
    """Resolve the config, prepare the run folder and launch the mode's workers."""
    parser = argparse.ArgumentParser(prog="python -m train", description=__doc__)
    config_mod.add_cli_args(parser)
    parser.add_argument("--out", help="run folder (default: train.out_dir)")
    parser.add_argument("--resume", action="store_true", help="continue from the last checkpoint")
    parser.add_argument("--force", action="store_true", help="replace an existing run folder")
    args = parser.parse_args(argv)
    cfg = config_mod.load(args.config, args.overrides)
    run_dir = prepare_run_dir(cfg, args.out, args.resume, args.force)
    module = importlib.import_module(MODES[cfg.train.mode])
    module.launch(cfg, run_dir, args.resume)


if __name__ == "__main__":
    main(sys.argv[1:])
