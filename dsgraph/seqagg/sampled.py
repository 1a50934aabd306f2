"""Sampled rematerialization: the first layers of a mini-batch aggregated one group of source
rows at a time and rebuilt in backward, with unmodified ``dgl.nn`` layers.

A :class:`RematBlock` stands in for the batch's first block (and, with
``sampled.remat_layers`` > 1, for the next ones: their rows are the previous layer's output, read
by position in runs of ``sar.chunk_rows`` rows, kept INT2 for backward with ``compression``, and
their gradient gathered into the input's). Its source nodes are grouped by
the partition that owns them (the trainer's own first) and each partition's rows are cut into
groups of at most ``sar.chunk_rows`` rows; the model receives a zero-stride placeholder instead
of their features. Layers installed by :func:`install` (SAGEConv mean/gcn/pool, GraphConv,
GATConv) then run as one autograd Function (:class:`_RematFn`) that calls the layer's own
forward on a :class:`GroupBlock` per group:

* forward, per group: pull its rows (:class:`RowSource`), run the layer up to its aggregation,
  fold the group into destination-sized state with the shared core
  (:mod:`dsgraph.seqagg.kernels`), drop the rows. Then the output runs: the layer once more
  per chunk of ``sar.chunk_rows`` destination rows, with no source rows, the aggregation
  returning the folded result, to produce the output (post-aggregation linear maps, bias,
  activation). SAGE mean/gcn and GraphConv over stored features aggregate the raw rows and
  apply their linear map in the output run (it commutes with a linear aggregation); GAT's
  destination term is computed once, not per group (with ``attn_r`` folded into the weight:
  a heads-wide map of the destination rows, not their projection).
* between forward and backward only the aggregate is kept (INT2-quantized when
  ``compression`` is enabled); destination rows are pulled again where needed.
* backward: the output runs again under autograd give the gradient of the aggregate. If what
  the layer aggregated needs no gradient (stored features under a linear aggregation) that is
  all: no source row is pulled again. Otherwise each group is pulled and recomputed under
  autograd (with ``compression`` hooks if enabled) and gets its gradient from the core: the
  reversed edges for sum/mean, the chunks that won for max/min, GAT's fused attention with
  its softmax term read off the aggregate (``D_i = <g_i, out_i>``: no extra pass). GAT's
  source side (a plain ``fc_src`` projection, DGL's) is not run under autograd: its
  gradients (weight, ``attn_l``, the rows) come from the attention's by
  :func:`~dsgraph.seqagg.gat.source_grads`, with the rows pulled for the weight gradient. With
  ``compression``, GAT keeps each group's source projection INT2 from forward, takes ``D``
  from it in one more pass (read off the INT2 aggregate, the logits' gradients would carry
  its quantization noise) that also leaves the per-edge dots for the gradient pass, which so
  never projects or decodes the group again; and it keeps the logits' source term exact, so
  the attention backward rebuilds matches the softmax statistics of forward. Where the
  output map adds only a bias, GAT's aggregate gradient is the incoming gradient itself
  (checked chunk by chunk), not a copy.

Only destination-sized tensors live across groups. Layer-0 feature or attention dropout would
draw different masks per group run and is refused.
"""
from __future__ import annotations

import contextlib
import dataclasses
import types
from typing import Any, Callable, Iterable, Optional, Protocol

import dgl
import dgl.function as fn
import torch
from dgl.nn import GATConv, GraphConv, SAGEConv
from torch import nn

from dsgraph.errors import UserError
from dsgraph.seqagg import kernels
from dsgraph.seqagg.chunks import GroupGraph
from dsgraph.seqagg.gat import dst_term, fusable, gat_fused, projection_keepable, \
    source_grads, source_projection, source_weight

SUPPORTED = "GraphConv, SAGEConv (aggregator mean, gcn or pool), GATConv"


class RowSource(Protocol):
    """Where a group's input rows come from."""

    def rows(self, ids: torch.Tensor) -> torch.Tensor:
        """Input rows of global node ids ``ids`` (differentiable if learnable)."""

    def parameters(self) -> Iterable[torch.Tensor]:
        """Learnable tensors the rows depend on (none for stored features)."""


class FeatureRows:
    """Stored features: ``reader[ids]`` (a DistTensor, ``CachedFeatures`` or a tensor),
    optionally cast to ``dtype``."""

    def __init__(self, reader: Any, dtype: Optional[torch.dtype] = None) -> None:
        self.reader, self.dtype = reader, dtype

    def rows(self, ids: torch.Tensor) -> torch.Tensor:
        """Rows of ``ids``."""
        x = self.reader[ids]
        return x if self.dtype is None else x.to(self.dtype)

    def parameters(self) -> list:
        """None: stored features are not learned."""
        return []


