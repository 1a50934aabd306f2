"""Real training jobs run by a benchmark: the one place in benchmarks/ that makes run folders and
calls the launcher (``dsgraph.cli.train.launch``), so a change of either API is adapted here."""
from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import time
from pathlib import Path
from typing import Any, Callable, Mapping, Optional, Sequence

from benchmarks.harness import environ, median
from dsgraph.cluster import memwatch
from dsgraph.cluster.dgl_job import run_dgl_job
from dsgraph.cluster.launch import run_workers
from dsgraph.cluster.netns import HostsUnavailable, emulated_hosts
from dsgraph.config import ClusterConfig, Config
from dsgraph.metrics import read_records
from dsgraph.runs import RunFolder
from dsgraph.cli.train import launch

LIMIT_TRAINER = "benchmarks.limit_trainer"


@dataclasses.dataclass(frozen=True)
class Job:
    """A finished job: its run folder, metrics.json and metrics.jsonl epoch records."""

    run_dir: Path
    summary: dict[str, Any]
    epochs: list[dict[str, Any]]


def run_folder(cfg: Config, out: Path) -> Path:
    """A fresh run folder for ``cfg`` at ``out`` (a run folder an earlier job left there is
    replaced), for jobs a benchmark runs itself (in process, or the stock DGL trainer)."""
    return RunFolder.create(cfg, out, force=True).path


def train_job(cfg: Config, out: Path, hooks: Sequence[str] = (),
              env: Optional[Mapping[str, str]] = None) -> Job:
    """Run the job of ``cfg`` in a fresh run folder ``out`` through the supervised launcher
    (``dsgraph.modes.worker`` processes, each with the ``module:function`` trainer ``hooks``), with
    ``env`` added to the environment of every process it starts."""
    run = RunFolder.create(cfg, out, force=True)
    with environ(dict(env or {})):
        summary = launch(cfg, run, False, [a for h in hooks for a in ("--hook", h)])
    return Job(run.path, summary, read_records(run.path))


def host_sets(folder: Path, hosts: tuple[list[str], list[str]], port: int) -> list[str]:
    """Config overrides that run machine m's processes in emulated host m (``hosts``: the
    namespace names and addresses of :func:`dsgraph.cluster.netns.emulated_hosts`, any number
    of hosts, one machine each) with its own /dev/shm, the servers on ``port`` (an ip_config
    file written into ``folder``)."""
    names, ips = hosts
    ip_config = folder / f"ip_config_{port}.txt"
    ip_config.write_text("".join(f"{ip} {port}\n" for ip in ips))
    return [f"cluster.ip_config={ip_config}", f"cluster.netns=[{', '.join(names)}]",
            "cluster.netns_shm=true"]


def emulated_links(stack: contextlib.ExitStack, throttle: str, count: int = 2
                   ) -> tuple[dict[str, tuple[list[str], list[str]]], dict[str, str]]:
    """``count`` emulated hosts per link, ``veth`` and ``veth_throttled`` (each host sending at
    most ``throttle``), held open by ``stack``: (hosts by link, the reason by link for those that
    cannot be made)."""
    hosts, skipped = {}, {}
    for link, rate in (("veth", None), ("veth_throttled", throttle)):
        try:
            hosts[link] = stack.enter_context(emulated_hosts(rate=rate, count=count))
        except HostsUnavailable as exc:
            skipped[link] = str(exc)
    return hosts, skipped


@dataclasses.dataclass(frozen=True)
class Measured:
    """A finished job as a comparison benchmark reads it: metrics.json-like summary, epoch
    records, the job's memory (peak summed PSS), the load before it and its wall time."""

    summary: dict[str, Any]
    epochs: list[dict[str, Any]]
    job_memory_mb: Optional[float]
    load1: float
    wall_s: float

    def steady(self, key: str) -> Optional[float]:
        """Median of ``key`` over the epochs after the first (warm-up), None if never set."""
        values = [r[key] for r in (self.epochs[1:] or self.epochs) if r.get(key) is not None]
        return median(values) if values else None


class SupervisedMemory:
    """``with SupervisedMemory() as mem: <one supervised job>``; then ``mem.peak_mb`` is the
    job's memory as its supervisor measured it (``job_memory_mb`` of ``metrics.json``: the peak
    summed PSS of its processes, :class:`dsgraph.cluster.memwatch.MemoryWatch`), the one
    instrument for dsgraph's and stock DGL's jobs alike; None if no job ended."""

    peak_mb: Optional[float] = None

    def __enter__(self) -> "SupervisedMemory":
        memwatch.forget_last_job()
        return self

    def __exit__(self, *exc: Any) -> None:
        record = memwatch.last_job()
        self.peak_mb = record["job_memory_mb"] if record else None


