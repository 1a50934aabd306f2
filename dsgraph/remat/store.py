"""What a rematerialized layer's rows are kept as from forward to backward: as they are, or
INT2-quantized when ``compression`` is enabled."""
from __future__ import annotations

import dataclasses
from typing import Any

import torch


def compressing(cfg: Any) -> bool:
    """Whether compression config ``cfg`` (None: none) is enabled."""
    return cfg is not None and bool(getattr(cfg, "enabled", False))


class Kept:
    """A tensor kept from forward to backward in chunks (the aggregate in the output runs' row
    chunks, GAT's source projection per group, a later layer's input): as is, or INT2-quantized
    when ``compression`` is enabled (a saved activation like any other: the output map's
    weight gradient and GAT's softmax term read the aggregate)."""

    def __init__(self, compression: Any, shape: torch.Size) -> None:
        self.shape, self.dtype = shape, torch.get_default_dtype()
        self.spec = self.gen = None
        if compressing(compression):
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
