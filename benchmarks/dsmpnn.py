"""DS-MPNN on Darcy and airfoil fields: accuracy vs sampled nodes and vs edge cap, 1 vs 2 workers,
resolution transfer.

Every full-run record is a real ``train.mode: dsmpnn`` job (run folder, supervised
``train.worker`` processes, full-field test inference); it takes test RMSE (standardized target
units) and relative L2, the training error (root of the last epoch's mean loss), optimizer
steps, times, and the largest per-worker peak RSS from the run's metrics.json / metrics.jsonl.
``--quick`` sweep records run the same Trainer in this process (world 1).
Sweeps: ``nodes`` (s at a fixed edge cap), ``edges`` (n_e at fixed s): accuracy only, so they run
as 1-worker jobs two at a time (one per core; P = 2 gives the same numbers, see ``workers``).
``workers``: P = 1, then P = 2 at the base setting, each job alone, one thread per worker; speed
is the median epoch time with the first (warm-up) epoch excluded, and the record keeps the load
(1-minute load average, CPU share of other processes) the job ran under. The workers jobs also
predict a second test set at another resolution (Darcy grid) or point density (airfoil): the
``transfer`` row of each dataset shows the P = 1 model's error at both.
"""
from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional

import torch

from benchmarks.harness import (Report, View, bars, line, load_payload, median, render_saved,
                                reports_dir, tag)
from dsgraph.config import load
from dsgraph.data.cache import param_hash
from dsgraph.errors import UserError
from dsgraph.fsutil import atomic_write_text
from dsgraph.metrics import read_summary
from dsgraph.procstats import reset_peak_rss
from dsgraph.runs import prepare_run_dir
from dsgraph.trainer import Hook, Trainer
from train.__main__ import launch
from train.dsmpnn import DsmpnnStrategy

CACHE = "data"  # the project's dataset cache (git-ignored), shared with `python -m train`
COLUMNS = ("dataset", "sweep", "nodes", "edges_per_node", "workers", "radius", "resolution",
           "test_rmse", "test_rel_l2", "train_rmse", "steps", "transfer_resolution",
           "transfer_rmse", "transfer_rel_l2", "train_s", "epoch_s", "graph_s", "compute_s",
           "halo_s", "allreduce_s", "infer_s", "peak_rss_mb", "train_mem_mb", "other_cpu_share")
# The sweep sets the radius; the workers rows repeat a sweep point under another sweep name.
KEY = ("dataset", "sweep", "nodes", "edges_per_node", "workers")
TITLE = ("DS-MPNN: accuracy vs sampled nodes and edge cap, 1 vs 2 workers, resolution transfer")
RECORD_KEYS = ["test_rmse", "test_rel_l2", "train_rmse", "steps", "batch_fields",
               "transfer_rmse", "transfer_rel_l2", "epochs", "epoch_s", "graph_s", "compute_s",
               "halo_s", "allreduce_s", "step_s", "cpu_s", "train_s", "infer_s", "infer_s_all",
               "peak_rss_mb", "train_mem_mb", "peak_rss_mb_per_worker", "final_loss", "epoch_s_all",
               "load1_start", "load1_end", "other_cpu_share"]
# What "resolution" means per dataset: the Darcy grid side, the airfoil's points per field.
SIZE_KEY = {"darcy": ("physics.resolution", "physics.test_resolution"),
            "airfoil": ("physics.points", "physics.test_points")}

