"""``GraphView``: rows aggregated group by group, presented to unmodified ``dgl.nn`` layers as a
DGL graph.

The surface the supported layers (:mod:`dsgraph.seqagg.layers`) use: node and edge data with
``local_scope``, node and edge counts, degrees, and builtin ``update_all``, whose copy_u
aggregations go to the subclass's fold (SAR's ring, a rematerialized block's groups). Any other
``DGLGraph`` attribute is refused with one error naming the supported layers.
"""
from __future__ import annotations

import abc
import contextlib
from typing import Any, Iterator, NoReturn, Optional

import dgl.function as fn
import torch

from dsgraph.errors import UserError
from dsgraph.seqagg.layers import SUPPORTED

REDUCERS = ("sum", "mean", "max", "min")


class UnsupportedGraphOp(UserError, AttributeError):
    """A layer used a DGLGraph feature a graph view does not provide (``hasattr`` sees False)."""


class GraphView(abc.ABC):
    """Base of the graph views (see module docstring). Subclasses give ``label`` (who refuses,
    in errors) and the counts, degrees and fold; ``homogeneous`` views have one node set
    (``srcdata`` is ``dstdata``)."""

    is_block = False
    label = "graph views"

    def __init__(self, homogeneous: bool = False) -> None:
        self._src: dict[str, torch.Tensor] = {}
        self._dst: dict[str, torch.Tensor] = self._src if homogeneous else {}
        self._edata: dict[str, torch.Tensor] = {}

    srcdata = property(lambda self: self._src, doc="Data of the source nodes.")
    dstdata = property(lambda self: self._dst, doc="Data of the destination nodes.")
    edata = property(lambda self: self._edata, doc="Edge data.")
    device = property(lambda self: torch.device("cpu"), doc="Always the CPU.")
    idtype = property(lambda self: torch.int64, doc="Integer type of ids.")

    # --- what a subclass supplies ---------------------------------------------------------------

    @abc.abstractmethod
    def _counts(self) -> tuple[int, int, int]:
        """(source nodes, destination nodes, edges)."""

    @abc.abstractmethod
    def _degrees(self, out: bool) -> torch.Tensor:
        """In-degrees of the destination nodes (``out``: out-degrees of the sources)."""

    @abc.abstractmethod
    def _fold(self, u: torch.Tensor, reduce: str) -> torch.Tensor:
        """``copy_u`` of source rows ``u`` aggregated by ``reduce`` into the destinations."""

    def _fold_message(self, message_func: Any, reduce: str) -> torch.Tensor:
        """Any other builtin message aggregated by ``reduce`` (refused unless overridden)."""
        self._refuse(f"aggregations of copy_u messages only; a layer passed {message_func!r}")

    # --- the DGLGraph surface -------------------------------------------------------------------

    def num_src_nodes(self, ntype: Optional[str] = None) -> int:
        """Source nodes."""
        return self._counts()[0]

    def num_dst_nodes(self, ntype: Optional[str] = None) -> int:
        """Destination nodes."""
        return self._counts()[1]

    def num_edges(self, etype: Optional[str] = None) -> int:
        """Edges (layers test it for emptiness)."""
        return self._counts()[2]

    number_of_src_nodes = num_src_nodes
    number_of_dst_nodes = num_dst_nodes
    number_of_edges = num_edges

    def in_degrees(self, v: Any = None) -> torch.Tensor:
        """In-degrees of the destination nodes (of ``v``, if given)."""
        d = self._degrees(out=False)
        return d if v is None else d[torch.as_tensor(v, dtype=torch.int64)]

    def out_degrees(self, u: Any = None) -> torch.Tensor:
        """Out-degrees of the source nodes (of ``u``, if given)."""
        d = self._degrees(out=True)
        return d if u is None else d[torch.as_tensor(u, dtype=torch.int64)]

    @contextlib.contextmanager
    def local_scope(self) -> Iterator[None]:
        """Changes to node/edge data inside are discarded on exit (as in DGL)."""
        saved = self._src, self._dst, self._edata
        self._src, self._edata = dict(saved[0]), dict(saved[2])
        self._dst = self._src if saved[1] is saved[0] else dict(saved[1])
        try:
            yield
        finally:
            self._src, self._dst, self._edata = saved

    def update_all(self, message_func: Any, reduce_func: Any, apply_node_func: Any = None) -> None:
        """Builtin message + builtin reduce into ``dstdata[reduce_func.out_field]``."""
        if apply_node_func is not None or not isinstance(reduce_func, fn.BuiltinFunction) \
                or not isinstance(message_func, fn.BuiltinFunction):
            self._refuse("dgl.function builtin message/reduce functions only (no Python UDFs "
                         f"or apply_node_func); a layer passed {message_func!r}, {reduce_func!r}")
        red = reduce_func.name
        if red not in REDUCERS:
            self._refuse(f"unsupported reducer {red!r}; expected one of {REDUCERS}")
        if reduce_func.msg_field != message_func.out_field:
            self._refuse(f"reduce reads {reduce_func.msg_field!r} but the message writes "
                         f"{message_func.out_field!r}")
        if message_func.name == "copy_u":
            out = self._fold(self._src[message_func.in_field], red)
        else:
            out = self._fold_message(message_func, red)
        self._dst[reduce_func.out_field] = out

    def _refuse(self, what: str) -> NoReturn:
        raise UserError(f"{self.label}: {what} (supported layers: {SUPPORTED})")

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        raise UnsupportedGraphOp(f"{self.label}: a layer called DGLGraph.{name}, which this "
                                 f"graph does not offer (supported layers: {SUPPORTED})")
