"""Benchmark ``partition``: the in-memory pipeline vs the streamed (chunked) one vs DGL's
``partition_graph``, on synthetic graphs stored in DGL's chunked format.

Each graph (avg degree 10, 128 features) is generated once, chunk by chunk, with
``python -m partition.chunk`` into a cached folder. Each measurement runs in a fresh process
(``python -m benchmarks.partition --measure SPEC``), which starts the partitioner as a user
would and watches it:

- ``in_memory``: ``python -m partition`` with ``partition.pipeline=in_memory`` (the whole graph,
  features included, loaded into one process, then pymetis and the writer);
- ``chunked``: ``python -m partition`` with the streamed pipeline (structure-only assignment
  within ``partition.memory_mb``, then ``partition.workers`` processes dispatch the rows);
- ``dgl``: the chunked folder loaded whole, then ``dgl.distributed.partition_graph(
  part_method="metis", balance_ntypes=train_mask, balance_edges=True)``.

Wall time: the partitioner's process from start to exit (imports and reading the input
included: a user waits for all of it). ``peak_rss_mb``: the largest VmHWM of any of its
processes (``RUSAGE_CHILDREN``); ``job_memory_mb``: the peak of the summed PSS of all of them
(shared pages counted once). The edge cut of every method is recomputed the same way from what it
wrote (node ranges in the JSON + the new->original id map) over the input's edges, read chunk by
chunk. ``python -m benchmarks partition --datasets 1M,4M`` reruns some sizes and carries the
others' records from the saved report.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional

import numpy as np

from benchmarks.harness import (Report, View, chosen, line, load_payload, median,
                                render_saved, reports_dir)

METHODS = ("in_memory", "chunked", "dgl")
COLUMNS = ("nodes", "edges", "parts", "method", "memory_mb", "edge_cut", "edge_cut_ratio",
           "node_balance", "train_balance", "wall_s", "peak_rss_mb", "job_memory_mb",
           "cut_vs_in_memory", "time_vs_dgl", "rss_vs_in_memory", "assigner", "repeats")
KEY = ("nodes", "parts", "method", "memory_mb")
TITLE = "Partitioning: in-memory vs streamed (chunked) pipeline vs DGL partition_graph"
FEAT_DIM = 128
# size name -> (nodes, parts, repeats, methods run). A method is ("chunked", partition.memory_mb)
# for the streamed pipeline: at 1M nodes both a budget METIS fits in and one it does not (the
# coarsened assignment), at 4M and 10M 5 GiB (coarsened: METIS would need more). In-memory and
# DGL load the whole graph: at 10M nodes (5 GB of features) they need more than this 24 GiB
# host holds (their peaks at 1M and 4M grow linearly with the graph).
WHOLE = ("in_memory", "dgl")
FULL = {"1M": (1_000_000, (2, 4), 2, (*WHOLE, ("chunked", 1024), ("chunked", 5120))),
        "4M": (4_000_000, (2, 4), 1, (*WHOLE, ("chunked", 5120))),
        "10M": (10_000_000, (2, 4), 1, (("chunked", 5120),))}
QUICK = {"20k": (20_000, (2,), 1, (*WHOLE, ("chunked", 5120)))}
WORKERS = 2  # partition.workers of the streamed pipeline


def _config_args(data: Path, parts: int, pipeline: str, out: Path,
                 memory_mb: int | None = None) -> list[str]:
    """``python -m partition`` arguments partitioning the chunked folder ``data``."""
    sets = {"dataset.name": "chunked", "dataset.path": str(data), "partition.num_parts": parts,
            "partition.pipeline": pipeline}
    if pipeline == "streamed":
        sets.update({"partition.memory_mb": memory_mb, "partition.workers": WORKERS})
    args = ["--config", "configs/default.yaml", "--out", str(out), "--force"]
    for k, v in sets.items():
        args += ["--set", f"{k}={v}"]
    return args


def measure(spec: dict) -> dict:
    """(Worker side) run one partitioner as a child process; time it, watch its memory, then
    recompute its cut and balance from what it wrote."""
    from dsgraph.cluster.memwatch import MemoryWatch

    out = Path(spec["out"])
    if spec["method"] == "dgl":
        cmd = [sys.executable, "-m", "benchmarks.partition", "--dgl", json.dumps(spec)]
    else:
        pipeline = "streamed" if spec["method"] == "chunked" else "in_memory"
        cmd = [sys.executable, "-m", "partition",
               *_config_args(Path(spec["data"]), spec["parts"], pipeline, out,
                             spec.get("memory_mb"))]
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "2")}
    # The command in a process group of its own, whose summed PSS (its workers' included) the
    # supervisor's instrument reads, as it reads a training job's.
    mem = MemoryWatch(pss_every_s=0.2)
    t0 = time.perf_counter()
    with tempfile.TemporaryFile("w+") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, text=True, env=env,
                                start_new_session=True)
        while proc.poll() is None:
            mem.sample([(spec["method"], proc.pid, True)])
            time.sleep(0.1)
        log.seek(0)
        output = log.read()
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        tail = output.strip().splitlines()[-3:]
        raise RuntimeError(f"{spec['method']} {spec['parts']} parts failed: " + " | ".join(tail))
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    result = {"wall_s": wall, "peak_rss_mb": peak, "job_memory_mb": mem.job_mb,
              **_quality(Path(spec["data"]), out / "graph.json", spec["parts"])}
    stats = out / "partition_stats.json"
    if stats.is_file():
        info = json.loads(stats.read_text()).get("assignment") or {}
        result["assigner"] = info.get("assigner", "metis")
    return result


def _quality(data: Path, part_json: Path, parts: int) -> dict:
    """Edge cut, node and training balance of a partitioning, from its files and the input."""
    from dgl.data.utils import load_tensors

    from dsgraph.data.chunked.folder import open_chunked
    from dsgraph.data.chunked.contract import iter_edges, read_node_key
    graph = open_chunked(data)
    meta = json.loads(part_json.read_text())
    assign = np.empty(graph.num_nodes, dtype=np.int8)
    for k in range(parts):
        feats = load_tensors(str(part_json.parent / meta[f"part-{k}"]["node_feats"]))
        orig = feats.get("_N/orig_id")
        if orig is None:  # DGL's own files keep the mapping elsewhere: its node map and NID
            orig = _dgl_orig_ids(part_json, k)
        assign[orig.numpy()] = k
        del feats
    cut = sum(int((assign[s] != assign[d]).sum()) for _, s, d in iter_edges(graph))
    counts = np.bincount(assign, minlength=parts)
    train = read_node_key(graph, "train_mask")
    trains = np.bincount(assign[train], minlength=parts)
    return {"nodes": graph.num_nodes, "edges": graph.num_edges, "edge_cut": cut,
            "edge_cut_ratio": cut / max(graph.num_edges, 1),
            "node_balance": float(counts.max() / counts.mean()),
            "train_balance": float(trains.max() / max(trains.mean(), 1e-9))}


def _dgl_orig_ids(part_json: Path, k: int):
    """Original ids of part ``k``'s owned nodes in DGL's files (saved by ``--dgl`` beside them)."""
    import torch
    return torch.from_numpy(np.load(part_json.parent / f"orig-{k}.npy"))


def _generate(name: str, nodes: int, cache: Path, quick: bool) -> Path:
    """The chunked folder of the size-``nodes`` graph, generated once (reused when present)."""
    folder = cache / f"chunked-{name}-{FEAT_DIM}f"
    if (folder / "metadata.json").is_file():
        return folder
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "partition.chunk", "--config", "configs/default.yaml",
                    "--set", f"dataset.num_nodes={nodes}", "--set", f"dataset.feat_dim={FEAT_DIM}",
                    "--set", "dataset.avg_degree=10", "--out", str(folder), "--force"],
                   check=True, env={**os.environ, "OMP_NUM_THREADS": "1"},
                   stdout=subprocess.DEVNULL if quick else None)
    print(f"generated {folder} in {time.perf_counter() - t0:.0f} s", flush=True)
    return folder


def _spawn(spec: dict) -> dict:
    """Run :func:`measure` in a fresh interpreter (its RUSAGE_CHILDREN is this run's alone)."""
    proc = subprocess.run([sys.executable, "-m", "benchmarks.partition", "--measure",
                           json.dumps(spec)], capture_output=True, text=True)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-5:]
        raise RuntimeError(f"partition benchmark worker failed ({spec['method']}, "
                           f"{spec['parts']} parts): " + " | ".join(tail))
    return json.loads(lines[-1][len("RESULT "):])


