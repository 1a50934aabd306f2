"""Sampled distributed training: DistGraph servers + trainers with DistNodeDataLoader and DDP.

``launch`` (in the ``python -m train`` process) starts the supervised cluster; the trainer
processes run this module as ``python -m train.sampled --run-dir RUN``. Evaluation is layer-wise
full-neighbour inference over all nodes (exact, independent of the number of trainers) for the
built-in models, which offer ``forward_layer``; a plug-in model without it is evaluated with the
training fanouts (sampled), which is noisier.
"""
from __future__ import annotations

from dsgraph.cluster import dgl_compat

# Process entry point: patch DGL before it starts. At module top level on purpose, because DGL's
# sampler processes are spawned and re-import this module without running __main__.
dgl_compat.apply_from_env()

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import torch  # noqa: E402

from dsgraph.cluster.worker import run_process_main  # noqa: E402
from dsgraph.config import Config  # noqa: E402
from dsgraph.errors import UserError  # noqa: E402
from dsgraph.metrics_report import print_summary  # noqa: E402


def part_config_path(cfg: Config) -> Path:
    """The partition JSON a run reads (written by ``python -m partition``)."""
    path = Path(cfg.partition.out_dir) / f"{cfg.partition.graph_name}.json"
    if not path.is_file():
        raise UserError(f"{path}: partition files not found; run `python -m partition --config "
                        f"{cfg.source}` (or `make partition`) first")
    return path


def launch(cfg: Config, run_dir: Path, resume: bool, stock: bool = False) -> None:
    """Start servers and trainers for the partitioned graph; print the summary when done.

    ``stock`` runs DGL's unpatched single-host path (benchmarks compare against it).
    """
    from dsgraph.cluster.dgl_job import run_dgl_job

    from dsgraph.models.registry import build_model

    part_config = part_config_path(cfg)
    build_model(cfg.model.name, 4, 2, cfg.model.args)  # bad model args fail here, before any process
    t0 = time.perf_counter()
    peaks = run_dgl_job(run_dir, part_config, cfg.cluster, "train.sampled", stock=stock)
    summary_path = run_dir / "metrics.json"
    summary = json.loads(summary_path.read_text())
    summary.update(wall_s=time.perf_counter() - t0, peak_rss_mb=max(peaks.values(), default=0.0),
                   peak_rss_mb_per_process=peaks)
    from dsgraph.fsutil import atomic_write_text
    atomic_write_text(summary_path, json.dumps(summary, indent=1))
    print_summary(run_dir)


# --- trainer process ---------------------------------------------------------------------------

@torch.no_grad()
def layerwise_logits(model, g, batch_size: int):
    """Exact logits of every node (a DistTensor): each layer computed over all neighbours.

    Each trainer computes its share of every layer into a DistTensor; the next layer reads its
    inputs (local or remote) from there.
    """
    import dgl
    from dgl.dataloading import DistNodeDataLoader
    from dgl.distributed import DistTensor
    import torch.distributed as dist

    pb = g.get_partition_book()
    everyone = dgl.distributed.node_split(torch.ones(g.num_nodes(), dtype=torch.bool), pb,
                                          force_even=True)
    sampler = dgl.dataloading.MultiLayerFullNeighborSampler(1)
    h_in = g.ndata["feat"]
    for i in range(model.num_layers):
        loader = DistNodeDataLoader(g, everyone, sampler, batch_size=batch_size, shuffle=False)
        outs = [(out_nodes, model.forward_layer(i, blocks[0], h_in[in_nodes]))
                for in_nodes, out_nodes, blocks in loader]
        # force_even gives every trainer nodes, so each knows the layer's width here.
        h_out = DistTensor((g.num_nodes(), outs[0][1].shape[1]), torch.float32, persistent=False)
        for out_nodes, out in outs:
            h_out[out_nodes] = out
        dist.barrier()
        h_in = h_out
    return h_in


def _evaluate(model, g, cfg: Config, rank_nodes: dict[str, torch.Tensor]) -> dict[str, float]:
    """Global val/test accuracy (counts summed over trainers)."""
    import dgl
    import torch.distributed as dist

    model.eval()
    counts = torch.zeros(4, dtype=torch.float64)
    if hasattr(model, "forward_layer") and cfg.train.eval == "layerwise":
        logits = layerwise_logits(model, g, cfg.train.eval_batch_size)
        for j, name in enumerate(("val", "test")):
            nodes = rank_nodes[name]
            counts[2 * j] = (logits[nodes].argmax(1) == g.ndata["label"][nodes]).sum()
            counts[2 * j + 1] = nodes.numel()
    else:
        sampler = dgl.dataloading.NeighborSampler(cfg.train.fanouts)
        for j, name in enumerate(("val", "test")):
            loader = dgl.dataloading.DistNodeDataLoader(g, rank_nodes[name], sampler,
                                                        batch_size=cfg.train.eval_batch_size)
            with torch.no_grad():
                for input_nodes, seeds, blocks in loader:
                    out = model(blocks, g.ndata["feat"][input_nodes])
                    counts[2 * j] += (out.argmax(1) == g.ndata["label"][seeds]).sum()
                    counts[2 * j + 1] += seeds.numel()
    dist.all_reduce(counts)
    model.train()
    return {"val_acc": float(counts[0] / counts[1]), "test_acc": float(counts[2] / counts[3])}


