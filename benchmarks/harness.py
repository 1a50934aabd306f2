"""Benchmark reports: environment capture, medians of repeats, and json/md/png output.

Each benchmark, a module ``benchmarks/<name>.py`` or a package ``benchmarks/<name>/`` (settings,
job running, measurement and report in modules of their own), exposes ``run(quick: bool) ->
Path``, a :class:`View` ``VIEW`` (how its JSON records become the table rows, notes and figure)
and ``render(quick: bool = False) -> Path``, which redraws NAME.md and NAME.png from the saved
NAME.json without measuring anything. Real training jobs go through :mod:`benchmarks.jobs`,
memory readings follow :mod:`benchmarks.memory`. The table and the figure come from the same rows
(``VIEW.rows(records)``); every value the figure draws is tagged with its row's key and column,
so :func:`plotted_values` can read back what was drawn (tests compare it with the table).
Paragraphs written by hand after a run live in ``NAME.notes.md`` beside the report, whose first
line ``<!-- run: DATE -->`` names the run (``env.date`` of NAME.json) they discuss: rendering
appends them to NAME.md for that run only, so a new run never inherits an old run's analysis.
Full runs write ``benchmarks/reports/<name>.{json,md,png}`` (committed); ``--quick`` runs write
under ``benchmarks/reports/quick/`` so a CI-size run never overwrites a committed full report.
``DSGRAPH_REPORTS_DIR`` overrides the folder (tests use a temporary one).
"""
from __future__ import annotations

import contextlib
import dataclasses
import datetime as _dt
import io
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping, Optional, Sequence

from dsgraph.cluster import preload
from dsgraph.errors import UserError
from dsgraph.fsutil import atomic_write_bytes, atomic_write_text


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


@contextlib.contextmanager
def environ(values: dict[str, str]) -> Iterator[None]:
    """Set environment variables for the block, then restore them (the launcher hands its
    environment to every process of a job, so this is how a benchmark sets theirs)."""
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


ROOT = Path(__file__).resolve().parents[1]


def run_cli(module: str, args: Sequence[str], env: Optional[Mapping[str, str]] = None,
            timeout: float = 240) -> subprocess.CompletedProcess:
    """``python -m module *args`` from the repository root, in a session of its own that is
    killed whole if it overruns (no process of its job outlives the caller): fresh in a
    benchmark, forked by the test suite's preload server under test
    (:func:`dsgraph.cluster.preload.run_command`)."""
    return preload.run_command([sys.executable, "-m", module, *args],
                               None if env is None else dict(env), str(ROOT), timeout)


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


def chosen(every: dict, datasets: Optional[list[str]]) -> dict:
    """The entries of ``every`` that ``--datasets`` names (all of them for None); an unknown
    name or an empty list is a UserError listing the choices."""
    unknown = sorted(set(datasets or []) - set(every))
    if unknown or datasets == []:
        raise UserError(f"--datasets {','.join(datasets or [])}: expected some of "
                        f"{', '.join(every)}")
    return {k: v for k, v in every.items() if datasets is None or k in datasets}


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


# --- one benchmark's report layout ---------------------------------------------------------------

def _copy_rows(records: list[dict]) -> list[dict]:
    return [dict(r) for r in records]


@dataclasses.dataclass(frozen=True)
class View:
    """How a benchmark's JSON payload becomes its report.

    ``rows(records)`` gives the table rows, which ``plot(rows, fig)`` draws; ``key`` names the
    columns that tell rows apart (every setting that distinguishes two records), so a figure
    never merges two rows; ``notes(payload)`` gives the report's paragraphs.
    """

    name: str
    title: str
    columns: tuple[str, ...]
    key: tuple[str, ...]
    rows: Callable[[list[dict]], list[dict]] = _copy_rows
    plot: Optional[Callable[[list[dict], Any], None]] = None
    notes: Optional[Callable[[dict], list[str]]] = None
    figsize: tuple[float, float] = (10.0, 5.0)


def row_key(row: dict, fields: Sequence[str]) -> str:
    """The identity of a table row: its ``fields`` values joined by '/'."""
    return "/".join(_fmt(row.get(f)) or "-" for f in fields)


def tag(artist: Any, column: str, rows: Sequence[dict], fields: Sequence[str],
        axis: str = "y") -> Any:
    """Mark ``artist`` as drawing ``column`` of ``rows`` (one row per point, or one row for a
    bar or a constant line) on its ``axis`` coordinate; return the artist."""
    artist.set_gid("\t".join([column, axis, *(row_key(r, fields) for r in rows)]))
    return artist


