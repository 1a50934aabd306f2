"""The ``tasks`` benchmark's rows: which task, system, deployment and config overrides."""
from __future__ import annotations

from dataclasses import dataclass

THROTTLE = "1gbit"
LINK_CONFIG = "configs/link_prediction.yaml"
EDGE_CONFIG = "configs/edge_classification.yaml"
EDGE_REGRESSION = "task.name=edge_regression"  # the same graph with a number planted per edge
CONVERGED = 10  # link prediction's accuracy rows: the shipped config's epochs
# every frontier of a batch's own-partition endpoints sampled in the trainer (2-hop halo)
LOCAL_SAMPLING = ("sampled.local_sampling=true", "partition.halo_hops=2")


@dataclass(frozen=True)
class Setting:
    """One row: the task's shipped config, the system, its deployment and overrides."""

    name: str
    config: str
    system: str = "dsgraph"  # "dsgraph" or "stock" (DGL's distributed link example logic)
    hosts: int = 1
    parts: int = 2
    trainers: int = 2  # in all
    link: str = "local"  # "local", "veth" or "veth_throttled"
    sets: tuple[str, ...] = ()  # `partition.` and `task.name` ones also when partitioning
    partition: str = "p2"  # which partitioning of the config's graph (a folder per config)
    timed: bool = False  # a throughput comparison: run alone, repeated, against its stock row
    epochs: int = 0  # full runs: train this long (0: the benchmark's default for the task)


def settings() -> list[Setting]:
    """Every row in table order: link prediction against stock over each emulated link, then
    what link prediction's options cost, then the node and edge tasks against their
    feature-only model."""
    rows = []
    for link in ("veth", "veth_throttled"):
        rows += [
            Setting(f"LP stock DGL 2 hosts ({link})", LINK_CONFIG, "stock", 2, 2, 2, link,
                    partition="stock2", timed=True),
            Setting(f"LP dsgraph 2 hosts ({link})", LINK_CONFIG, hosts=2, link=link, timed=True),
            Setting(f"LP dsgraph 2 hosts ({link}), local sampling", LINK_CONFIG, hosts=2,
                    link=link, sets=LOCAL_SAMPLING, partition="p2h2", timed=True),
        ]
    rows += [
        # the same global batch as 2 trainers of 1024 edges, so as many optimizer steps
        Setting("LP dsgraph 1 part x 1 trainer (whole graph)", LINK_CONFIG, parts=1, trainers=1,
                sets=("sampled.batch_size=2048",), partition="p1", epochs=CONVERGED),
        Setting("LP dsgraph 2 parts x 1 trainer", LINK_CONFIG, epochs=CONVERGED),
        Setting("LP dsgraph 2 parts, INT2 activations", LINK_CONFIG,
                sets=("compression.enabled=true",), epochs=CONVERGED),
        Setting("LP dsgraph 2 parts, in-batch negatives + contrastive", LINK_CONFIG,
                sets=("task.negative_sampler=in_batch", "task.loss=contrastive"),
                epochs=CONVERGED),
        Setting("LP dsgraph 2 parts, SAR full-batch", LINK_CONFIG, sets=("train.mode=sar",),
                epochs=100),  # one step per epoch
        Setting("LP dsgraph 2 parts, MLP (features only)", LINK_CONFIG, sets=("model.name=mlp",),
                epochs=CONVERGED),
        Setting("node regression SAGE", "configs/regression.yaml"),
        Setting("node regression MLP (features only)", "configs/regression.yaml",
                sets=("model.name=mlp",)),
        Setting("multilabel SAGE", "configs/multilabel.yaml"),
        Setting("multilabel SAGE, INT2 activations", "configs/multilabel.yaml",
                sets=("compression.enabled=true",)),
        Setting("multilabel MLP (features only)", "configs/multilabel.yaml",
                sets=("model.name=mlp",)),
        Setting("edge classification SAGE", EDGE_CONFIG),
        Setting("edge classification MLP (features only)", EDGE_CONFIG,
                sets=("model.name=mlp",)),
        # task.name is a partitioning setting too: it plants the edge targets
        Setting("edge regression SAGE", EDGE_CONFIG, sets=(EDGE_REGRESSION,),
                partition="p2reg"),
        Setting("edge regression MLP (features only)", EDGE_CONFIG,
                sets=(EDGE_REGRESSION, "model.name=mlp"), partition="p2reg"),
    ]
    return rows
