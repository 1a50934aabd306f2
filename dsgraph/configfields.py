"""Field helpers for config section dataclasses (numeric bounds checked at load time)."""
from __future__ import annotations

from dataclasses import field
from typing import Any


def bound(default: Any, *, ge: float | None = None, gt: float | None = None,
          le: float | None = None, lt: float | None = None) -> Any:
    """A dataclass field with numeric bounds checked at load time."""
    return field(default=default, metadata={"ge": ge, "gt": gt, "le": le, "lt": lt})


def items(default_factory: Any, *, ge: float | None = None) -> Any:
    """A list field whose elements must be >= ``ge``."""
    return field(default_factory=default_factory, metadata={"item_ge": ge})
