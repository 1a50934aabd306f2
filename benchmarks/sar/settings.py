"""The ``sar`` benchmark's settings: graphs, models, configurations and the job config."""
from __future__ import annotations

import json
from pathlib import Path

from dsgraph.config import Config, load

# seqagg.chunk_rows of the extra chunked SAR rows at N = 4 (every other row aggregates a whole
# remote part at once, chunk_rows 0)
SAR_CHUNK = 1024
CACHE = Path("data/bench_sar")
GRADS_FILE = "first_grads.pt"  # rank 0's parameter gradients after the first step
SEED, LR = 0, 0.01
REPEATS = 3  # fresh runs per configuration (the "median of 3")
EPOCHS = 3  # training epochs per run; epoch 1 also pays lazy set-up, so epoch_s uses the rest
MODELS = {"sage": {"hidden": 128, "num_layers": 3, "aggregator": "mean"},
          "gat": {"hidden": 32, "heads": 4, "num_layers": 3}}


def graphs(quick: bool) -> dict[str, dict]:
    """Generator parameters of the graphs measured (--quick: the community graph only)."""
    if quick:
        return {"community": dict(num_nodes=3000, avg_degree=10, homophily=0.85)}
    return {"community": dict(num_nodes=40000, avg_degree=10, homophily=0.85),
            "random": dict(num_nodes=16000, avg_degree=20, homophily=0.0)}


def configurations(quick: bool) -> list[tuple[str, int, int]]:
    """(mode, workers, chunk_rows) of every row of a graph and model, plain DGL first."""
    if quick:
        return [("dgl", 1, 0), ("sar", 2, 0), ("one_shot", 2, 0)]
    return ([("dgl", 1, 0)] + [(m, n, 0) for n in (1, 2, 4) for m in ("sar", "sa", "one_shot")]
            + [("sar", 4, SAR_CHUNK)])


def job_config(part_file: Path, n: int, model: str, mode: str, chunk_rows: int, dtype: str,
               epochs: int) -> Config:
    """The ``train.mode: sar`` job of one run on the ``n``-part partition ``part_file``."""
    return load(None, ["train.mode=sar", f"partition.out_dir={part_file.parent}",
                       f"partition.graph_name={part_file.stem}", f"partition.num_parts={n}",
                       f"model.name={model}", f"model.args={json.dumps(MODELS[model])}",
                       f"train.epochs={epochs}", f"train.lr={LR}", f"train.seed={SEED}",
                       "train.lr_schedule=constant", "train.eval_every=1", f"train.dtype={dtype}",
                       "train.timeout_s=900", f"sar.mode={mode}",
                       f"seqagg.chunk_rows={chunk_rows}",
                       "sar.prefetch=false", "sar.rebuild_inputs=true",  # the defaults, stated
                       "cluster.num_threads=1", "compression.enabled=false"])