# Per dataset: base config file, fixed overrides, the training and transfer resolution, the
# base (s, n_e) of the workers comparison, the swept values with the neighbourhood radius of each
# sweep, and s for the edge sweep.
# Nodes: radius and cap fixed, so sparse samples have few neighbours (Darcy r = 0.1: ~8
# candidates at s = 250, ~60 at s = 2000) and a coarse view of the inputs. Edges: a radius with
# ~280 (Darcy) candidates at s = 1000, so every cap binds and the mean over n_e random
# neighbours estimates the kernel integral over a wide disc; the sweep starts at n_e = 2, the
# fewest edges that still give each node a 2-D view of its neighbourhood. Workers: Darcy s = 1000,
# r = 0.2 (wider neighbourhoods train Darcy better: 2000 steps, 8 covers, relative L2 0.046),
# airfoil the node sweep's setting, so its s = 2000 point is the P = 1 workers run.
# Training: 100 fields x epochs, one field per optimizer step (at equal compute, 800
# single-field steps beat 200 steps of 4 fields: Darcy relative L2 0.070 vs 0.084), cosine
# learning-rate decay per epoch; airfoil with gradient-norm clipping (its first steps diverged
# without). Darcy gets 20 epochs (the 0.05 target), airfoil 36: its error was still falling fast
# at 12 and 24 (s = 1000, r = 0.25, n_e = 16: test RMSE 0.291 after 1200 steps, 0.221 after
# 2400), and short training hid how the graph's size matters (at 12 / 24 epochs the node sweep
# fell 14% / 22%, the edge sweep 0% / 14%; the edge sweep's ends 22% at 36). Parity: on one
# sampled graph P = 2 computes P = 1's gradients to float32 rounding (tests), and Darcy's runs
# stay 1e-7 apart, but the airfoil's unstable first epochs amplify that rounding into another
# trajectory (epoch 1 losses 3e-7 apart, epoch 2 2% apart; test RMSE 0.9% apart after 12
# epochs, 2.1% after 24), as another seed would (seeds alone spread 0.161..0.194 at 36): its
# parity is the mean over three training seeds (``parity_seeds`` besides the config's), run as
# accuracy-only jobs. Inference averages random covers: 8 on Darcy (s = 500: relative L2
# 0.080 / 0.070 / 0.065 / 0.062 with 1 / 2 / 4 / 8), 4 on the airfoil.
FULL = {
    "darcy": {"config": "configs/darcy.yaml",
              "set": ["physics.train_samples=100", "physics.test_samples=10", "train.epochs=20",
                      "train.lr=0.01", "physics.batch_fields=1", "physics.infer_repeats=8",
                      "train.timeout_s=5400"],
              "size": (64, 128), "base": (1000, 16), "nodes": [250, 500, 1000, 2000],
              "edge_nodes": 1000, "edges": [2, 4, 8, 16, 32],
              "radius": {"workers": 0.2, "nodes": 0.1, "edges": 0.3}},
    "airfoil": {"config": "configs/airfoil.yaml",
                "set": ["physics.train_samples=100", "physics.test_samples=10", "train.epochs=36",
                        "train.lr=0.01", "train.grad_clip=1.0", "physics.batch_fields=1",
                        "physics.infer_repeats=4", "train.timeout_s=5400"],
                "size": (8000, 16000), "base": (2000, 16), "nodes": [250, 500, 1000, 2000],
                "edge_nodes": 1000, "edges": [2, 4, 8, 16, 32],
                "radius": {"workers": 0.25, "nodes": 0.25, "edges": 0.3},
                "parity_seeds": [1, 2]},
}
# Inference passes of each workers run (infer_s is their median): one ~15 s pass swung the
# airfoil's 2-worker speed-up between 1.45x and 1.59x on the same work.
INFER_PASSES = 3
QUICK = {
    "darcy": {"config": "configs/darcy.yaml",
              "set": ["physics.train_samples=4", "physics.test_samples=1", "train.epochs=1",
                      "physics.infer_repeats=1", "physics.batch_fields=2",
                      "model.args={width: 8, layers: 2, kernel_hidden: 8}"],
              "size": (24, 32), "base": (150, 8), "nodes": [100, 200], "edges": [4, 8],
              "radius": {"workers": 0.25, "nodes": 0.25, "edges": 0.25}},
    "airfoil": {"config": "configs/airfoil.yaml",
                "set": ["physics.train_samples=4", "physics.test_samples=1", "train.epochs=1",
                        "physics.infer_repeats=1", "physics.batch_fields=2",
                        "model.args={width: 8, layers: 2, kernel_hidden: 8}"],
                "size": (400, 600), "base": (150, 8), "nodes": [100, 200], "edges": [4, 8],
                "radius": {"workers": 0.4, "nodes": 0.4, "edges": 0.4}},
}


def train_run(config: str, overrides: list[str], out: Path) -> dict:
    """Run one dsmpnn training job through the launcher (``train.__main__.launch``: one
    ``train.worker`` process per subdomain); return its metrics.json."""
    cfg = load(config, overrides)
    run_dir = prepare_run_dir(cfg, str(out), resume=False, force=True)
    return launch(cfg, run_dir, resume=False)


class _ResetPeak(Hook):
    """Hook of an in-process run: the RSS high-water mark restarts when loading is done, so the
    run's peak_rss_mb and train_mem_mb are its own, not an earlier run's in the same process."""

    def on_ready(self, trainer) -> None:
        reset_peak_rss()


