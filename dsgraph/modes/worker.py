"""One process of a training job: ``python -m dsgraph.modes.worker --run-dir RUN [--resume]
[--hook M:F]``.

Started by the launcher (``python -m train``) on every rank, in every mode; it reads the run
folder's resolved config and runs :class:`dsgraph.trainer.Trainer` with the mode's strategy.
``--hook package.module:factory`` adds a :class:`dsgraph.trainer.Hook` (``factory()`` returns
it): how benchmarks measure the real trainer.
"""
from __future__ import annotations

from dsgraph.cluster import dgl_compat

# Patch DGL before it starts, at module level on purpose: DGL's sampler processes are spawned
# and re-import this module without running __main__.
dgl_compat.apply_from_env()

import argparse  # noqa: E402
import importlib  # noqa: E402
from pathlib import Path  # noqa: E402

from dsgraph.cluster.worker import run_process_main  # noqa: E402
from dsgraph.runs import RunFolder  # noqa: E402
from dsgraph.trainer import Hook, Trainer  # noqa: E402
from dsgraph.modes import strategy_class  # noqa: E402


def load_hook(target: str) -> Hook:
    """Call the ``package.module:factory`` named by ``target`` for a Hook."""
    module, name = target.split(":", 1)
    return getattr(importlib.import_module(module), name)()


def main(argv: list[str] | None = None) -> None:
    """Train this rank of the run in ``--run-dir``."""
    parser = argparse.ArgumentParser(prog="python -m dsgraph.modes.worker", description=__doc__)
    parser.add_argument("--run-dir", required=True, type=Path)
    parser.add_argument("--resume", action="store_true", help="continue from the checkpoint")
    parser.add_argument("--hook", action="append", default=[], metavar="MODULE:FACTORY")
    args = parser.parse_args(argv)
    cfg = RunFolder(args.run_dir).config()
    strategy = strategy_class(cfg)(cfg)
    Trainer(cfg, args.run_dir, strategy, args.resume, [load_hook(h) for h in args.hook]).run()


if __name__ == "__main__":
    run_process_main(main)