class EmbeddingRows:
    """Learnable input embeddings: ``module(ids)`` (an ``nn.Embedding`` over global ids, say)."""

    def __init__(self, module: nn.Module) -> None:
        self.module = module

    def rows(self, ids: torch.Tensor) -> torch.Tensor:
        """Embedding rows of ``ids``."""
        return self.module(ids)

    def parameters(self) -> list:
        """The module's parameters."""
        return list(self.module.parameters())


class Group:
    """Source rows of one owning partition (all, or a chunk of them) and their edges."""

    __slots__ = ("part", "rows", "ids", "graph", "first_chunk")

    def __init__(self, part: int, rows: torch.Tensor, ids: torch.Tensor, graph: GroupGraph) -> None:
        self.part, self.rows, self.ids, self.graph = part, rows, ids, graph
        self.first_chunk = 0


class RematBlock:
    """A sampled block whose source rows are pulled and aggregated one group at a time: the rows
    of one owning partition (the trainer's own first), cut into groups of at most
    ``chunk_rows`` rows (0: one group per partition). ``owner(ids)`` gives the partition of
    global ids.

    With ``source`` None the rows are the layer's input (a later layer, fed the previous
    layer's output): the groups are consecutive runs of ``chunk_rows`` rows by position."""

    def __init__(self, block, source: Optional[RowSource],
                 owner: Optional[Callable[[torch.Tensor], torch.Tensor]] = None,
                 own_part: int = 0, chunk_rows: int = 0, compression: Any = None,
                 width: Optional[int] = None, dtype: Optional[torch.dtype] = None) -> None:
        self.block, self.source, self.chunk_rows = block, source, chunk_rows
        self.compression = compression
        self.num_src, self.num_dst = block.num_src_nodes(), block.num_dst_nodes()
        self.num_edges = block.num_edges()
        if source is None:  # rows by position: a DGL block's destinations are its first sources
            self.src_ids, self.dst_ids = torch.arange(self.num_src), torch.arange(self.num_dst)
            owner = None
        else:
            self.src_ids = block.srcdata[dgl.NID]
            self.dst_ids = block.dstdata[dgl.NID]
        self.in_deg = block.in_degrees()
        # out-edges of every source row, contiguous per row: a group's edges are its rows'
        # segments, gathered without sorting the block's edges
        indptr, dst, _ = block.adj_tensors("csr")
        indptr, dst = indptr.long(), dst.long()
        self.out_deg = indptr[1:] - indptr[:-1]
        part = owner(self.src_ids).long() if owner is not None else \
            torch.full((self.num_src,), own_part, dtype=torch.int64)
        parts = torch.unique(part).tolist()
        order = [own_part] * (own_part in parts) + [p for p in parts if p != own_part]
        self.groups: list[Group] = []
        for p in order:
            rows = (part == p).nonzero().squeeze(1)
            # Groups of at most chunk_rows rows: one is pulled, projected and folded at a time,
            # so the largest partition's share of the batch is never alive at once.
            step = chunk_rows if chunk_rows > 0 else max(rows.numel(), 1)
            for a in range(0, rows.numel(), step):
                piece = rows[a:a + step]
                count = self.out_deg[piece]
                n = int(count.sum())
                if n == 0:
                    continue  # these rows reach no destination: never pulled
                first = torch.cumsum(count, 0) - count  # each row's first edge in the group
                edges = torch.repeat_interleave(indptr[piece] - first, count) + torch.arange(n)
                src = torch.repeat_interleave(torch.arange(piece.numel()), count)
                self.groups.append(Group(p, piece, self.src_ids[piece],
                                         GroupGraph(src, dst[edges], piece.numel(), self.num_dst,
                                                    cache=False)))
        self.width, self.dtype = width, dtype

    def placeholder(self, width: int, dtype: torch.dtype) -> torch.Tensor:
        """What the model gets as the block's input features: the right shape, no memory."""
        self.width, self.dtype = width, dtype
        return torch.zeros((), dtype=dtype).expand(self.num_src, width)

    def num_dst_nodes(self) -> int:
        """Destination nodes of the block."""
        return self.num_dst

    number_of_dst_nodes = num_dst_nodes

    def num_src_nodes(self) -> int:
        """Source nodes of the block."""
        return self.num_src

    number_of_src_nodes = num_src_nodes


class _Collected(Exception):
    """Raised by a GroupBlock's aggregation to stop the layer once the group is folded in."""