def trainer_main(run_dir: Path) -> None:
    """One trainer: join DGL and gloo, train for train.epochs, rank 0 writes metrics."""
    import logging

    import dgl
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel
    from tqdm import tqdm

    from dsgraph.cluster.worker import init_gloo, set_threads
    from dsgraph.dist_features import HaloCachedFeatures
    from dsgraph.models.registry import build_model
    from dsgraph.compress import compression_context
    from dsgraph.runs import (MetricsLog, end_epoch, epoch_seed, load_run_config, peak_rss_mb,
                              restore, seed_everything)

    logging.getLogger("dgl-distributed-socket").setLevel(logging.ERROR)
    set_threads()
    cfg = load_run_config(run_dir)
    dgl.distributed.initialize(os.environ["DGL_IP_CONFIG"])
    rank, world = init_gloo(cfg.cluster.timeout_s)
    g = dgl.distributed.DistGraph(os.environ["DSGRAPH_DGL_GRAPH"])
    pb = g.get_partition_book()
    split = {name: dgl.distributed.node_split(g.ndata[f"{name}_mask"], pb, force_even=True)
             for name in ("train", "val", "test")}
    feat_dim = g.ndata["feat"].shape[1]
    num_classes = int(json.loads(Path(os.environ["DGL_CONF_PATH"]).read_text())
                      .get("num_classes", 0)) or _num_classes(g)

    seed_everything(cfg.train.seed)
    model = build_model(cfg.model.name, feat_dim, num_classes, cfg.model.args)
    ddp = DistributedDataParallel(model)
    opt = torch.optim.Adam(model.parameters(), lr=cfg.train.lr, weight_decay=cfg.train.weight_decay)
    start_epoch = restore(run_dir, model, opt)
    log = MetricsLog(run_dir, resume_epoch=start_epoch - 1) if rank == 0 else None
    sampler = dgl.dataloading.NeighborSampler(cfg.train.fanouts)
    feat = HaloCachedFeatures(g, "feat", cache_halo=cfg.train.cache_halo)
    label = g.ndata["label"]
    n_batches = (split["train"].numel() + cfg.train.batch_size - 1) // cfg.train.batch_size
    last = {}
    for epoch in range(start_epoch, cfg.train.epochs + 1):
        seed_everything(epoch_seed(cfg.train.seed, epoch, rank))
        # A fresh loader over a per-epoch permutation: DGL's own shuffle permutes the previous
        # epoch's order, which a resumed run could not reproduce.
        order = split["train"][torch.randperm(split["train"].numel())]
        loader = dgl.dataloading.DistNodeDataLoader(g, order, sampler,
                                                    batch_size=cfg.train.batch_size)
        stats = torch.zeros(5, dtype=torch.float64)  # loss sum, correct, seeds, batches, remote B
        feat.remote_rows = 0
        t0 = time.perf_counter()
        bar = tqdm(total=n_batches, desc=f"epoch {epoch}", disable=rank != 0, mininterval=2,
                   dynamic_ncols=False, ncols=100)
        with ddp.join():
            for input_nodes, seeds, blocks in loader:
                x, y = feat[input_nodes], label[seeds]
                # The loss stays outside: its backward uses the saved log-softmax non-linearly,
                # so quantizing it would bias every gradient.
                with compression_context(cfg.compression):
                    out = ddp(blocks, x)
                loss = torch.nn.functional.cross_entropy(out, y)
                opt.zero_grad()
                loss.backward()
                opt.step()
                stats += torch.tensor([loss.item() * seeds.numel(),
                                       (out.argmax(1) == y).sum().item(), seeds.numel(), 1, 0],
                                      dtype=torch.float64)
                bar.update(1)
                bar.set_postfix(loss=f"{loss.item():.3f}",
                                seeds_s=f"{stats[2] / (time.perf_counter() - t0):.0f}")
        bar.close()
        train_s = torch.tensor([time.perf_counter() - t0])
        stats[4] = feat.remote_rows * feat.row_bytes
        dist.all_reduce(stats)
        dist.all_reduce(train_s, op=dist.ReduceOp.MAX)
        t1 = time.perf_counter()
        acc = _evaluate(model, g, cfg, split)
        rss = [None] * world
        dist.all_gather_object(rss, peak_rss_mb())
        last = {"epoch": epoch, "loss": float(stats[0] / stats[2]),
                "train_acc": float(stats[1] / stats[2]), "val_acc": acc["val_acc"],
                "test_acc": acc["test_acc"], "epoch_s": float(train_s),
                "eval_s": time.perf_counter() - t1,
                "samples_per_s": float(stats[2] / train_s), "batches": int(stats[3]),
                "remote_feature_bytes": int(stats[4]), "peak_rss_mb": rss}
        if rank == 0:
            end_epoch(run_dir, log, last, model, opt)
            print(f"epoch {epoch}: loss {last['loss']:.4f} train {last['train_acc']:.4f} "
                  f"val {last['val_acc']:.4f} ({last['epoch_s']:.1f} s, "
                  f"{last['samples_per_s']:.0f} seeds/s)", flush=True)
    if rank == 0:
        records = log.records()
        final = records[-1] if records else last
        log.summary({"test_acc": final.get("test_acc"), "val_acc": final.get("val_acc"),
                     "epochs": cfg.train.epochs, "num_trainers": world,
                     "num_parts": int(pb.num_partitions()), "mode": "sampled",
                     "samples_per_s": _median([r["samples_per_s"] for r in records[1:]] or
                                              [r["samples_per_s"] for r in records])})
    dist.barrier()


def _median(values: list[float]) -> float:
    import statistics
    return float(statistics.median(values)) if values else 0.0


def _num_classes(g) -> int:
    import torch.distributed as dist
    local = torch.tensor([int(g.ndata["label"][torch.arange(0, min(g.num_nodes(), 200_000))].max())])
    dist.all_reduce(local, op=dist.ReduceOp.MAX)
    return int(local) + 1


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="sampled-training trainer process")
    parser.add_argument("--run-dir", required=True, type=Path)
    run_process_main(trainer_main, parser.parse_args().run_dir)
