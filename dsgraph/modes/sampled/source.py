"""The batch-source contract of the sampled runtime (:mod:`.runtime`) and what every source
shares: one fanout per model layer, blocks that say when the fanouts are too few, and the
homogeneous inputs (features, or rematerialized first blocks)."""
from __future__ import annotations

import abc
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, ClassVar, Iterator, Optional

import dgl
import torch
from torch import nn

from dsgraph import remat
from dsgraph.config import Config
from dsgraph.config.limits import short_repr
from dsgraph.errors import ConfigError
from dsgraph.models.gnn import layer_count
from dsgraph.tasks import Task

# Mini-batches sampled before training to rank remote rows by how often they are read.
PRESAMPLE_BATCHES = 32


def check_fanouts(cfg: Config, model: nn.Module) -> None:
    """One fanout per message-passing layer (when the model says how many it has)."""
    fanouts, layers = cfg.sampled.fanouts, layer_count(model)
    if layers is not None and len(fanouts) != layers:
        raise ConfigError(f"{cfg.source}: sampled.fanouts: {short_repr(fanouts)} samples "
                          f"{len(fanouts)} layer(s) but model {cfg.model.name!r} has {layers} "
                          f"(model.args.num_layers); give one fanout per layer")


def fanouts_message(cfg: Config, what: str) -> str:
    """The one-line error of a model that ``what`` (reads or returns) against the fanouts."""
    fanouts = cfg.sampled.fanouts
    return (f"{cfg.source}: sampled.fanouts: {short_repr(fanouts)} gives {len(fanouts)} "
            f"block(s) per mini-batch but model {cfg.model.name!r} {what}; give one fanout per "
            f"model layer")


class FanoutBlocks(list):
    """A mini-batch's blocks, one per fanout; a model reading a block past the last one is
    told that ``sampled.fanouts`` is too short (instead of an IndexError deep in its forward)."""

    def __init__(self, blocks: list, cfg: Config) -> None:
        super().__init__(blocks)
        self.cfg = cfg

    def __getitem__(self, index):
        try:
            return super().__getitem__(index)
        except IndexError:
            raise ConfigError(fanouts_message(self.cfg, f"reads block {index}")) from None


def homogeneous_inputs(cfg: Config, feat: Any, pb: Any, input_nodes: torch.Tensor,
                       lids: Optional[torch.Tensor], blocks: list) -> tuple[torch.Tensor, list]:
    """A batch's input features from ``feat`` (a CachedFeatures; ``lids``: the input nodes'
    local ids, when known; InputRows when ``feat.in_place``) and its blocks; with ``sampled.rematerialize`` the first
    ``sampled.remat_layers`` blocks become RematBlocks and the features a placeholder (rows are
    pulled one owning partition at a time, :mod:`dsgraph.remat`)."""
    if not cfg.sampled.rematerialize:
        if feat.in_place:  # the model sums the first block's rows where they are stored
            return feat.input_rows(input_nodes), blocks
        return feat.by_local_id(input_nodes, lids), blocks
    chunk, comp, k = cfg.seqagg.chunk_rows, cfg.compression, cfg.sampled.remat_layers
    rb = remat.RematBlock(blocks[0], remat.FeatureRows(feat), pb.nid2partid, pb.partid, chunk,
                          comp)
    later = [remat.RematBlock(b, None, chunk_rows=chunk, compression=comp) for b in blocks[1:k]]
    return rb.placeholder(feat.tensor.shape[1], feat.tensor.dtype), [rb] + later + list(blocks[k:])


def layerwise(cfg: Config, model: nn.Module) -> bool:
    """Whether evaluation and predictions are exact layer-wise inference."""
    return cfg.sampled.eval == "layerwise" and hasattr(model, "forward_layer")


@dataclass
class Batch:
    """One training step's data: ``size`` seeds or edges, the inputs ``x`` (rows, or input
    node ids per type), the blocks, and the task's targets (node sources) or the scored pairs
    (edge sources)."""

    size: int
    x: Any
    blocks: list
    target: Any = None
    pairs: Any = None


