"""Chunked kernels of the sequential-aggregation core: fold a group into destination state,
and a group's gradients in backward, ``chunk_rows`` source rows at a time.

Forward state is destination-sized: a sum (``SpmmState``; a mean divides once at the end), a
max/min with the id of the chunk that won each value, or GAT's online softmax
(``SoftmaxState``: running max, denominator and weighted sum, rescaled when the max grows). No
per-edge tensor outlives a chunk. Backward kernels take a group's rows again (SAR refetches them,
sampled training pulls and recomputes them) and return the gradients of those rows.
"""
from __future__ import annotations

import math
import warnings
from typing import Optional

import dgl
import torch

from dsgraph.errors import ConfigError
from dsgraph.seqagg import native
from dsgraph.seqagg.chunks import GroupGraph, chunk_slice

MAX_CHUNKS = 2 ** 15 - 1  # chunk ids of max/min winners are int16
# Below SPARSE_CHUNK edges per destination and from SPARSE_WIDTH values per row, a chunk's
# sum goes in place through torch's sparse addmm_; otherwise DGL's gspmm into a partial result
# is faster (one core, 1.1 edges per destination: width 512 2.0 ms vs 5.0 ms, 256 1.4 vs 2.3,
# 128 1.1 vs 0.5; 6.8 per destination, width 64: 3.4 vs 0.6). SAR's widths (<= 128 in its
# benchmark) stay on gspmm: with the in-place path on its sparse shards, its resident peak rose
# by ~0.5 MB (random graph, N = 4, SAGE). From SPARSE_WIDTH values per row, every chunk after
# the state exists goes in place too, whatever its density: a partial beside the state doubles
# the destination-sized memory, and at width 512 with 2-8 edges per destination neither path
# was consistently faster (one core, measured under load: 2.4-7.4 ms vs 3.2-7.4 ms per chunk).
SPARSE_CHUNK = 2
SPARSE_WIDTH = 256


def _edge_slice(e: Optional[torch.Tensor], gg: GroupGraph, a: int, b: int):
    if e is None:
        return None
    ea, eb = gg.edge_range(a, b)
    return e[ea:eb]


class SpmmState:
    """Destination-sized state of one sum/mean/max/min aggregation over groups."""

    def __init__(self, reduce: str, winner_dtype: torch.dtype = torch.int16) -> None:
        self.reduce = reduce
        self.acc: Optional[torch.Tensor] = None
        self.winner: Optional[torch.Tensor] = None  # max/min: id of the chunk that won
        self.winner_dtype = winner_dtype
        self.next_id = 0  # the next chunk's id (max/min)

    @property
    def minmax(self) -> bool:
        """Whether this is a max/min aggregation."""
        return self.reduce in ("max", "min")


def spmm_fold(state: SpmmState, gg: GroupGraph, op: str, u: torch.Tensor,
              e: Optional[torch.Tensor], chunk_rows: int, row0: int = 0) -> int:
    """Fold ``gspmm(op, reduce)`` of group ``gg`` (rows ``u``, edge values ``e`` in the group's
    edge order) into ``state``, chunk by chunk; return the id of the first chunk folded. ``u``
    may be a piece of the group: its rows ``[row0, row0 + len(u))``."""
    red = "sum" if state.reduce in ("sum", "mean") else state.reduce
    first = state.next_id
    lo, hi = row0, row0 + u.shape[0]
    if red == "sum" and op == "copy_lhs":
        width = math.prod(u.shape[1:])  # values per row
        for a, b in gg.bounds(chunk_rows, lo, hi):
            ea, eb = gg.edge_range(a, b)
            if eb == ea:
                continue
            if width >= SPARSE_WIDTH and (eb - ea < SPARSE_CHUNK * gg.num_dst
                                          or state.acc is not None):
                # A sparse matrix times the rows, added in place: no destination-sized
                # partial result (see SPARSE_WIDTH for when).
                if state.acc is None:
                    state.acc = u.new_zeros((gg.num_dst,) + tuple(u.shape[1:]))
                state.acc.view(gg.num_dst, -1).addmm_(gg.matrix(a, b, u.dtype),
                                                      u[a - lo:b - lo].reshape(b - a, -1))
                continue
            fold_partial(state, dgl.ops.gspmm(gg.block(a, b), "copy_lhs", "sum",
                                              u[a - lo:b - lo], None))
        return first
    for a, b, g in gg.chunks(chunk_rows, lo=lo, hi=hi):
        uc, ec = u[a - lo:b - lo], _edge_slice(e, gg, a, b)
        p = dgl.ops.gspmm(g, op, red, uc, None if op == "copy_lhs" else ec)
        if not state.minmax:
            fold_partial(state, p)
            continue
        cid = state.next_id
        state.next_id += 1
        if cid > MAX_CHUNKS:
            raise ConfigError(f"seqagg.chunk_rows: more than {MAX_CHUNKS} chunks in one max/min "
                              "aggregation; raise seqagg.chunk_rows")
        fold_partial(state, p, gg.has_in_edge(a, b), cid)
        del p
    return first


