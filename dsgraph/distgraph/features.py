"""Feature reads for sampled training: own rows from shared memory, remote rows from a budgeted
cache, the rest over RPC.

A trainer's mini-batch inputs are mostly its own partition's nodes and the partition's halo.
Own rows are gathered straight from the machine's server's shared memory (never copied: a copy
would cost the partition's feature bytes once more per trainer). Rows owned elsewhere are
read-only during training, so the ones most likely read (:mod:`dsgraph.distgraph.cache_policy`)
are pulled once, in bulk, into a cache of at most ``sampled.feature_memory_mb`` (ids included),
stored block-wise quantized with ``sampled.feature_cache_bits`` 8 or 4
(:class:`dsgraph.compress.rows.QuantizedRows`) so the budget holds 4-8x the rows. Only rows
outside the cache travel over RPC during training.
"""
from __future__ import annotations

import logging
from typing import Any, Callable, Iterable, Optional

import torch
from dgl.distributed.constants import DEFAULT_NTYPE

from dsgraph.compress.rows import QuantizedRows
from dsgraph.distgraph import cache_policy
from dsgraph.distgraph.budget import ID_BYTES, cache_row_bytes, feature_budget_bytes
from dsgraph.models.inputs import InputRows

_log = logging.getLogger(__name__)
_PULL_ROWS = 1 << 16  # rows per bulk pull (bounds the transient float32 chunk)


class ExactRows:
    """Float rows kept as they are (``feature_cache_bits: 32``), with QuantizedRows' API."""

    def __init__(self, num_rows: int, width: int, dtype: torch.dtype) -> None:
        self.table = torch.empty((num_rows, width), dtype=dtype)

    def write(self, start: int, rows: torch.Tensor) -> None:
        """Store ``rows`` at table rows ``start``..."""
        self.table[start:start + rows.shape[0]] = rows

    def gather(self, pos: torch.Tensor) -> torch.Tensor:
        """Rows at positions ``pos``."""
        return self.table.index_select(0, pos)

    @property
    def nbytes(self) -> int:
        """Bytes held."""
        return self.table.numel() * self.table.element_size()