def local_run(config: str, overrides: list[str], out: Path) -> dict:
    """One worker in this process (no process start-up): the --quick path for the sweeps. The
    real trainer (:class:`dsgraph.trainer.Trainer` with the dsmpnn strategy, world 1) in run
    folder ``out``, with the configured thread count; returns its metrics.json."""
    cfg = load(config, overrides)
    run_dir = prepare_run_dir(cfg, str(out), resume=False, force=True)
    DsmpnnStrategy.prepare(cfg)  # the launcher-side step: the dataset cache
    threads, env = torch.get_num_threads(), os.environ.get("OMP_NUM_THREADS")
    os.environ["OMP_NUM_THREADS"] = str(cfg.cluster.num_threads)  # what the trainer applies
    try:
        Trainer(cfg, run_dir, DsmpnnStrategy(cfg), hooks=[_ResetPeak()]).run()
    finally:
        torch.set_num_threads(threads)
        if env is None:
            os.environ.pop("OMP_NUM_THREADS", None)
        else:
            os.environ["OMP_NUM_THREADS"] = env
    return read_summary(run_dir)


def _settings(spec: dict, sweep: str, nodes: int, edges: int, workers: int,
              seed: Optional[int] = None) -> list[str]:
    """The overrides of one run. Runs at the workers base setting also predict the transfer
    set and time inference as the median of INFER_PASSES passes, so the node sweep's point at
    that setting is the same run as the P = 1 workers row. ``seed``: a parity run, another
    training seed at the base setting (accuracy only: one inference pass)."""
    size_key, transfer_key = SIZE_KEY[_dataset(spec)]
    size, transfer = spec["size"]
    base = (nodes, edges) == spec["base"] and \
        spec["radius"][sweep] == spec["radius"]["workers"]
    extra = [f"{transfer_key}={transfer}"] if base else []
    if seed is not None:
        extra.append(f"train.seed={seed}")
    elif base:
        extra.append(f"physics.infer_passes={INFER_PASSES}")
    return spec["set"] + [f"{size_key}={size}", f"physics.sampled_nodes={nodes}",
                          f"physics.max_edges={edges}", f"physics.radius={spec['radius'][sweep]}",
                          f"physics.workers={workers}", "cluster.num_threads=1",
                          f"dataset.cache_dir={CACHE}"] + extra


def _dataset(spec: dict) -> str:
    return Path(spec["config"]).stem


def _cpu_seconds() -> tuple[float, float]:
    """(busy CPU seconds of the whole machine, CPU seconds of this process and its waited-for
    children): their difference over a run is what other processes used meanwhile."""
    fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
    ticks = [int(v) for v in fields]
    busy = sum(ticks) - ticks[3] - (ticks[4] if len(ticks) > 4 else 0)  # minus idle and iowait
    own = sum(getattr(resource.getrusage(who), f) for who in
              (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN) for f in ("ru_utime", "ru_stime"))
    return busy / os.sysconf("SC_CLK_TCK"), own


def _run_dir(spec: dict, out: Path, sweep: str, nodes: int, edges: int, workers: int,
             seed: Optional[int] = None) -> Path:
    """The run folder of one job, keyed by its settings only: a run two sweeps share (same s,
    n_e, radius, P) runs once."""
    sets = _settings(spec, sweep, nodes, edges, workers, seed)
    return out / f"{Path(spec['config']).stem}-{nodes}-{edges}-{workers}-" \
                 f"{param_hash({'config': spec['config'], 'set': sets})}"


def _epochs(run_dir: Path) -> list[dict]:
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def _with_epochs(m: dict, run_dir: Path) -> dict:
    """Add the median epoch time without the first (warm-up) epoch and rank 0's phase split."""
    eps = _epochs(run_dir)
    timed = eps[1:] if len(eps) > 1 else eps
    m = dict(m)
    m["epoch_s"] = median(e["epoch_s"] for e in timed)
    m["epoch_s_all"] = [e["epoch_s"] for e in eps]
    for k in ("graph_s", "compute_s", "halo_s", "allreduce_s", "step_s", "cpu_s"):
        if k in timed[0]:
            m[k] = median(e[k] for e in timed)
    return m


def _timed_run(spec: dict, sweep: str, nodes: int, edges: int, workers: int, out: Path) -> dict:
    """One real job run alone (workers comparison), with the machine's load around it. A finished
    run folder is reused, so an interrupted benchmark resumes (delete data/bench-dsmpnn to
    re-measure everything)."""
    run_dir = _run_dir(spec, out, sweep, nodes, edges, workers)
    done = run_dir / "metrics.json"
    if done.exists():
        print(f"  (reusing {run_dir})", flush=True)
        return _with_epochs(json.loads(done.read_text()), run_dir)
    load0, (busy0, own0), t0 = os.getloadavg()[0], _cpu_seconds(), time.perf_counter()
    m = train_run(spec["config"], _settings(spec, sweep, nodes, edges, workers), run_dir)
    (busy1, own1), wall = _cpu_seconds(), time.perf_counter() - t0
    m.update(load1_start=load0, load1_end=os.getloadavg()[0],
             other_cpu_share=max(0.0, (busy1 - busy0) - (own1 - own0)) / wall)
    atomic_write_text(done, json.dumps(m, indent=1))
    return _with_epochs(m, run_dir)


