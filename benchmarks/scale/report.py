"""The ``scale`` report: the table, the comparison with stock, the per-size target lines, the
figure (throughput and job memory against graph size), and redrawing from the saved scale.json."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable, Optional

from benchmarks.harness import View, line, render_saved

COLUMNS = ("size", "nodes", "hosts", "parts", "link", "system", "variant", "samples_per_s",
           "samples_per_s_min", "samples_per_s_max", "ratio_vs_stock", "ratio_vs_limit", "test_acc",
           "job_memory_mb", "memory_ratio_vs_stock", "peak_rss_mb", "planned_peak_mb",
           "feature_memory_mb", "cache_hit_rate", "remote_feature_bytes", "load1", "wall_s")
KEY = ("nodes", "hosts", "link", "variant")
TITLE = ("Scaling the graph: dsgraph vs stock DistDGL at equal job memory (emulated hosts), "
         "and the in-memory limit")
# The least equal_memory / stock throughput the targets ask for: per link on 2 hosts, and on more.
SPEEDUP_TARGET = {"veth": 1.5, "veth_throttled": 2.0}
SPEEDUP_TARGET_MORE_HOSTS = 1.3
LIMIT_TARGET = 1.0  # equal_memory / limit throughput, at least
EQUAL_MEMORY_LIMIT = 1.05  # equal_memory job memory / stock's, at most
DEFAULTS_MEMORY_LIMIT = 1.1  # defaults job memory / stock's, at most
ACCURACY_TOLERANCE = 0.005  # |dsgraph test accuracy - stock's|, at most
EPS = 1e-9  # float slack of the comparisons (0.8655 - 0.8705 is -0.005000000000000004)


def _deployment(row: dict) -> tuple:
    return row["nodes"], row["hosts"], row["link"]


def stock_row(rows: Iterable[dict], row: dict) -> Optional[dict]:
    """The stock row of ``row``'s size and deployment."""
    for r in rows:
        if r["variant"] == "stock" and _deployment(r) == _deployment(row):
            return r
    return None


def _ratio(a: Optional[float], b: Optional[float]) -> Optional[float]:
    return a / b if a is not None and b else None


def limit_row(rows: Iterable[dict], row: dict) -> Optional[dict]:
    """The limit row (plain DGL, whole graph in memory) of ``row``'s size."""
    for r in rows:
        if r["variant"] == "limit" and r["nodes"] == row["nodes"]:
            return r
    return None


def compare(rows: list[dict]) -> list[dict]:
    """Set every row's ``ratio_vs_stock`` (throughput) and ``memory_ratio_vs_stock`` (job
    memory) against the stock row of its size and deployment, and ``ratio_vs_limit`` against
    its size's limit row; return ``rows``."""
    for row in rows:
        lim = limit_row(rows, row)
        row["ratio_vs_limit"] = _ratio(row.get("samples_per_s"), lim and lim["samples_per_s"])
        ref = stock_row(rows, row)
        row["ratio_vs_stock"] = _ratio(row.get("samples_per_s"), ref and ref["samples_per_s"])
        row["memory_ratio_vs_stock"] = _ratio(row.get("job_memory_mb"),
                                              ref and ref.get("job_memory_mb"))
    return rows


def _check(value: Optional[float], ok: bool, text: str) -> tuple[bool, str]:
    if value is None:
        return False, f"{text}: not measured"
    return ok, f"{text}: {'met' if ok else 'missed'}"


def targets(rows: list[dict]) -> list[str]:
    """One line per size and deployment saying, from the rows' numbers, whether dsgraph met
    its targets: equal_memory at least SPEEDUP_TARGET[link] x stock's throughput on 2 hosts
    (SPEEDUP_TARGET_MORE_HOSTS x on more) with job
    memory <= EQUAL_MEMORY_LIMIT x and LIMIT_TARGET x the limit row's (where the size has
    one), defaults memory <= DEFAULTS_MEMORY_LIMIT x, and both
    within ACCURACY_TOLERANCE of stock's test accuracy."""
    out = []
    for stock in sorted((r for r in rows if r["variant"] == "stock"), key=_deployment):
        mine = {r["variant"]: r for r in rows if _deployment(r) == _deployment(stock)}
        eq, de = mine.get("equal_memory", {}), mine.get("defaults", {})
        need = SPEEDUP_TARGET_MORE_HOSTS if stock["hosts"] > 2 else \
            SPEEDUP_TARGET.get(stock["link"], SPEEDUP_TARGET["veth"])
        speed, mem = eq.get("ratio_vs_stock"), eq.get("memory_ratio_vs_stock")
        vs_limit = eq.get("ratio_vs_limit")
        dmem = de.get("memory_ratio_vs_stock")
        accs = {v: r["test_acc"] - stock["test_acc"] for v, r in (("equal_memory", eq),
                                                                   ("defaults", de))
                if r.get("test_acc") is not None and stock.get("test_acc") is not None}
        close = len(accs) == 2 and all(abs(d) <= ACCURACY_TOLERANCE + EPS for d in accs.values())
        checks = [
            _check(speed, speed is not None and speed >= need - EPS,
                   f"equal_memory {_x(speed)} stock's throughput (>= {need:g}x)"),
            _check(mem, mem is not None and mem <= EQUAL_MEMORY_LIMIT + EPS,
                   f"its job memory {_x(mem)} (<= {EQUAL_MEMORY_LIMIT:g}x)"),
            _check(vs_limit, vs_limit is not None and vs_limit >= LIMIT_TARGET - EPS,
                   f"its throughput {_x(vs_limit)} the in-memory limit's "
                   f"(>= {LIMIT_TARGET:g}x)"),
            _check(dmem, dmem is not None and dmem <= DEFAULTS_MEMORY_LIMIT + EPS,
                   f"defaults job memory {_x(dmem)} (<= {DEFAULTS_MEMORY_LIMIT:g}x)"),
            _check(accs.get("equal_memory") if len(accs) == 2 else None, close,
                   "test accuracy within " + f"{ACCURACY_TOLERANCE:g} of stock's ("
                   + ", ".join(f"{v} {d:+.4f}" for v, d in accs.items()) + ")"),
        ]
        verdict = "all targets met" if all(ok for ok, _ in checks) else "targets missed"
        out.append(f"**{stock.get('size', stock['nodes'])}, {stock['hosts']} hosts "
                   f"({stock['link']})**: {verdict}. " + "; ".join(t for _, t in checks) + ".")
    return out


