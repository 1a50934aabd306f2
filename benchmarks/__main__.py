"""``python -m benchmarks NAME [--quick]``: run one benchmark (or ``all``) and write its report."""
from __future__ import annotations

import argparse
import importlib
import os

from dsgraph.errors import UserError, cli_main

BENCHMARKS = ("partition", "sampled", "compression", "sar", "dsmpnn")


@cli_main
def main(argv: list[str] | None = None) -> None:
    """Parse arguments and run the named benchmarks."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    parser.add_argument("name", help="one of: " + ", ".join(BENCHMARKS) + ", all")
    parser.add_argument("--quick", action="store_true", help="CI-size run (seconds)")
    args = parser.parse_args(argv)
    names = BENCHMARKS if args.name == "all" else (args.name,)
    for name in names:
        if name not in BENCHMARKS:
            raise UserError(f"benchmark {name!r}: unknown; expected one of "
                            + ", ".join(BENCHMARKS) + ", all")
        os.environ.setdefault("OMP_NUM_THREADS", "2")
        print(f"== benchmark {name}{' (quick)' if args.quick else ''}", flush=True)
        module = importlib.import_module(f"benchmarks.{name}")
        out = module.run(quick=args.quick)
        print(f"report written to {out.name if hasattr(out, 'name') else out}")


if __name__ == "__main__":
    main()