def _plot(rows: list[dict], fig) -> None:
    """Peak memory and wall time against graph size, one line per (method, parts)."""
    for i, (col, title) in enumerate((("peak_rss_mb", "largest process's peak RSS, MiB"),
                                      ("wall_s", "wall time, s"))):
        ax = fig.add_subplot(1, 2, i + 1)
        series = sorted({(r["method"], r.get("memory_mb") or 0, r["parts"]) for r in rows})
        for m, budget, parts in series:
            rs = sorted((r for r in rows if (r["method"], r.get("memory_mb") or 0, r["parts"])
                         == (m, budget, parts)), key=lambda r: r["nodes"])
            label = f"{m}{f' {budget} MiB' if budget else ''}, {parts} parts"
            line(ax, rs, "nodes", col, KEY, "o-", label=label)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("nodes (avg degree 10, 128 features)")
        ax.set_title(title)
        ax.legend(fontsize=7)


def _notes(payload: dict) -> list[str]:
    """Targets and what each column measures."""
    records, notes = payload["records"], []
    by = {(r["nodes"], r["parts"], r["method"], r.get("memory_mb")): r for r in records}
    checks = []
    for (n, p, m, budget), r in sorted(by.items(), key=lambda kv: str(kv[0])):
        if m != "chunked":
            continue
        line_ = (f"{n:,} nodes / {p} parts, budget {budget} MiB ({r.get('assigner')}): "
                 f"{r['wall_s']:.0f} s, peak {r['peak_rss_mb']:.0f} MiB")
        if r.get("cut_vs_in_memory") is not None:
            line_ += (f", cut {r['cut_vs_in_memory']:.3f}x in-memory, peak "
                      f"{r['rss_vs_in_memory']:.2f}x in-memory")
        if r.get("time_vs_dgl") is not None:
            line_ += f", time {r['time_vs_dgl']:.2f}x DGL"
        checks.append(line_)
    if checks:
        notes.append("Chunked pipeline: " + "; ".join(checks) + ".")
    notes.append(
        "Targets: 10M nodes / 100M edges / 128 features, 2 and 4 parts, peak RSS <= 6 GiB in "
        "< ~30 min; at 1M nodes the chunked path's edge cut <= 1.10x in-memory METIS, its time "
        "<= DGL's, its peak RSS <= 0.5x the in-memory path's.")
    notes.append(
        "Wall time = the partitioner's process tree from start to exit (imports and input "
        "reading included); peak_rss_mb = the largest VmHWM of its processes; job_memory_mb = "
        "peak summed PSS of its processes, sampled every 0.2 s; edge cut = directed edges whose "
        "endpoints lie in different parts, recomputed for every method from its files. "
        f"Chunked: partition.workers={WORKERS}, partition.memory_mb as the column says; "
        f"OMP_NUM_THREADS="
        f"{payload.get('omp_num_threads')}; medians over `repeats` fresh processes.")
    return notes