class GroupBlock:
    """The block a layer sees during one group's run: DGL-block surface over the group's rows
    (``srcdata``) and every destination; its aggregation calls go to the run (:class:`_Run`)."""

    is_block = True

    def __init__(self, run: "_Run", group: Optional[Group],
                 dst: Optional[tuple[int, int]] = None) -> None:
        self._run, self._group = run, group
        # destination rows [a, b) this run computes (output runs go in row chunks)
        self._dst_range = dst if dst is not None else (0, run.rb.num_dst)
        self._src: dict = {}
        self._dst: dict = {}
        self._edata: dict = {}

    srcdata = property(lambda self: self._src, doc="Data of the group's source rows.")
    dstdata = property(lambda self: self._dst, doc="Data of the destination nodes.")
    edata = property(lambda self: self._edata, doc="Edge data (unused by supported layers).")
    device = property(lambda self: torch.device("cpu"), doc="Always the CPU.")
    idtype = property(lambda self: torch.int64, doc="Integer type of ids.")

    def num_src_nodes(self, ntype: Optional[str] = None) -> int:
        """Rows of this group (0 in the output run)."""
        return 0 if self._group is None else self._group.graph.num_src

    number_of_src_nodes = num_src_nodes

    def num_dst_nodes(self, ntype: Optional[str] = None) -> int:
        """Destination nodes of this run (all of the block's, or an output run's chunk)."""
        a, b = self._dst_range
        return b - a

    number_of_dst_nodes = num_dst_nodes

    def num_edges(self, etype: Optional[str] = None) -> int:
        """Edges of the whole block (layers test it for emptiness)."""
        return self._run.rb.num_edges

    number_of_edges = num_edges

    def in_degrees(self, v: Any = None) -> torch.Tensor:
        """In-degree in the whole block of this run's destination nodes."""
        a, b = self._dst_range
        d = self._run.rb.in_deg[a:b]
        return d if v is None else d[torch.as_tensor(v, dtype=torch.int64)]

    def out_degrees(self, u: Any = None) -> torch.Tensor:
        """Out-degree in the whole block of this group's rows."""
        rb = self._run.rb
        d = torch.zeros(0, dtype=rb.out_deg.dtype) if self._group is None else \
            rb.out_deg[self._group.rows]
        return d if u is None else d[torch.as_tensor(u, dtype=torch.int64)]

    @contextlib.contextmanager
    def local_scope(self):
        """Changes to node/edge data inside the block are discarded on exit (as in DGL)."""
        saved = self._src, self._dst, self._edata
        self._src, self._dst, self._edata = dict(saved[0]), dict(saved[1]), dict(saved[2])
        try:
            yield
        finally:
            self._src, self._dst, self._edata = saved

    def update_all(self, message_func, reduce_func, apply_node_func=None) -> None:
        """``copy_u`` + sum/mean/max/min, folded over the groups by the core."""
        if apply_node_func is not None or not isinstance(message_func, fn.BuiltinFunction) \
                or message_func.name != "copy_u" \
                or not isinstance(reduce_func, fn.BuiltinFunction) \
                or reduce_func.name not in ("sum", "mean", "max", "min"):
            raise UserError("sampled.rematerialize supports aggregations of copy_u messages "
                            f"with sum/mean/max/min (layers: {SUPPORTED}); a layer passed "
                            f"{message_func!r}, {reduce_func!r}")
        self._dst[reduce_func.out_field] = self._run.aggregate(
            self._group, self._src[message_func.in_field], reduce_func.name)

    def attention(self, ft: torch.Tensor, el: torch.Tensor, er: torch.Tensor,
                  slope: float) -> torch.Tensor:
        """GAT's fused attention + aggregation over the groups (see dsgraph.seqagg.gat)."""
        return self._run.attend(self._group, ft, el, er, slope)

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        raise UserError(f"sampled.rematerialize: a layer called DGLBlock.{name}, which a "
                        f"rematerialized block does not offer (supported layers: {SUPPORTED})")


