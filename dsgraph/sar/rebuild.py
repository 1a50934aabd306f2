"""Aggregates of the input features rebuilt in backward instead of saved (``sar.rebuild_inputs``).

A layer that aggregates the input features before its linear map (SAGEConv with ``in_feats <=
out_feats``: ``fc_neigh(mean of x)``) hands the aggregate to ``nn.Linear``, which saves it for
its weight gradient. That destination-sized tensor stays alive from the first layer's forward
to the end of backward, through every later layer's peak, although each worker keeps the
features it was computed from. Inside :class:`RebuildInputAggregates` autograd saves a recipe
instead, and the linear map's backward runs the aggregation again: one more ring at the input
width. The rebuilt tensor is bitwise the forward's: the core folds the same pieces in the same
order.

Only aggregations of a declared input qualify (no edge values, nothing that requires grad).
Rebuilding one from a tensor made only for it (GraphConv's ``x * norm``) would keep that tensor
alive in its place and save nothing. Every other save goes to ``fallback`` (the compressor when
compression is on) or is kept as it is.
"""
from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Any, Iterable, Optional

import torch

from dsgraph.sar.ops import Runtime, ShardOp
from dsgraph.sar.shard import OpSpec


@dataclass(frozen=True)
class _Recipe:
    """How to run a saved aggregation again: the builtin and its (input-feature) operand."""

    spec: OpSpec
    u: torch.Tensor


def _key(t: torch.Tensor) -> tuple:
    return (t.untyped_storage().data_ptr(), t.storage_offset(), tuple(t.shape), t.stride(),
            t._version, t.dtype)


class RebuildInputAggregates:
    """A ``saved_tensors_hooks`` context for one training forward (see the module docstring).

    While it is entered, ``rt.rebuild`` is this object: :class:`dsgraph.sar.graph.SarGraph`
    reports each aggregation it runs through :meth:`note`. ``rebuilt`` counts the aggregations
    run again in backward.
    """

    def __init__(self, rt: Runtime, inputs: Iterable[torch.Tensor], fallback: Any = None) -> None:
        self.rt = rt
        self._inputs = tuple(inputs)
        self._fallback = fallback  # an object with pack/unpack (the Compressor), or None
        self._made: dict[tuple, tuple[weakref.ref, _Recipe]] = {}
        self._hooks: Optional[Any] = None
        self.rebuilt = 0

    def __enter__(self) -> "RebuildInputAggregates":
        self._hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack)
        self._hooks.__enter__()
        self.rt.rebuild = self
        return self

    def __exit__(self, *exc: Any) -> None:
        self.rt.rebuild = None
        assert self._hooks is not None
        self._hooks.__exit__(*exc)
        self._hooks = None
        self._made.clear()  # recipes already handed to autograd stay with it

    def note(self, out: torch.Tensor, spec: OpSpec, u: torch.Tensor,
             e: Optional[torch.Tensor]) -> None:
        """Remember how ``out`` was made if it is an aggregation of a declared input."""
        if e is not None or out.requires_grad or not torch.is_grad_enabled() \
                or not any(u is x for x in self._inputs):
            return
        self._made[_key(out)] = (weakref.ref(out), _Recipe(spec, u))

    def _pack(self, t: torch.Tensor) -> Any:
        hit = self._made.get(_key(t))
        if hit is not None and hit[0]() is not None:
            return hit[1]
        return self._fallback.pack(t) if self._fallback is not None else t

    def _unpack(self, packed: Any) -> torch.Tensor:
        if isinstance(packed, _Recipe):
            self.rebuilt += 1
            with torch.no_grad():
                return ShardOp.apply(self.rt, packed.spec, packed.u, None, None)
        return self._fallback.unpack(packed) if self._fallback is not None else packed
