"""The SAR runtime's memory model: one worker per partition holding its partition's graph and
features, the remote rows of one ring round and the full-graph activations of its own rows.

The constants were calibrated on measured peaks of real jobs (docs/memory.md).
"""
from __future__ import annotations

from dsgraph.config import Config
from dsgraph.memplan import MB, MemoryPlan, PartSizes, ProcessPlan, act_ratio, layer_widths

SAR_RUNTIME_MB = 548.0  # a SAR worker: torch + DGL + gloo, before its partition
SAR_GRAPH_X = 3.3  # SAR worker: edges, shards and their sparse formats per graph.dgl byte
SAR_ACT_X = 1.5  # full batch: tensors per (local rows x width) of a layer
SAR_POOL_X = 0.45  # compressed full batch: extra float32 copies of the largest layer


def plan_sar(cfg: Config, meta: dict, parts: list[PartSizes]) -> MemoryPlan:
    """One worker per partition."""
    layers = int(cfg.model.args.get("num_layers", 2))
    procs = []
    for m, part in enumerate(parts):
        widths = layer_widths(cfg, meta, part.row_bytes // 4, layers)
        layer = [part.nodes * (widths[i] + widths[i + 1]) * 4 for i in range(layers)]
        acts = sum(layer)
        remote = max(p.nodes for i, p in enumerate(parts) if i != m) if len(parts) > 1 else 0
        remote_rows = min(part.halo or remote, remote) * part.row_bytes
        procs.append(ProcessPlan(f"worker{m}", "worker", m, {
            "runtime": SAR_RUNTIME_MB, "graph": part.graph_bytes * SAR_GRAPH_X / MB,
            "features": part.feat_bytes / MB, "remote rows": remote_rows / MB,
            "activations": (part.nodes * part.row_bytes + SAR_ACT_X * acts * act_ratio(cfg))
            / MB}))
        if cfg.compression.enabled:  # float32 tensors alive beside the packed ones, unpack pool
            procs[-1].items["compression buffers"] = SAR_ACT_X * (
                acts * (1 - act_ratio(cfg)) + SAR_POOL_X * max(layer)) / MB
    notes = ([] if cfg.task_facts.trains_on == "nodes" else
             [f"task {cfg.task_name!r}: planned as node classification (its pair outputs are "
              f"not planned)"])
    shrink = ({"compression buffers": "compression.enabled: false"} if cfg.compression.enabled
              else {"activations": "compression.enabled: true"})
    return MemoryPlan(procs, notes, shrink)
