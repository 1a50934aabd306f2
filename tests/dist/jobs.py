"""The command-line programs as the multi-process tests run them: ``python -m train`` /
``predict``'s main in this process (the launcher: the job's processes are its children, as under
the command), ``partition``'s main in this process, ``python -m ...`` from the repository root in
a session of its own (:func:`cli`), and a run folder's metrics.

A fresh interpreter per job would add its own torch and DGL imports (about 3 s of the 2 cores
each, some 40 jobs in tests/dist) and nothing else: the command only calls ``main``. The
command's own process (exit code, console, signals) is tested by the fault matrix and the
run-folder scenarios (``benchmarks.faults`` / ``misuse``, real commands) and in tests/
(test_datasets_formats, test_partition, test_partition_integrity, test_config).
"""
from __future__ import annotations

import contextlib
import importlib
import io
import json
import os
import sys
from pathlib import Path

from dsgraph import phases


ROOT = Path(__file__).resolve().parents[2]
DEFAULT = ROOT / "configs" / "default.yaml"
DARCY = ROOT / "configs" / "darcy.yaml"
# The default (sampled) config on a graph a fifth its size.
SMALL = ("dataset.num_nodes=20000", "sampled.batch_size=256")
# The session's shared graph (tests/dist/conftest.py ``sampled_graph``): SMALL with 2-hop halos,
# so that sampled.local_sampling can train on it as well as DGL's own sampler.
SHARED = (*SMALL, "partition.halo_hops=2")
# A DS-MPNN job of a few seconds: 24x24 Darcy fields, 2 workers (darcy.yaml's count).
DARCY_TINY = ("physics.resolution=24", "physics.train_samples=8", "physics.test_samples=2",
              "physics.sampled_nodes=200", "physics.radius=0.2", "physics.max_edges=8",
              "physics.infer_repeats=1", "model.args={width: 8, layers: 2, kernel_hidden: 8}",
              "physics.gen_workers=1", "train.timeout_s=120",
              # Cosine decay depends on train.epochs, which a resume extends; a constant rate
              # keeps resumed and uninterrupted runs comparable.
              "train.lr_schedule=constant")


def _set_args(*overrides: str) -> list[str]:
    return [arg for s in overrides for arg in ("--set", s)]


def run_main(module: str, *args: str) -> tuple[int, str]:
    """``python -m module *args`` as its ``main`` in this process, from the repository root:
    its exit code and what it wrote to stderr (also passed on to this process's stderr, which
    pytest shows with a failing test). A job started here runs under the same supervisor as
    under the command: it stops its processes when the job ends, fails, overruns
    ``train.timeout_s`` or the test is interrupted (pytest-timeout), and they die with this
    process (parent-death signal, the job's reaper)."""
    main = importlib.import_module(f"{module}.__main__").main
    raw = io.BytesIO()
    # rank 0's echoed lines are written to sys.stderr.buffer by the supervisor's threads
    err = io.TextIOWrapper(raw, encoding="utf-8", errors="replace", write_through=True)
    code = 0
    try:
        with contextlib.chdir(ROOT), contextlib.redirect_stderr(err):
            main(list(args))
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else int(exc.code is not None)
    finally:
        text = raw.getvalue().decode("utf-8", "replace")
        sys.stderr.write(text)
    if code == 130:  # the command's Ctrl-C: stop the test run as well
        raise KeyboardInterrupt
    return code, text


def train(config: Path, out: Path, *overrides: str, resume: bool = False) -> str:
    """A ``python -m train`` job (:func:`run_main`) into ``out`` that must succeed; its
    stderr."""
    code, err = run_main("train", "--config", str(config), "--out", str(out),
                         *_set_args(*overrides), *(["--resume"] if resume else []))
    assert code == 0, err[-3000:]
    return err


def predict(run: Path, *args: str) -> str:
    """A ``python -m predict --run run *args`` job (:func:`run_main`) that must succeed; its
    stderr."""
    code, err = run_main("predict", "--run", str(run), *args)
    assert code == 0, err[-3000:]
    return err


def partition(config: Path, *overrides: str) -> None:
    """``python -m partition``'s main, in this process: it starts no job, and a fresh
    interpreter would only add its own torch and DGL imports (the command's process itself is
    tested in tests/test_partition.py)."""
    importlib.import_module("dsgraph.cli.partition").main(
        ["--config", str(config), *_set_args(*overrides)])


def default_sets(root: Path, size: tuple[str, ...] = SMALL) -> tuple[str, ...]:
    """Overrides that put configs/default.yaml's data and partitions under ``root`` and give
    the graph ``size`` (``()``: the default's own)."""
    return (f"dataset.cache_dir={root / 'data'}", f"partition.out_dir={root / 'parts'}",
            "train.timeout_s=200", *size)


def partition_default(root: Path, *overrides: str, size: tuple[str, ...] = SMALL) -> None:
    """Partition configs/default.yaml's graph (of ``size``) under ``root``."""
    partition(DEFAULT, *default_sets(root, size), *overrides)


def train_default(root: Path, name: str, *overrides: str, size: tuple[str, ...] = SMALL,
                  resume: bool = False) -> Path:
    """Train configs/default.yaml on the graph :func:`partition_default` made under ``root``,
    into the run folder ``root / name``; that folder."""
    train(DEFAULT, root / name, *default_sets(root, size), *overrides, resume=resume)
    return root / name


def epochs(run: Path) -> list[dict]:
    """The run's per-epoch records (metrics.jsonl)."""
    return [json.loads(ln) for ln in (run / "metrics.jsonl").read_text().splitlines()]


def summary(run: Path) -> dict:
    """The run's summary (metrics.json)."""
    return json.loads((run / "metrics.json").read_text())


def check_phases(lines: list[dict], trainers: int = 2) -> None:
    """``train.profile``'s phases are per 1,000 seeds: the job's CPU in an epoch (trainers'
    phases and other threads, servers) fits in the machine's cores over the epoch's seconds,
    and the trainers' waiting in their own wall time. (No lower bound: with other test workers
    on the cores the job may get a small share of them.)"""
    for r in lines:
        ph, seeds = r["phases"], r["samples_per_s"] * r["epoch_s"]
        assert list(ph) == list(phases.RECORD_KEYS), ph
        assert all(v >= 0 for v in ph.values()) and ph["servers"] is not None, ph
        assert min(ph["sample"], ph["block"], ph["gather"], ph["forward"], ph["backward"]) > 0, ph
        cpu_s = sum(v for k, v in ph.items() if k != "wait") * seeds / 1000
        assert cpu_s <= 1.1 * os.cpu_count() * r["epoch_s"], (cpu_s, r)
        assert ph["wait"] * seeds / 1000 <= 1.01 * trainers * r["epoch_s"], r
        # CPU seconds, whatever the load: a forward and backward cost well over 0.1 us a seed
        assert ph["forward"] + ph["backward"] >= 1e-4, ph
