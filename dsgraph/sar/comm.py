"""Transfers for SAR's ring: whole remote parts as async isend/irecv pairs, or in pieces.

Whole parts: every worker calls the same aggregations in the same order, so message tags come
from a counter that advances identically on all ranks; gloo matches a send to a receive by
(peer, tag). Pieces (``seqagg.chunk_rows`` > 0): each ring round moves its rows in pieces of at
most ``chunk_rows`` rows, one all-to-all per piece (:func:`dsgraph.dist.exchange_rows`), so only
a piece of a remote part, not the part, is alive at a time; every worker makes the same number
of exchanges per round (the largest piece count of any worker's round, :func:`ring_pieces`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterator, Optional, Sequence, Union

import torch
import torch.distributed as dist

from dsgraph.dist import exchange_rows

_TAG_STRIDE = 1 << 12  # room for a few tags per ring round (world size < 1024)


class Comm:
    """This worker's view of the process group: rank, size, tags and a bytes-sent counter."""

    def __init__(self, rank: int, world: int) -> None:
        self.rank, self.world = rank, world
        self.bytes_sent = 0
        self._seq = 0

    def next_tag(self) -> int:
        """A fresh tag base for one ring of transfers (identical sequence on every rank)."""
        self._seq = (self._seq + 1) % (1 << 18)  # tags stay below 2**30
        return self._seq * _TAG_STRIDE

    def isend(self, t: torch.Tensor, peer: int, tag: int):
        """Post a send of ``t`` (kept alive by the caller until the returned work is waited)."""
        self.bytes_sent += t.numel() * t.element_size()
        return dist.isend(t, peer, tag=tag)

    def irecv(self, t: torch.Tensor, peer: int, tag: int):
        """Post a receive into ``t``."""
        return dist.irecv(t, peer, tag=tag)


Tensors = Union[torch.Tensor, tuple[torch.Tensor, ...]]


class _Round:
    """One ring round in flight: the receive buffers and the send buffers it must keep alive."""

    __slots__ = ("part", "recv", "send", "works")

    def __init__(self, part: int, recv: Optional[tuple], send: list, works: list) -> None:
        self.part, self.recv, self.send, self.works = part, recv, send, works

    def wait(self) -> Optional[tuple]:
        """Wait for the round; hand over the received rows (this round keeps no reference)."""
        for w in self.works:
            w.wait()
        self.send = None
        recv, self.recv = self.recv, None
        return recv


def ring_fetch(comm: Comm, need: list[int], send_rows: list[torch.Tensor], x: Tensors,
               prefetch: bool = True) -> Iterator[tuple[int, Optional[Tensors]]]:
    """Yield ``(part, rows)`` for every part: first ``(rank, x)`` itself, then for round r the
    ``need[part]`` rows this worker needs from part ``rank - r`` (None when it needs none),
    while sending part ``rank + r`` the rows ``send_rows[rank + r]`` of ``x`` it needs.

    ``x`` may be a tuple of tensors with the same rows (one message each, same round): the
    rows then come as a tuple too. At most two rounds are in flight (one with
    ``prefetch=False``), so at most two remote blocks are alive; the consumer must drop each
    block before asking for the next.
    """
    k, n = comm.rank, comm.world
    single = isinstance(x, torch.Tensor)
    xs = (x,) if single else tuple(x)
    xs = tuple(t.detach() for t in xs)
    nt = len(xs)
    tag = comm.next_tag()

    def post(r: int) -> _Round:
        src, dst = (k - r) % n, (k + r) % n
        works, recv, send = [], None, []
        if need[src] > 0:
            recv = tuple(t.new_empty((need[src],) + tuple(t.shape[1:])) for t in xs)
            works += [comm.irecv(b, src, tag + r * nt + i) for i, b in enumerate(recv)]
        if send_rows[dst].numel() > 0:
            send = [t.index_select(0, send_rows[dst]) for t in xs]
            works += [comm.isend(b, dst, tag + r * nt + i) for i, b in enumerate(send)]
        return _Round(src, recv, send, works)

    pending = post(1) if (n > 1 and prefetch) else None
    yield k, (xs[0] if single else xs)
    for r in range(1, n):
        cur = pending if pending is not None else post(r)
        pending = post(r + 1) if (prefetch and r + 1 < n) else None
        # No local name may hold the rows while suspended at the yield: the consumer's
        # ``del`` must free them before it asks for the next round.
        yield (k - r) % n, _unwrap(cur.wait(), single)