def fold_partial(state: SpmmState, p: torch.Tensor, has: Optional[torch.Tensor] = None,
                 cid: int = 0) -> None:
    """Fold ``p``, one chunk's (or group's) own aggregate, into ``state``: added, or for max/min
    kept where it beats the state (``has``: which destinations it reaches; ``cid``: its id in
    the winners). ``p`` may become the state itself."""
    if not state.minmax:
        # the first partial becomes the state: no zeros allocated beside it
        state.acc = p if state.acc is None else state.acc.add_(p)
        return
    has = has.view((-1,) + (1,) * (p.dim() - 1))
    p = p.masked_fill(~has, float("-inf") if state.reduce == "max" else float("inf"))
    if state.acc is None:
        state.acc = p
        state.winner = torch.full(p.shape, cid, dtype=state.winner_dtype)
    else:
        better = p > state.acc if state.reduce == "max" else p < state.acc
        state.acc = torch.where(better, p, state.acc)  # strict: the first one wins ties
        state.winner.masked_fill_(better, cid)


def spmm_finish(state: SpmmState, num_dst: int, row_shape: tuple, in_degrees: torch.Tensor,
                dtype: torch.dtype, inplace: bool = True) -> torch.Tensor:
    """The aggregation's result (as ``DGLGraph.update_all``: no message -> 0). A mean divides
    the state in place unless ``inplace`` is False (a state that is a partial kept elsewhere)."""
    acc = state.acc
    if acc is None:
        if state.minmax:
            state.winner = torch.full((num_dst,) + tuple(row_shape), -1,
                                      dtype=state.winner_dtype)
        return torch.zeros((num_dst,) + tuple(row_shape), dtype=dtype)
    if state.reduce == "mean":
        deg = in_degrees.view((-1,) + (1,) * (acc.dim() - 1)).clamp(min=1).to(acc.dtype)
        return acc.div_(deg) if inplace else acc / deg
    if state.minmax:
        dead = torch.isinf(acc)
        state.winner.masked_fill_(dead, -1)
        return acc.masked_fill(dead, 0.0)
    return acc


def spmm_linear_grad(gg: GroupGraph, op: str, gout: torch.Tensor, e: Optional[torch.Tensor],
                     u_shape: tuple, chunk_rows: int,
                     edge_div: Optional[torch.Tensor] = None,
                     rows: Optional[tuple[int, int]] = None) -> torch.Tensor:
    """Gradient of a sum (or, with ``edge_div`` a per-edge destination degree, copy_u mean)
    aggregation w.r.t. the group's rows (or its rows ``[a, b)``): ``gout`` through the reversed
    edges, chunk by chunk."""
    lo, hi = rows if rows is not None else (0, gg.num_src)
    gu = gout.new_zeros((hi - lo,) + tuple(u_shape[1:]))
    for a, b, rg in gg.chunks(chunk_rows, reverse=True, lo=lo, hi=hi):
        if op == "copy_lhs" and edge_div is not None:
            d = _edge_slice(edge_div, gg, a, b).view((-1,) + (1,) * (gout.dim() - 1))
            g = dgl.ops.gspmm(rg, "div", "sum", gout, d)
        elif op == "copy_lhs":
            g = dgl.ops.gspmm(rg, "copy_lhs", "sum", gout, None)
        else:
            g = dgl.ops.gspmm(rg, op, "sum", gout, _edge_slice(e, gg, a, b))
        gu[a - lo:b - lo] += sum_to(g, gu.shape)
    return gu


