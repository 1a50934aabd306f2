"""Benchmark reports: environment capture, medians of repeats, and json/md/png output.

Each benchmark module ``benchmarks/<name>.py`` defines ``run(quick: bool) -> Report``.
Full runs write ``benchmarks/reports/<name>.{json,md,png}`` (committed); ``--quick`` runs write
under ``benchmarks/reports/quick/`` so a CI-size run never overwrites a committed full report.
``DSGRAPH_REPORTS_DIR`` overrides the folder (tests use a temporary one).
"""
from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import statistics
import time
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from dsgraph.fsutil import atomic_write_text


def environment() -> dict[str, Any]:
    """Versions and machine facts recorded with every report."""
    import numpy
    import torch
    env = {"python": platform.python_version(), "torch": torch.__version__,
           "numpy": numpy.__version__, "platform": platform.platform(),
           "cores": os.cpu_count(), "date": _dt.datetime.now().isoformat(timespec="seconds")}
    try:
        import dgl
        env["dgl"] = dgl.__version__
    except Exception:  # dgl import is optional for pure-torch benchmarks
        env["dgl"] = None
    return env


def median(values: Iterable[float]) -> float:
    """Median of a non-empty sequence of numbers."""
    return float(statistics.median(list(values)))


def timed(fn: Callable[[], Any], repeats: int, warmup: int = 1) -> tuple[float, list[float]]:
    """Run ``fn`` ``warmup`` + ``repeats`` times; return (median seconds, all timings)."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return median(times), times


def reports_dir(quick: bool) -> Path:
    """Where a report is written (see module docstring)."""
    base = os.environ.get("DSGRAPH_REPORTS_DIR")
    root = Path(base) if base else Path(__file__).resolve().parent / "reports"
    return root / "quick" if quick and not base else root


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        if v != 0 and (abs(v) >= 1e5 or abs(v) < 1e-3):
            return f"{v:.3g}"
        return f"{v:.4g}"
    return "" if v is None else str(v)


def markdown_table(records: Sequence[dict], columns: Sequence[str]) -> str:
    """A GitHub markdown table of ``columns`` over ``records``."""
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for r in records:
        lines.append("| " + " | ".join(_fmt(r.get(c)) for c in columns) + " |")
    return "\n".join(lines)


class Report:
    """Collects records of one benchmark run and writes NAME.json, NAME.md and NAME.png."""

    def __init__(self, name: str, quick: bool, columns: Sequence[str], repeats: int = 1,
                 title: str | None = None) -> None:
        self.name, self.quick, self.columns, self.repeats = name, quick, list(columns), repeats
        self.title = title or name
        self.records: list[dict] = []
        self.notes: list[str] = []
        self.env = environment()
        self.extra: dict[str, Any] = {}

    def add(self, record: dict) -> dict:
        """Append one record (a flat dict) and echo it as a progress line."""
        self.records.append(record)
        print("  " + ", ".join(f"{c}={_fmt(record.get(c))}" for c in self.columns if c in record),
              flush=True)
        return record

    def note(self, text: str) -> None:
        """Add a markdown paragraph (targets met, caveats, profiles) to the report."""
        self.notes.append(text)

    def save(self, plot: Callable[[list[dict], Any], None] | None = None) -> Path:
        """Print the table and write json/md/png; ``plot(records, fig)`` draws the figure."""
        out = reports_dir(self.quick)
        out.mkdir(parents=True, exist_ok=True)
        table = markdown_table(self.records, self.columns)
        print(table)
        for n in self.notes:
            print(n)
        payload = {"name": self.name, "quick": self.quick, "repeats": self.repeats,
                   "env": self.env, **self.extra, "records": self.records, "notes": self.notes}
        atomic_write_text(out / f"{self.name}.json", json.dumps(payload, indent=1, default=str))
        md = [f"# {self.title}", "",
              f"{'Quick (CI-size)' if self.quick else 'Full'} run, {self.env['date']}; "
              f"python {self.env['python']}, torch {self.env['torch']}, dgl {self.env['dgl']}, "
              f"{self.env['cores']} cores; repeats: {self.repeats} (medians).", "",
              table, ""] + [n + "\n" for n in self.notes]
        if plot is not None:
            import matplotlib
            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
            fig = plt.figure(figsize=(10, 5))
            plot(self.records, fig)
            fig.tight_layout()
            fig.savefig(out / f"{self.name}.png", dpi=90)
            plt.close(fig)
            md.insert(2, f"![{self.name}]({self.name}.png)\n")
        atomic_write_text(out / f"{self.name}.md", "\n".join(md))
        return out
