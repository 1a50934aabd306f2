"""The ``scale`` benchmark's settings: graph sizes, deployments, variants, each job's overrides,
and the equal-memory budget."""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from dsgraph.distgraph.budget import MB, feature_budget_bytes

THROTTLE = "1gbit"
STOCK_TRAINER = "benchmarks.stock_dgl_trainer"
# The second peer: GraphStorm 0.4.0's node classification (benchmarks/graphstorm_trainer.py)
# from its own venv (`make graphstorm-venv`, or the interpreter DSGRAPH_GRAPHSTORM_PYTHON
# names), on stock's partitions, on 2 hosts over veth.
GRAPHSTORM_TRAINER = "benchmarks.graphstorm_trainer"
GRAPHSTORM_PYTHON = os.environ.get("DSGRAPH_GRAPHSTORM_PYTHON", ".venv-graphstorm/bin/python")
CONFIG = "configs/default.yaml"
FEAT_DIM = 256
AVG_DEGREE = 10
REPEATS = 2
EPOCHS = 4
TRAIN_NODES = 61_440  # ~30 batches of 1024 per trainer and epoch with 2 trainers
VAL_NODES = 2_048  # dsgraph's sampled evaluation also scores the validation split
TEST_NODES = 8_192
# dsgraph's job memory may exceed stock's by this share at most (the targets' 1.05x, less a
# margin for what the budget does not count: the cache's index, allocator slack)
EQUAL_MEMORY_HEADROOM = 1.04
VARIANTS = ("stock", "graphstorm", "no_cache", "equal_memory", "defaults")
PEERS = {"stock": STOCK_TRAINER, "graphstorm": GRAPHSTORM_TRAINER}  # variant: trainer module
# The limit row: plain DGL, the whole graph (this file in the size's folder) in memory in each
# of one process per core, no servers (benchmarks/limit_trainer.py).
WHOLE_GRAPH = "whole_graph.bin"
LIMIT_PROCESSES = os.cpu_count() or 1


@dataclass(frozen=True)
class Size:
    """One graph size: its name (``--datasets``), nodes, and whether it also runs 4 hosts."""

    name: str
    nodes: int
    four_hosts: bool = False


SIZES = {s.name: s for s in (Size("250k", 250_000), Size("1M", 1_000_000, four_hosts=True),
                             Size("2M", 2_000_000))}
QUICK_SIZES = {s.name: s for s in (Size("20k", 20_000, four_hosts=True),)}


@dataclass(frozen=True)
class Deployment:
    """Hosts (one partition and one trainer each) and the link between them."""

    link: str  # "veth" or "veth_throttled"
    hosts: int

    @property
    def label(self) -> str:
        return f"{self.hosts} hosts ({self.link})"


def deployments(size: Size) -> list[Deployment]:
    """Every deployment of ``size``: 2 hosts on both links, and 4 on veth where it says so."""
    out = [Deployment("veth", 2), Deployment("veth_throttled", 2)]
    return out + ([Deployment("veth", 4)] if size.four_hosts else [])


def base_sets(size: Size, epochs: int, cache_dir: Path, quick: bool) -> list[str]:
    """The overrides every job of ``size`` shares: the synthetic graph, small splits (an epoch
    is ~20-40 batches per trainer), one evaluation of sampled neighbourhoods after training,
    each epoch's phases timed (a few clock reads per batch) for the breakdown."""
    n = size.nodes
    fracs = (0.5, 0.05, 0.1) if quick else (TRAIN_NODES / n, VAL_NODES / n, TEST_NODES / n)
    return [f"dataset.num_nodes={n}", f"dataset.feat_dim={FEAT_DIM}",
            f"dataset.avg_degree={AVG_DEGREE}", f"dataset.cache_dir={cache_dir}",
            f"dataset.train_frac={fracs[0]:.6g}", f"dataset.val_frac={fracs[1]:.6g}",
            f"dataset.test_frac={fracs[2]:.6g}", f"train.epochs={epochs}",
            "train.eval_every=0", "train.timeout_s=3600", "sampled.eval=sampled",
            "cluster.trainers_per_machine=1", "train.profile=true"]


def variant_sets(variant: str, budget_mb: Optional[float] = None) -> list[str]:
    """A dsgraph variant's overrides (``equal_memory``: ``budget_mb`` per trainer)."""
    if variant == "no_cache":
        return ["sampled.feature_memory_mb=0"]
    if variant == "equal_memory":
        return [f"sampled.feature_memory_mb={budget_mb:.6g}"]
    return []


def equal_memory_budget(stock_job_mb: Optional[float], no_cache_job_mb: Optional[float],
                        trainers: int) -> float:
    """MiB of feature cache per trainer that brings dsgraph's job to
    :data:`EQUAL_MEMORY_HEADROOM` x stock's job memory: what the no-cache job leaves of it,
    shared over the trainers, floored at 0 (also when a figure is missing)."""
    if not stock_job_mb or no_cache_job_mb is None:
        return 0.0
    return max(0.0, (EQUAL_MEMORY_HEADROOM * stock_job_mb - no_cache_job_mb) / max(trainers, 1))


def default_budget_mb(nodes: int, parts: int) -> float:
    """The budget dsgraph's default (``feature_memory_mb: null``) gives each trainer, with the
    partitions taken as equal (one trainer per partition)."""
    return feature_budget_bytes(None, nodes // parts, 4 * FEAT_DIM, 1) / MB