def spmm_minmax_grad(gg: GroupGraph, op: str, reduce: str, u: torch.Tensor,
                     e: Optional[torch.Tensor], gout: torch.Tensor, winner: torch.Tensor,
                     first_id: int, chunk_rows: int, need_e: bool = False):
    """(grad of the group's rows, grad of its edge values or None) of a max/min aggregation:
    each chunk is recomputed under autograd and gets the gradient where it won."""
    gu = torch.zeros_like(u)
    ge = torch.zeros_like(e) if need_e and e is not None else None
    cid = first_id
    for a, b, g in gg.chunks(chunk_rows):
        uc = u[a:b].detach().requires_grad_(True)
        ec = _edge_slice(e, gg, a, b)
        ec = None if ec is None else ec.detach().requires_grad_(need_e)
        with torch.enable_grad():
            p = dgl.ops.gspmm(g, op, reduce, uc, None if op == "copy_lhs" else ec)
        gp = gout.masked_fill(winner != cid, 0.0)
        wanted = [uc] + ([ec] if ge is not None else [])
        got = torch.autograd.grad(p, wanted, gp, allow_unused=True)
        if got[0] is not None:
            gu[a:b] += got[0]
        if ge is not None and got[1] is not None:
            ea, eb = gg.edge_range(a, b)
            ge[ea:eb] += got[1]
        cid += 1
    return gu, ge


def sum_to(t: torch.Tensor, shape) -> torch.Tensor:
    """Sum a broadcast result back to ``shape`` (leading row dimension kept)."""
    if tuple(t.shape[1:]) == tuple(shape[1:]):
        return t
    dims = [i for i, (a, b) in enumerate(zip(t.shape[1:], shape[1:]), start=1) if b == 1 and a != 1]
    return t.sum(dim=dims, keepdim=True)


# --- GAT: attention + aggregation with an online softmax -------------------------------------

class SoftmaxState:
    """Online-softmax state per destination and head: running max, denominator, weighted sum."""

    def __init__(self, num_dst: int, heads: int, like: torch.Tensor) -> None:
        self.m = like.new_full((num_dst, heads, 1), float("-inf"))
        self.den = like.new_zeros((num_dst, heads, 1))
        self.acc: Optional[torch.Tensor] = None


def _edge_logits(el_rows: torch.Tensor, er2: torch.Tensor, u: torch.Tensor, v: torch.Tensor,
                 slope: float) -> torch.Tensor:
    """``leaky_relu(el_u + er_v)`` per edge (rows' local ids ``u``, destinations ``v``):
    E x heads. Gathered with index_select, several times faster than advanced indexing here.
    With ``slope >= 0`` a logit is > 0 exactly where its input is, so backward reads the
    leaky_relu derivative off the logits."""
    return torch.nn.functional.leaky_relu_(
        el_rows.reshape(-1, er2.shape[1]).index_select(0, u) + er2.index_select(0, v), slope)


def _message_batch(chunk_rows: int, num_dst: int) -> int:
    """Edges whose gathered rows one step of the attention kernels holds at a time:
    ``chunk_rows`` (a chunk's edges can be several times its rows, and the messages of all of
    them would outweigh the rows), or without chunks as many as destinations (the partial sum
    a DGL aggregation would make)."""
    return chunk_rows if chunk_rows > 0 else max(num_dst, 1)


# A destination's softmax shift is raised only when a chunk's logit exceeds it by more than
# this: exp() of at most e^20 ~ 5e8 per edge cannot overflow a float32 sum, and the shift need not
# be the exact max (softmax does not depend on it), so most chunks skip the destination-sized
# rescaling pass of a strict online softmax.
SHIFT_SLACK = 20.0


