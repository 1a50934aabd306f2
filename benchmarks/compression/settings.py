"""The ``compression`` benchmark's settings: compression configs, models, scale."""
from __future__ import annotations

import dataclasses
from typing import Optional

from dsgraph.compress import CompressionConfig
from dsgraph.config import DatasetConfig

RP = 0.125  # EXACT's kept fraction D/R = 8
MODELS = {"sage": {"hidden": 256}, "gcn": {"hidden": 256}, "gat": {"hidden": 64, "heads": 4}}
# Accuracy: a 20k-node graph, epochs per model to reach the plateau (measured: GCN and GAT
# plateau by epoch 10, SAGE at lr 0.01 needs ~100), mean over the last ACC_LAST epochs.
ACC_NODES, ACC_EPOCHS, ACC_LAST = 20_000, {"sage": 100, "gcn": 30, "gat": 30}, 5
# Settings trained for accuracy (full-graph mode only), per model: training every setting of the
# sweep would take hours on 2 cores.
ACC_SETTINGS = {"sage": ("fp32", "row", "block256-uniform", "block256-optimal", "block256-rp"),
                "gcn": ("fp32", "block256-uniform", "block256-rp"),
                "gat": ("fp32", "block256-uniform")}
# Interleaved (fp32, setting) epoch pairs per setting (default: the scale's ``pairs``); more for
# the target setting and the row-wise / projection comparisons.
TIMING_PAIRS = {"block256-uniform": 5, "row": 2, "row-rp": 2, "block256-rp": 2}
# The settings whose real step peak is measured (a fresh process each).
PEAK_SETTINGS = ("fp32", "row", "block256-uniform", "block256-optimal", "block256-rp")


def compression_settings(blocks: list[int], optimal: list[int]
                         ) -> list[tuple[str, Optional[CompressionConfig]]]:
    """(label, config) pairs: fp32 (None), row-wise INT2, block INT2 uniform per G, optimal levels."""
    out: list[tuple[str, Optional[CompressionConfig]]] = [("fp32", None)]
    out.append(("row", CompressionConfig(enabled=True, granularity="row")))
    for g in blocks:
        out.append((f"block{g}-uniform", CompressionConfig(enabled=True, block_size=g)))
    for g in optimal:
        out.append((f"block{g}-optimal", CompressionConfig(enabled=True, block_size=g, levels="optimal")))
    out.append(("row-rp", CompressionConfig(enabled=True, granularity="row", projection=RP)))
    out.append(("block256-rp", CompressionConfig(enabled=True, block_size=256, projection=RP)))
    return out


@dataclasses.dataclass(frozen=True)
class Scale:
    """How large a run is: graphs, the sweep, models, batches."""

    data: DatasetConfig
    acc_data: DatasetConfig  # the graph trained for accuracy
    blocks: list[int]
    optimal: list[int]
    acc_epochs: dict[str, int]
    pairs: int
    models: dict[str, dict]
    batch: int
    fanouts: list[int]
    max_batches: int


def scale(quick: bool) -> Scale:
    """The full run's scale, or --quick's (seconds)."""
    if quick:
        data = DatasetConfig(num_nodes=2000, feat_dim=16, num_classes=4)
        return Scale(data, data, [64, 256], [256], {m: 6 for m in ACC_EPOCHS}, 1,
                     {"sage": {"hidden": 16}, "gcn": {"hidden": 16},
                      "gat": {"hidden": 4, "heads": 4}}, 256, [3, 3, 3], 2)
    # Accuracy runs to convergence on a 20k-node graph of the same generator (a 100k-node SAGE
    # needs 100+ full-graph epochs per setting: hours on 2 cores).
    return Scale(DatasetConfig(num_nodes=100_000), DatasetConfig(num_nodes=ACC_NODES),
                 [64, 128, 256, 512, 1024], [256], ACC_EPOCHS, 1, MODELS, 2048, [5, 5, 5], 3)
