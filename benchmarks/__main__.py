"""``python -m benchmarks NAME [--quick] [--render] [--datasets A,B]``: run one benchmark (or
``all``) and write its report, or only redraw the report from its saved JSON."""
from __future__ import annotations

import argparse
import importlib
import inspect
import os
import signal

from dsgraph.cluster import preload
from dsgraph.cluster.chatter import quiet_env
from dsgraph.config import plain_help
from dsgraph.errors import UserError, cli_main

BENCHMARKS = ("partition", "sampled", "sampled_remat", "compression", "sar", "dsmpnn", "tasks",
              "reliability", "scale", "hetero", "recipes")


@cli_main
def main(argv: list[str] | None = None) -> None:
    """Parse arguments and run the named benchmarks."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=plain_help(__doc__))
    parser.add_argument("name", help="one of: " + ", ".join(BENCHMARKS) + ", all")
    parser.add_argument("--quick", action="store_true", help="CI-size run (seconds)")
    parser.add_argument("--render", action="store_true",
                        help="redraw NAME.md/.png from the saved NAME.json; measures nothing")
    parser.add_argument("--datasets", default=None,
                        help="comma-separated datasets to rerun (benchmarks with several, e.g. "
                             "dsmpnn; scale: graph sizes; tasks: task names); the others' "
                             "records are carried from the saved report")
    args = parser.parse_args(argv)
    names = BENCHMARKS if args.name == "all" else (args.name,)
    kwargs = {}
    if args.datasets is not None:
        kwargs["datasets"] = [d for d in args.datasets.split(",") if d]
    os.environ.setdefault("OMP_NUM_THREADS", "2")  # before torch is imported
    # Fresh processes only: a forked one shares pages with its server, which skews memory
    # (given back afterwards: a test may call this main in its own process).
    preload_server = os.environ.pop(preload.ENV_SOCKET, None)
    quiet_env(os.environ)  # before DGL is imported: no backend notice on the console
    # SIGTERM unwinds like Ctrl-C, so emulated hosts (namespaces, their /dev/shm folders) and
    # temporary partitions are removed by their context managers instead of left behind.
    previous = signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        for name in names:
            _run_one(name, args, kwargs)
    finally:
        signal.signal(signal.SIGTERM, previous)
        if preload_server is not None:
            os.environ[preload.ENV_SOCKET] = preload_server


def _run_one(name: str, args: argparse.Namespace, kwargs: dict) -> None:
    """Run (or with ``--render`` redraw) benchmark ``name``."""
    if name not in BENCHMARKS:
        raise UserError(f"benchmark {name!r}: unknown; expected one of "
                        + ", ".join(BENCHMARKS) + ", all")
    module = importlib.import_module(f"benchmarks.{name}")
    if kwargs and (args.render or "datasets" not in inspect.signature(module.run).parameters):
        raise UserError(f"--datasets: benchmark {name!r} has no datasets to choose"
                        f"{' when rendering' if args.render else ''}")
    verb = "render" if args.render else "benchmark"
    print(f"== {verb} {name}{' (quick)' if args.quick else ''}", flush=True)
    out = module.render(quick=args.quick) if args.render \
        else module.run(quick=args.quick, **kwargs)
    print(f"report written to {out.name if hasattr(out, 'name') else out}")

if __name__ == "__main__":
    main()