class _Run:
    """One call of one layer on a RematBlock: its forward and backward (see module docstring)."""

    def __init__(self, conv: nn.Module, rb: RematBlock,
                 feat: Optional[torch.Tensor] = None) -> None:
        self.conv, self.rb = conv, rb
        learned = list(rb.source.parameters()) if rb.source is not None else []
        self.params = [p for p in list(conv.parameters()) + learned if p.requires_grad]
        # a later layer's input rows (RematBlock without a source), and their gradient
        self.input = _InputRows(feat, rb.chunk_rows) if rb.source is None else None
        self.mode = "collect"
        self.reduce: Optional[str] = None
        self.state: Optional[kernels.SpmmState] = None
        self.soft: Optional[kernels.SoftmaxState] = None
        self.final: Optional[torch.Tensor] = None  # the aggregate of every destination
        self.emitted: Optional[torch.Tensor] = None  # what an output run's aggregation returns
        self.kept: Optional[_Kept] = None  # the aggregate, from forward to backward
        # does what the layer aggregates depend on learnable tensors
        self.src_grad = self.input is not None and self.input.grad
        self.captured: tuple = ()
        self.is_gat = isinstance(conv, GATConv)
        self.er: Optional[torch.Tensor] = None  # GAT: the destination term, computed once
        # GAT with compression: each group's source projection, INT2, from forward to backward
        # (1/16 of its size), so backward does not project the rows again
        self.ft_kept: Optional[_Kept] = None
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
        if self.mode == "emit":
            return self.emitted
        if self.mode == "probe":  # no group has edges: the aggregate is zeros of u's width
            self.state, self.reduce = kernels.SpmmState(reduce), reduce
            self.final = u.new_zeros((self.rb.num_dst,) + tuple(u.shape[1:])).detach()
            raise _Collected
        if self.mode == "collect":
            if self.state is None:
                self.state, self.reduce = kernels.SpmmState(reduce), reduce
            self.src_grad = self.src_grad or u.requires_grad
            group.first_chunk = kernels.spmm_fold(self.state, group.graph, "copy_lhs",
                                                  u.detach(), None, self.rb.chunk_rows)
        self.captured = (u,)
        raise _Collected

    def attend(self, group: Optional[Group], ft, el, er, slope: float) -> torch.Tensor:
        self.slope = slope
        if self.mode == "emit":
            return self.emitted
        if self.mode == "collect":
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
        raise _Collected

    # --- running the layer ----------------------------------------------------------------------

    def _call(self, group: Optional[Group], x_dst: torch.Tensor,
              dst: Optional[tuple[int, int]] = None) -> Optional[torch.Tensor]:
        """The layer's forward on ``group`` (None: an output run over destination rows ``dst``,
        default all); None if it stopped at the aggregation."""
        rb = self.rb
        rows = torch.zeros((0, x_dst.shape[1]), dtype=x_dst.dtype) if group is None else \
            self._rows(group)
        graph = GroupBlock(self, group, dst)
        try:
            if self.is_gat:
                # the destination term is a constant to the groups and to the output run (its
                # gradient is taken once, at the end of backward): fc on the destination rows
                # runs once per layer, not once per group
                a, b = dst if dst is not None else (0, rb.num_dst)
                return gat_fused(self.conv, (rows, x_dst), graph.attention,
                                 er=None if self.er is None else self.er[a:b])
            with _aggregate_first(self.conv, self.raw_first):
                return type(self.conv).forward(self.conv, graph, (rows, x_dst))
        except _Collected:
            return None

    def _rows(self, group: Group) -> torch.Tensor:
        """The group's input rows (pulled, or a later layer's input read by position)."""
        if self.input is not None:
            return self.input.rows(int(group.rows[0]), int(group.rows[-1]) + 1)
        return self.rb.source.rows(group.ids)

    def _dst_chunks(self) -> list[tuple[int, int]]:
        """Destination row ranges of the output runs (``chunk_rows`` at a time)."""
        n, step = self.rb.num_dst, self.rb.chunk_rows
        step = n if step <= 0 else step
        return [(a, min(a + step, n)) for a in range(0, n, step)] or [(0, 0)]

    def _pull_dst(self, a: int, b: int) -> torch.Tensor:
        if self.input is not None:
            return self.input.rows(a, b)
        return self.rb.source.rows(self.rb.dst_ids[a:b])

    def _grad(self, outputs, inputs: list, grad_outputs) -> tuple:
        """``torch.autograd.grad`` of ``outputs`` w.r.t. ``inputs`` (unused: None); the input
        rows read since the last call get their share of the input's gradient too."""
        leaves = self.input.take_leaves() if self.input is not None else []
        got = torch.autograd.grad(outputs, list(inputs) + [x for _, x in leaves], grad_outputs,
                                  allow_unused=True)
        for (a, x), g in zip(leaves, got[len(inputs):]):
            self.input.add_grad(a, g)
        return got[:len(inputs)]

    def _dst_rows(self, a: int, b: int) -> torch.Tensor:
        """Destination rows ``[a, b)`` for an output run (GAT without a residual map reads
        none: its destination term is passed precomputed)."""
        if self.is_gat and self.conv.res_fc is None:
            return self._dst_stub(b - a)
        return self._pull_dst(a, b)

    def _compress(self):
        cfg = self.rb.compression
        if not _compressing(cfg):
            return contextlib.nullcontext()
        from dsgraph.compress import compressed
        return compressed(cfg)

    def _dst_stub(self, rows: Optional[int] = None) -> torch.Tensor:
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
                self.er = torch.cat([dst_term(self.conv, self._pull_dst(a, b)).detach()
                                     for a, b in self._dst_chunks()])
                if for_backward and _compressing(rb.compression):
                    self.el_kept = []
                    if projection_keepable(self.conv):
                        self.ft_kept = _Kept(rb.compression, torch.Size())
            self.mode = "collect"
            for group in rb.groups:
                self._call(group, self._dst_stub())
                self.captured = ()  # the group's rows: folded into the state, not kept
        like = torch.zeros((), dtype=rb.dtype)
        if self.is_gat:
            if self.soft is None:  # no edges: no group ran
                width = self.conv._num_heads
                self.soft = kernels.SoftmaxState(rb.num_dst, width, like)
                self.ft_shape = (width, self.conv._out_feats)
            self.final = kernels.attention_finish(self.soft, rb.num_dst, self.ft_shape, like)
        elif self.state is None or self.state.acc is None:
            self.mode = "probe"
            with torch.no_grad():
                self._call(None, self._dst_stub())
        else:
            self.final = kernels.spmm_finish(self.state, rb.num_dst, (), rb.in_deg, rb.dtype)
        # The output runs go over destination rows in chunks: their rows are pulled now, and
        # again in backward, never alive across the groups or the later layers.
        self.mode = "emit"
        out: Optional[torch.Tensor] = None
        keep = _Kept(self.rb.compression, self.final.shape)
        chunks = self._dst_chunks()
        for a, b in chunks:
            self.emitted = self.final[a:b]
            o = self._call(None, self._dst_rows(a, b).detach(), (a, b)).detach()
            if len(chunks) == 1:
                out = o
            else:  # written into place: chunks and their concatenation are never both alive
                if out is None:
                    out = o.new_empty((rb.num_dst,) + tuple(o.shape[1:]))
                out[a:b] = o
            del o
            keep.add(self.emitted)
        self.final, self.kept = None, keep
        if self.input is not None:
            self.input.keep(self.rb.compression if for_backward else None, for_backward)
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

    def backward(self, gout: torch.Tensor) -> list[Optional[torch.Tensor]]:
        rb, params = self.rb, self.params
        grads: list[Optional[torch.Tensor]] = [None] * len(params)
        if self.input is not None:
            self.input.start_backward()

        kept, self.kept = self.kept, None
        # the aggregate's gradient is needed only where backward revisits the groups. GAT's is
        # the output's own gradient where the output map adds only a bias (DGL's default): then
        # ``gout`` serves as it, and no second destination-sized gradient is allocated.
        g_agg, dsum = None, None
        if self.is_gat:
            gout = gout.contiguous()
            dsum = torch.zeros(kept.shape[0], *kept.shape[1:-1], 1, dtype=kept.dtype)
        elif self.src_grad:
            g_agg = kept.new_zeros()
        self.mode = "emit"
        for i, (a, b) in enumerate(self._dst_chunks()):  # the output runs again, under autograd
            agg = kept.chunk(i)
            self.emitted = agg.detach().requires_grad_(True)
            with torch.enable_grad():
                out = self._call(None, self._dst_rows(a, b), (a, b))
                got = self._grad(out, params + [self.emitted], gout[a:b])
            _accumulate(grads, got[:-1])
            g = got[-1]
            if self.is_gat:
                g = torch.zeros_like(agg) if g is None else g
                if g_agg is not None or not torch.equal(g, gout[a:b]):
                    if g_agg is None:  # the first chunk whose gradient is not gout's
                        g_agg = torch.zeros_like(gout)
                        g_agg[:a] = gout[:a]
                    g_agg[a:b] = g
                if self.el_kept is None:
                    # The softmax term D_i = sum_j a_ij <g_i, ft_j> = <g_i, sum_j a_ij ft_j>
                    # is the gradient's dot with the aggregate: no pass over the groups
                    # computes it (with compression, :meth:`_gat_dsum` does).
                    dsum[a:b] = (g * agg).sum(-1, keepdim=True)
            elif g is not None and g_agg is not None:
                g_agg[a:b] = g
            del out, got, agg, g
        self.emitted, self.captured = None, ()
        if self.is_gat:
            _accumulate(grads, self._gat_backward(gout if g_agg is None else g_agg, dsum))
        elif self.src_grad and rb.groups:
            self.mode = "partial"
            for group in rb.groups:
                with torch.enable_grad(), self._compress():
                    self._call(group, self._dst_stub())
                    (u,) = self.captured
                    self.captured = ()
                    gu = self._spmm_grad(group, u, g_agg)
                    _accumulate(grads, self._grad(u, params, gu))
                del u, gu
        return grads

    def _spmm_grad(self, group: Group, u: torch.Tensor, g_agg: torch.Tensor) -> torch.Tensor:
        rb, gg = self.rb, group.graph
        if self.reduce in ("max", "min"):
            gu, _ = kernels.spmm_minmax_grad(gg, "copy_lhs", self.reduce, u.detach(), None, g_agg,
                                             self.state.winner, group.first_chunk, rb.chunk_rows)
            return gu
        div = None
        if self.reduce == "mean":
            div = rb.in_deg.clamp(min=1).to(g_agg.dtype)[gg.dst.long()]
        return kernels.spmm_linear_grad(gg, "copy_lhs", g_agg, None, tuple(u.shape),
                                        rb.chunk_rows, div)

    def _gat_dsum(self, g_agg: torch.Tensor, kept: Optional[_Kept], el_kept: list,
                  dsum: torch.Tensor) -> list:
        """With compression: the softmax term ``D_i = sum_j a_ij <g_i, ft_j>`` from the groups'
        rows as backward reads them (the kept projection, INT2), not off the INT2 aggregate.

        The logits' gradients are ``a_ij (<g_i, ft_j> - D_i)``: with ``D`` from a separately
        quantized aggregate, their sum over a destination's edges is quantization noise
        instead of zero, which the destination and source terms' gradients pick up (a
        rematerialized output layer lost 6 points of accuracy that way). One more pass over
        the groups, without pulling or projecting rows where the projection is kept. Returns
        per group its chunks' ``<g_i, ft_j>``, which the gradient pass then reads (edges x
        heads: 1/64 of the rows' size at 64 features per head) instead of computing again.
        """
        rb, st = self.rb, self.soft
        dots: list = []
        for i, group in enumerate(rb.groups):
            if kept is not None:
                ft = kept.chunk(i)
            else:
                with torch.no_grad():
                    self._call(group, self._dst_stub())
                ft = self.captured[0].detach()
                self.captured = ()
                if self.input is not None:
                    self.input.take_leaves()  # rows read without grad: no gradient to route
            dots.append([])
            kernels.attention_dsum(dsum, group.graph, ft, el_kept[i], self.er, st.m, st.den,
                                   g_agg, self.slope, rb.chunk_rows, dots=dots[-1])
            del ft
        return dots

    def _gat_source_grads(self, i: int, group: Group, el_kept: Optional[list],
                          dots: Optional[list], g_agg: torch.Tensor, dsum: torch.Tensor,
                          grad_er: torch.Tensor) -> list:
        """One group's gradients where the source side is a plain projection
        (:func:`projection_keepable`): the attention's gradients from the core, then
        :func:`source_grads` instead of the group's rows run again under autograd. The rows
        are pulled for the weight gradient; with compression their projection is not even
        decoded (the softmax-term pass left the per-edge dots and the logits are kept)."""
        conv, params, st = self.conv, self.params, self.soft
        with torch.enable_grad():  # learnable rows (embeddings, a later layer's input) keep a graph
            x = self._rows(group)
        if dots is not None:
            ft = x.new_zeros(()).expand(x.shape[0], *self.ft_shape)  # only its shape is read
        else:
            ft = source_projection(conv, x)
        el = el_kept[i] if el_kept is not None else (ft * conv.attn_l.detach()).sum(-1, True)
        gft, gel = kernels.attention_grads(group.graph, ft, el, self.er, st.m, st.den, g_agg,
                                           dsum, self.slope, self.rb.chunk_rows, grad_er,
                                           dots=dots)
        del ft
        g_w, g_attn, g_x = source_grads(conv, x, gft, gel, x.requires_grad)
        got: list = [None] * len(params)
        for t, g in ((source_weight(conv), g_w), (conv.attn_l, g_attn)):
            k = next((k for k, p in enumerate(params) if p is t), None)
            if k is not None:
                got[k] = g
        if g_x is not None:  # through the rows' own graph to the embeddings / the input
            _accumulate(got, self._grad(x, params, g_x))
        return got

    def _gat_backward(self, g_agg: torch.Tensor, dsum: torch.Tensor):
        rb, params, st = self.rb, self.params, self.soft
        self.mode = "partial"
        grad_er = torch.zeros_like(st.den)
        grads: list[Optional[torch.Tensor]] = [None] * len(params)
        kept, self.ft_kept = self.ft_kept, None
        el_kept, self.el_kept = self.el_kept, None
        dots = self._gat_dsum(g_agg, kept, el_kept, dsum) if el_kept is not None else None
        explicit = projection_keepable(self.conv)
        for i, group in enumerate(rb.groups):
            group_dots = None if dots is None else dots[i]
            if explicit:
                got = self._gat_source_grads(i, group, el_kept, group_dots, g_agg, dsum, grad_er)
                _accumulate(grads, got)
                continue
            with torch.enable_grad(), self._compress():  # the group's rows under autograd
                self._call(group, self._dst_stub())
                ft, el, er = self.captured
                self.captured = ()
                el_fwd = el.detach() if el_kept is None else el_kept[i]
                gft, gel = kernels.attention_grads(group.graph, ft.detach(), el_fwd,
                                                   er.detach(), st.m, st.den, g_agg, dsum,
                                                   self.slope, rb.chunk_rows, grad_er,
                                                   dots=group_dots)
                got = self._grad([ft, el], params, [gft, gel])
            _accumulate(grads, got)
            del ft, el, er, gft, gel, got
        # the destination term's gradient, through its graph rebuilt now (cheaper in memory
        # than keeping the output run's graph, with the destination rows, across the groups)
        for a, b in self._dst_chunks():
            with torch.enable_grad():
                er = dst_term(self.conv, self._pull_dst(a, b))
                got = self._grad(er, params, grad_er[a:b])
            _accumulate(grads, got)
        return grads


