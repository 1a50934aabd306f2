"""What is known of each task without importing it: one torch-free :class:`TaskFacts` per
``task.name``, read by the config's checks and mode sections, partitioning, the memory planner,
``python -m predict``, the console and the task classes themselves
(:class:`dsgraph.tasks.base.Task` takes its name and what it trains on from here), so a task's
facts are written once.

A new task adds its line to :data:`TASK_FACTS` and its class to
:data:`dsgraph.tasks.registry.TASK_CLASSES` (docs/tasks.md).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Optional

TrainsOn = Literal["nodes", "edges", "links", "fields"]


@dataclass(frozen=True)
class TaskFacts:
    """One task's facts: what a training step's seeds are, where it runs, what data it needs
    and what its console line shows."""

    name: str
    # "nodes" (labelled nodes), "edges" (labelled edges, scored from their endpoints), "links"
    # (edges against negative pairs, held-out edges removed before partitioning) or "fields"
    # (physics fields); a mode picks its batches by it
    trains_on: TrainsOn
    modes: tuple[str, ...]  # train.mode values that run it
    # dataset.target its node data must hold (None: it reads no node targets)
    target: Optional[str] = None
    edge_target: Optional[str] = None  # edge tasks: "class" ids or "regression" values
    weighted: Optional[str] = None  # what one task.class_weights entry weighs (None: no weights)
    # the generated graph's key that counts its classes or targets (the weights' length)
    count_key: Optional[str] = None
    hetero: bool = False  # also trains on heterogeneous graphs (the target type's labels)
    # evaluation keys in the per-epoch console line (beside loss and throughput)
    line_keys: tuple[str, ...] = ()

    @property
    def holds_out_edges(self) -> bool:
        """Whether partitioning removes validation and test edges first (link prediction)."""
        return self.trains_on == "links"

    @property
    def reads_edges(self) -> bool:
        """Whether its examples are edges, so the partitions record the edge split."""
        return self.trains_on in ("edges", "links")


_GRAPH_MODES = ("sampled", "sar")

TASK_FACTS: dict[str, TaskFacts] = {f.name: f for f in (
    # (the order is each mode's: its first is task.name auto's)
    TaskFacts("node_classification", "nodes", _GRAPH_MODES, target="class", weighted="class",
              count_key="num_classes", hetero=True,
              line_keys=("train_acc", "val_acc", "test_acc")),
    TaskFacts("node_regression", "nodes", _GRAPH_MODES, target="regression",
              line_keys=("val_rmse", "test_rmse")),
    TaskFacts("multilabel", "nodes", _GRAPH_MODES, target="multilabel", weighted="label",
              count_key="num_targets", line_keys=("val_rocauc", "test_rocauc")),
    TaskFacts("link_prediction", "links", _GRAPH_MODES, line_keys=("val_mrr", "test_mrr")),
    # edge tasks: the node data stays the generators' class labels
    TaskFacts("edge_classification", "edges", ("sampled",), target="class", edge_target="class",
              line_keys=("train_acc", "val_acc", "test_acc")),
    TaskFacts("edge_regression", "edges", ("sampled",), target="class",
              edge_target="regression", line_keys=("val_rmse", "test_rmse")),
    TaskFacts("field_regression", "fields", ("dsmpnn",),
              line_keys=("test_rmse", "test_rel_l2")),
)}


def task_facts(name: str) -> TaskFacts:
    """The facts of task ``name`` (a resolved ``Config.task_name``)."""
    return TASK_FACTS[name]


def tasks_of_mode(mode: str) -> tuple[str, ...]:
    """The task names ``train.mode`` ``mode`` runs, in declaration order."""
    return tuple(name for name, f in TASK_FACTS.items() if mode in f.modes)


def hetero_tasks() -> tuple[str, ...]:
    """The task names that train heterogeneous graphs."""
    return tuple(name for name, f in TASK_FACTS.items() if f.hetero)
