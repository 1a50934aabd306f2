"""``SarGraph``: a DGL-graph-like view of one worker's partition for unmodified ``dgl.nn`` layers.

Nodes are this worker's own nodes (a homogeneous graph: ``srcdata`` is ``dstdata`` is
``ndata``), edges are their in-edges in local order (grouped by the source's part). Builtin
``update_all``/``apply_edges`` that read source features run through the SAR ring (or the
one-shot halo fetch); everything else (edge softmax, copy_e reductions) is local, because every
in-edge of a node lives with the node. With nothing remote anywhere the calls go straight to
DGL on the local graph: no copies, no custom autograd.

Layers known to work: GraphConv, SAGEConv (mean, gcn, pool), GATConv (``edge_softmax`` reads
``graph._graph``, which is the local block's graph index; in ``sar`` mode a model prepared by
``dsgraph.sar.model.prepare_model`` runs GATConv's attention as one fused op instead, see
``dsgraph.sar.attention``). See ``dsgraph.sar.model``.
"""
from __future__ import annotations

import contextlib
from typing import Any, Optional

import dgl
import dgl.function as fn
import torch
from dgl.base import is_all

from dsgraph.errors import UserError
from dsgraph.sar.ops import HaloFetch, OpSpec, Runtime, ShardOp

_TARGET = {0: "u", 1: "v", 2: "e"}
_REDUCERS = ("sum", "mean", "max", "min")
_SPMM_OPS = ("add", "sub", "mul", "div")


def _zero_inf(t: torch.Tensor, red: str) -> torch.Tensor:
    """As DGLGraph.update_all: max/min of no messages is 0, not -inf/inf."""
    return t.masked_fill(torch.isinf(t), 0.0) if red in ("max", "min") else t


class UnsupportedGraphOp(UserError, AttributeError):
    """A layer used a DGLGraph feature SAR graphs do not provide (``hasattr`` sees False)."""


class SarGraph:
    """The graph one SAR worker hands to its model (see module docstring)."""

    is_block = False

    def __init__(self, rt: Runtime) -> None:
        self._rt = rt
        self._plan = rt.plan
        self._ndata: dict[str, torch.Tensor] = {}
        self._edata: dict[str, torch.Tensor] = {}

    # --- DGLGraph surface used by dgl.nn layers ------------------------------------------------

    @property
    def ndata(self) -> dict:
        """Node data of the local nodes (also ``srcdata`` and ``dstdata``)."""
        return self._ndata

    srcdata = ndata
    dstdata = ndata

    @property
    def edata(self) -> dict:
        """Data of local edges, in local edge order."""
        return self._edata

    @property
    def device(self) -> torch.device:
        """Always the CPU."""
        return torch.device("cpu")

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
        """Number of local nodes."""
        return self._plan.num_local

    number_of_nodes = num_src_nodes = number_of_src_nodes = num_nodes
    num_dst_nodes = number_of_dst_nodes = num_nodes

    def num_edges(self, etype: Optional[str] = None) -> int:
        """Number of local edges (the in-edges of local nodes)."""
        return self._plan.num_edges

    number_of_edges = num_edges

    def in_degrees(self, v: Any = None) -> torch.Tensor:
        """Global in-degree of local nodes (all of a node's in-edges are local)."""
        d = self._plan.in_degrees
        return d if v is None else d[torch.as_tensor(v, dtype=torch.int64)]

    def out_degrees(self, u: Any = None) -> torch.Tensor:
        """Global out-degree of local nodes (summed over every part at set-up)."""
        d = self._plan.out_degrees
        return d if u is None else d[torch.as_tensor(u, dtype=torch.int64)]

    @contextlib.contextmanager
    def local_scope(self):
        """Changes to node/edge data inside the block are discarded on exit (as in DGL)."""
        saved = self._ndata, self._edata
        self._ndata, self._edata = dict(saved[0]), dict(saved[1])
        try:
            yield
        finally:
            self._ndata, self._edata = saved

    def update_all(self, message_func, reduce_func, apply_node_func=None) -> None:
        """Builtin message + builtin reduce into ``dstdata[reduce_func.out_field]``."""
        if apply_node_func is not None or not isinstance(reduce_func, fn.BuiltinFunction) \
                or not isinstance(message_func, fn.BuiltinFunction):
            raise UserError("SAR graphs support only dgl.function builtin message/reduce "
                            "functions (no Python UDFs or apply_node_func); a layer passed "
                            f"{message_func!r}, {reduce_func!r}")
        red = reduce_func.name
        if red not in _REDUCERS:
            raise UserError(f"SAR graphs: unsupported reducer {red!r}; expected one of {_REDUCERS}")
        if reduce_func.msg_field != message_func.out_field:
            raise UserError(f"SAR graphs: reduce reads {reduce_func.msg_field!r} but the message "
                            f"writes {message_func.out_field!r}")
        name = message_func.name
        if name == "copy_u":
            out = self._spmm("copy_lhs", red, self._ndata[message_func.in_field], None)
        elif name == "copy_e":
            out = self._local_spmm("copy_rhs", red, None, self._edata[message_func.in_field])
        else:
            lhs, rhs, op = _TARGET[message_func.lhs], _TARGET[message_func.rhs], \
                message_func.binary_op
            lf, rf = message_func.lhs_field, message_func.rhs_field
            if (lhs, rhs) == ("e", "u") and op in ("add", "mul"):  # commutative: swap sides
                lhs, rhs, lf, rf = rhs, lhs, rf, lf
            if (lhs, rhs) == ("u", "e") and op in _SPMM_OPS:
                out = self._spmm(op, red, self._ndata[lf], self._edata[rf])
            else:  # messages that read v (or dot): edge values first, then a local reduce
                m = self._sddmm(op, lhs, rhs, lf, rf)
                out = self._local_spmm("copy_rhs", red, None, m)
        self._ndata[reduce_func.out_field] = out

    def apply_edges(self, func, edges: Any = None, etype: Any = None) -> None:
        """Builtin edge function over all local edges into ``edata[func.out_field]``."""
        if edges is not None and not is_all(edges) or not isinstance(func, fn.BuiltinFunction):
            raise UserError("SAR graphs support apply_edges only with a dgl.function builtin on "
                            f"all edges; a layer passed {func!r}")
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

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        raise UnsupportedGraphOp(
            f"SAR graphs do not implement DGLGraph.{name}; the layer that called it is not "
            "supported in full-batch SAR training (supported: GraphConv, SAGEConv "
            "mean/gcn/pool, GATConv)")

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
            return self._edata[field] if target == "e" else self._ndata[field]

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
