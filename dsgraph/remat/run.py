"""The forward of one rematerialized layer call (:class:`Run`): the layer over every group,
then its output runs.

Per group the layer's own forward runs on a :class:`~dsgraph.remat.view.GroupBlock` up to its
aggregation, which folds the group's rows into destination-sized state with the core
(:mod:`dsgraph.seqagg.kernels`) and stops the layer; the rows are dropped. Then the output
runs: the layer once more per chunk of ``chunk_rows`` destination rows, with no source rows,
the aggregation returning the folded result, to produce the output (post-aggregation linear
maps, bias, activation). SAGE mean/gcn and GraphConv over stored features aggregate the raw
rows and apply their linear map in the output run (it commutes with a linear aggregation);
GAT's destination term is computed once, not per group (with ``attn_r`` folded into the
weight). Between forward and backward only the aggregate is kept (INT2 with ``compression``,
:class:`~dsgraph.remat.store.Kept`). Backward: :mod:`dsgraph.remat.backward`.
"""
from __future__ import annotations

import contextlib
import enum
from typing import Optional

import torch
from dgl.nn import GATConv, GraphConv, SAGEConv
from torch import nn

from dsgraph.models.order import aggregate_first
from dsgraph.remat.block import Group, RematBlock
from dsgraph.remat.rows import InputRows
from dsgraph.remat.store import Kept, compressing
from dsgraph.remat.view import Collected, GroupBlock
from dsgraph.seqagg import kernels
from dsgraph.seqagg.gat import dst_term, gat_fused, projection_keepable


class Phase(enum.Enum):
    """What a GroupBlock's aggregation does when the layer reaches it (:meth:`Run.aggregate`)."""

    COLLECT = "collect"  # forward over the groups: fold the rows into the state, stop the layer
    PROBE = "probe"  # no group had edges: the aggregate is zeros of the rows' width
    EMIT = "emit"  # an output run: return the folded aggregate of the chunk's destinations
    PARTIAL = "partial"  # backward over a group: only capture what the layer aggregates


