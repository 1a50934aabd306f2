"""Datasets: synthetic community graphs, user graph files (npz/DGL, DGL CSV, OGB node and link
folders, DGL's chunked graph format), physics.

The graph loaders (:mod:`dsgraph.data.graphs`) are imported on first use (PEP 562): a process
that only streams a chunked folder (a partitioning worker) never loads DGL's graph readers.
"""
from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {"load_graph": "graphs", "open_chunked_dataset": "graphs", "GRAPH_KEYS": "graphs"}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    """Import the submodule that defines ``name`` (see ``_EXPORTS``) and return it from there."""
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)


def __dir__() -> list[str]:
    """Module attributes plus the lazily imported public names."""
    return sorted({*globals(), *__all__})
