"""The collectives every training mode uses, over the default torch.distributed process group.

Each works in a single process too (no process group, or a group of one): it then returns its
input unchanged, so the same code path runs with one worker and with many.
"""
from __future__ import annotations

import itertools
import math
from typing import Any, Iterable, Optional, Sequence

import torch
import torch.distributed as dist
from torch import nn


def is_distributed() -> bool:
    """Whether a process group of more than one rank is active."""
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def _reduce(values: Sequence[float], op: Any) -> list[float]:
    t = torch.tensor(list(values), dtype=torch.float64)
    if is_distributed():
        dist.all_reduce(t, op=op)
    return t.tolist()


def all_sum(values: Sequence[float]) -> list[float]:
    """Element-wise sum of equally long lists of numbers over all ranks (float64)."""
    return _reduce(values, dist.ReduceOp.SUM)


def all_max(values: Sequence[float]) -> list[float]:
    """Element-wise maximum of equally long lists of numbers over all ranks (float64)."""
    return _reduce(values, dist.ReduceOp.MAX)


def all_sum_(tensor: torch.Tensor) -> torch.Tensor:
    """Sum ``tensor`` over all ranks in place; return it."""
    if is_distributed():
        dist.all_reduce(tensor)
    return tensor


def gather_values(value: Any) -> list[Any]:
    """One picklable value from every rank, in rank order, on every rank."""
    if not is_distributed():
        return [value]
    out: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(out, value)
    return out


def gather_to_root(value: Any, root: int = 0) -> Optional[list[Any]]:
    """One picklable value from every rank, in rank order, on rank ``root`` (None on the
    others): rows only one rank needs are not copied to every rank."""
    if not is_distributed():
        return [value]
    out: Optional[list[Any]] = [None] * dist.get_world_size() if dist.get_rank() == root \
        else None
    dist.gather_object(value, out, dst=root)
    return out


def broadcast_value(value: Any, root: int = 0) -> Any:
    """Rank ``root``'s picklable ``value`` on every rank."""
    if not is_distributed():
        return value
    box = [value]
    dist.broadcast_object_list(box, src=root)
    return box[0]


def broadcast_module(module: nn.Module, src: int = 0) -> None:
    """Make every rank's parameters and buffers equal to rank ``src``'s (a module's extra state,
    such as embeddings the DistGraph servers hold, is shared already)."""
    if is_distributed():
        for t in itertools.chain(module.parameters(), module.buffers()):
            dist.broadcast(t.data, src)


def allreduce_grads(params: Iterable[torch.Tensor]) -> None:
    """Sum the gradients of ``params`` over all ranks with one flat all-reduce.

    A parameter without a gradient takes part as zeros (and then holds the sum), so every rank
    sends buffers of the same layout whatever its local graph touched.
    """
    if not is_distributed():
        return
    params = [p for p in params if p.requires_grad]
    for p in params:
        if p.grad is None:
            p.grad = torch.zeros_like(p)
    if not params:
        return
    flat = torch.cat([p.grad.reshape(-1) for p in params])
    dist.all_reduce(flat)
    offset = 0
    for p in params:
        n = p.numel()
        p.grad.copy_(flat[offset:offset + n].view_as(p.grad))
        offset += n


def exchange_rows(send: dict[int, torch.Tensor], recv: dict[int, int],
                  row_shape: Sequence[int], dtype: torch.dtype) -> dict[int, torch.Tensor]:
    """Send ``send[q]`` (rows of ``row_shape``) to each rank q and receive ``recv[q]`` rows from
    each q, in one all-to-all; returns the received rows by rank (views of one buffer).

    Every rank calls it for every exchange (with empty dicts when it has nothing to move). On
    gloo it costs a tenth of an isend/irecv pair: 0.19 vs 1.85 ms for 180 x 16 floats between two
    processes on one host.
    """
    width = math.prod(row_shape)
    world = dist.get_world_size()
    empty = torch.empty(0, width, dtype=dtype)
    parts = [send[q].reshape(-1, width) if q in send else empty for q in range(world)]
    full = [t for t in parts if len(t)]
    # one payload (a ring step) is sent as it is: no concatenated copy beside it
    payload = full[0].contiguous() if len(full) == 1 else torch.cat(parts)
    counts = [recv.get(q, 0) for q in range(world)]
    out = torch.empty(sum(counts), width, dtype=dtype)
    dist.all_to_all_single(out, payload, output_split_sizes=counts,
                           input_split_sizes=[len(t) for t in parts])
    got = out.split(counts)
    return {q: got[q].view((-1,) + tuple(row_shape)) for q in recv}


def barrier() -> None:
    """Wait for every rank (a no-op in a single process)."""
    if is_distributed():
        dist.barrier()
