"""Where a rematerialized layer's input rows come from: stored features or learnable embeddings
pulled by global id (:class:`RowSource`), or a later layer's input read by position
(:class:`InputRows`)."""
from __future__ import annotations

from typing import Any, Iterable, Optional, Protocol

import torch
from torch import nn

from dsgraph.remat.store import Kept, compressing


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


class InputRows:
    """A later layer's input rows, read by position: in forward views of the input; from
    forward to backward the input itself, or with ``compression`` INT2 runs of ``chunk_rows``
    rows (the groups' and destination chunks' grid); in backward leaves whose gradients
    :meth:`add_grad` gathers into the input's."""

    def __init__(self, feat: torch.Tensor, chunk_rows: int) -> None:
        self.grad = feat.requires_grad
        self.shape, self.dtype = feat.shape, feat.dtype
        self.feat: Optional[torch.Tensor] = feat.detach()
        self.step = chunk_rows if chunk_rows > 0 else max(int(feat.shape[0]), 1)
        self.kept: Optional[Kept] = None
        self.recording = False  # backward: rows are leaves
        self.leaves: list[tuple[int, torch.Tensor]] = []
        self.grad_in: Optional[torch.Tensor] = None

    def keep(self, compression: Any, for_backward: bool) -> None:
        """End of forward: keep the input for backward (INT2 with ``compression``) or drop it."""
        if not for_backward:
            self.feat = None
        elif compressing(compression):
            self.kept = Kept(compression, self.shape)
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