def attention_fold(st: SoftmaxState, gg: GroupGraph, ft: torch.Tensor, el: torch.Tensor,
                   er: torch.Tensor, slope: float, chunk_rows: int, row0: int = 0) -> None:
    """Fold the group's edges (rows ``ft``, ``el``: the group's rows from ``row0`` on;
    destination ``er``) into ``st``.

    Edge-sized work only, in torch ops over the chunk's edge slices (no DGL block to build):
    the weighted rows are added into the state in place, and the state is rescaled only where
    a destination's shift moves (see ``SHIFT_SLACK``).
    """
    lo = row0
    heads = el.shape[1]
    er2 = er.reshape(er.shape[0], heads)
    for a, b, u, v in gg.edge_chunks(chunk_rows, lo, lo + ft.shape[0]):
        s = _edge_logits(el[a - lo:b - lo], er2, u, v, slope)
        top = s.new_full((gg.num_dst, heads), float("-inf")).scatter_reduce_(
            0, v.unsqueeze(1).expand_as(s), s, "amax")
        shift = st.m.view(gg.num_dst, heads)
        first = torch.isneginf(shift)
        new = torch.where(first, top, shift)  # a destination's first edges set its shift
        del first
        raise_ = top > new + SHIFT_SLACK
        if bool(raise_.any()):
            # (elsewhere 1: new - top is nan where neither has an edge yet)
            scale = torch.where(raise_, torch.exp(new - top), 1.0).unsqueeze(-1)
            st.den.mul_(scale)
            if st.acc is not None:
                st.acc.mul_(scale)
            new = torch.where(raise_, top, new)
            del scale
        del top, raise_
        st.m = new.unsqueeze(-1)
        p = s.sub_(new.index_select(0, v)).exp_()  # E x heads
        del new
        st.den.view(gg.num_dst, heads).index_add_(0, v, p)
        rows = ft[a - lo:b - lo]
        if st.acc is None:
            st.acc = rows.new_zeros((gg.num_dst,) + tuple(rows.shape[1:]))
        if native.usable(rows, st.acc):  # fused: no message tensor at all
            native.scatter_weighted(st.acc, rows, p, u, v)
            del p
            continue
        step = _message_batch(chunk_rows, gg.num_dst)
        for e0 in range(0, u.numel(), step):  # weighted rows, one message batch at a time
            msg = rows.index_select(0, u[e0:e0 + step])
            msg.mul_(p[e0:e0 + step].view((msg.shape[0], heads) + (1,) * (msg.dim() - 2)))
            st.acc.index_add_(0, v[e0:e0 + step], msg)
            del msg
        del p


def attention_finish(st: SoftmaxState, num_dst: int, ft_row_shape: tuple,
                     like: torch.Tensor) -> torch.Tensor:
    """``sum_j softmax_j(e_ij) ft_j`` per destination (0 without in-edges, as DGL)."""
    acc = st.acc if st.acc is not None else like.new_zeros((num_dst,) + tuple(ft_row_shape))
    return acc.div_(torch.where(st.den > 0, st.den, torch.ones_like(st.den)))