def _keep(t):
    return t


def _accumulate(grads: list, got) -> None:
    """Add the gradients ``got`` (None: no contribution) into ``grads`` in place."""
    for i, g in enumerate(got):
        if g is not None:
            grads[i] = g if grads[i] is None else grads[i] + g


class _InputRows:
    """A later layer's input rows, read by position: in forward views of the input; from
    forward to backward the input itself, or with ``compression`` INT2 runs of ``chunk_rows``
    rows (the groups' and destination chunks' grid); in backward leaves whose gradients
    :meth:`add_grad` gathers into the input's."""

    def __init__(self, feat: torch.Tensor, chunk_rows: int) -> None:
        self.grad = feat.requires_grad
        self.shape, self.dtype = feat.shape, feat.dtype
        self.feat: Optional[torch.Tensor] = feat.detach()
        self.step = chunk_rows if chunk_rows > 0 else max(int(feat.shape[0]), 1)
        self.kept: Optional[_Kept] = None
        self.recording = False  # backward: rows are leaves
        self.leaves: list[tuple[int, torch.Tensor]] = []
        self.grad_in: Optional[torch.Tensor] = None

    def keep(self, compression: Any, for_backward: bool) -> None:
        """End of forward: keep the input for backward (INT2 with ``compression``) or drop it."""
        if not for_backward:
            self.feat = None
        elif _compressing(compression):
            self.kept = _Kept(compression, self.shape)
            for a in range(0, self.shape[0], self.step):
                self.kept.add(self.feat[a:a + self.step])
            self.feat = None

    def rows(self, a: int, b: int) -> torch.Tensor:
        """Rows ``[a, b)`` (``a`` on the grid of ``chunk_rows``, ``b - a`` at most one step)."""
        if self.feat is not None:
            x = self.feat[a:b]
        else:
            k = a // self.step
            x = self.kept.chunk(k)[a - k * self.step:b - k * self.step]
        if self.recording and self.grad:
            x = x.detach().requires_grad_(True)
            self.leaves.append((a, x))
        return x

    def start_backward(self) -> None:
        """Rows read from now on are leaves; the input's gradient starts at zero."""
        self.recording = True
        if self.grad:
            self.grad_in = torch.zeros(self.shape, dtype=self.dtype)

    def take_leaves(self) -> list[tuple[int, torch.Tensor]]:
        """The leaves read since the last call."""
        leaves, self.leaves = self.leaves, []
        return leaves

    def add_grad(self, a: int, g: Optional[torch.Tensor]) -> None:
        """Add the gradient of the rows read from ``a`` on."""
        if g is not None:
            self.grad_in[a:a + g.shape[0]] += g

    def take_grad(self) -> Optional[torch.Tensor]:
        """The input's gradient (end of backward); frees what was kept."""
        g, self.grad_in, self.feat, self.kept = self.grad_in, None, None, None
        return g


