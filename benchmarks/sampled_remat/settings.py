"""The ``sampled_remat`` benchmark's settings: the sweep, the scale and each job's config."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from dsgraph import config as config_mod

FANOUTS = ([10, 25], [15, 10, 5], [25, 25])
FEAT_DIMS = (128, 512)
VARIANTS = ("stock", "remat", "remat_int2")
HIDDEN = 256
MODELS = {"sage": {"hidden": HIDDEN, "aggregator": "mean"}, "gat": {"hidden": HIDDEN // 4, "heads": 4}}
# seqagg.chunk_rows of the remat variants. SAGE [15, 10, 5], width 512, INT2 (one probe job each,
# idle machine): 2048 rows 0.52x of stock's memory at 1.16x the batch time, 1024 rows 0.48x at
# 1.19x; the output runs' destination chunks set the peak, the pulls are mostly cached rows.
CHUNK_ROWS = 1024
SETTLED = 0.005  # "accuracy has settled": the last two validation accuracies within 0.5 point
CACHE = Path("data/bench_sampled_remat")


def remat_layers(model: str, fanouts: list) -> int:
    """``sampled.remat_layers`` of the remat variants. GAT: every layer but the output layer
    (its sources are the batch's last hop, a few thousand rows), since with only the first
    rematerialized the second layer's backward set GAT's peak (probe jobs, [15, 10, 5], width
    512, INT2, 3 epochs: 38.2 MB with 1 layer, 34.5 MB with 2, before the aggregate's
    gradient stopped being copied). SAGE: the first only (35.7 MB with 1, 37.4 MB with 2, and
    slower)."""
    return max(1, len(fanouts) - 1) if model == "gat" else 1


def scale(quick: bool) -> dict[str, Any]:
    """Graph size, batch, epochs and repeats (the full run takes ~50 min on 2 idle cores)."""
    if quick:
        return {"num_nodes": 3000, "batch_size": 128, "epochs": 2, "mem_epochs": 2,
                "eval_every": 1, "repeats": 1, "fanouts": FANOUTS[:1], "feat_dims": FEAT_DIMS[:1]}
    # 3-layer SAGE still climbs at epoch 12 (val 0.92 -> 0.94 from epoch 9, width 128), so 20
    # epochs, evaluated every 4th: ``acc_settled`` compares epochs 16 and 20. ~15 s of job
    # start-up + up to ~4 s per epoch (GAT [15, 10, 5], width 512, remat_int2). The memory jobs'
    # 3 epochs give 3 fresh peaks each. Two repeats: one job's batch time and final accuracy
    # vary by ~10% and ~0.4 point (2,000 test nodes) between runs. 72 + 72 jobs ~ 50 min.
    return {"num_nodes": 20_000, "batch_size": 256, "epochs": 20, "mem_epochs": 3,
            "eval_every": 4, "repeats": 2, "fanouts": FANOUTS, "feat_dims": FEAT_DIMS}


def report_settings(scale: dict[str, Any]) -> dict[str, Any]:
    """The ``settings`` the report's json records."""
    return {**{k: v for k, v in scale.items() if k not in ("fanouts", "feat_dims")},
            "hidden": HIDDEN, "chunk_rows": CHUNK_ROWS,
            "remat_layers": "SAGE 1, GAT all but the output layer", "partitions": 2,
            "trainers": 2, "settled_within": SETTLED, "models": MODELS, "threads_per_process": 1}


def dataset_overrides(scale: dict[str, Any], feat_dim: int) -> list[str]:
    """Dataset and partition overrides of the graph with ``feat_dim`` features (2 parts)."""
    root = (CACHE / f"n{scale['num_nodes']}-f{feat_dim}").resolve()
    return [f"dataset.num_nodes={scale['num_nodes']}", f"dataset.feat_dim={feat_dim}",
            f"dataset.cache_dir={root / 'data'}", f"partition.out_dir={root / 'p2'}",
            "partition.num_parts=2"]


def _variant_overrides(variant: str, model: str, fanouts: list) -> list[str]:
    remat = [f"seqagg.chunk_rows={CHUNK_ROWS}",
             f"sampled.remat_layers={remat_layers(model, fanouts)}"]
    return {"stock": ["sampled.rematerialize=false", "compression.enabled=false"],
            "remat": ["sampled.rematerialize=true", "compression.enabled=false", *remat],
            "remat_int2": ["sampled.rematerialize=true", "compression.enabled=true",
                           *remat]}[variant]


def job_config(base: list[str], setting: dict, scale: dict[str, Any],
               memory: bool) -> config_mod.Config:
    """The config of one job of ``setting``: a memory job (``mem_epochs``) or a timing job
    (``epochs``)."""
    epochs = scale["mem_epochs"] if memory else scale["epochs"]
    args = dict(MODELS[setting["model"]], num_layers=len(setting["fanouts"]))
    return config_mod.load("configs/default.yaml", base + [
        f"model.name={setting['model']}", f"model.args={json.dumps(args)}",
        f"sampled.fanouts={json.dumps(setting['fanouts'])}",
        f"sampled.batch_size={scale['batch_size']}", f"train.epochs={epochs}",
        f"train.eval_every={min(scale['eval_every'], epochs)}", "train.seed=0",
        "train.timeout_s=1800", "cluster.num_threads=1",
        *_variant_overrides(setting["variant"], setting["model"], setting["fanouts"])])