VIEW = View("partition", TITLE, COLUMNS, KEY, plot=_plot, notes=_notes, figsize=(11.0, 4.5))


def render(quick: bool = False) -> Path:
    """Redraw partition.md and partition.png from the saved partition.json."""
    return render_saved(VIEW, quick)


def _rows(nodes: int, parts: int, runs: dict, repeats: int) -> list[dict]:
    """One row per method from its repeats (medians), with the ratios against the others."""
    rows = {}
    for method, rs in runs.items():
        m, budget = method if isinstance(method, tuple) else (method, None)
        row = {"nodes": rs[0]["nodes"], "edges": rs[0]["edges"], "parts": parts, "method": m,
               "memory_mb": budget, "repeats": repeats,
               "assigner": rs[0].get("assigner") if m == "chunked" else None}
        for k in ("edge_cut", "edge_cut_ratio", "node_balance", "train_balance", "wall_s",
                  "peak_rss_mb", "job_memory_mb"):
            row[k] = median(r[k] for r in rs)
        row["edge_cut"] = int(row["edge_cut"])
        row["wall_s_all"] = [round(r["wall_s"], 1) for r in rs]
        row["peak_rss_mb_all"] = [round(r["peak_rss_mb"]) for r in rs]
        rows[method] = row
    for row in rows.values():
        mem, dgl = rows.get("in_memory"), rows.get("dgl")
        row["cut_vs_in_memory"] = row["edge_cut"] / mem["edge_cut"] if mem else None
        row["rss_vs_in_memory"] = row["peak_rss_mb"] / mem["peak_rss_mb"] if mem else None
        row["time_vs_dgl"] = row["wall_s"] / dgl["wall_s"] if dgl else None
    return list(rows.values())