def bars(ax: Any, xs: Sequence[float], rows: Sequence[dict], column: str,
         fields: Sequence[str], horizontal: bool = False, **kw: Any) -> None:
    """One bar per row at ``xs`` showing ``row[column]`` (rows without a value get no bar),
    each bar tagged with its row (see :func:`tag`)."""
    pts = [(x, r) for x, r in zip(xs, rows) if r.get(column) is not None]
    if not pts:
        return
    draw = ax.barh if horizontal else ax.bar
    container = draw([x for x, _ in pts], [r[column] for _, r in pts], **kw)
    for patch, (_, r) in zip(container.patches, pts):
        tag(patch, column, [r], fields, "x" if horizontal else "y")


def throughput_bars(ax: Any, ys: Sequence[float], rows: Sequence[dict], fields: Sequence[str],
                    colours: Sequence[str]) -> None:
    """Horizontal ``samples_per_s`` bars, one per row at ``ys`` (labelled by its ``setting``),
    each with the range of its repeats (``samples_per_s_min`` .. ``_max``); grey: stock DGL."""
    bars(ax, ys, rows, "samples_per_s", fields, horizontal=True, color=colours)
    for y, r in zip(ys, rows):
        if r.get("samples_per_s_min") is not None:
            ax.plot([r["samples_per_s_min"], r["samples_per_s_max"]], [y, y], color="k", lw=1)
    ax.set_xlabel("training seeds / s (median, range of repeats); grey: stock DGL")
    ax.set_yticks(ys, [r["setting"] for r in rows], fontsize=7)


def line(ax: Any, rows: Sequence[dict], x: str, column: str, fields: Sequence[str],
         *args: Any, **kw: Any) -> None:
    """``row[column]`` against ``row[x]`` over ``rows`` (rows without a value left out), tagged."""
    rows = [r for r in rows if r.get(column) is not None]
    if rows:
        (ln,) = ax.plot([r[x] for r in rows], [r[column] for r in rows], *args, **kw)
        tag(ln, column, rows, fields)


def plotted_values(fig: Any) -> list[tuple[str, str, float]]:
    """(row key, column, value) of every tagged bar, line point and scatter point of ``fig``,
    read from what was drawn (bar heights or widths, line and scatter coordinates)."""
    from matplotlib.collections import PathCollection
    from matplotlib.lines import Line2D
    from matplotlib.patches import Rectangle

    out: list[tuple[str, str, float]] = []
    for ax in fig.axes:
        for artist in [*ax.patches, *ax.lines, *ax.collections]:
            gid = artist.get_gid()
            if not gid:
                continue
            column, axis, *keys = gid.split("\t")
            col = 0 if axis == "x" else 1
            if isinstance(artist, Rectangle):
                values = [artist.get_width() if axis == "x" else artist.get_height()]
            elif isinstance(artist, Line2D):
                values = list(artist.get_xydata()[:, col])
                if len(keys) == 1 and len(set(values)) == 1:  # a constant line (axhline)
                    values = values[:1]
            elif isinstance(artist, PathCollection):
                values = list(artist.get_offsets()[:, col])
            else:
                continue
            if len(values) != len(keys):
                raise ValueError(f"artist {gid!r}: {len(values)} values for {len(keys)} rows")
            out += [(k, column, float(v)) for k, v in zip(keys, values)]
    return out


def figure(view: View, rows: list[dict], layout: bool = True) -> Any:
    """The report's figure drawn from ``rows`` (a matplotlib Figure on the Agg canvas);
    ``layout=False`` skips the tight layout (a draw pass), for reading values back only."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    assert view.plot is not None
    fig = Figure(figsize=view.figsize)
    FigureCanvasAgg(fig)  # Agg for this figure only: no global backend switch
    view.plot(rows, fig)
    if layout:
        fig.tight_layout()
    return fig


# --- writing and re-rendering ---------------------------------------------------------------

def hand_notes(out: Path, name: str, run_date: str) -> Optional[str]:
    """The hand-written paragraphs of ``out/NAME.notes.md`` when they discuss the run of
    ``run_date``, else None (see the module docstring)."""
    path = out / f"{name}.notes.md"
    if not path.exists():
        return None
    first, _, body = path.read_text().partition("\n")
    match = re.fullmatch(r"<!-- run: (\S+) -->", first.strip())
    if match is None:
        raise UserError(f"{path}: first line must be '<!-- run: DATE -->' naming the run "
                        f"it discusses (env.date of {name}.json)")
    if match.group(1) != run_date:
        print(f"note: {path.name} discusses the run of {match.group(1)}, not this one "
              f"({run_date}); left out of {name}.md", flush=True)
        return None
    return body.strip("\n")


def render(payload: dict, view: View, out: Path, figure_too: bool = True) -> Path:
    """Write NAME.md (and NAME.png with ``figure_too`` and a plot) into ``out`` from a report's
    JSON payload; return ``out``."""
    env = payload["env"]
    rows = view.rows(payload["records"])
    notes = view.notes(payload) if view.notes is not None else []
    table = markdown_table(rows, view.columns)
    md = [f"# {view.title}", "",
          f"{'Quick (CI-size)' if payload['quick'] else 'Full'} run, {env['date']}; "
          f"python {env['python']}, torch {env['torch']}, dgl {env['dgl']}, "
          f"{env['cores']} cores; repeats: {payload['repeats']} (medians).", "",
          table, ""] + [n + "\n" for n in notes]
    by_hand = hand_notes(out, view.name, env["date"])
    if by_hand:
        md.append(by_hand + "\n")
    if figure_too and view.plot is not None:
        buf = io.BytesIO()
        figure(view, rows).savefig(buf, format="png", dpi=90)
        atomic_write_bytes(out / f"{view.name}.png", buf.getvalue())
        md.insert(2, f"![{view.name}]({view.name}.png)\n")
    atomic_write_text(out / f"{view.name}.md", "\n".join(md))
    return out


def load_payload(name: str, quick: bool = False) -> dict:
    """A saved report's JSON payload (``reports_dir(quick)/NAME.json``)."""
    path = reports_dir(quick) / f"{name}.json"
    if not path.exists():
        raise UserError(f"{path}: no such report; run `python -m benchmarks {name}"
                        f"{' --quick' if quick else ''}` first")
    try:
        payload = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise UserError(f"{path}: not a report JSON file ({exc})") from None
    if not isinstance(payload, dict) or not isinstance(payload.get("records"), list):
        raise UserError(f"{path}: not a report JSON file (expected an object with 'records')")
    return payload