def _compressing(cfg: Any) -> bool:
    return cfg is not None and bool(getattr(cfg, "enabled", False))


class _Kept:
    """The aggregate kept from forward to backward, in the output runs' row chunks: as is, or
    INT2-quantized when ``compression`` is enabled (it is a saved activation like any other:
    the output map's weight gradient and GAT's softmax term read it)."""

    def __init__(self, compression: Any, shape: torch.Size) -> None:
        self.shape, self.dtype = shape, torch.get_default_dtype()
        self.spec = self.gen = None
        if _compressing(compression):
            from dsgraph.compress import spec_from_config
            self.spec = dataclasses.replace(spec_from_config(compression), projection=1.0)
            self.gen = torch.Generator()
            self.gen.manual_seed(compression.seed * 1_000_003
                                 + int(torch.randint(0, 2 ** 31, (1,)).item()))
        self.parts: list = []

    def add(self, t: torch.Tensor) -> None:
        """Keep the next chunk."""
        self.dtype = t.dtype
        if self.spec is None:
            self.parts.append(t)
        else:
            from dsgraph.compress import quantize
            self.parts.append(quantize(t, self.spec, self.gen))

    def chunk(self, i: int) -> torch.Tensor:
        """Chunk ``i`` (decoded)."""
        if self.spec is None:
            return self.parts[i]
        from dsgraph.compress import dequantize
        return dequantize(self.parts[i])

    def new_zeros(self) -> torch.Tensor:
        """Zeros of the whole aggregate's shape."""
        return torch.zeros(self.shape, dtype=self.dtype)


