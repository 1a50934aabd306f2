"""A chunked graph folder of one node type and one edge type as a training dataset: the node
keys training reads, and labels of the kind ``dataset.target`` names, checked from the headers
alone (no DGL, no data read). Typed folders (several node / edge types) never come here:
``load_graph`` and ``python -m partition`` send them to :mod:`dsgraph.data.hetero.chunked`
(:func:`open_chunked` refuses one in one line, should it be passed)."""
from __future__ import annotations

from typing import Any

import numpy as np

from dsgraph.data.chunked.folder import ChunkedGraph, open_chunked
from dsgraph.data.chunked.contract import GRAPH_KEYS
from dsgraph.errors import DataError


def open_dataset(cfg: Any) -> ChunkedGraph:
    """The chunked graph folder of a ``dataset`` config section, checked to hold every node key
    training reads, with labels of the kind ``cfg.target`` names (only headers are read)."""
    for key, unset in (("split", None), ("add_reverse_edges", "auto")):
        if getattr(cfg, key) != unset:
            raise DataError(f"{cfg.path}: a chunked folder of one node type and one edge type "
                            f"is read as stored (masks from its node_data, edges as listed); "
                            f"remove dataset.{key} (only typed folders read it), got "
                            f"{getattr(cfg, key)!r:.80}")
    graph = open_chunked(cfg.path)
    keys = {k.name: k for k in graph.node_keys()}
    missing = [k for k in GRAPH_KEYS if k not in keys]
    if missing:
        raise DataError(f"{cfg.path}: node_data has no {missing[0]!r}; expected "
                        f"{', '.join(GRAPH_KEYS)} (python -m partition.chunk writes them)")
    dtype = np.dtype(keys["label"].dtype)
    if (dtype.kind == "f") != (cfg.target != "class"):
        wanted = "integer class ids" if cfg.target == "class" else "float targets"
        raise DataError(f"{cfg.path}: node_data 'label' is {dtype.name}; dataset.target "
                        f"{cfg.target!r} expects {wanted}")
    return graph
