"""Labelled edge batches for the edge tasks: seeds are the edges in the training mask.

The edges' targets and masks are edge data of the partitions (:mod:`dsgraph.data.edge_targets`);
training edges are split over trainers (by owning partition, as ``sampled.seed_split`` says for
nodes), validation and test edges evenly. A batch samples the neighbourhoods of its edges'
endpoints (the edges themselves included: their labels are not features), runs the node model
on them and the task's edge head (``edge_head``, a submodule of the model) on each edge's two
embeddings. Evaluation and ``python -m predict`` use the nodes' exact layer-wise embeddings
(models with ``forward_layer``, ``sampled.eval: layerwise``) or sampled ones; predictions cover
the user's edges (reverse copies a loader added are left out), keyed by ``edge_id``, ``src``
and ``dst``.
"""
from __future__ import annotations

import json
from typing import Any, Callable, Iterator, Optional

import dgl
import torch
from torch import nn

from dsgraph import checkpoint, dist
from dsgraph.config import Config
from dsgraph.distgraph.evaluate import layerwise_outputs, sampled_outputs
from dsgraph.distgraph.features import feature_cache
from dsgraph.distgraph.local_sampler import LOCAL_ID, LocalHaloSampler, LocalIndex, SampleCounter
from dsgraph.errors import DataError
from dsgraph.tasks.edge import EdgeHead
from dsgraph.tasks.evaluation import split_figures
from dsgraph.tasks.link_prediction import embedding_width
from dsgraph.modes.sampled.nodes import NodeBatches
from dsgraph.modes.sampled.source import (PRESAMPLE_BATCHES, Batch, FanoutBlocks, check_fanouts,
                                          homogeneous_inputs, layerwise, seeded_sampling)

SPLITS = ("train", "val", "test")
# Edges whose head rows one evaluation step computes (bounds the rows read at once).
EVAL_EDGES = 65536