def run(quick: bool, datasets: Optional[list[str]] = None) -> Path:
    """Partition every size with every method that fits, in fresh processes; write the report.
    With ``datasets`` (size names), only those run and the others' records are carried."""
    every = QUICK if quick else FULL
    sizes = chosen(every, datasets)
    report = Report(VIEW, quick, repeats=max(v[2] for v in sizes.values()))
    report.extra["omp_num_threads"] = os.environ.get("OMP_NUM_THREADS", "2")
    report.extra["plan"] = {k: {"nodes": v[0], "parts": list(v[1]), "repeats": v[2],
                                "methods": list(v[3])} for k, v in every.items()}
    if len(sizes) < len(every) and (reports_dir(quick) / "partition.json").is_file():
        saved = load_payload(VIEW.name, quick)
        kept = {every[k][0] for k in every if k not in sizes}
        for r in saved["records"]:
            if r["nodes"] in kept:  # runs before the budget column: the chunked rows had 5120
                if r["method"] == "chunked" and r.get("memory_mb") is None:
                    r["memory_mb"] = 5120
                report.records.append(r)
        # each carried size keeps the date of the run that measured it
        report.extra["carried"] = {k: saved.get("carried", {}).get(k, saved["env"]["date"])
                                   for k in every if k not in sizes}
    cache = Path(os.environ.get("DSGRAPH_BENCH_CACHE", "data"))
    with tempfile.TemporaryDirectory(prefix="dsgraph-bench-part-") as tmpd:
        for name, (nodes, parts_list, repeats, methods) in sizes.items():
            data = _generate(name, nodes, Path(tmpd) if quick else cache, quick)
            for parts in parts_list:
                runs: dict = {m: [] for m in methods}
                for rep in range(repeats):  # methods interleaved so drift hits all alike
                    for m in methods:
                        method, budget = m if isinstance(m, tuple) else (m, None)
                        out = Path(tmpd) / f"{method}-{nodes}-{parts}-{rep}"
                        print(f"{name} {parts} parts: {method} {budget or ''} (repeat "
                              f"{rep + 1}/{repeats}) ...", flush=True)
                        runs[m].append(_spawn({"data": str(data), "method": method,
                                               "parts": parts, "out": str(out),
                                               "memory_mb": budget}))
                        shutil.rmtree(out, ignore_errors=True)
                for row in _rows(nodes, parts, runs, repeats):
                    report.add(row)
                report.save(partial=True)
    return report.save()


def _main() -> None:
    """``--measure SPEC`` (one measurement, printed as JSON) or ``--dgl SPEC`` (DGL's
    partitioner on a chunked folder)."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.partition")
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--measure", help="JSON measurement spec (internal)")
    group.add_argument("--dgl", help="JSON spec: run DGL's partition_graph (internal)")
    args = parser.parse_args()
    if args.dgl:
        _run_dgl(json.loads(args.dgl))
        return
    print("RESULT " + json.dumps(measure(json.loads(args.measure))), flush=True)


def _run_dgl(spec: dict) -> None:
    """DGL's partition_graph on the whole graph; saves each part's original ids beside it."""
    import dgl
    import torch

    from dsgraph.data.chunked.folder import open_chunked
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "2")))
    g = open_chunked(spec["data"]).to_dgl()
    orig, _ = dgl.distributed.partition_graph(
        g, "graph", spec["parts"], spec["out"], part_method="metis",
        balance_ntypes=g.ndata["train_mask"], balance_edges=True, return_mapping=True)
    ranges = json.loads((Path(spec["out"]) / "graph.json").read_text())["node_map"]["_N"]
    for k, (a, b) in enumerate(ranges):
        np.save(Path(spec["out"]) / f"orig-{k}.npy", orig[a:b].numpy())


if __name__ == "__main__":
    _main()
