"""Link prediction: score node pairs from node embeddings (``dot`` / ``distmult`` decoders),
binary cross-entropy against uniform negatives; MRR and Hits@K as OGB's link tasks rank them."""
from __future__ import annotations

from typing import Any, Optional, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from dsgraph.tasks.base import Task
from dsgraph.tasks.node import as_float64


class DotDecoder(nn.Module):
    """score(u, v) = h_u . h_v."""

    def forward(self, hu: torch.Tensor, hv: torch.Tensor) -> torch.Tensor:
        """One score per row pair."""
        return (hu * hv).sum(-1)

    def pairwise(self, hu: torch.Tensor, hv: torch.Tensor) -> torch.Tensor:
        """(len(hu), len(hv)) scores of every ``hu`` row against every ``hv`` row (one matrix
        product, not len(hu) * len(hv) rows of products)."""
        return hu @ hv.T


class DistMultDecoder(nn.Module):
    """score(u, v) = h_u . diag(r) . h_v with one learned relation vector r (DistMult)."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.relation = nn.Parameter(torch.ones(width))  # starts as the dot product

    def forward(self, hu: torch.Tensor, hv: torch.Tensor) -> torch.Tensor:
        """One score per row pair."""
        return (hu * self.relation.to(hu.dtype) * hv).sum(-1)

    def pairwise(self, hu: torch.Tensor, hv: torch.Tensor) -> torch.Tensor:
        """(len(hu), len(hv)) scores of every ``hu`` row against every ``hv`` row."""
        return (hu * self.relation.to(hu.dtype)) @ hv.T


def make_decoder(name: str, width: int) -> nn.Module:
    """``task.decoder`` for embeddings of ``width``."""
    return DistMultDecoder(width) if name == "distmult" else DotDecoder()


def reciprocal_ranks(scores: np.ndarray) -> np.ndarray:
    """1 / rank of column 0 among each row's scores (column 0 the positive, the rest its
    negatives); ties count half, as OGB's MRR evaluator does (mean of the optimistic and the
    pessimistic rank)."""
    pos, neg = scores[:, :1], scores[:, 1:]
    optimistic = (neg > pos).sum(1)
    pessimistic = (neg >= pos).sum(1)
    return 1.0 / (0.5 * (optimistic + pessimistic) + 1.0)


DEFAULT_HIDDEN = 128  # the built-in models' default model.args.hidden


def embedding_width(args: dict) -> int:
    """The embedding width: ``model.args.hidden`` (the built-in models' default otherwise)."""
    hidden = args.get("hidden", DEFAULT_HIDDEN)
    return hidden if isinstance(hidden, int) and not isinstance(hidden, bool) else DEFAULT_HIDDEN


def hits_threshold(shared_negatives: np.ndarray, k: int) -> float:
    """The K-th highest score of the shared negative pairs (OGB's Hits@K: a positive counts if
    it scores strictly above it); -inf when there are fewer than K negatives."""
    if shared_negatives.size < k:
        return float("-inf")
    return float(np.sort(shared_negatives)[-k])


class LinkPrediction(Task):
    """Whether an edge joins two nodes, scored from their embeddings (the model's output).

    Training: ``out`` are edge scores (logits), ``target`` 0/1 (positive / negative edge).
    Evaluation: ``out`` is (edges x (1 + eval_negatives)) scores, the positive first, then its
    negatives; ``target`` per row the Hits@K threshold (:func:`hits_threshold`). Sums per
    split: edges, reciprocal ranks, hits: MRR and Hits@K are exact over ranks.
    """

    facts_of = "link_prediction"
    num_sums = 3
    selection_metric = "val_mrr"

    def bind(self, width: int, train_targets: Any = None) -> None:
        """Embeddings of ``width`` (the model's output width)."""
        super().bind(width)

    @staticmethod
    def head_width(targets: int) -> int:
        """The embedding width: the model's output layer is the embedding."""
        return targets

    def loss(self, out: torch.Tensor, target: torch.Tensor,
             reduction: str = "mean") -> torch.Tensor:
        """Binary cross-entropy of edge logits against 0/1 (positive / negative edge)."""
        return F.binary_cross_entropy_with_logits(out, target.to(out.dtype), reduction=reduction)

    def edge_loss(self, pos: torch.Tensor, neg: torch.Tensor,
                  reduction: str = "mean") -> torch.Tensor:
        """``task.loss`` of positive scores ``pos`` (P,) against each one's negatives ``neg``
        (P, K). ``bce``: binary cross-entropy over all P * (1 + K) pairs; ``contrastive``
        (InfoNCE): cross-entropy of each positive among its 1 + K scores. ``mean`` averages
        over the pairs (``bce``) or positives (``contrastive``), ``sum`` adds them up: the
        strategy divides by :meth:`loss_count` summed over ranks."""
        if self.cfg.loss == "contrastive":
            rows = torch.cat([pos.unsqueeze(1), neg], 1)
            first = torch.zeros(len(rows), dtype=torch.long, device=rows.device)
            return F.cross_entropy(rows, first, reduction=reduction)
        scores = torch.cat([pos, neg.reshape(-1)])
        labels = torch.cat([torch.ones_like(pos), torch.zeros_like(neg.reshape(-1))])
        return F.binary_cross_entropy_with_logits(scores, labels, reduction=reduction)

    def loss_count(self, positives: int, negatives_each: int) -> int:
        """The terms :meth:`edge_loss` adds up for ``positives`` edges with ``negatives_each``
        negatives each (what ``mean`` divides by)."""
        return positives if self.cfg.loss == "contrastive" else positives * (1 + negatives_each)

    def metric_sums(self, out: Any, target: Any) -> list[float]:
        """Edges, their reciprocal ranks and their hits."""
        scores, threshold = as_float64(out), as_float64(target)
        if not len(scores):
            return [0.0, 0.0, 0.0]
        return [float(len(scores)), float(reciprocal_ranks(scores).sum()),
                float((scores[:, 0] > threshold).sum())]

    def metrics(self, sums: Sequence[float], split: str) -> dict[str, Optional[float]]:
        """``<split>_mrr`` and ``<split>_hits<K>``; None for a split without edges."""
        edges, rr, hits = sums
        key = f"{split}_hits{self.cfg.hits_k}"
        if not edges:
            return {f"{split}_mrr": None, key: None}
        return {f"{split}_mrr": rr / edges, key: hits / edges}

    def outputs(self, out: torch.Tensor, index: dict[str, np.ndarray], target: Any = None,
                embedding: Optional[torch.Tensor] = None) -> dict[str, np.ndarray]:
        """``node_id`` and ``embedding`` (the model's output, what the decoder scores), sorted
        by node id."""
        (key, ids), = index.items()
        order = np.argsort(ids, kind="stable")
        return {key: np.asarray(ids)[order].astype(np.int64),
                "embedding": torch.as_tensor(out)[torch.from_numpy(order)].numpy()}

    @staticmethod
    def pair_outputs(pairs: np.ndarray, score: torch.Tensor) -> dict[str, np.ndarray]:
        """The columns ``python -m predict --pairs`` writes: each pair's ``src`` and ``dst``
        (original ids), the decoder's ``score`` (logit) and ``prob`` (its sigmoid)."""
        score = score.double()
        return {"src": pairs[:, 0], "dst": pairs[:, 1], "score": score.float().numpy(),
                "prob": torch.sigmoid(score).float().numpy()}

    @classmethod
    def check_outputs(cls, embeddings: bool, model_probe: Optional[torch.nn.Module]) -> None:
        """Embeddings are the task's output: ``--embeddings`` adds nothing and is accepted."""
