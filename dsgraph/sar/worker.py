"""Set up one SAR worker: load its partition, build shards and exchange plan, wrap the graph."""
from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ContextManager, Iterable

import torch

from dsgraph.partition.reader import LocalPartition, load_local_partition
from dsgraph.sar.comm import Comm
from dsgraph.sar.graph import SarGraph
from dsgraph.sar.ops import Runtime
from dsgraph.sar.plan import ShardPlan
from dsgraph.sar.rebuild import RebuildInputAggregates


@dataclass
class SarWorker:
    """Everything a full-batch worker trains with."""

    part: LocalPartition
    plan: ShardPlan
    comm: Comm
    rt: Runtime
    graph: SarGraph

    def set_mode(self, mode: str) -> None:
        """Switch between ``sar``, ``sa`` and ``one_shot`` (same shards and plan)."""
        if mode not in ("sar", "sa", "one_shot"):
            raise ValueError(f"unknown SAR mode {mode!r}")
        self.rt.mode = mode

    def rebuild_inputs(self, inputs: Iterable[torch.Tensor],
                       fallback: Any = None) -> ContextManager:
        """Where a training forward runs: aggregates of ``inputs`` that a layer saves are rebuilt
        in backward (:mod:`dsgraph.sar.rebuild`; ``sar`` mode with remote rows, else a no-op);
        ``fallback`` (the compressor) stores every other save."""
        if self.rt.mode != "sar" or not self.plan.any_remote:
            return contextlib.nullcontext()
        return RebuildInputAggregates(self.rt, inputs, fallback)

    def local_mask(self, name: str) -> torch.Tensor:
        """A boolean node mask of the local nodes (all False when the partition lacks it)."""
        m = self.part.ndata.get(name)
        return m if m is not None else torch.zeros(self.part.num_local, dtype=torch.bool)


def setup_worker(part_json: str | Path, rank: int, world: int, mode: str = "sar",
                 prefetch: bool = False, chunk_rows: int = 0) -> SarWorker:
    """Load part ``rank`` and build its plan (collective: every worker must call it)."""
    part = load_local_partition(part_json, rank, world)
    plan = ShardPlan(part)
    comm = Comm(rank, world)
    rt = Runtime(plan, comm, mode, prefetch, chunk_rows)
    w = SarWorker(part, plan, comm, rt, SarGraph(rt))
    w.set_mode(mode)
    return w
