"""``SarGraph``: a DGL-graph-like view of one worker's partition for unmodified ``dgl.nn`` layers.

Nodes are this worker's own nodes (a homogeneous graph: ``srcdata`` is ``dstdata`` is
``ndata``), edges are their in-edges in local order (grouped by the source's part). Builtin
``update_all``/``apply_edges`` that read source features run through the SAR ring (or the
one-shot halo fetch); everything else (edge softmax, copy_e reductions) is local, because every
in-edge of a node lives with the node. With nothing remote anywhere the calls go straight to
DGL on the local graph: no copies, no custom autograd. The DGLGraph surface itself is the
shared :class:`dsgraph.seqagg.view.GraphView`.

Layers: those of :mod:`dsgraph.seqagg.layers` (GATConv's ``edge_softmax`` reads
``graph._graph``, which is the local block's graph index; in ``sar`` mode a model prepared by
``dsgraph.sar.model.prepare_model`` runs GATConv's attention as one fused op instead, see
``dsgraph.sar.attention``).
"""
from __future__ import annotations

from typing import Any, Optional

import dgl
import dgl.function as fn
import torch
from dgl.base import is_all

from dsgraph.sar.ops import HaloFetch, Runtime, ShardOp
from dsgraph.sar.shard import OpSpec
from dsgraph.seqagg.view import GraphView

_TARGET = {0: "u", 1: "v", 2: "e"}
_SPMM_OPS = ("add", "sub", "mul", "div")


def _zero_inf(t: torch.Tensor, red: str) -> torch.Tensor:
    """As DGLGraph.update_all: max/min of no messages is 0, not -inf/inf."""
    return t.masked_fill(torch.isinf(t), 0.0) if red in ("max", "min") else t


class SarGraph(GraphView):
    """The graph one SAR worker hands to its model (see module docstring)."""

    label = "SAR graphs"

    def __init__(self, rt: Runtime) -> None:
        super().__init__(homogeneous=True)
        self._rt = rt
        self._plan = rt.plan

    ndata = GraphView.srcdata

    @property
    def idtype(self) -> torch.dtype:
        """Integer type of the underlying graphs."""
        return self._plan.idtype

    @property
    def _graph(self):
        # dgl.nn.functional.edge_softmax reads graph._graph; every in-edge of a node is local,
        # so the local block's index gives exactly the distributed edge softmax.
        return self._plan.local_block()._graph

    def num_nodes(self, ntype: Optional[str] = None) -> int:
        """Number of local nodes (sources and destinations alike)."""
        return self._plan.num_local

    number_of_nodes = num_nodes

    def _counts(self) -> tuple[int, int, int]:
        n = self._plan.num_local
        return n, n, self._plan.num_edges

    def _degrees(self, out: bool) -> torch.Tensor:
        # global degrees: all of a node's in-edges are local; out-degrees were summed over
        # every part at set-up
        return self._plan.out_degrees if out else self._plan.in_degrees

    def _fold(self, u: torch.Tensor, reduce: str) -> torch.Tensor:
        return self._spmm("copy_lhs", reduce, u, None)

    def _fold_message(self, message_func, reduce: str) -> torch.Tensor:
        if message_func.name == "copy_e":
            return self._local_spmm("copy_rhs", reduce, None, self._edata[message_func.in_field])
        lhs, rhs, op = _TARGET[message_func.lhs], _TARGET[message_func.rhs], \
            message_func.binary_op
        lf, rf = message_func.lhs_field, message_func.rhs_field
        if (lhs, rhs) == ("e", "u") and op in ("add", "mul"):  # commutative: swap sides
            lhs, rhs, lf, rf = rhs, lhs, rf, lf
        if (lhs, rhs) == ("u", "e") and op in _SPMM_OPS:
            return self._spmm(op, reduce, self._src[lf], self._edata[rf])
        # messages that read v (or dot): edge values first, then a local reduce
        m = self._sddmm(op, lhs, rhs, lf, rf)
        return self._local_spmm("copy_rhs", reduce, None, m)

    def apply_edges(self, func, edges: Any = None, etype: Any = None) -> None:
        """Builtin edge function over all local edges into ``edata[func.out_field]``."""
        if edges is not None and not is_all(edges) or not isinstance(func, fn.BuiltinFunction):
            self._refuse(f"apply_edges only with a dgl.function builtin on all edges; a layer "
                         f"passed {func!r}")
        if func.name == "copy_u":
            out = self._sddmm("copy_lhs", "u", "v", func.in_field, None)
        elif func.name == "copy_e":
            out = self._edata[func.in_field]
        else:
            out = self._sddmm(func.binary_op, _TARGET[func.lhs], _TARGET[func.rhs],
                              func.lhs_field, func.rhs_field)
        self._edata[func.out_field] = out

    def fused_attention_ok(self) -> bool:
        """Whether GATConv should run the fused SAR attention (``sar`` mode, remote rows)."""
        return self._rt.mode == "sar" and self._plan.any_remote

    # --- dispatch ---------------------------------------------------------------------------

    def _fetch_full(self, x: torch.Tensor) -> torch.Tensor:
        """Local rows followed by every halo row (one-shot mode)."""
        return torch.cat([x, HaloFetch.apply(self._rt, x)])

    def _spmm(self, op: str, red: str, u: torch.Tensor, e: Optional[torch.Tensor]):
        mode = self._rt.mode
        if not self._plan.any_remote or mode == "one_shot":
            uf = self._fetch_full(u) if self._plan.any_remote else u
            return _zero_inf(dgl.ops.gspmm(self._plan.local_block(), op, red, uf,
                                           None if op == "copy_lhs" else e), red)
        spec, e = OpSpec("spmm", op, red), None if op == "copy_lhs" else e
        out = ShardOp.apply(self._rt, spec, u, None, e)
        if self._rt.rebuild is not None:
            self._rt.rebuild.note(out, spec, u, e)
        return out

    def _local_spmm(self, op: str, red: str, u, e: torch.Tensor) -> torch.Tensor:
        return _zero_inf(dgl.ops.gspmm(self._plan.local_block(), op, red, u, e), red)

    def _sddmm(self, op: str, lhs: str, rhs: str, lf: str, rf: Optional[str]) -> torch.Tensor:

        def get(target: str, field: Optional[str]):
            if field is None:
                return None
            return self._edata[field] if target == "e" else self._src[field]

        a, b = get(lhs, lf), get(rhs, rf)
        uses_u = lhs == "u" or (b is not None and rhs == "u")
        if not uses_u or not self._plan.any_remote or self._rt.mode == "one_shot":
            if self._plan.any_remote and uses_u:
                a = self._fetch_full(a) if lhs == "u" else a
                b = self._fetch_full(b) if rhs == "u" and b is not None else b
            return dgl.ops.gsddmm(self._plan.local_block(), op, a, b, lhs,
                                  rhs if b is not None else "v")
        data = {"u": None, "v": None, "e": None}
        data[lhs] = a
        if b is not None:
            data[rhs] = b
        return ShardOp.apply(self._rt, OpSpec("sddmm", op, lhs=lhs, rhs=rhs), data["u"],
                             data["v"], data["e"])
