"""DS-MPNN training on physical fields (Darcy, airfoil) with P domain-decomposed gloo workers.

``launch`` (in the ``python -m train`` process) generates/caches the dataset once, then starts
``physics.workers`` processes running ``python -m train.dsmpnn --run-dir RUN``. Each worker draws
the same sampled graph per training sample (shared seed), trains on its subdomain with halo
exchange after every kernel layer, and all-reduces gradients. Rank 0 writes metrics.jsonl per
epoch, a checkpoint per epoch, and metrics.json with the full-field test metrics.
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from dsgraph.config import Config
from dsgraph.errors import ConfigError


def check_config(cfg: Config) -> None:
    """Reject configs this mode cannot run, with a one-line message."""
    if cfg.dataset.name not in ("darcy", "airfoil"):
        raise ConfigError(f"{cfg.source}: dataset.name: expected 'darcy' or 'airfoil' for "
                          f"train.mode 'dsmpnn', got {cfg.dataset.name!r}")
    if cfg.physics.sampled_nodes < cfg.physics.workers:
        raise ConfigError(f"{cfg.source}: physics.sampled_nodes: expected >= physics.workers "
                          f"({cfg.physics.workers}), got {cfg.physics.sampled_nodes}")


def launch(cfg: Config, run_dir: Path, resume: bool) -> None:
    """Build the dataset cache, run the workers, and print the run summary."""
    from dsgraph.cluster.launch import run_workers
    from dsgraph.fsutil import atomic_write_text
    from dsgraph.metrics_report import print_summary
    from dsgraph.physics.fields import load_fields

    check_config(cfg)
    t0 = time.perf_counter()
    load_fields(cfg, progress=True)  # generate once here, not in every worker
    run_workers(run_dir, "train.dsmpnn", cfg.physics.workers, cfg.cluster,
                args=["--resume"] if resume else [])
    summary_path = run_dir / "metrics.json"
    summary = json.loads(summary_path.read_text())
    summary["wall_s"] = time.perf_counter() - t0
    atomic_write_text(summary_path, json.dumps(summary, indent=1))
    print_summary(run_dir)


def build(cfg: Config, data) -> torch.nn.Module:
    """The configured model sized for ``data`` (edge feature width is derived, not configured)."""
    from dsgraph.models.registry import build_model
    from dsgraph.physics.sampling import edge_feat_dim

    args = dict(cfg.model.args)
    if cfg.model.name == "mpnn":
        args["edge_feats"] = edge_feat_dim(data.coef_dim)
    model = build_model(cfg.model.name, data.in_feats, data.out_feats, args)
    return model.to(torch.float64 if cfg.train.dtype == "float64" else torch.float32)


def worker_main(run_dir: Path, resume: bool) -> None:
    """One worker: train for train.epochs, evaluate the full test fields, rank 0 writes metrics."""
    import torch.distributed as dist

    from dsgraph.cluster.worker import init_gloo
    from dsgraph.physics import engine
    from dsgraph.physics.fields import load_fields
    from dsgraph.runs import (MetricsLog, end_epoch, load_run_config, peak_rss_mb, restore,
                              rss_mb, seed_everything)

    t_start = time.perf_counter()
    cfg = load_run_config(run_dir)
    rank, world = init_gloo(cfg.cluster.timeout_s)
    ph, seed = cfg.physics, cfg.train.seed
    dtype = torch.float64 if cfg.train.dtype == "float64" else torch.float32
    data = load_fields(cfg, progress=False)
    seed_everything(seed)
    model = build(cfg, data)
    for p in model.parameters():  # identical start on every worker, whatever the seeding
        dist.broadcast(p.data, 0)
    opt = torch.optim.Adam(model.parameters(), lr=cfg.train.lr, weight_decay=cfg.train.weight_decay)
    start = restore(run_dir, model, opt) if resume else 1
    log = MetricsLog(run_dir, resume_epoch=start - 1) if rank == 0 else None
    base_rss = rss_mb()  # libraries + dataset: what training adds is measured against this
    train_s = sum(r.get("epoch_s", 0.0) for r in log.records()) if log else 0.0
    for epoch in range(start, cfg.train.epochs + 1):
        dist.barrier()
        lr = engine.epoch_lr(cfg.train.lr, epoch, cfg.train.epochs, ph.lr_schedule)
        engine.set_lr(opt, lr)
        t0 = time.perf_counter()
        timers: dict[str, float] = {}
        loss = engine.train_epoch(model, opt, data, ph, seed, epoch, rank, world, dtype, timers)
        epoch_s = time.perf_counter() - t0
        train_s += epoch_s
        record = {"epoch": epoch, "loss": loss, "epoch_s": epoch_s, "lr": lr, **timers}
        if ph.eval_every and epoch % ph.eval_every == 0 and epoch < cfg.train.epochs:
            pred = engine.predict(model, data, data.test, ph, seed, ph.infer_repeats, rank, world, dtype)
            record.update(engine.metrics(pred, data.test, data.y_norm))
        if rank == 0:
            end_epoch(run_dir, log, record, model, opt)
            print(f"epoch {epoch}: loss {loss:.4f} ({epoch_s:.1f} s)", flush=True)
    dist.barrier()
    t1 = time.perf_counter()
    pred = engine.predict(model, data, data.test, ph, seed, ph.infer_repeats, rank, world, dtype)
    infer_s = time.perf_counter() - t1
    result = engine.metrics(pred, data.test, data.y_norm)
    rss: list = [None] * world
    dist.all_gather_object(rss, peak_rss_mb())
    extra: list = [None] * world
    dist.all_gather_object(extra, peak_rss_mb() - base_rss)
    if rank == 0:
        log.summary({**result, "epochs": cfg.train.epochs, "train_s": train_s,
                     "infer_s": infer_s, "wall_s": time.perf_counter() - t_start,
                     "peak_rss_mb": max(rss), "peak_rss_mb_per_worker": rss,
                     "train_mem_mb": max(extra),
                     "workers": world, "mode": "dsmpnn", "dataset": cfg.dataset.name,
                     "sampled_nodes": ph.sampled_nodes, "max_edges": ph.max_edges,
                     "final_loss": log.records()[-1]["loss"] if log.records() else None})
    dist.barrier()


def exit_now(code: int = 0) -> None:
    """Flush and leave without running destructors.

    With torch 2.2, destroying a gloo process group (explicitly or at interpreter exit) can
    deadlock: the destructor joins gloo's worker threads while holding the GIL, and a worker
    thread may still need the GIL to free the last tensor of a finished async operation
    (observed with isend/irecv halo traffic). Results are already written atomically.
    """
    import os
    import sys

    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="DS-MPNN worker process")
    parser.add_argument("--run-dir", required=True, type=Path)
    parser.add_argument("--resume", action="store_true")
    args = parser.parse_args()
    worker_main(args.run_dir, args.resume)
    exit_now(0)
