"""The ``dsmpnn`` run: the workers comparison, the sweeps and parity seeds, one record per job,
and records carried from the saved report for datasets not rerun."""
from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path
from typing import Optional

from benchmarks.dsmpnn import settings
from benchmarks.dsmpnn.report import VIEW
from benchmarks.dsmpnn.runner import (local_run, measure_capacity, parallel_runs, run_cmds,
                                      timed_run, train_cmd, with_epochs)
from benchmarks.dsmpnn.settings import CACHE, FULL, QUICK
from benchmarks.harness import Report, carry, chosen, reports_dir
from dsgraph.config import load
from dsgraph.errors import UserError

# What a record keeps of a job's figures (``transfer_*`` on the transfer row only).
RECORD_KEYS = ["test_rmse", "test_rel_l2", "train_rmse", "steps", "batch_fields",
               "transfer_rmse", "transfer_rel_l2", "epochs", "epoch_s", "graph_s", "compute_s",
               "halo_s", "allreduce_s", "step_s", "cpu_s", "train_s", "infer_s", "infer_s_all",
               "peak_rss_mb", "train_mem_mb", "peak_rss_mb_per_worker", "final_loss", "epoch_s_all",
               "load1_start", "load1_end", "other_cpu_share"]


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
    one = timed_run(spec, "workers", s0, e0, 1, out)
    _record(report, ds, "workers", s0, e0, 1, one, spec)
    if pair:
        _record(report, ds, "workers", s0, e0, 2, timed_run(spec, "workers", s0, e0, 2, out),
                spec)
    _record(report, ds, "transfer", s0, e0, 1, one, spec)
    if capacity:
        report.extra.setdefault("capacity", {})[ds] = measure_capacity(spec, out, one)


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
            run_dir = settings.run_dir(spec, out, "workers", s0, e0, p, seed)
            runs.append((seed, p, json.loads((run_dir / "metrics.json").read_text())))
    report.extra.setdefault("parity", {})[ds] = [
        {"seed": seed, "workers": p, **{k: m[k] for k in ("test_rmse", "test_rel_l2",
                                                           "train_rmse")}}
        for seed, p, m in runs]


def _carry(report: Report, quick: bool, keep: list[str]) -> None:
    """Copy the records (capacity check, parity, settings) of datasets ``keep`` from the saved
    report (:func:`benchmarks.harness.carry`); every one of them must be there."""
    carry(report, quick, "dataset", keep, extras=("capacity", "parity", "settings"))
    for ds in keep:
        if ds not in report.extra.get("carried", {}):
            raise UserError(f"{reports_dir(quick) / VIEW.name}.json: no {ds} records to carry; "
                            f"rerun {ds} too")


def run(quick: bool, datasets: Optional[list[str]] = None) -> Path:
    """Run the sweeps and write benchmarks/reports/dsmpnn.{json,md,png}. With ``datasets``, only
    those run; the other datasets' records are carried from the saved report (``carried``
    names the run each comes from)."""
    every = QUICK if quick else FULL
    specs = chosen(every, datasets)
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
                dirs = [settings.run_dir(specs[ds], out, *j, 1) for j in jobs]
                results[ds] = [with_epochs(local_run(specs[ds]["config"],
                                                      settings.overrides(specs[ds], *j, 1), d), d)
                               for j, d in zip(jobs, dirs)]
        else:
            # All sweep and parity runs in one pool: 1-worker jobs largest (s * n_e) first, so
            # the two slots end together, then the 2-worker parity jobs, each on both cores.
            pool = sorted([(ds, (*j, 1, None)) for ds, jobs in sweeps.items() for j in jobs] +
                          [(ds, ("workers", *specs[ds]["base"], p, seed))
                           for ds in specs for seed in specs[ds].get("parity_seeds", [])
                           for p in (1, 2)],
                          key=lambda dj: (dj[1][3], -dj[1][1] * dj[1][2]))
            run_cmds([(train_cmd(specs[ds]["config"], settings.overrides(specs[ds], *j), d), d, j[3])
                       for ds, j in pool for d in [settings.run_dir(specs[ds], out, *j)]], slots=2)
            results = {ds: parallel_runs(specs[ds], jobs, out, slots=2) for ds, jobs in sweeps.items()}
            for ds, spec in specs.items():
                _parity(report, ds, spec, out)
        for ds, jobs in sweeps.items():
            for (sweep, s, e), m in zip(jobs, results[ds]):
                _record(report, ds, sweep, s, e, 1, m, specs[ds])
    report.extra["wall_s"] = time.perf_counter() - t_start
    return report.save()
