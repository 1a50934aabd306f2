"""Datasets: synthetic community graphs and user graph files (npz/DGL, DGL CSV, OGB node and
link folders) here; DGL's chunked graph format in :mod:`.chunked`, heterogeneous graphs in
:mod:`.hetero`, physics fields in :mod:`.fields`.

The graph loaders (:mod:`dsgraph.data.graphs`) are imported on first use (PEP 562): a process
that only streams a chunked folder (a partitioning worker) never loads DGL's graph readers.
"""
from __future__ import annotations

from dsgraph.lazy import lazy_exports

_EXPORTS = {"load_graph": "graphs", "GRAPH_KEYS": "chunked.contract"}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
