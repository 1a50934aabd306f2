"""The ``dsmpnn`` benchmark's settings: datasets, sweeps, and each job's overrides and folder."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

from dsgraph.data.cache import param_hash

CACHE = "data"  # the project's dataset cache (git-ignored), shared with `python -m train`
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


def overrides(spec: dict, sweep: str, nodes: int, edges: int, workers: int,
              seed: Optional[int] = None) -> list[str]:
    """The overrides of one run. Runs at the workers base setting also predict the transfer
    set and time inference as the median of INFER_PASSES passes, so the node sweep's point at
    that setting is the same run as the P = 1 workers row. ``seed``: a parity run, another
    training seed at the base setting (accuracy only: one inference pass)."""
    size_key, transfer_key = SIZE_KEY[dataset_name(spec)]
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


def dataset_name(spec: dict) -> str:
    """The dataset a spec trains (its config file's name)."""
    return Path(spec["config"]).stem


def run_dir(spec: dict, out: Path, sweep: str, nodes: int, edges: int, workers: int,
             seed: Optional[int] = None) -> Path:
    """The run folder of one job, keyed by its settings only: a run two sweeps share (same s,
    n_e, radius, P) runs once."""
    sets = overrides(spec, sweep, nodes, edges, workers, seed)
    return out / f"{Path(spec['config']).stem}-{nodes}-{edges}-{workers}-" \
                 f"{param_hash({'config': spec['config'], 'set': sets})}"