def _unwrap(rows: Optional[tuple], single: bool):
    return rows[0] if single and rows is not None else rows


@dataclass(frozen=True)
class Piece:
    """One exchange of a ring round in pieces, for one worker: ``rows`` ``[a, b)`` of those it
    needs from part ``src`` come in (their gradients go back in backward) while ``sent``
    ``[a, b)`` of ``send_rows[dst]`` go out (their gradients come back)."""

    src: int
    rows: tuple[int, int]
    dst: int
    sent: tuple[int, int]


def ring_pieces(need_table: Sequence[Sequence[int]], rank: int, piece_rows: int) -> list[Piece]:
    """This worker's exchanges, rounds 1..n-1 in order, pieces of at most ``piece_rows`` rows.

    ``need_table[k][j]``: rows part k needs from part j (the same table on every worker). Round
    r has as many pieces on every worker as the largest transfer of the round needs, so all
    workers call the same number of all-to-alls; a worker's own pieces past its rows are empty.
    """
    n = len(need_table)
    out = []
    for r in range(1, n):
        most = max(need_table[k][(k - r) % n] for k in range(n))
        src, dst = (rank - r) % n, (rank + r) % n
        rows_in, rows_out = need_table[rank][src], need_table[dst][rank]
        for a in range(0, most, piece_rows):
            b = a + piece_rows
            out.append(Piece(src, (min(a, rows_in), min(b, rows_in)), dst,
                             (min(a, rows_out), min(b, rows_out))))
    return out


def fetch_pieces(comm: Comm, pieces: list[Piece], send_rows: list[torch.Tensor],
                 x: Tensors) -> Iterator[tuple[int, int, Tensors]]:
    """Yield ``(part, a, rows)``: first ``(rank, 0, x)``, then per piece the rows it brings
    (rows ``a..`` of those needed from ``part``; empty when this worker's share of the piece is)
    while sending the piece's rows of ``x``. ``x`` may be a tuple of tensors with the same rows
    (one exchange each). The consumer must drop each piece before asking for the next."""
    single = isinstance(x, torch.Tensor)
    xs = (x,) if single else tuple(x)
    xs = tuple(t.detach() for t in xs)
    yield comm.rank, 0, x
    for p in pieces:
        idx = send_rows[p.dst][p.sent[0]:p.sent[1]]
        got = []
        for t in xs:
            send = {p.dst: t.index_select(0, idx)} if idx.numel() else {}
            comm.bytes_sent += idx.numel() * math.prod(t.shape[1:]) * t.element_size()
            got.append(exchange_rows(send, {p.src: p.rows[1] - p.rows[0]}, t.shape[1:],
                                     t.dtype)[p.src])
            del send
        yield p.src, p.rows[0], (got[0] if single else tuple(got))
        del got