def _x(value: Optional[float]) -> str:
    return "n/a" if value is None else f"{value:.2f}x"


def table_rows(records: list[dict]) -> list[dict]:
    """The records of the main table (the breakdown's, which carry a ``phase``, apart)."""
    return [r for r in records if "phase" not in r]


# The breakdown's columns, in this order where a size has them: (hosts, link, variant).
_BREAKDOWN_ORDER = [(2, "veth", v) for v in ("stock", "equal_memory", "defaults", "no_cache")] \
    + [(2, "veth_throttled", v) for v in ("stock", "equal_memory", "defaults", "no_cache")] \
    + [(4, "veth", v) for v in ("stock", "equal_memory", "defaults", "no_cache")] \
    + [(1, "local", "limit")]


def breakdown_tables(records: list[dict]) -> list[str]:
    """Per size with breakdown records, a markdown table: one line per phase, one column per
    row of the main table, CPU seconds per 1,000 training seeds (``wait``: wall seconds)."""
    out = []
    sizes = sorted({r["nodes"] for r in records if "phase" in r})
    for nodes in sizes:
        cells: dict[tuple, dict[str, Optional[float]]] = {}
        phases: list[str] = []
        for r in records:
            if "phase" in r and r["nodes"] == nodes:
                cells.setdefault((r["hosts"], r["link"], r["variant"]), {})[r["phase"]] = \
                    r["cpu_s_per_1k_seeds"]
                if r["phase"] not in phases:
                    phases.append(r["phase"])
        cols = [c for c in _BREAKDOWN_ORDER if c in cells]
        size = next(r.get("size", nodes) for r in records if r["nodes"] == nodes)
        head = ["phase"] + [("limit" if v == "limit" else f"{v}, {h} hosts {link}")
                            for h, link, v in cols]
        lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for ph in phases + ["cpu total"]:
            vals = [sum(x or 0.0 for k, x in cells[c].items() if k != "wait")
                    if ph == "cpu total" else cells[c].get(ph) for c in cols]
            lines.append(f"| {ph} | " + " | ".join("" if v is None else f"{v:.3f}"
                                                  for v in vals) + " |")
        out.append(f"**Where the seconds go at {size}** (dsgraph.phases; CPU seconds per 1,000 "
                   "training seeds summed over trainers, median over epochs 2.. and repeats; "
                   "`wait`: wall seconds inside sampling and feature gathering not on the "
                   "thread's CPU; `other`: the trainers' CPU outside every phase, e.g. RPC and "
                   "gloo threads; `servers`: the DistGraph servers' CPU):\n\n"
                   + "\n".join(lines))
    return out


def _notes(payload: dict) -> list[str]:
    """Target lines, the breakdown tables, then carried sizes and skipped deployments."""
    notes = targets(table_rows(payload["records"])) + breakdown_tables(payload["records"])
    for size, runs_date in payload.get("carried", {}).items():
        notes.append(f"Size **{size}** carried from the run of {runs_date}.")
    for dep, why in payload.get("skipped", {}).items():
        notes.append(f"**{dep}** rows skipped: {why}.")
    return notes


def _plot(rows: list[dict], fig: Any) -> None:
    """Throughput and job memory against nodes, one line per (system variant, link, hosts)."""
    ax1, ax2 = fig.subplots(1, 2)
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        groups.setdefault((r["variant"], r["link"], r["hosts"]), []).append(r)
    for (variant, link, hosts), grp in sorted(groups.items()):
        grp = sorted(grp, key=lambda r: r["nodes"])
        label = ("limit: plain DGL in memory, one process per core" if variant == "limit"
                 else f"{variant}, {link}, {hosts} hosts")
        style = {"label": label, "marker": "o",
                 "linestyle": "--" if link == "veth_throttled" else "-",
                 "color": {"stock": "tab:gray", "graphstorm": "tab:purple",
                           "no_cache": "tab:orange",
                           "equal_memory": "tab:blue", "defaults": "tab:green",
                           "limit": "black"}.get(variant)}
        if hosts > 2:
            style["marker"] = "s"
        line(ax1, grp, "nodes", "samples_per_s", KEY, **style)
        line(ax2, grp, "nodes", "job_memory_mb", KEY, **style)
    for ax, label in ((ax1, "training seeds / s (median of repeats)"),
                      (ax2, "job memory, MiB (peak summed PSS)")):
        ax.set_xscale("log")
        ax.set_xlabel("graph nodes")
        ax.set_ylabel(label)
    ax1.legend(fontsize=6)


VIEW = View("scale", TITLE, COLUMNS, KEY, rows=table_rows, plot=_plot, notes=_notes,
            figsize=(12.0, 5.0))


def render(quick: bool = False) -> Path:
    """Redraw scale.md and scale.png from the saved scale.json."""
    return render_saved(VIEW, quick)