def _train_cmd(config: str, sets: list[str], run_dir: Path) -> list[str]:
    cmd = [sys.executable, "-m", "train", "--config", config, "--out", str(run_dir), "--force"]
    for s in sets:
        cmd += ["--set", s]
    return cmd


def _run_cmds(cmds: list[tuple[list[str], Path, int]], slots: int) -> None:
    """Run ``python -m train`` commands (command, run folder, worker processes) in order, as
    many at a time as their workers fit in ``slots`` cores, skipping run folders that already
    hold a metrics.json; raise with the log tail if one fails."""
    pending = [(c, d, n) for c, d, n in cmds if not (d / "metrics.json").exists()]
    running: list[tuple[subprocess.Popen, Path, int]] = []
    while pending or running:
        while pending and (not running or
                           sum(n for *_, n in running) + pending[0][2] <= slots):
            cmd, run_dir, cores = pending.pop(0)
            run_dir.parent.mkdir(parents=True, exist_ok=True)
            with open(run_dir.parent / f"{run_dir.name}.log", "w") as log:
                running.append((subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT),
                                run_dir, cores))
        proc, run_dir, _ = running.pop(0)
        if proc.wait() != 0:
            tail = (run_dir.parent / f"{run_dir.name}.log").read_text()[-2000:]
            raise RuntimeError(f"run {run_dir.name} failed:\n{tail}")


def _parallel_runs(spec: dict, jobs: list[tuple[str, int, int]], out: Path, slots: int) -> list[dict]:
    """Sweep runs as independent 1-worker ``python -m train`` jobs, ``slots`` at a time (one per
    core); metrics of each, in the order of ``jobs``. Finished run folders are reused."""
    dirs = [_run_dir(spec, out, sweep, nodes, edges, 1) for sweep, nodes, edges in jobs]
    _run_cmds([(_train_cmd(spec["config"], _settings(spec, *j, 1), d), d, 1)
               for j, d in zip(jobs, dirs)], slots)
    return [_with_epochs(json.loads((d / "metrics.json").read_text()), d) for d in dirs]


def _capacity(spec: dict, out: Path, alone: dict) -> dict:
    """Two copies of the 1-worker base run (2 epochs) side by side: how much faster two cores
    get through independent work than one under the load of the moment, which bounds what any
    2-worker speed-up can reach. Compares the second epoch with the P=1 run's median epoch."""
    s0, e0 = spec["base"]
    # Epoch times only: one inference pass, not the workers runs' timed ones.
    sets = _settings(spec, "workers", s0, e0, 1) + ["train.epochs=2", "physics.infer_passes=1"]
    key = param_hash({"config": spec["config"], "set": sets})
    dirs = [out / f"capacity-{Path(spec['config']).stem}-{k}-{key}" for k in range(2)]
    load0, (busy0, own0), t0 = os.getloadavg()[0], _cpu_seconds(), time.perf_counter()
    _run_cmds([(_train_cmd(spec["config"], sets, d), d, 1) for d in dirs], slots=2)
    (busy1, own1), wall = _cpu_seconds(), time.perf_counter() - t0
    side = [_with_epochs(json.loads((d / "metrics.json").read_text()), d)["epoch_s"] for d in dirs]
    return {"epoch_s_alone": alone["epoch_s"], "epoch_s_side_by_side": side,
            "throughput_x": 2 * alone["epoch_s"] / median(side), "load1_start": load0,
            "other_cpu_share": max(0.0, (busy1 - busy0) - (own1 - own0)) / wall}


def _record(report: Report, dataset: str, sweep: str, nodes: int, edges: int, workers: int,
            m: dict, spec: dict) -> dict:
    """One table row; transfer figures only on the ``transfer`` row (from the P = 1 run)."""
    rec = {"dataset": dataset, "sweep": sweep, "nodes": nodes, "edges_per_node": edges,
           "workers": workers, "radius": spec["radius"]["workers" if sweep == "transfer"
                                                        else sweep],
           "resolution": spec["size"][0]}
    keep = [k for k in RECORD_KEYS if sweep == "transfer" or not k.startswith("transfer_")]
    rec.update({k: m[k] for k in keep if k in m})
    if sweep == "transfer":
        rec["transfer_resolution"] = spec["size"][1]
    return report.add(rec)