class EdgeBatches(NodeBatches):
    """Mini-batches of labelled training edges and their endpoints' sampled neighbourhoods
    (traffic figures, cache and sampling as :class:`NodeBatches`)."""

    rate_key = "edges_s"

    @staticmethod
    def seed_nodes(cfg: Config) -> int:
        """Both endpoints of every labelled edge of the batch."""
        return 2 * cfg.sampled.batch_size

    def setup(self, trainer: Any) -> nn.Module:
        """Split the labelled edges, bind the task to the edge labels, build model, edge head
        and feature cache."""
        g, s = self.g, self.cfg.sampled
        meta = json.loads(self.part_config.read_text())
        if "edge_label" not in meta:
            raise DataError(f"{self.part_config}: no edge_label: the partitions hold no edge "
                            f"targets; partition with task.name: {self.cfg.task_name}")
        self.user_edges = int(meta["edge_label"].get("user_edges", g.num_edges()))
        even = s.seed_split == "even"
        self.split = {name: dgl.distributed.edge_split(g.edata[f"{name}_mask"], self.pb,
                                                       force_even=even or name != "train")
                      for name in SPLITS}
        # the endpoints once, not one find_edges request per batch
        self.ends = {name: g.find_edges(eids) for name, eids in self.split.items()}
        self.task.check_labels(g.edata["label"].dtype, str(self.part_config))
        self.label = g.edata["label"]
        self.task.bind(self._edge_width(meta["edge_label"]),
                       lambda: self.task.target(self.label[self.split["train"]]))
        self.num_scores = self.task.num_sums
        width = embedding_width(self.cfg.model.args)
        model = trainer.build_model(g.ndata["feat"].shape[1], width)
        check_fanouts(self.cfg, model)
        model.edge_head = EdgeHead(width, self.task.head_width(self.task.width)).to(trainer.dtype)
        self.head = model.edge_head
        index = LocalIndex.build(g) if s.local_sampling else None
        self.sampler = dgl.dataloading.NeighborSampler(s.fanouts) if index is None \
            else LocalHaloSampler(s.fanouts, index)
        self.counter = SampleCounter(g, index)
        self.feat = feature_cache(g, s, self.cfg.cluster.trainers_per_machine,
                                  lambda: self._presample(trainer.rank), model=model)
        self.steps_per_epoch = (self.split["train"].numel() + s.batch_size - 1) // s.batch_size
        return model

    def _edge_width(self, meta: dict) -> int:
        """Classes or targets per edge, as the partition JSON's ``edge_label`` records them."""
        return int(meta.get("num_classes") or meta.get("num_targets") or 1)

    def _presample(self, rank: int) -> Iterator[torch.Tensor]:
        """Input nodes of :data:`PRESAMPLE_BATCHES` mini-batches of this trainer's training
        edges' endpoints, sampled as training samples them (the cache's ``frequency``
        policy)."""
        seed = checkpoint.epoch_seed(self.cfg.train.seed, 0, rank)
        src, dst = self.ends["train"]
        order = torch.randperm(src.numel(), generator=torch.Generator().manual_seed(seed))
        bs = self.cfg.sampled.batch_size
        dgl.seed(seed)
        for start in range(0, min(order.numel(), PRESAMPLE_BATCHES * bs), bs):
            rows = order[start:start + bs]
            yield self.sampler.sample_blocks(self.g, torch.unique(torch.cat([src[rows],
                                                                             dst[rows]])))[0]

    def epoch(self, seed: int) -> Callable[[], Iterator[Batch]]:
        """This trainer's training edges in a fresh order."""
        eids, (src, dst) = self.split["train"], self.ends["train"]
        order = torch.randperm(eids.numel(), generator=torch.Generator().manual_seed(seed))
        bs = self.cfg.sampled.batch_size

        def batches() -> Iterator[Batch]:
            for start in range(0, order.numel(), bs):
                rows = order[start:start + bs]
                nodes, ends = torch.unique(torch.cat([src[rows], dst[rows]]), return_inverse=True)
                input_nodes, _, blocks = self.sampler.sample_blocks(self.g, nodes)
                lids = blocks[0].srcdata.pop(LOCAL_ID, None)  # sampled wholly in the partition
                self.counter.add(blocks, all_local=lids is not None)
                x, blocks = homogeneous_inputs(self.cfg, self.feat, self.pb, input_nodes, lids,
                                               blocks)
                yield Batch(rows.numel(), x, blocks,
                            self.task.target(self.label[eids[rows]]), ends.view(2, -1))
        return lambda: seeded_sampling(seed, batches())

    def forward(self, module: nn.Module, batch: Batch) -> torch.Tensor:
        """The edge head's rows of the batch's edges."""
        h = module(FanoutBlocks(batch.blocks, self.cfg), batch.x)
        return self.head(h[batch.pairs[0]], h[batch.pairs[1]])

    def _embeddings(self, model: nn.Module) -> Any:
        """Every node's embedding (a DistTensor; collective)."""
        s = self.cfg.sampled
        if layerwise(self.cfg, model):
            return layerwise_outputs(model, self.g, s.eval_batch_size)[0]
        return sampled_outputs(model, self.g, s.fanouts, s.eval_batch_size)[0]

    @torch.no_grad()
    def _rows(self, h: Any, src: torch.Tensor, dst: torch.Tensor) -> torch.Tensor:
        """The edge head's rows of edges ``src`` -> ``dst`` from embeddings ``h``."""
        out = [self.head(h[src[i:i + EVAL_EDGES]], h[dst[i:i + EVAL_EDGES]])
               for i in range(0, src.numel(), EVAL_EDGES)]
        return torch.cat(out) if out else torch.zeros(0, self.task.head_width(self.task.width))

    def evaluate(self, trainer: Any) -> dict[str, Any]:
        """Validation and test figures of the edge task over all trainers."""
        h = self._embeddings(trainer.model)
        parts = {name: (self._rows(h, *self.ends[name]),
                        self.task.target(self.label[self.split[name]])) for name in ("val", "test")}
        dist.barrier()  # the embedding DistTensor must outlive every rank's reads
        return split_figures(self.task, parts)

    def predict(self, trainer: Any, embeddings: bool,
                pairs: Optional[Any] = None) -> Optional[dict[str, Any]]:
        """The outputs of every edge of the user's edge list, read by rank 0."""
        g = self.g
        mine = dgl.distributed.edge_split(torch.ones(g.num_edges(), dtype=torch.bool), self.pb,
                                          force_even=False)
        orig = g.edata["orig_id"][mine]
        keep = orig < self.user_edges  # reverse copies carry messages, not predictions
        mine, orig = mine[keep], orig[keep]
        src, dst = g.find_edges(mine)
        h = self._embeddings(trainer.model)
        out = self._rows(h, src, dst)
        ids = g.ndata["orig_id"]
        rows = dist.gather_to_root((orig, ids[src], ids[dst], out))
        dist.barrier()  # the embedding DistTensor must outlive every rank's reads
        if rows is None:
            return None
        edge_id, src, dst, out = (torch.cat([r[i] for r in rows]) for i in range(4))
        return self.task.outputs(out, {"edge_id": edge_id.numpy(), "src": src.numpy(),
                                       "dst": dst.numpy()})