def _edge_dots(rows: torch.Tensor, gout: torch.Tensor, u: torch.Tensor, v: torch.Tensor,
               step: int) -> torch.Tensor:
    """``<rows_u, gout_v>`` per edge and head (rows' local ids ``u``, destinations ``v``):
    E x heads. Two gathers of ``step / 2`` edges' rows at a time: together the size of one
    message batch of :func:`attention_fold` (a chunk's edges can be several times its rows);
    one fused pass with no gathered rows where the C kernels apply."""
    if native.usable(rows, gout):
        return native.edge_dots(rows, gout, u, v)
    heads = rows.shape[1]
    step = max(step // 2, 1)
    dot = rows.new_empty((u.numel(), heads))
    for e0 in range(0, u.numel(), step):
        x = rows.index_select(0, u[e0:e0 + step])
        x.mul_(gout.index_select(0, v[e0:e0 + step]))
        torch.sum(x.view(x.shape[0], heads, -1), -1, out=dot[e0:e0 + step])
        del x
    return dot


def attention_dsum(dsum: torch.Tensor, gg: GroupGraph, ft: torch.Tensor, el: torch.Tensor,
                   er: torch.Tensor, m: torch.Tensor, den: torch.Tensor, gout: torch.Tensor,
                   slope: float, chunk_rows: int, row0: int = 0,
                   dots: Optional[list] = None) -> None:
    """Add the share of ``D_i = sum_j a_ij <g_i, ft_j>`` (backward pass 1) of the group's rows
    ``ft``, ``el`` (from ``row0`` on) to ``dsum``; ``dots``, if given, receives each chunk's
    ``<g_i, ft_j>`` (edges x heads) for :func:`attention_grads`. Block-free, as the fold."""
    lo = row0
    num_dst, heads = gg.num_dst, el.shape[1]
    er2, m2, den2 = (t.reshape(num_dst, heads) for t in (er, m, den))
    ds2 = dsum.view(num_dst, heads)
    step = _message_batch(chunk_rows, num_dst)
    for a, b, u, v in gg.edge_chunks(chunk_rows, lo, lo + ft.shape[0]):
        s = _edge_logits(el[a - lo:b - lo], er2, u, v, slope)
        att = s.sub_(m2.index_select(0, v)).exp_().div_(den2.index_select(0, v))  # E x heads
        dot = _edge_dots(ft[a - lo:b - lo], gout, u, v, step)
        if dots is not None:
            dots.append(dot)
        ds2.index_add_(0, v, att.mul_(dot))
        del att, dot


def attention_grads(gg: GroupGraph, ft: torch.Tensor, el: torch.Tensor, er: torch.Tensor,
                    m: torch.Tensor, den: torch.Tensor, gout: torch.Tensor, dsum: torch.Tensor,
                    slope: float, chunk_rows: int, grad_er: torch.Tensor, row0: int = 0,
                    dots: Optional[list] = None):
    """(grad of the ``ft`` rows, of the ``el`` rows: the group's rows from ``row0`` on); adds
    their share of the destination ``er`` gradient to ``grad_er`` (backward pass 2).

    ``ft``'s gradient gathers each row's edges' ``a_ij g_i`` (the group's edges are sorted by
    row): one fused pass where the C kernels apply, else per chunk and head a CSR matrix
    (rows x destinations) times ``gout``'s head; no edge x F tensor either way. The logits'
    ``<ft_j, g_i>`` are per-edge dots (as in :func:`attention_dsum`), or taken from ``dots``
    (what :func:`attention_dsum` computed, chunk by chunk; then only ``ft``'s shape is read).
    (``torch.sparse.sampled_addmm`` per head is faster than the torch dots but
    wants each head of ``gout`` contiguous: a copy of ``gout``, a destination-sized tensor,
    which sampled rematerialization's peak cannot afford.)
    """
    heads = el.shape[1]
    gft, gel = ft.new_zeros(ft.shape), torch.zeros_like(el)
    num_dst = gg.num_dst
    er2, m2, den2, ds2 = (t.reshape(num_dst, heads) for t in (er, m, den, dsum))
    ger2 = grad_er.view(num_dst, heads)
    lo = row0
    step = _message_batch(chunk_rows, num_dst)
    for a, b, u, v in gg.edge_chunks(chunk_rows, lo, lo + ft.shape[0]):
        s = _edge_logits(el[a - lo:b - lo], er2, u, v, slope)
        pos = s > 0  # the input's sign too (slope >= 0, see _edge_logits)
        att = s.sub_(m2.index_select(0, v)).exp_().div_(den2.index_select(0, v))  # E x heads
        del s
        crow = gg.row_ptr[a:b + 1] - gg.row_ptr[a]
        if native.usable(gft, gout):
            native.gather_weighted(gft[a - lo:b - lo], gout, att, crow, v)
        else:
            att_h = att.t().contiguous()
            with warnings.catch_warnings():  # torch calls its sparse compressed support "beta"
                warnings.simplefilter("ignore", UserWarning)
                for h in range(heads):
                    pat = torch.sparse_csr_tensor(crow, v, att_h[h], (b - a, num_dst))
                    gft[a - lo:b - lo, h] = torch.mm(pat, gout[:, h])
            del att_h
        gs = dots.pop(0) if dots else _edge_dots(ft[a - lo:b - lo], gout, u, v, step)
        gs = gs.sub_(ds2.index_select(0, v)).mul_(att)
        del att
        gz = torch.where(pos, gs, gs * slope)  # leaky_relu backward, as torch computes it
        del gs, pos
        gel[a - lo:b - lo].view(b - a, heads).index_add_(0, u, gz)
        ger2.index_add_(0, v, gz)
        del gz
    return gft, gel


__all__ = ["SpmmState", "SoftmaxState", "attention_dsum", "attention_finish",
           "attention_fold", "attention_grads", "chunk_slice", "fold_partial", "spmm_finish",
           "spmm_fold", "spmm_linear_grad", "spmm_minmax_grad", "sum_to"]