def _workers_sweep(report: Report, ds: str, spec: dict, out: Path, capacity: bool,
                   pair: bool = True) -> None:
    """P = 1, then (``pair``) P = 2, at the base setting, each run alone with one thread per
    worker, and the transfer row of the P = 1 run; then (``capacity``) two 1-worker copies side
    by side."""
    s0, e0 = spec["base"]
    one = _timed_run(spec, "workers", s0, e0, 1, out)
    _record(report, ds, "workers", s0, e0, 1, one, spec)
    if pair:
        _record(report, ds, "workers", s0, e0, 2, _timed_run(spec, "workers", s0, e0, 2, out),
                spec)
    _record(report, ds, "transfer", s0, e0, 1, one, spec)
    if capacity:
        report.extra.setdefault("capacity", {})[ds] = _capacity(spec, out, one)


def _parity(report: Report, ds: str, spec: dict, out: Path) -> None:
    """``parity[ds]``: test RMSE of P = 1 and P = 2 at the base setting for every training
    seed, the workers rows' (the config's seed) first and then ``parity_seeds``."""
    if not spec.get("parity_seeds"):
        return
    s0, e0 = spec["base"]
    seed0 = load(spec["config"], spec["set"]).train.seed
    runs = [(seed0, p, r) for r in report.records for p in (1, 2)
            if r["dataset"] == ds and r["sweep"] == "workers" and r["workers"] == p]
    for seed in spec["parity_seeds"]:
        for p in (1, 2):
            run_dir = _run_dir(spec, out, "workers", s0, e0, p, seed)
            runs.append((seed, p, json.loads((run_dir / "metrics.json").read_text())))
    report.extra.setdefault("parity", {})[ds] = [
        {"seed": seed, "workers": p, **{k: m[k] for k in ("test_rmse", "test_rel_l2",
                                                           "train_rmse")}}
        for seed, p, m in runs]


def _drop(recs: list[dict]) -> float:
    return 1.0 - recs[-1]["test_rmse"] / recs[0]["test_rmse"]


# The report paragraph on how every column is measured.
MEASURED = (
    "RMSE is over all test points and target channels in standardized units "
    "(train-set mean/std per channel); relative L2 is per test sample in physical "
    "units, averaged. Test fields are predicted GKN-style: every point is covered by "
    "random groups of s sampled nodes, each group's radius graph is predicted, and "
    "the covers are averaged. Sweeps train 1-worker jobs, two at a time (one per "
    "core), so their times are not speed measurements. Workers rows: P=1, then P=2, "
    "each alone with one thread per worker; epoch_s is the median epoch time without "
    "the first epoch, and graph_s / compute_s / halo_s / allreduce_s split rank 0's "
    "median epoch into graph building (sampling, edges, plan), forward+backward "
    "compute, halo exchanges (waiting for the peer included) and the gradient "
    "all-reduce; other_cpu_share is the CPU (in cores) that other processes used "
    "during the job. peak_rss_mb is the largest worker's peak RSS (about 500 MB of "
    "it is torch + DGL); train_mem_mb is what training and inference added on top of "
    "the RSS before the first epoch (largest worker). train_rmse is the root of the last "
    "epoch's mean training loss (standardized units, on the sampled training graphs); "
    "steps counts optimizer steps. resolution is the Darcy grid side or the airfoil's "
    "points per field; each transfer row is the P=1 workers run, whose model also "
    "predicted test fields at transfer_resolution (Darcy: a finer grid; airfoil: "
    "denser point clouds), drawn after the test fields so no field is seen twice.")


