"""Typed node batches: seeds are a heterogeneous graph's labelled nodes of its target type.

Seeds are the target node type's labelled nodes (the type the partition JSON names
``target_ntype``), split evenly over trainers. Each layer samples ``sampled.fanouts`` neighbours
per relation, or what ``sampled.relation_fanouts`` gives a named relation. Input rows come from
each type's ``feat`` (own rows from shared memory, the remote rows read most in pre-sampled
batches from a cache within ``sampled.feature_memory_mb``, the rest over RPC) or, for a type
without features, from a learnable embedding the servers hold
(:mod:`dsgraph.distgraph.hetero_inputs`, sparse Adam at ``sampled.embedding_lr``). The
model is a relational model (:mod:`dsgraph.models.hetero`: ``rgcn``, ``rgat``, or a user's class
with the same contract). Gradients are summed after backward (a relation that a batch never
reaches leaves its weights without a gradient, which DDP would refuse), and every trainer runs
the same number of batches, because the sparse optimizer's step is collective. Evaluation and
``python -m predict`` sample with the training fanouts. With ``sampled.rematerialize`` the first
layer's relations out of featured types aggregate their source rows one owning partition (and
``seqagg.chunk_rows`` rows) at a time and rebuild them in backward
(:mod:`dsgraph.remat.hetero`); featureless types' embedding rows are read whole.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable, Iterator, Optional, Sequence

import dgl
import torch
from torch import nn

from dsgraph import checkpoint, dist, remat
from dsgraph.config import Config
from dsgraph.config.limits import short_repr
from dsgraph.config.tasks import hetero_tasks
from dsgraph.distgraph.budget import feature_budget_bytes
from dsgraph.distgraph.evaluate import read_all
from dsgraph.distgraph.hetero_inputs import HeteroInputs, HeteroNet
from dsgraph.errors import ConfigError, DataError
from dsgraph.models.registry import build_model
from dsgraph.partition import partition_json
from dsgraph.tasks.evaluation import split_figures
from dsgraph.modes.sampled.source import PRESAMPLE_BATCHES, Batch, BatchSource, seeded_sampling

# Node-type width the launcher-side probe builds the model with (its structure, not its size).
PROBE_WIDTH = 4
SPLITS = ("train", "val", "test")


def layer_fanouts(cfg: Config, etypes: Sequence[tuple[str, str, str]]
                  ) -> list[dict[tuple[str, str, str], int]]:
    """Per layer, the fanout of every canonical edge type (``sampled.relation_fanouts`` over
    ``sampled.fanouts``); an unknown relation name is refused in one line."""
    s = cfg.sampled
    relations = {e[1] for e in etypes}
    for rel in s.relation_fanouts:  # their lengths and values: SampledConfig.check
        if rel not in relations:
            raise ConfigError(f"{cfg.source}: sampled.relation_fanouts: {short_repr(rel)} is not "
                              f"a relation of the graph; expected one of "
                              f"{short_repr(sorted(relations))}")
    return [{e: int(s.relation_fanouts.get(e[1], s.fanouts)[i]) for e in etypes}
            for i in range(len(s.fanouts))]


def build_hetero_model(cfg: Config, widths: dict[str, int], num_classes: int,
                       etypes: Sequence[tuple[str, str, str]]) -> nn.Module:
    """The configured relational model (``Model(in_feats, num_classes, etypes, **args)``)."""
    return build_model(cfg.model.name, widths, num_classes,
                       {**cfg.model.args, "etypes": [tuple(e) for e in etypes]})


class TypedNodeBatches(BatchSource):
    """Mini-batches of a heterogeneous graph's target-type training nodes."""

    ddp = False  # see the module docstring

    @staticmethod
    def prepare(cfg: Config) -> Path:
        """The partitions exist; the options this source has not got are refused; the model
        builds over the graph's types and has one layer per fanout."""
        s = cfg.sampled
        if not cfg.task_facts.hetero:  # (their targets are the target type's labels)
            raise ConfigError(f"{cfg.source}: task.name: heterogeneous graphs train "
                              f"{', '.join(map(repr, hetero_tasks()))}, got {cfg.task_name!r}")
        if s.feature_cache_policy != "frequency":
            raise ConfigError(f"{cfg.source}: sampled.feature_cache_policy: heterogeneous graphs "
                              f"rank cached rows by 'frequency', got "
                              f"{short_repr(s.feature_cache_policy)}")
        if s.rematerialize and s.remat_layers != 1:
            raise ConfigError(f"{cfg.source}: sampled.remat_layers: heterogeneous graphs "
                              f"rematerialize the first layer only; expected 1, got "
                              f"{short_repr(s.remat_layers)}")
        for key, on in (("local_sampling", s.local_sampling), ("prefetch", s.prefetch)):
            if on:
                raise ConfigError(f"{cfg.source}: sampled.{key}: not available for heterogeneous "
                                  f"graphs yet; expected it off, got {short_repr(on)}")
        path = partition_json(cfg)
        meta = json.loads(path.read_text())
        etypes = [tuple(e.split(":")) for e in meta["etypes"]]
        layer_fanouts(cfg, etypes)
        probe = build_hetero_model(cfg, {t: PROBE_WIDTH for t in meta["ntypes"]}, 2, etypes)
        layers = getattr(probe, "num_layers", None)
        if layers is not None and layers != len(s.fanouts):
            raise ConfigError(f"{cfg.source}: sampled.fanouts: {short_repr(s.fanouts)} samples "
                              f"{len(s.fanouts)} layer(s) but model {cfg.model.name!r} has "
                              f"{layers}; give one fanout per layer")
        return path

    def setup(self, trainer: Any) -> nn.Module:
        """Split the target type's labelled nodes, build inputs (seeded tables) and model."""
        g, s = self.g, self.cfg.sampled
        meta = json.loads(self.part_config.read_text())
        self.target = t = meta["target_ntype"]
        data = g.nodes[t].data
        self.split = {name: dgl.distributed.node_split(data[f"{name}_mask"], self.pb, ntype=t,
                                                       force_even=True) for name in SPLITS}
        self.task.check_labels(data["label"].dtype, str(self.part_config))
        self.label = data["label"]
        self.task.bind(int(meta["num_classes"]),
                       lambda: self.task.target(self.label[self.split["train"]]))
        self.num_scores = self.task.num_sums
        self.sampler = dgl.dataloading.NeighborSampler(layer_fanouts(self.cfg,
                                                                     g.canonical_etypes))
        inputs = HeteroInputs(g, s.embedding_dim)
        inputs.seed_tables(self.cfg.train.seed)
        budget = feature_budget_bytes(s.feature_memory_mb, inputs.own_feature_bytes(), 1,
                                      self.cfg.cluster.trainers_per_machine)
        if budget > 0:
            inputs.fill_caches(self._presample(trainer.rank), budget, s.feature_cache_bits)
        model = build_hetero_model(self.cfg, inputs.widths, self.task.head_width(self.task.width),
                                   g.canonical_etypes).to(trainer.dtype)
        self.dtype = trainer.dtype
        self.sparse_opt = inputs.sparse_optimizer(s.embedding_lr)
        self.inputs = inputs
        # Every trainer runs as many batches as the one with most seeds (the sparse step is
        # collective); the others wrap around their seeds, so each needs one.
        fewest, most = dist.all_max([-float(self.split["train"].numel()),
                                     float(self.split["train"].numel())])
        if fewest == 0:
            raise DataError(f"{self.part_config}: a trainer got no training node of type {t!r} "
                            f"({int(most)} at most per trainer); use fewer trainers or more "
                            f"training nodes")
        self.steps_per_epoch = int((most + s.batch_size - 1) // s.batch_size)
        return HeteroNet(inputs, model, t)

    def epoch(self, seed: int) -> Callable[[], Iterator[Batch]]:
        """This trainer's training nodes in a fresh order, wrapped around to the common number
        of batches."""
        train = self.split["train"]
        order = train[torch.randperm(train.numel())]
        bs, steps = self.cfg.sampled.batch_size, self.steps_per_epoch
        if order.numel():
            order = order.repeat((steps * bs + order.numel() - 1) // order.numel())[:steps * bs]

        def batches() -> Iterator[Batch]:
            for input_nodes, seeds, blocks in self.sample(order):
                yield Batch(seeds.numel(), input_nodes, blocks,
                            self.task.target(self.label[seeds]))
        return lambda: seeded_sampling(seed, batches())

    def forward(self, module: nn.Module, batch: Batch) -> torch.Tensor:
        """The target-type seeds' rows."""
        return module(self._first_block(batch.blocks), batch.x)

    def loss(self, batch: Batch, out: torch.Tensor) -> torch.Tensor:
        """The task's loss of the seeds' rows."""
        return self.task.loss(out, batch.target)

    def after_step(self) -> None:
        """The embedding tables' sparse step (collective)."""
        if self.sparse_opt is not None:
            self.sparse_opt.step()

    def reset_figures(self) -> None:
        """Cache counters at zero."""
        self.inputs.reset_figures()

    def figures(self) -> list[float]:
        """Remote feature bytes, cache hits, foreign rows read."""
        return list(self.inputs.cache_figures())

    def figure_record(self, totals: list[float]) -> dict[str, Any]:
        """Traffic keys of an epoch's record."""
        return {"remote_feature_bytes": int(totals[0]),
                # of the feature rows owned by another partition, the share the caches served
                "cache_hit_rate": totals[1] / totals[2] if totals[2] else None}

    def cache_bytes(self) -> int:
        """The feature caches' bytes."""
        return self.inputs.cache_bytes

    def _presample(self, rank: int) -> Iterator[dict[str, torch.Tensor]]:
        """Input nodes of :data:`PRESAMPLE_BATCHES` mini-batches of this trainer's training
        seeds, sampled as training samples them (what the feature caches rank by)."""
        seeds = self.split["train"]
        seed = checkpoint.epoch_seed(self.cfg.train.seed, 0, rank)
        order = seeds[torch.randperm(seeds.numel(),
                                     generator=torch.Generator().manual_seed(seed))]
        dgl.seed(seed)
        for input_nodes, _, _ in self.sample(order[:PRESAMPLE_BATCHES
                                                         * self.cfg.sampled.batch_size]):
            yield input_nodes

    def sample(self, order: torch.Tensor, batch_size: Optional[int] = None
               ) -> Iterator[tuple[dict[str, torch.Tensor], torch.Tensor, list]]:
        """(input nodes per type, target-type seeds, blocks) of consecutive slices of
        ``order`` (target-type ids), sampled in the trainer or by sampler processes."""
        bs = batch_size or self.cfg.sampled.batch_size
        if self.cfg.cluster.samplers_per_trainer:
            batches: Any = dgl.dataloading.DistNodeDataLoader(self.g, {self.target: order},
                                                              self.sampler, batch_size=bs)
        else:
            batches = (self.sampler.sample_blocks(self.g, {self.target: order[i:i + bs]})
                       for i in range(0, order.numel(), bs))
        for input_nodes, seeds, blocks in batches:
            yield input_nodes, seeds[self.target], blocks

    def _first_block(self, blocks: list) -> list:
        """With ``sampled.rematerialize``: the first block's relations out of featured types
        rematerialized (their rows pulled group by group, in chunks of ``seqagg.chunk_rows``)."""
        if not self.cfg.sampled.rematerialize:
            return blocks
        features = self.inputs.features
        hb = remat.HeteroRematBlock(
            blocks[0], {t: remat.FeatureRows(f, self.dtype) for t, f in features.items()},
            {t: f.width for t, f in features.items()}, self.pb.nid2partid, self.pb.partid,
            self.cfg.seqagg.chunk_rows, self.cfg.compression, self.dtype)
        return [hb] + list(blocks[1:])

    @torch.no_grad()
    def outputs(self, model: nn.Module, ids: torch.Tensor) -> torch.Tensor:
        """The model's output rows of target-type nodes ``ids`` (sampled as in training)."""
        bs = self.cfg.sampled.eval_batch_size
        outs = [model(self._first_block(blocks), input_nodes)
                for input_nodes, _, blocks in self.sample(ids, bs)]
        return torch.cat(outs) if outs else torch.zeros(0, self.task.head_width(self.task.width))

    def evaluate(self, trainer: Any) -> dict[str, Any]:
        """Validation and test metrics of the target type over all trainers."""
        parts = {name: (self.outputs(trainer.model, self.split[name]),
                        self.task.target(self.label[self.split[name]]))
                 for name in ("val", "test")}
        return split_figures(self.task, parts)

    def predict(self, trainer: Any, embeddings: bool,
                pairs: Optional[Any] = None) -> Optional[dict[str, Any]]:
        """Every target-type node's outputs, keyed by its original id, read by rank 0."""
        if embeddings:
            raise ConfigError(f"{self.cfg.source}: --embeddings: not available for "
                              f"heterogeneous graphs yet")
        t, n = self.target, self.g.num_nodes(self.target)
        # Nodes this machine's partition owns: their rows of the shared table are in this
        # machine's memory, written before the barrier returns (another machine's rows would
        # be pushes DGL sends without waiting for them to land; see evaluate.all_nodes).
        mine = dgl.distributed.node_split(torch.ones(n, dtype=torch.bool), self.pb, ntype=t,
                                          force_even=False)
        logits = self.outputs(trainer.model, mine)
        sink = dgl.distributed.DistTensor((n, logits.shape[1]), logits.dtype, name="predict-out",
                                          part_policy=self.g.get_node_partition_policy(t))
        sink[mine] = logits
        dist.barrier()  # every partition's rows written before rank 0 reads them
        out = None
        if trainer.rank == 0:
            out = self.task.outputs(read_all(sink), {
                "node_id": read_all(self.g.nodes[t].data["orig_id"]).numpy()})
        dist.barrier()  # the DistTensor must outlive rank 0's reads
        return out

    def summary(self) -> dict[str, Any]:
        """The target type."""
        return {"target_ntype": self.target}
