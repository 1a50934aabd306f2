"""The sampled runtime's memory model: per machine, DistGraph servers holding the partition in
shared memory and trainers holding the runtime, the feature cache, one mini-batch (or one
evaluation batch) and their share of the evaluation outputs.

The constants were calibrated on measured peaks of real jobs (docs/memory.md).
"""
from __future__ import annotations

import math

from dsgraph.config import Config
from dsgraph.distgraph.budget import cache_row_bytes, feature_budget_bytes
from dsgraph.memplan import MB, MemoryPlan, PartSizes, ProcessPlan, act_ratio, layer_widths

SERVER_RUNTIME_MB = 498.0  # torch + DGL + RPC server, before the partition is loaded
TRAINER_RUNTIME_MB = 570.0  # torch + DGL + gloo + DDP + model, before any batch
SERVER_GRAPH_X = 3.2  # server: graph.dgl bytes -> loaded structure, csc + coo, shared copy
SERVER_FEAT_X = 1.0  # server: node_feat.dgl bytes -> shared-memory tensors
TRAINER_GRAPH_X = 1.0  # trainer: touched pages of the shared partition graph per graph.dgl byte
TRAINER_FEAT_X = 1.0  # trainer: touched share of its partition's shared feature rows
BATCH_ACT_X = 1.0  # mini-batch: tensors per (rows x width) of a layer, forward + backward
BATCH_EDGE_BYTES = 40  # mini-batch: one sampled edge in a block (ids, formats)
EVAL_X = 2.0  # layer-wise evaluation: one batch's inputs, outputs and block, per row width
LOOKUP_BYTES = 8  # the cache's per-node int64 lookup (one per node of the graph)

# A trainer's items that peak at different times -> their phase.
TRAINER_PHASES = {"mini-batch": "training", "evaluation (shared)": "evaluation",
                  "evaluation": "evaluation"}


def shrink_settings(cfg: Config) -> dict[str, str]:
    """Item -> the setting that shrinks it."""
    batch = "sampled.batch_size" + ("" if cfg.compression.enabled
                                    else " (or compression.enabled: true)")
    return {"runtime": "cluster.trainers_per_machine",
            "feature cache": "sampled.feature_memory_mb", "mini-batch": batch,
            "evaluation": "sampled.eval_batch_size"}


def sampled_nodes(seeds: int, fanouts: list[int], n: int, degree: float) -> list[float]:
    """Expected distinct nodes per block boundary from ``seeds`` seed nodes, inputs first (the
    seeds last)."""
    rows = [float(min(seeds, n))]
    for f in reversed(fanouts):
        d, draws = rows[0], rows[0] * min(f, degree)
        rows.insert(0, d + (n - d) * (1 - math.exp(-draws / max(n, 1))))
    return rows


def minibatch_mb(cfg: Config, meta: dict, row_bytes: int, seeds: int) -> float:
    """One mini-batch from ``seeds`` seed nodes: input rows, activations, sampled edges."""
    s, n = cfg.sampled, int(meta["num_nodes"])
    degree = int(meta["num_edges"]) / max(n, 1)
    rows = sampled_nodes(seeds, list(s.fanouts), n, degree)
    widths = layer_widths(cfg, meta, row_bytes // 4, len(s.fanouts))
    inputs = rows[0] * row_bytes
    layer = [rows[i + 1] * (widths[i] + widths[i + 1]) * 4 for i in range(len(s.fanouts))]
    edges = sum(rows[i + 1] * min(f, degree) for i, f in enumerate(s.fanouts))
    acts = BATCH_ACT_X * sum(layer) * act_ratio(cfg)
    if cfg.compression.enabled:  # backward decodes one layer's saved tensors at a time
        acts += BATCH_ACT_X * max(layer)
    return (inputs + acts + BATCH_EDGE_BYTES * edges) / MB


def cache_mb(cfg: Config, meta: dict, part: PartSizes) -> float:
    """``feature_budget_bytes`` (ids included; at most every remote row) + an int64 per node."""
    s, T = cfg.sampled, cfg.cluster.trainers_per_machine
    budget = feature_budget_bytes(s.feature_memory_mb, part.nodes, part.row_bytes, T)
    row = cache_row_bytes(part.row_bytes // 4, s.feature_cache_bits)
    every = (int(meta["num_nodes"]) - part.nodes) * row
    return 0.0 if budget < row else (min(budget, every) + LOOKUP_BYTES * meta["num_nodes"]) / MB


def plan_sampled(cfg: Config, meta: dict, parts: list[PartSizes], seeds: int) -> MemoryPlan:
    """Servers and trainers of every machine; a mini-batch starts from ``seeds`` seed nodes
    (what the batch source says one batch holds at most)."""
    c, s = cfg.cluster, cfg.sampled
    S, T = c.servers_per_machine, c.trainers_per_machine
    widths = layer_widths(cfg, meta, 0, len(s.fanouts))[1:]  # each layer's output width
    degree = int(meta["num_edges"]) / max(int(meta["num_nodes"]), 1)
    procs, notes = [], []
    batch = minibatch_mb(cfg, meta, parts[0].row_bytes, seeds)
    for m, part in enumerate(parts):
        graph, feats = part.graph_bytes / MB, part.feat_bytes / MB
        evald = part.nodes * sum(widths) * 4 / MB  # DistTensors of every layer, this part's rows
        for j in range(S):
            items = {"runtime": SERVER_RUNTIME_MB,
                     "graph (shared)": graph * (SERVER_GRAPH_X if j == 0 else TRAINER_GRAPH_X)}
            if j == 0:
                items.update({"features (shared)": feats * SERVER_FEAT_X,
                              "evaluation (shared)": evald})
            procs.append(ProcessPlan(f"server{m * S + j}", "server", m, items))
        own_rows = part.nodes * part.row_bytes / MB
        eval_rows = min(min(s.eval_batch_size, part.nodes) * (1 + degree), meta["num_nodes"])
        eval_mb = EVAL_X * eval_rows * max(part.row_bytes, 4 * max(widths)) / MB
        for t in range(T):
            procs.append(ProcessPlan(f"trainer{m * T + t}", "trainer", m, {
                "runtime": TRAINER_RUNTIME_MB, "graph (shared)": graph * TRAINER_GRAPH_X,
                "features (shared)": own_rows * TRAINER_FEAT_X,
                "feature cache": cache_mb(cfg, meta, part), "mini-batch": batch,
                "evaluation (shared)": evald / T, "evaluation": eval_mb}, dict(TRAINER_PHASES)))
    if S > 1:
        notes.append("backup servers (servers_per_machine > 1) are planned as runtime plus the "
                     "shared graph pages they touch")
    if len(meta["ntypes"]) > 1:
        notes.append("heterogeneous graph: every node type's rows (and cached rows) planned at "
                     "the widest `feat` row; embeddings of featureless types are not planned")
    if s.rematerialize or s.prefetch or c.samplers_per_trainer:
        notes.append("sampled.rematerialize / prefetch / samplers_per_trainer are not planned: "
                     "the mini-batch item assumes one batch in the trainer")
    return MemoryPlan(procs, notes, shrink_settings(cfg))