def _notes(payload: dict) -> list[str]:
    """Machine capacity, how the figures are measured, and the targets per dataset."""
    rec, notes = payload["records"], []
    for ds, cap in payload.get("capacity", {}).items():
        notes.append(f"**{ds} machine capacity**: two independent copies of the 1-worker base "
                     f"run, side by side, took {median(cap['epoch_s_side_by_side']):.2f} s per "
                     f"epoch vs {cap['epoch_s_alone']:.2f} s alone: the two cores did "
                     f"{cap['throughput_x']:.2f}x the work of one (other processes used "
                     f"{cap['other_cpu_share']:.2f} cores meanwhile). No 2-worker run can beat "
                     f"that factor under the same load.")
    notes.append(MEASURED)
    for ds, date in payload.get("carried", {}).items():
        notes.append(f"**{ds} records carried**: this run did not rerun {ds}; its rows (and "
                     f"capacity check) are those of the run of {date}.")
    for ds in sorted({r["dataset"] for r in rec}):
        parts = []
        for sweep, target in (("nodes", "nodes"), ("edges", "edges_per_node")):
            rs = [r for r in rec if r["dataset"] == ds and r["sweep"] == sweep]
            if len(rs) >= 2:
                d = _drop(rs)
                # how much of the fall the first step carries: from the second point on
                later = (f", {100 * _drop(rs[1:]):.0f}% from {rs[1][target]}"
                         if len(rs) >= 3 else "")
                parts.append(f"RMSE {rs[0]['test_rmse']:.3f} -> {rs[-1]['test_rmse']:.3f} over "
                             f"{sweep} {rs[0][target]}..{rs[-1][target]} ({100 * d:.0f}% lower"
                             f"{later}; target >= 20%: {'met' if d >= 0.2 else 'NOT met'})")
        ws = {r["workers"]: r for r in rec if r["dataset"] == ds and r["sweep"] == "workers"}
        if 1 in ws and 2 in ws:
            one, two = ws[1], ws[2]
            diff = two["test_rmse"] / one["test_rmse"] - 1.0
            sp_train, sp_inf = one["epoch_s"] / two["epoch_s"], one["infer_s"] / two["infer_s"]
            load = ""
            if "other_cpu_share" in one and "other_cpu_share" in two:
                load = (f"; other processes used {one['other_cpu_share']:.2f} / "
                        f"{two['other_cpu_share']:.2f} cores during the P=1 / P=2 runs")
            if "cpu_s" in one and "cpu_s" in two:
                load += (f"; rank 0 was on a CPU {one['cpu_s'] / one['epoch_s']:.0%} (P=1) / "
                         f"{two['cpu_s'] / two['epoch_s']:.0%} (P=2) of its median epoch")
            phases = ""
            if "compute_s" in two:
                phases = (f"; per epoch, P=1 vs P=2 (rank 0): graph building "
                          f"{one.get('graph_s', 0):.2f} vs {two['graph_s']:.2f} s, compute "
                          f"{one.get('compute_s', 0):.2f} vs {two['compute_s']:.2f} s, halo exchange "
                          f"- vs {two['halo_s']:.2f} s, all-reduce - vs {two['allreduce_s']:.2f} s")
            verdict = f"target within 2%: {'met' if abs(diff) <= 0.02 else 'NOT met'}"
            seeds = _seed_means(payload.get("parity", {}).get(ds, []))
            if seeds:  # the target holds for the mean over training seeds
                mean1, mean2, per_seed = seeds
                diff = mean2 / mean1 - 1.0
                verdict = (f"over {len(per_seed)} training seeds mean RMSE {mean2:.4f} vs "
                           f"{mean1:.4f}, {100 * diff:+.2f}% (per seed "
                           + ", ".join(f"{100 * d:+.2f}%" for d in per_seed) +
                           f"); target within 2% for the mean: "
                           f"{'met' if abs(diff) <= 0.02 else 'NOT met'}")
            parts.append(f"2 workers: RMSE {two['test_rmse']:.4f} vs {one['test_rmse']:.4f} "
                         f"({100 * (two['test_rmse'] / one['test_rmse'] - 1):+.2f}%; "
                         f"{verdict}), training "
                         f"{sp_train:.2f}x faster (median epoch {two['epoch_s']:.2f} s vs "
                         f"{one['epoch_s']:.2f} s; target >= 1.6x: "
                         f"{'met' if sp_train >= 1.6 else 'NOT met'}), inference {sp_inf:.2f}x "
                         f"({two['infer_s']:.2f} s vs {one['infer_s']:.2f} s{_passes(one, two)}; "
                         f"target >= 1.5x: {'met' if sp_inf >= 1.5 else 'NOT met'}), "
                         f"peak RSS per worker {two['peak_rss_mb']:.0f} MB vs "
                         f"{one['peak_rss_mb']:.0f} MB{phases}{load}")
        for r in rec:
            if r["dataset"] == ds and r["sweep"] == "transfer" and r.get("transfer_rel_l2"):
                ratio = r["transfer_rel_l2"] / r["test_rel_l2"]
                parts.append(f"resolution transfer {r['resolution']} -> "
                             f"{r['transfer_resolution']}: relative L2 {r['test_rel_l2']:.4f} -> "
                             f"{r['transfer_rel_l2']:.4f} ({ratio:.2f}x; target within 1.5x: "
                             f"{'met' if ratio <= 1.5 else 'NOT met'})")
        if ds == "darcy" and 1 in ws:
            rel = ws[1]["test_rel_l2"]
            parts.append(f"test relative L2 {rel:.4f} at s={ws[1]['nodes']}, "
                         f"n_e={ws[1]['edges_per_node']} (target <= 0.05: "
                         f"{'met' if rel <= 0.05 else 'NOT met'})")
        notes.append(f"**{ds}**: " + "; ".join(parts) + ".")
    return notes