@contextlib.contextmanager
def _aggregate_first(conv: nn.Module, on: bool):
    """SAGEConv / GraphConv aggregate before their linear map while this is active.

    DGL 2.1 picks the order in ``forward`` by ``_in_feats > _out_feats`` and reads
    ``_out_feats`` nowhere else there, so raising it for the call flips only the order; the
    results agree to rounding (tests/dist/test_sampled_remat.py checks every gradient).
    """
    if not on:
        yield
        return
    out = conv._out_feats
    conv._out_feats = 2 ** 62
    try:
        yield
    finally:
        conv._out_feats = out


class _RematFn(torch.autograd.Function):
    """The layer over all groups as one autograd node (inputs: the layer's input, for a block
    without a row source, and the learnable tensors)."""

    @staticmethod
    def forward(ctx, run: _Run, feat: Optional[torch.Tensor], *params: torch.Tensor):
        ctx.run = run
        return run.forward(for_backward=True)

    @staticmethod
    def backward(ctx, gout: torch.Tensor):
        run, ctx.run = ctx.run, None
        grads = run.backward(gout)
        return (None, run.input.take_grad() if run.input is not None else None, *grads)


def remat_layer(conv: nn.Module, rb: RematBlock,
                feat: Optional[torch.Tensor] = None) -> torch.Tensor:
    """Layer ``conv`` on RematBlock ``rb`` (see the module docstring); ``feat`` is the layer's
    input where ``rb`` has no row source (a later layer)."""
    check_layer(conv)
    if rb.source is None:
        if feat is None or feat.dim() != 2 or feat.shape[0] != rb.num_src:
            raise UserError(f"sampled.rematerialize: a later layer's input must be one tensor "
                            f"of {rb.num_src} rows (the block's sources); got "
                            f"{None if feat is None else tuple(feat.shape)}")
        rb.width, rb.dtype = int(feat.shape[1]), feat.dtype
    run = _Run(conv, rb, feat if rb.source is None else None)
    learns = run.params or (run.input is not None and run.input.grad)
    if not torch.is_grad_enabled() or not learns:
        with torch.no_grad():
            return run.forward()
    return _RematFn.apply(run, feat if run.input is not None else None, *run.params)