def measured_job(cfg: Config, out: Path, stock_trainer: Optional[str] = None,
                 stock_args: Sequence[str] = (), part_config: Optional[Path] = None) -> Measured:
    """Run one fresh job of ``cfg`` in ``out`` (its memory: :class:`SupervisedMemory`):
    dsgraph's trainer, or with ``stock_trainer`` that module (``stock_args``) on
    ``part_config``'s unpatched servers, whose ``stock_summary.json`` /
    ``stock_metrics.jsonl`` stand in for metrics."""
    load1, t0 = os.getloadavg()[0], time.perf_counter()
    with SupervisedMemory() as mem:
        if stock_trainer is not None:
            run_dir = run_folder(cfg, out)
            peaks = run_dgl_job(run_dir, part_config, cfg.cluster, stock_trainer, stock_args,
                                cfg.train.timeout_s, stock=True)
        else:
            job = train_job(cfg, out)
    if stock_trainer is not None:
        summary, epochs = _peer_files(run_dir, peaks)
    else:
        summary, epochs = job.summary, job.epochs
    return Measured(summary, epochs, mem.peak_mb or None, load1, time.perf_counter() - t0)


def measured_limit_job(cfg: Config, out: Path, graph: Path, trainer_args: Sequence[str],
                       processes: int) -> Measured:
    """Run ``benchmarks.limit_trainer`` on the whole graph saved at ``graph`` (``processes``
    gloo ranks on this host, one per core; ``trainer_args`` as the stock trainer's) in a fresh
    run folder ``out``; measured as :func:`measured_job` measures the others."""
    load1, t0 = os.getloadavg()[0], time.perf_counter()
    with SupervisedMemory() as mem:
        run_dir = run_folder(cfg, out)
        peaks = run_workers(run_dir, ClusterConfig(), LIMIT_TRAINER, processes,
                            ["--graph", str(graph), *trainer_args], cfg.train.timeout_s,
                            name="limit")
    summary, epochs = _peer_files(run_dir, peaks)
    return Measured(summary, epochs, mem.peak_mb or None, load1, time.perf_counter() - t0)


def _peer_files(run_dir: Path, peaks: Mapping[str, float]) -> tuple[dict, list[dict]]:
    """A peer trainer's ``stock_summary.json`` (with the peak RSS of its processes) and
    ``stock_metrics.jsonl`` epoch records, standing in for metrics.json and metrics.jsonl."""
    summary = json.loads((run_dir / "stock_summary.json").read_text())
    epochs = [json.loads(ln) for ln in
              (run_dir / "stock_metrics.jsonl").read_text().splitlines() if ln.strip()]
    summary.update(peak_rss_mb=max(peaks.values()))
    return summary, epochs


def round_robin(settings: Sequence[Any], repeats: Callable[[Any], int], hosts: Mapping[str, Any],
                folder: Path, first_port: int,
                run_one: Callable[[Any, int, int, list[str]], dict],
                progress: Callable[[dict], str]) -> dict[str, list[dict]]:
    """Every setting's runs (``repeats(setting)`` each), interleaved: repeat r of every setting
    before repeat r + 1, so the machine's drift hits all alike. ``run_one(setting, index,
    repeat, host_sets)`` runs one job; a setting whose ``link`` is one of ``hosts`` (emulated
    hosts, :func:`emulated_links`) gets :func:`host_sets` with a fresh server port per job (no
    TIME_WAIT clash). Prints each run's ``progress``; returns the runs by setting name."""
    runs: dict[str, list[dict]] = {s.name: [] for s in settings}
    port = first_port
    for r in range(max((repeats(s) for s in settings), default=0)):
        for i, s in enumerate(settings):
            if r >= repeats(s):
                continue
            sets: list[str] = []
            if s.link in hosts:
                port += 1
                sets = host_sets(folder, hosts[s.link], port)
            runs[s.name].append(run_one(s, i, r, sets))
            print(f"  [{r + 1}/{repeats(s)}] {s.name}: {progress(runs[s.name][-1])}", flush=True)
    return runs


def median_row(row: dict, runs: list[dict], spread: Sequence[str] = ("samples_per_s",)) -> dict:
    """``row`` with every figure of ``runs`` as its median over them (None where never set)
    and, for each key of ``spread`` that was set, its range (``<key>_min``, ``<key>_max``)."""
    for key in runs[0]:
        values = [r[key] for r in runs if r.get(key) is not None]
        row[key] = median(values) if values else None
    for key in spread:
        values = [r[key] for r in runs if r.get(key) is not None]
        if values:
            row[f"{key}_min"], row[f"{key}_max"] = min(values), max(values)
    return row