class BatchSource(abc.ABC):
    """What the sampled runtime trains on, chosen by what the task trains on and the graph
    kind: it loads this rank's share, builds the model, makes each epoch's batches, runs the
    model on one, and evaluates and predicts as its task wants.

    The runtime owns the graph, the epoch loop (clock, DDP, compression, step, sums over ranks),
    the prefetch thread and the job's summary; a source never starts a process or a thread.
    """

    ddp: ClassVar[bool] = True  # DDP sums gradients in backward (False: summed after it)
    rate_key: ClassVar[str] = "seeds_s"  # the progress bar's throughput figure

    def __init__(self, cfg: Config, task: Task, g: Any, part_config: Path) -> None:
        self.cfg, self.task, self.g, self.part_config = cfg, task, g, part_config
        self.pb = g.get_partition_book()
        self.steps_per_epoch = 1

    @staticmethod
    @abc.abstractmethod
    def prepare(cfg: Config) -> Path:
        """Launcher side: check what only this source needs; return the partition JSON."""

    @staticmethod
    def seed_nodes(cfg: Config) -> int:
        """The most seed nodes one mini-batch samples from (the memory plan's batch)."""
        return cfg.sampled.batch_size

    @abc.abstractmethod
    def setup(self, trainer: Any) -> nn.Module:
        """Load this rank's share, build the feature cache and the model (returned; the
        runtime lets its layers take RematBlocks with ``sampled.rematerialize``)."""

    def prefetch_depth(self) -> int:
        """Batches a thread may prepare ahead (0: inline)."""
        return 0

    @abc.abstractmethod
    def epoch(self, seed: int) -> Callable[[], Iterator[Batch]]:
        """This epoch's order, drawn now; the returned callable makes its batches (perhaps on
        the prefetch thread, which it seeds with ``seed``)."""

    @abc.abstractmethod
    def forward(self, module: nn.Module, batch: Batch) -> torch.Tensor:
        """The model's output for ``batch``."""

    @abc.abstractmethod
    def loss(self, batch: Batch, out: torch.Tensor) -> torch.Tensor:
        """The task's training loss of ``out``."""

    num_scores = 0  # length of :meth:`metric_sums` (0: no training metrics)

    def metric_sums(self, batch: Batch, out: torch.Tensor) -> list[float]:
        """The task's additive training sums of ``out`` (see :attr:`num_scores`)."""
        return self.task.metric_sums(out, batch.target)

    def after_step(self) -> None:
        """Work after the optimizer's step (a sparse optimizer's own step, say)."""

    @abc.abstractmethod
    def reset_figures(self) -> None:
        """Start this epoch's traffic counters at zero."""

    @abc.abstractmethod
    def figures(self) -> list[float]:
        """This rank's traffic counters (summed over ranks by the runtime)."""

    @abc.abstractmethod
    def figure_record(self, totals: list[float]) -> dict[str, Any]:
        """The epoch record's keys of :meth:`figures` summed over ranks."""

    @abc.abstractmethod
    def cache_bytes(self) -> int:
        """Bytes of this rank's remote-feature cache, ids included."""

    @abc.abstractmethod
    def evaluate(self, trainer: Any) -> dict[str, Any]:
        """Validation and test figures over all ranks (collective)."""

    @abc.abstractmethod
    def predict(self, trainer: Any, embeddings: bool,
                pairs: Optional[Any]) -> Optional[dict[str, Any]]:
        """The outputs ``python -m predict`` writes, on rank 0 (collective)."""

    def summary(self) -> dict[str, Any]:
        """Keys this source adds to ``metrics.json``."""
        return {}


def seeded_sampling(seed: int, batches: Iterator[Batch]) -> Iterator[Batch]:
    """``batches`` drawn after seeding DGL's generator, which is per thread: the thread that
    samples must seed it."""
    dgl.seed(seed)
    yield from batches