class GradPush:
    """Return gradients of fetched rows to their owners; owners add them into ``grad_x``.

    Round r sends the gradient of part ``rank - r``'s rows to it and receives, from part
    ``rank + r``, the gradient of the rows this worker sent it in the forward ring. With
    several gradients per row (``row_shape`` a list of shapes, ``grad_x`` a list of targets)
    each travels as its own message of the round. With ``overlap`` a round completes when the
    next one is pushed (its buffers live on while the next shard is computed); without, at
    once.
    """

    def __init__(self, comm: Comm, need: list[int], send_rows: list[torch.Tensor],
                 grad_x: Optional[Tensors], row_shape: Union[tuple[int, ...], list],
                 dtype: torch.dtype, overlap: bool = True) -> None:
        self.comm, self.need, self.send_rows, self.grad_x = comm, need, send_rows, grad_x
        self.overlap = overlap
        self.single = not isinstance(row_shape, list)
        self.row_shapes = [tuple(row_shape)] if self.single else [tuple(s) for s in row_shape]
        self.dtype = dtype
        self.tag = comm.next_tag()
        self._inflight: list[tuple[Optional[list], Optional[list], list, int]] = []
        self._round = 0

    def push(self, part: int, row0: int, grad_rows: Optional[Tensors]) -> None:
        """Send ``grad_rows`` (all rows of ``part``'s needed; ``row0`` 0) in its ring round,
        post that round's receive."""
        k, n = self.comm.rank, self.comm.world
        r = (k - part) % n
        if row0 != 0:
            raise RuntimeError("GradPush returns whole parts (PiecePush returns pieces)")
        # Rounds must come in ring order on every worker: completing round r waits for peers
        # that may themselves wait for this worker's earlier rounds.
        if r <= self._round or r >= n:
            raise RuntimeError(f"GradPush: round {r} after round {self._round} (world {n})")
        self._round = r
        src, dst = (k + r) % n, (k - r) % n
        nt = len(self.row_shapes)
        works, recv, send = [], None, None
        rows = self.send_rows[src].numel()
        if rows > 0:
            recv = [torch.empty((rows,) + s, dtype=self.dtype) for s in self.row_shapes]
            works += [self.comm.irecv(b, src, self.tag + r * nt + i) for i, b in enumerate(recv)]
        if self.need[dst] > 0:
            gs = (grad_rows,) if self.single else tuple(grad_rows)
            send = [g.contiguous() for g in gs]
            works += [self.comm.isend(b, dst, self.tag + r * nt + i) for i, b in enumerate(send)]
        del grad_rows
        self._inflight.append((recv, send, works, src))
        del recv, send
        if len(self._inflight) > (1 if self.overlap else 0):  # bound live gradient buffers
            self._complete(self._inflight.pop(0))

    def _complete(self, item) -> None:
        recv, _send, works, src = item
        del item
        for w in works:
            w.wait()
        if recv is not None and self.grad_x is not None:
            targets = (self.grad_x,) if self.single else tuple(self.grad_x)
            for t, b in zip(targets, recv):
                t.index_add_(0, self.send_rows[src], b)

    def finish(self) -> None:
        """Wait for every transfer and add the received gradients."""
        while self._inflight:
            self._complete(self._inflight.pop(0))


class PiecePush:
    """Return gradients of rows fetched by :func:`fetch_pieces`, piece by piece, in its order.

    For each piece, the gradient of the rows that came in goes back to their part and the
    gradients of the rows that went out come back and are added into ``grad_x`` (a tensor, or
    a list of them with ``row_shape`` a list of shapes). Every piece must be pushed, in order,
    empty ones with ``None``.
    """

    def __init__(self, comm: Comm, pieces: list[Piece], send_rows: list[torch.Tensor],
                 grad_x: Optional[Tensors], row_shape: Union[tuple[int, ...], list],
                 dtype: torch.dtype) -> None:
        self.comm, self.pieces, self.send_rows, self.grad_x = comm, pieces, send_rows, grad_x
        self.single = not isinstance(row_shape, list)
        self.row_shapes = [tuple(row_shape)] if self.single else [tuple(s) for s in row_shape]
        self.dtype = dtype
        self._next = 0

    def push(self, part: int, row0: int, grad_rows: Optional[Tensors]) -> None:
        """Exchange the next piece: ``grad_rows`` are the gradients of its incoming rows."""
        p = self.pieces[self._next]
        if (p.src, p.rows[0]) != (part, row0):
            raise RuntimeError(f"PiecePush: got part {part} row {row0}, expected piece "
                               f"{self._next} (part {p.src} row {p.rows[0]})")
        self._next += 1
        gs = (None,) * len(self.row_shapes) if grad_rows is None else \
            ((grad_rows,) if self.single else tuple(grad_rows))
        del grad_rows
        sent = self.send_rows[p.dst][p.sent[0]:p.sent[1]]
        targets = (self.grad_x,) if self.single else tuple(self.grad_x or ())
        for i, (shape, g) in enumerate(zip(self.row_shapes, gs)):
            send = {}
            if p.rows[1] > p.rows[0]:  # the owner expects these rows: zeros if no gradient
                g = g.contiguous() if g is not None else \
                    torch.zeros((p.rows[1] - p.rows[0],) + shape, dtype=self.dtype)
                send = {p.src: g}
                self.comm.bytes_sent += g.numel() * g.element_size()
            g = None
            got = exchange_rows(send, {p.dst: sent.numel()}, shape, self.dtype)[p.dst]
            del send
            if sent.numel() and targets and targets[i] is not None:
                targets[i].index_add_(0, sent, got)
            del got

    def finish(self) -> None:
        """Check that every piece was pushed."""
        if self._next != len(self.pieces):
            raise RuntimeError(f"PiecePush: {self._next} of {len(self.pieces)} pieces pushed")