def _passes(one: dict, two: dict) -> str:
    """How the two inference times were taken: the median of several passes, or one."""
    counts = {len(r.get("infer_s_all") or [None]) for r in (one, two)}
    if counts == {1}:
        return ", one pass each"
    spread = "; ".join(f"P={r['workers']} " + " / ".join(f"{t:.2f}" for t in r["infer_s_all"])
                       for r in (one, two) if r.get("infer_s_all"))
    return f", median passes ({spread} s)"


def _seed_means(parity: list[dict]) -> Optional[tuple[float, float, list[float]]]:
    """(mean P = 1 RMSE, mean P = 2 RMSE, per-seed relative gap) over the seeds that ran
    both; None for fewer than two such seeds."""
    by_seed: dict[int, dict[int, float]] = {}
    for r in parity:
        by_seed.setdefault(r["seed"], {})[r["workers"]] = r["test_rmse"]
    pairs = [(w[1], w[2]) for w in by_seed.values() if 1 in w and 2 in w]
    if len(pairs) < 2:
        return None
    return (sum(a for a, _ in pairs) / len(pairs), sum(b for _, b in pairs) / len(pairs),
            [b / a - 1.0 for a, b in pairs])


def _plot(rows: list[dict], fig) -> None:
    """Test (and, dotted, training) RMSE over each sweep (one line per dataset, its fixed
    settings in the legend), rank 0's epoch time split of the workers rows, and the relative L2
    at the trained and the transfer resolution."""
    axes = fig.subplots(1, 4, gridspec_kw={"width_ratios": [3, 3, 3, 2]})
    for ds, marker, colour in (("darcy", "o", "C0"), ("airfoil", "s", "C1")):
        for ax, sweep, key, fixed in ((axes[0], "nodes", "nodes", "edges_per_node"),
                                      (axes[1], "edges", "edges_per_node", "nodes")):
            rs = [r for r in rows if r["dataset"] == ds and r["sweep"] == sweep]
            if rs:
                held = "n_e" if fixed == "edges_per_node" else "s"
                line(ax, rs, key, "test_rmse", KEY, marker=marker, color=colour,
                     label=f"{ds} ({held}={rs[0][fixed]}, r={rs[0]['radius']:g})")
                ax.set_xscale("log", base=2)
                ax.set_xlabel("sampled nodes s" if sweep == "nodes" else "edge cap n_e")
                line(ax, rs, key, "train_rmse", KEY, marker=marker, linestyle=":",
                     color=colour, label=f"{ds} train")
                ax.set_ylabel("RMSE (standardized; dotted: training)")
                ax.legend(fontsize=7)
    ws = [r for r in rows if r["sweep"] == "workers"]
    labels = [f"{r['dataset']}\nP={r['workers']}" for r in ws]
    bottom = [0.0] * len(ws)
    for key in ("graph_s", "compute_s", "halo_s", "allreduce_s"):
        idx = [i for i, r in enumerate(ws) if r.get(key) is not None]
        bars(axes[2], idx, [ws[i] for i in idx], key, KEY, bottom=[bottom[i] for i in idx],
             label=key[:-2])
        for i in idx:
            bottom[i] += ws[i][key]
    tag(axes[2].scatter(range(len(ws)), [r["epoch_s"] for r in ws], color="k", marker="_",
                        s=200, label="epoch", zorder=3), "epoch_s", ws, KEY)
    axes[2].set_xticks(range(len(ws)), labels, fontsize=7)
    axes[2].set_ylabel("seconds per epoch (median; rank 0)")
    axes[2].legend(fontsize=7)
    ts = [r for r in rows if r["sweep"] == "transfer"]
    xs = list(range(len(ts)))
    bars(axes[3], [x - 0.2 for x in xs], ts, "test_rel_l2", KEY, width=0.4, label="trained size")
    bars(axes[3], [x + 0.2 for x in xs], ts, "transfer_rel_l2", KEY, width=0.4,
         label="transfer size")
    axes[3].set_xticks(xs, [f"{r['dataset']}\n{r['resolution']}->{r.get('transfer_resolution')}"
                            for r in ts], fontsize=7)
    axes[3].set_ylabel("test relative L2")
    axes[3].legend(fontsize=7)
    axes[3].set_title("resolution transfer")
    axes[0].set_title("accuracy vs sampled nodes")
    axes[1].set_title("accuracy vs edges per node")
    axes[2].set_title("1 vs 2 workers: epoch time")