class CachedFeatures:
    """Rows of a DistGraph node tensor by global id: this machine's partition's rows from
    shared memory, cached remote rows (after :meth:`fill`) from the cache, the rest over RPC."""

    def __init__(self, g, name: str = "feat", ntype: Optional[str] = None) -> None:
        # ntype: a heterogeneous graph's node type, whose per-type ids the reader then takes
        self.tensor = g.nodes[ntype].data[name] if ntype else g.ndata[name]
        self.ntype = ntype or DEFAULT_NTYPE
        self.pb = g.get_partition_book()
        self.partid = self.pb.partid
        self.remote_rows = 0  # rows that went over RPC (cache misses), for metrics
        self.cache_hits = 0  # rows owned elsewhere but served from the cache
        self.policy = self.tensor.part_policy
        try:
            self.own_rows = self.tensor.local_partition
        except (KeyError, AttributeError):  # no server of this partition on this machine
            self.own_rows = None
        self.cache_ids = torch.empty(0, dtype=torch.int64)
        self.cache: Optional[ExactRows | QuantizedRows] = None
        # The batch reader hands the model InputRows (:meth:`input_rows`), not gathered rows.
        self.in_place = False

    @property
    def width(self) -> int:
        """Values per row."""
        return int(self.tensor.shape[1]) if len(self.tensor.shape) > 1 else 1

    @property
    def row_bytes(self) -> int:
        """Bytes of one row as served (what a cache miss moves over the network)."""
        return self.width * torch.empty((), dtype=self.tensor.dtype).element_size()

    @property
    def cached_rows(self) -> int:
        """Rows owned by other partitions that this reader serves locally."""
        return int(self.cache_ids.numel())

    @property
    def cache_bytes(self) -> int:
        """Bytes the cache holds, ids included."""
        held = self.cache.nbytes if self.cache is not None else 0
        return held + self.cache_ids.numel() * ID_BYTES

    def fill(self, ranked: torch.Tensor, budget_bytes: int, bits: int) -> None:
        """Cache the rows of remote ids ``ranked`` (most wanted first) that fit
        ``budget_bytes``, stored with ``bits`` bits per value, pulled in bulk now."""
        try:
            self._fill(ranked, budget_bytes, bits)
        except ValueError as exc:  # NaN, inf or values beyond the quantizer's fp16 statistics
            if bits == 32:
                raise
            _log.warning("feature rows cannot be quantized (%s): the cache keeps them exact, "
                         "so the budget holds fewer", exc)
            self._fill(ranked, budget_bytes, 32)

    def _fill(self, ranked: torch.Tensor, budget_bytes: int, bits: int) -> None:
        per_row = cache_row_bytes(self.width, bits, self.row_bytes // self.width)
        fit = max(int(budget_bytes) // per_row, 0)
        self.cache_ids = torch.sort(ranked[:fit].to(torch.int64))[0]
        n = self.cache_ids.numel()
        self.cache = ExactRows(n, self.width, self.tensor.dtype) if bits == 32 \
            else QuantizedRows(n, self.width, bits)
        for start in range(0, n, _PULL_ROWS):
            rows = self.tensor[self.cache_ids[start:start + _PULL_ROWS]]
            self.cache.write(start, rows.reshape(rows.shape[0], self.width))

    def _cached(self, ids: torch.Tensor) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
        """Positions in the cache of ``ids`` and a mask of those it holds (None: all)."""
        n = self.cache_ids.numel()
        if not n:
            return torch.zeros_like(ids), torch.zeros_like(ids, dtype=torch.bool)
        pos = torch.searchsorted(self.cache_ids, ids).clamp_(max=n - 1)
        hit = self.cache_ids[pos] == ids
        return pos, None if bool(hit.all()) else hit

    def by_local_id(self, ids: torch.Tensor, lids: Optional[torch.Tensor]) -> torch.Tensor:
        """Rows of global ids ``ids`` (``lids``, their local ids in the partition graph, are not
        needed: own rows are found by global id in shared memory)."""
        return self[ids]

    def input_rows(self, ids: torch.Tensor) -> InputRows:
        """Rows ``ids`` (global node ids) as :class:`~dsgraph.models.inputs.InputRows`: own
        rows left in shared memory, the others (cache, RPC) in one compact tensor."""
        width = self.tensor.shape[1:]
        nowhere = torch.full_like(ids, -1)
        if self.own_rows is None:
            return InputRows(torch.empty((0, *width), dtype=self.tensor.dtype), nowhere,
                             self._remote(ids), torch.arange(ids.numel()))
        remote = self.pb.nid2partid(ids, self.ntype) != self.partid
        own = ~remote
        store_pos, extra_pos = nowhere, nowhere.clone()
        store_pos[own] = self.policy.to_local(ids[own])
        rpos = remote.nonzero().squeeze(1)
        extra_pos[rpos] = torch.arange(rpos.numel())
        extra = self._remote(ids.index_select(0, rpos)) if rpos.numel() \
            else torch.empty((0, *width), dtype=self.tensor.dtype)
        return InputRows(self.own_rows, store_pos, extra, extra_pos)

    def __getitem__(self, ids: torch.Tensor) -> torch.Tensor:
        """Rows ``ids`` (global node ids), what ``g.ndata[name][ids]`` returns (cached rows as
        the cache stores them): :meth:`input_rows` gathered into one tensor (one gather over
        every position, remote ones overwritten, beats gathering own rows apart)."""
        return self.input_rows(ids).materialize()

    def _decoded(self, pos: torch.Tensor) -> torch.Tensor:
        """Cache rows at ``pos``, shaped and typed as the served tensor's rows."""
        rows = self.cache.gather(pos).to(self.tensor.dtype)
        return rows.reshape(-1, *self.tensor.shape[1:])

    def _remote(self, rids: torch.Tensor) -> torch.Tensor:
        """Rows of ids ``rids`` owned elsewhere: cached ones decoded, the rest over RPC."""
        pos, hit = self._cached(rids)
        n_hit = rids.numel() if hit is None else int(hit.sum())
        self.cache_hits += n_hit
        self.remote_rows += rids.numel() - n_hit
        if hit is None:  # the common case: every remote row cached
            return self._decoded(pos)
        out = torch.empty((rids.numel(), *self.tensor.shape[1:]), dtype=self.tensor.dtype)
        if n_hit:
            hpos = hit.nonzero().squeeze(1)
            out.index_copy_(0, hpos, self._decoded(pos.index_select(0, hpos)))
        mpos = (~hit).nonzero().squeeze(1)
        out.index_copy_(0, mpos, self.tensor[rids.index_select(0, mpos)])
        return out


def feature_cache(g, s: Any, trainers_per_machine: int,
                  presample: Optional[Callable[[], Iterable[torch.Tensor]]] = None,
                  model: Optional[torch.nn.Module] = None) -> CachedFeatures:
    """The trainer's reader of ``g.ndata["feat"]`` with its cache filled as the ``sampled``
    section ``s`` says; ``presample`` yields pre-sampled batches' input nodes for the
    ``frequency`` policy (None: rank by degree). With ``sampled.aggregate_in_place`` and a
    ``model`` that takes InputRows (``takes_input_rows``), batches read :meth:`input_rows`."""
    feat = CachedFeatures(g, "feat")
    feat.in_place = bool(s.aggregate_in_place and getattr(model, "takes_input_rows", False))
    pb = g.get_partition_book()
    own = int(pb.partid2nids(pb.partid).numel())
    budget = feature_budget_bytes(s.feature_memory_mb, own, feat.row_bytes,
                                  trainers_per_machine)
    rows = budget // cache_row_bytes(feat.width, s.feature_cache_bits,
                                     feat.row_bytes // feat.width)
    if rows <= 0:
        return feat
    if rows >= g.num_nodes() - own:  # every remote row fits: no ranking needed
        ranked = cache_policy.remote_ids(pb)
    elif s.feature_cache_policy == "frequency" and presample is not None:
        ranked = cache_policy.by_frequency(presample(), pb, g, rows)
    else:
        ranked = cache_policy.by_degree(g, pb, rows)
    feat.fill(ranked, budget, s.feature_cache_bits)
    return feat