def check_layer(conv: nn.Module) -> None:
    """Raise a one-line UserError if ``conv`` cannot run rematerialized."""
    name = type(conv).__name__
    ok = isinstance(conv, (GraphConv, GATConv)) or (
        isinstance(conv, SAGEConv) and conv._aggre_type in ("mean", "gcn", "pool"))
    if not ok:
        raise UserError(f"sampled.rematerialize: the first layer is {name}, which cannot be "
                        f"rematerialized; supported: {SUPPORTED}")
    drop = getattr(conv, "feat_drop", None)
    if conv.training and isinstance(drop, nn.Dropout) and drop.p > 0:
        raise UserError(f"sampled.rematerialize: the first layer ({name}) has feat_drop "
                        f"{drop.p}; rematerialized groups would draw different masks (use 0)")
    if isinstance(conv, GATConv) and not fusable(conv):
        raise UserError("sampled.rematerialize: the first GATConv needs attn_drop 0 in "
                        "training and a non-negative LeakyReLU slope")


def install(model: nn.Module) -> nn.Module:
    """Let the model's SAGEConv/GraphConv/GATConv layers take a RematBlock (they run
    rematerialized on one, as before on anything else). Returns ``model``, changed in place."""
    for mod in model.modules():
        if isinstance(mod, (SAGEConv, GraphConv, GATConv)) and not hasattr(mod, "_remat_prev"):
            prev = mod.forward
            mod._remat_prev = prev

            def forward(self, graph, feat, *args, **kwargs):
                if isinstance(graph, RematBlock):
                    if args or kwargs:
                        raise UserError("sampled.rematerialize: the first layer was called "
                                        "with edge weights or extra arguments")
                    return remat_layer(self, graph, feat)
                return self._remat_prev(graph, feat, *args, **kwargs)
            mod.forward = types.MethodType(forward, mod)
    return model
