"""How a config field is declared: default, documentation and the bounds checked at load time."""
from __future__ import annotations

from dataclasses import field
from typing import Any, Callable, Optional


def opt(default: Any = None, doc: str = "", *, factory: Optional[Callable[[], Any]] = None,
        ge: float | None = None, gt: float | None = None, le: float | None = None,
        lt: float | None = None, item_ge: float | None = None) -> Any:
    """A section field: its default (or ``factory`` for lists and mappings), a one-line ``doc``
    (docs/configuration.md's table is generated from it) and numeric bounds (``item_ge``
    bounds every element of a list)."""
    meta = {"doc": doc, "ge": ge, "gt": gt, "le": le, "lt": lt, "item_ge": item_ge}
    if factory is not None:
        return field(default_factory=factory, metadata=meta)
    return field(default=default, metadata=meta)