class Run:
    """One call of one layer on a RematBlock: its forward (see module docstring) and the state
    its backward (:func:`dsgraph.remat.backward.backward`) reads."""

    def __init__(self, conv: nn.Module, rb: RematBlock, feat: Optional[torch.Tensor] = None,
                 dst_feat: Optional[torch.Tensor] = None) -> None:
        self.conv, self.rb = conv, rb
        learned = list(rb.source.parameters()) if rb.source is not None else []
        self.params = [p for p in list(conv.parameters()) + learned if p.requires_grad]
        # a later layer's input rows (RematBlock without a source), and their gradient
        self.input = InputRows(feat, rb.chunk_rows) if rb.source is None else None
        # destination rows the caller gave (a relation whose destination type is not its
        # source type: a heterograph's layer), read by position, and their gradient
        self.dst_input = InputRows(dst_feat, rb.chunk_rows) if dst_feat is not None else None
        self.mode = Phase.COLLECT
        self.reduce: Optional[str] = None
        self.state: Optional[kernels.SpmmState] = None
        self.soft: Optional[kernels.SoftmaxState] = None
        self.final: Optional[torch.Tensor] = None  # the aggregate of every destination
        self.emitted: Optional[torch.Tensor] = None  # what an output run's aggregation returns
        self.kept: Optional[Kept] = None  # the aggregate, from forward to backward
        # does what the layer aggregates depend on learnable tensors
        self.src_grad = self.input is not None and self.input.grad
        self.captured: tuple = ()
        self.is_gat = isinstance(conv, GATConv)
        self.er: Optional[torch.Tensor] = None  # GAT: the destination term, computed once
        # GAT with compression: each group's source projection, INT2, from forward to backward
        # (1/16 of its size), so backward does not project the rows again
        self.ft_kept: Optional[Kept] = None
        # GAT with compression: each group's attention logits' source term, exact (a row per
        # source and head), so the attention backward rebuilds is forward's: a logit recomputed
        # from quantized rows would not match the softmax max and denominator kept from forward
        self.el_kept: Optional[list] = None
        # A linear map ahead of a linear aggregation commutes with it: over stored features,
        # aggregating the raw rows first leaves nothing to recompute in backward (the state
        # is num_dst x in_feats instead of num_dst x out_feats).
        self.raw_first = not learned and (
            isinstance(conv, GraphConv)
            or (isinstance(conv, SAGEConv) and conv._aggre_type in ("mean", "gcn")))

    # --- calls from GroupBlock ----------------------------------------------------------------

    def aggregate(self, group: Optional[Group], u: torch.Tensor, reduce: str) -> torch.Tensor:
        """A GroupBlock's copy_u aggregation of rows ``u``: folded into the state (forward),
        only captured (backward), or the folded result (output runs)."""
        if self.mode is Phase.EMIT:
            return self.emitted
        if self.mode is Phase.PROBE:  # no group has edges: the aggregate is zeros of u's width
            self.state, self.reduce = kernels.SpmmState(reduce), reduce
            self.final = u.new_zeros((self.rb.num_dst,) + tuple(u.shape[1:])).detach()
            raise Collected
        if self.mode is Phase.COLLECT:
            if self.state is None:
                self.state, self.reduce = kernels.SpmmState(reduce), reduce
            self.src_grad = self.src_grad or u.requires_grad
            group.first_chunk = kernels.spmm_fold(self.state, group.graph, "copy_lhs",
                                                  u.detach(), None, self.rb.chunk_rows)
        self.captured = (u,)
        raise Collected

    def attend(self, group: Optional[Group], ft, el, er, slope: float) -> torch.Tensor:
        """A GroupBlock's GAT attention, as :meth:`aggregate`."""
        self.slope = slope
        if self.mode is Phase.EMIT:
            return self.emitted
        if self.mode is Phase.COLLECT:
            if self.soft is None:
                self.soft = kernels.SoftmaxState(self.rb.num_dst, ft.shape[1], ft)
                self.ft_shape = tuple(ft.shape[1:])
            self.src_grad = True
            if self.ft_kept is not None:
                self.ft_kept.add(ft.detach())
            if self.el_kept is not None:
                self.el_kept.append(el.detach())
            kernels.attention_fold(self.soft, group.graph, ft.detach(), el.detach(),
                                   er.detach(), slope, self.rb.chunk_rows)
        self.captured = (ft, el, er)
        raise Collected

    # --- running the layer ----------------------------------------------------------------------

    def call(self, group: Optional[Group], x_dst: torch.Tensor,
              dst: Optional[tuple[int, int]] = None) -> Optional[torch.Tensor]:
        """The layer's forward on ``group`` (None: an output run over destination rows ``dst``,
        default all); None if it stopped at the aggregation."""
        rb = self.rb
        rows = torch.zeros((0, x_dst.shape[1]), dtype=x_dst.dtype) if group is None else \
            self.pull_rows(group)
        graph = GroupBlock(self, group, dst)
        try:
            if self.is_gat:
                # the destination term is a constant to the groups and to the output run (its
                # gradient is taken once, at the end of backward): fc on the destination rows
                # runs once per layer, not once per group
                a, b = dst if dst is not None else (0, rb.num_dst)
                return gat_fused(self.conv, (rows, x_dst), graph.attention,
                                 er=None if self.er is None else self.er[a:b])
            with aggregate_first(self.conv, self.raw_first):
                return type(self.conv).forward(self.conv, graph, (rows, x_dst))
        except Collected:
            return None

    def pull_rows(self, group: Group) -> torch.Tensor:
        """The group's input rows (pulled, or a later layer's input read by position)."""
        if self.input is not None:
            return self.input.rows(int(group.rows[0]), int(group.rows[-1]) + 1)
        return self.rb.source.rows(group.ids)

    def dst_chunks(self) -> list[tuple[int, int]]:
        """Destination row ranges of the output runs (``chunk_rows`` at a time)."""
        n, step = self.rb.num_dst, self.rb.chunk_rows
        step = n if step <= 0 else step
        return [(a, min(a + step, n)) for a in range(0, n, step)] or [(0, 0)]

    def pull_dst(self, a: int, b: int) -> torch.Tensor:
        """The layer's input rows of destinations ``[a, b)``."""
        if self.dst_input is not None:
            return self.dst_input.rows(a, b)
        if self.input is not None:
            return self.input.rows(a, b)
        return self.rb.source.rows(self.rb.dst_ids[a:b])

    def grad(self, outputs, inputs: list, grad_outputs) -> tuple:
        """``torch.autograd.grad`` of ``outputs`` w.r.t. ``inputs`` (unused: None); the input
        rows read since the last call get their share of the input's gradient too."""
        leaves = [(rows, a, x) for rows in (self.input, self.dst_input) if rows is not None
                  for a, x in rows.take_leaves()]
        got = torch.autograd.grad(outputs, list(inputs) + [x for _, _, x in leaves],
                                  grad_outputs, allow_unused=True)
        for (rows, a, _), g in zip(leaves, got[len(inputs):]):
            rows.add_grad(a, g)
        return got[:len(inputs)]

    def dst_rows(self, a: int, b: int) -> torch.Tensor:
        """Destination rows ``[a, b)`` for an output run (GAT without a residual map reads
        none: its destination term is passed precomputed)."""
        if self.is_gat and self.conv.res_fc is None:
            return self.dst_stub(b - a)
        return self.pull_dst(a, b)

    def compress(self):
        """The compressor's context for a group's recompute (none without ``compression``)."""
        cfg = self.rb.compression
        if not compressing(cfg):
            return contextlib.nullcontext()
        from dsgraph.compress import compressed
        return compressed(cfg)

    def dst_stub(self, rows: Optional[int] = None) -> torch.Tensor:
        """Zero-stride destination rows (all by default), for runs that never read them: a
        group's run stops at the aggregation, and GAT's destination term is precomputed."""
        rb = self.rb
        return torch.zeros((), dtype=rb.dtype).expand(rb.num_dst if rows is None else rows,
                                                       rb.width)

    def forward(self, for_backward: bool = False) -> torch.Tensor:
        """The layer over every group, then the output runs (``for_backward``: keep what
        backward reads)."""
        # Torch-function modes off: the compressor's (dsgraph.compress) decides how autograd
        # saves are stored, and this pass saves nothing for autograd, so its Python dispatch on
        # each of the thousands of chunk-level calls is pure overhead (~4% of a GAT step).
        with torch._C.DisableTorchFunction():
            return self._forward(for_backward)

    def _forward(self, for_backward: bool) -> torch.Tensor:
        rb = self.rb
        # the layer runs with grad on (inside an autograd Function it is off) only so that the
        # aggregated value tells whether backward must recompute the groups; nothing is saved
        with torch.enable_grad(), torch.autograd.graph.saved_tensors_hooks(_keep, _keep):
            if self.is_gat:
                self.er = torch.cat([dst_term(self.conv, self.pull_dst(a, b)).detach()
                                     for a, b in self.dst_chunks()])
                if for_backward and compressing(rb.compression):
                    self.el_kept = []
                    if projection_keepable(self.conv):
                        self.ft_kept = Kept(rb.compression, torch.Size())
            self.mode = Phase.COLLECT
            for group in rb.groups:
                self.call(group, self.dst_stub())
                self.captured = ()  # the group's rows: folded into the state, not kept
        like = torch.zeros((), dtype=rb.dtype)
        if self.is_gat:
            if self.soft is None:  # no edges: no group ran
                width = self.conv._num_heads
                self.soft = kernels.SoftmaxState(rb.num_dst, width, like)
                self.ft_shape = (width, self.conv._out_feats)
            self.final = kernels.attention_finish(self.soft, rb.num_dst, self.ft_shape, like)
        elif self.state is None or self.state.acc is None:
            self.mode = Phase.PROBE
            with torch.no_grad():
                self.call(None, self.dst_stub())
        else:
            self.final = kernels.spmm_finish(self.state, rb.num_dst, (), rb.in_deg, rb.dtype)
        # The output runs go over destination rows in chunks: their rows are pulled now, and
        # again in backward, never alive across the groups or the later layers.
        self.mode = Phase.EMIT
        out: Optional[torch.Tensor] = None
        keep = Kept(self.rb.compression, self.final.shape)
        chunks = self.dst_chunks()
        for a, b in chunks:
            self.emitted = self.final[a:b]
            o = self.call(None, self.dst_rows(a, b).detach(), (a, b)).detach()
            if len(chunks) == 1:
                out = o
            else:  # written into place: chunks and their concatenation are never both alive
                if out is None:
                    out = o.new_empty((rb.num_dst,) + tuple(o.shape[1:]))
                out[a:b] = o
            del o
            keep.add(self.emitted)
        self.final, self.kept = None, keep
        for rows in (self.input, self.dst_input):
            if rows is not None:
                rows.keep(self.rb.compression if for_backward else None, for_backward)
        # The accumulators are the aggregate itself (or, for GAT, its unnormalized sum): with
        # INT2 the kept copy replaces them, and backward reads only the small softmax terms
        # (max, denominator) and a max/min aggregation's winners.
        if self.state is not None:
            self.state.acc = None
        if self.soft is not None:
            self.soft.acc = None
        self.emitted = None
        self.captured = ()
        return out


def _keep(t):
    # the identity pack/unpack: saves inside forward bypass any outer hooks (the compressor)
    return t
