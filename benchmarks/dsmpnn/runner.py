"""Running ``dsmpnn`` jobs: through the launcher, in this process (--quick sweeps), or as
``python -m train`` commands sharing the cores; their figures and the machine's load."""
from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import torch

from benchmarks import jobs, memory
from benchmarks.dsmpnn import settings
from benchmarks.harness import median
from dsgraph.config import load
from dsgraph.data.cache import param_hash
from dsgraph.fsutil import atomic_write_text
from dsgraph.metrics import read_summary
from dsgraph.trainer import Hook, Trainer
from dsgraph.modes.dsmpnn import DsmpnnStrategy


def train_run(config: str, overrides: list[str], out: Path) -> dict:
    """Run one dsmpnn training job through the launcher (``dsgraph.cli.train.launch``: one
    ``dsgraph.modes.worker`` process per subdomain); return its metrics.json."""
    return jobs.train_job(load(config, overrides), out).summary


class _ResetPeak(Hook):
    """Hook of an in-process run: the RSS high-water mark restarts when loading is done, so the
    run's peak_rss_mb and train_mem_mb are its own, not an earlier run's in the same process."""

    def on_ready(self, trainer) -> None:
        memory.mark()


def local_run(config: str, overrides: list[str], out: Path) -> dict:
    """One worker in this process (no process start-up): the --quick path for the sweeps. The
    real trainer (:class:`dsgraph.trainer.Trainer` with the dsmpnn strategy, world 1) in run
    folder ``out``, with the configured thread count; returns its metrics.json."""
    cfg = load(config, overrides)
    run_dir = jobs.run_folder(cfg, out)
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


def _cpu_seconds() -> tuple[float, float]:
    """(busy CPU seconds of the whole machine, CPU seconds of this process and its waited-for
    children): their difference over a run is what other processes used meanwhile."""
    fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
    ticks = [int(v) for v in fields]
    busy = sum(ticks) - ticks[3] - (ticks[4] if len(ticks) > 4 else 0)  # minus idle and iowait
    own = sum(getattr(resource.getrusage(who), f) for who in
              (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN) for f in ("ru_utime", "ru_stime"))
    return busy / os.sysconf("SC_CLK_TCK"), own


def _epochs(run_dir: Path) -> list[dict]:
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def with_epochs(m: dict, run_dir: Path) -> dict:
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


def timed_run(spec: dict, sweep: str, nodes: int, edges: int, workers: int, out: Path) -> dict:
    """One real job run alone (workers comparison), with the machine's load around it. A finished
    run folder is reused, so an interrupted benchmark resumes (delete data/bench-dsmpnn to
    re-measure everything)."""
    run_dir = settings.run_dir(spec, out, sweep, nodes, edges, workers)
    done = run_dir / "metrics.json"
    if done.exists():
        print(f"  (reusing {run_dir})", flush=True)
        return with_epochs(json.loads(done.read_text()), run_dir)
    load0, (busy0, own0), t0 = os.getloadavg()[0], _cpu_seconds(), time.perf_counter()
    m = train_run(spec["config"], settings.overrides(spec, sweep, nodes, edges, workers), run_dir)
    (busy1, own1), wall = _cpu_seconds(), time.perf_counter() - t0
    m.update(load1_start=load0, load1_end=os.getloadavg()[0],
             other_cpu_share=max(0.0, (busy1 - busy0) - (own1 - own0)) / wall)
    atomic_write_text(done, json.dumps(m, indent=1))
    return with_epochs(m, run_dir)


def train_cmd(config: str, sets: list[str], run_dir: Path) -> list[str]:
    """The ``python -m train`` command of one job (run folder ``run_dir`` replaced)."""
    cmd = [sys.executable, "-m", "train", "--config", config, "--out", str(run_dir), "--force"]
    for s in sets:
        cmd += ["--set", s]
    return cmd


def run_cmds(cmds: list[tuple[list[str], Path, int]], slots: int) -> None:
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


def parallel_runs(spec: dict, points: list[tuple[str, int, int]], out: Path,
                  slots: int) -> list[dict]:
    """Sweep runs as independent 1-worker ``python -m train`` jobs, ``slots`` at a time (one per
    core); metrics of each, in the order of ``points``. Finished run folders are reused."""
    dirs = [settings.run_dir(spec, out, sweep, nodes, edges, 1) for sweep, nodes, edges in points]
    run_cmds([(train_cmd(spec["config"], settings.overrides(spec, *j, 1), d), d, 1)
              for j, d in zip(points, dirs)], slots)
    return [with_epochs(json.loads((d / "metrics.json").read_text()), d) for d in dirs]


def measure_capacity(spec: dict, out: Path, alone: dict) -> dict:
    """Two copies of the 1-worker base run (2 epochs) side by side: how much faster two cores
    get through independent work than one under the load of the moment, which bounds what any
    2-worker speed-up can reach. Compares the second epoch with the P=1 run's median epoch."""
    s0, e0 = spec["base"]
    # Epoch times only: one inference pass, not the workers runs' timed ones.
    sets = settings.overrides(spec, "workers", s0, e0, 1) + ["train.epochs=2", "physics.infer_passes=1"]
    key = param_hash({"config": spec["config"], "set": sets})
    dirs = [out / f"capacity-{Path(spec['config']).stem}-{k}-{key}" for k in range(2)]
    load0, (busy0, own0), t0 = os.getloadavg()[0], _cpu_seconds(), time.perf_counter()
    run_cmds([(train_cmd(spec["config"], sets, d), d, 1) for d in dirs], slots=2)
    (busy1, own1), wall = _cpu_seconds(), time.perf_counter() - t0
    side = [with_epochs(json.loads((d / "metrics.json").read_text()), d)["epoch_s"] for d in dirs]
    return {"epoch_s_alone": alone["epoch_s"], "epoch_s_side_by_side": side,
            "throughput_x": 2 * alone["epoch_s"] / median(side), "load1_start": load0,
            "other_cpu_share": max(0.0, (busy1 - busy0) - (own1 - own0)) / wall}