def carry(report: "Report", quick: bool, field: str, keep: Iterable[str],
          extras: Sequence[str] = ()) -> None:
    """Copy the saved report's records whose ``field`` is one of ``keep`` (a rerun of some
    sizes, datasets or tasks keeps the others), and each kept value's entry of the payload's
    ``extras`` dicts, noting in ``carried`` the run each came from. A value the saved report
    has no records of is left out (``carried`` does not name it)."""
    keep = list(keep)
    path = reports_dir(quick) / f"{report.name}.json"
    if not keep:
        return
    if not path.exists():
        print(f"note: {path} absent; {', '.join(keep)} left out", flush=True)
        return
    saved = load_payload(report.name, quick)
    carried = saved.get("carried", {})
    for value in keep:
        recs = [r for r in saved["records"] if r.get(field) == value]
        if not recs:
            continue
        report.records.extend(recs)
        report.extra.setdefault("carried", {})[value] = carried.get(
            value, saved.get("env", {}).get("date"))
        for extra in extras:
            if value in saved.get(extra, {}):
                report.extra.setdefault(extra, {})[value] = saved[extra][value]
    for dep, why in saved.get("skipped", {}).items():
        report.extra.setdefault("skipped", {}).setdefault(dep, why)


def render_saved(view: View, quick: bool = False) -> Path:
    """Redraw NAME.md and NAME.png from the saved NAME.json (nothing is measured)."""
    payload = load_payload(view.name, quick)
    out = render(payload, view, reports_dir(quick))
    print(f"rendered {out / view.name}.md and .png from {view.name}.json", flush=True)
    return out


class Report:
    """Collects records of one benchmark run and writes NAME.json, NAME.md and NAME.png."""

    def __init__(self, view: View, quick: bool, repeats: int = 1) -> None:
        self.view, self.name, self.quick, self.repeats = view, view.name, quick, repeats
        self.records: list[dict] = []
        self.env = environment()
        self.extra: dict[str, Any] = {}

    def add(self, record: dict) -> dict:
        """Append one record (a flat dict) and echo it as a progress line."""
        self.records.append(record)
        print("  " + ", ".join(f"{c}={_fmt(record.get(c))}" for c in self.view.columns
                               if c in record), flush=True)
        return record

    def payload(self) -> dict:
        """The JSON document of this report (notes are the view's, from the records)."""
        payload = {"name": self.name, "quick": self.quick, "repeats": self.repeats,
                   "env": self.env, **self.extra, "records": self.records, "notes": []}
        if self.view.notes is not None:
            payload["notes"] = self.view.notes(payload)
        return payload

    def save(self, partial: bool = False) -> Path:
        """Print the table and write json/md/png. ``partial`` (a run still going, saved so an
        interrupt keeps its finished part): json and the bare table only."""
        out = reports_dir(self.quick)
        out.mkdir(parents=True, exist_ok=True)
        if partial:
            payload = {"name": self.name, "quick": self.quick, "repeats": self.repeats,
                       "env": self.env, **self.extra, "records": self.records, "notes": []}
            view = dataclasses.replace(self.view, plot=None, notes=None)
        else:
            payload, view = self.payload(), self.view
        atomic_write_text(out / f"{self.name}.json", json.dumps(payload, indent=1, default=str))
        print(markdown_table(view.rows(self.records), view.columns))
        for n in payload["notes"]:
            print(n)
        return render(payload, view, out)
