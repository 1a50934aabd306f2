"""``python -m benchmarks NAME [--quick] [--render]``: run one benchmark (or ``all``) and write its
report, or only redraw the report from its saved JSON."""
from __future__ import annotations

import argparse
import importlib
import os

from dsgraph.errors import UserError, cli_main

BENCHMARKS = ("partition", "sampled", "sampled_remat", "compression", "sar", "dsmpnn",
              "reliability")


@cli_main
def main(argv: list[str] | None = None) -> None:
    """Parse arguments and run the named benchmarks."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    parser.add_argument("name", help="one of: " + ", ".join(BENCHMARKS) + ", all")
    parser.add_argument("--quick", action="store_true", help="CI-size run (seconds)")
    parser.add_argument("--render", action="store_true",
                        help="redraw NAME.md/.png from the saved NAME.json; measures nothing")
    args = parser.parse_args(argv)
    names = BENCHMARKS if args.name == "all" else (args.name,)
    for name in names:
        if name not in BENCHMARKS:
            raise UserError(f"benchmark {name!r}: unknown; expected one of "
                            + ", ".join(BENCHMARKS) + ", all")
        os.environ.setdefault("OMP_NUM_THREADS", "2")
        verb = "render" if args.render else "benchmark"
        print(f"== {verb} {name}{' (quick)' if args.quick else ''}", flush=True)
        module = importlib.import_module(f"benchmarks.{name}")
        out = module.render(quick=args.quick) if args.render else module.run(quick=args.quick)
        print(f"report written to {out.name if hasattr(out, 'name') else out}")


if __name__ == "__main__":
    main()