VIEW = View("dsmpnn", TITLE, COLUMNS, KEY, plot=_plot, notes=_notes, figsize=(15.0, 5.0))


def render(quick: bool = False) -> Path:
    """Redraw dsmpnn.md and dsmpnn.png from the saved dsmpnn.json."""
    return render_saved(VIEW, quick)


def _carry(report: Report, quick: bool, keep: list[str]) -> None:
    """Copy the records (and capacity check) of datasets ``keep`` from the saved report, and
    note in ``carried`` the run each came from, so a rerun of one dataset keeps the others."""
    saved = load_payload(VIEW.name, quick)
    carried = saved.get("carried", {})
    for ds in keep:
        recs = [r for r in saved["records"] if r["dataset"] == ds]
        if not recs:
            raise UserError(f"{reports_dir(quick) / VIEW.name}.json: no {ds} records to carry; "
                            f"rerun {ds} too")
        report.records.extend(recs)
        report.extra.setdefault("carried", {})[ds] = carried.get(ds, saved["env"]["date"])
        for extra in ("capacity", "parity"):
            if ds in saved.get(extra, {}):
                report.extra.setdefault(extra, {})[ds] = saved[extra][ds]
        if ds in saved.get("settings", {}):
            report.extra["settings"][ds] = saved["settings"][ds]


def run(quick: bool, datasets: Optional[list[str]] = None) -> Path:
    """Run the sweeps and write benchmarks/reports/dsmpnn.{json,md,png}. With ``datasets``, only
    those run; the other datasets' records are carried from the saved report (``carried``
    names the run each comes from)."""
    every = QUICK if quick else FULL
    unknown = sorted(set(datasets or []) - set(every))
    if unknown or datasets == []:
        raise UserError(f"--datasets {','.join(datasets or [])}: expected some of "
                        f"{', '.join(every)}")
    specs = {ds: spec for ds, spec in every.items() if datasets is None or ds in datasets}
    report = Report(VIEW, quick, repeats=1)
    report.extra["settings"] = dict(specs)
    if len(specs) < len(every):
        _carry(report, quick, [ds for ds in every if ds not in specs])
    t_start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="dsmpnn-bench-") as tmp:
        out = Path(tmp) if quick else Path(CACHE) / "bench-dsmpnn"
        for ds, spec in specs.items():  # --quick: P = 2 and capacity on Darcy only
            _workers_sweep(report, ds, spec, out, capacity=ds == "darcy" and not quick,
                           pair=not quick or ds == "darcy")
        sweeps = {}
        for ds, spec in specs.items():
            s0, e0 = spec["base"]
            s_edges = spec.get("edge_nodes", s0)
            sweeps[ds] = [("nodes", s, e0) for s in spec["nodes"]] + \
                         [("edges", s_edges, e) for e in spec["edges"]]
        if quick:  # one in-process worker: seconds, no process start-up
            results = {}
            for ds, jobs in sweeps.items():
                dirs = [_run_dir(specs[ds], out, *j, 1) for j in jobs]
                results[ds] = [_with_epochs(local_run(specs[ds]["config"],
                                                      _settings(specs[ds], *j, 1), d), d)
                               for j, d in zip(jobs, dirs)]
        else:
            # All sweep and parity runs in one pool: 1-worker jobs largest (s * n_e) first, so
            # the two slots end together, then the 2-worker parity jobs, each on both cores.
            pool = sorted([(ds, (*j, 1, None)) for ds, jobs in sweeps.items() for j in jobs] +
                          [(ds, ("workers", *specs[ds]["base"], p, seed))
                           for ds in specs for seed in specs[ds].get("parity_seeds", [])
                           for p in (1, 2)],
                          key=lambda dj: (dj[1][3], -dj[1][1] * dj[1][2]))
            _run_cmds([(_train_cmd(specs[ds]["config"], _settings(specs[ds], *j), d), d, j[3])
                       for ds, j in pool for d in [_run_dir(specs[ds], out, *j)]], slots=2)
            results = {ds: _parallel_runs(specs[ds], jobs, out, slots=2) for ds, jobs in sweeps.items()}
            for ds, spec in specs.items():
                _parity(report, ds, spec, out)
        for ds, jobs in sweeps.items():
            for (sweep, s, e), m in zip(jobs, results[ds]):
                _record(report, ds, sweep, s, e, 1, m, specs[ds])
    report.extra["wall_s"] = time.perf_counter() - t_start
    return report.save()
