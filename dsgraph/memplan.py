"""A job's memory plan before launch: each process's peak RSS (VmHWM), item by item, from
the config and the partition files' sizes, counts and tensor headers (no feature is loaded).

Items named ``... (shared)`` are a machine's shared memory (DistGraph servers' partition and
evaluation outputs; the pages a trainer touches count in its RSS too): :meth:`MemoryPlan.
machine_mb` counts each once per machine. Modes ``sampled`` and ``sar`` are planned, ``dsmpnn``
is not. The constants were calibrated on measured peaks of real jobs (docs/memory.md).
"""
from __future__ import annotations

import json
import math
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from dsgraph.distgraph.budget import cache_row_bytes, feature_budget_bytes
from dsgraph.errors import ConfigError, DataError, UserError
from dsgraph.partition.ndarray_file import read_headers

MB = float(1 << 20)
# Calibrated constants (MiB or multiples of file bytes), measured on real jobs.
SERVER_RUNTIME_MB = 498.0  # torch + DGL + RPC server, before the partition is loaded
TRAINER_RUNTIME_MB = 570.0  # torch + DGL + gloo + DDP + model, before any batch
SAR_RUNTIME_MB = 548.0  # a SAR worker: torch + DGL + gloo, before its partition
SERVER_GRAPH_X = 3.2  # server: graph.dgl bytes -> loaded structure, csc + coo, shared copy
SERVER_FEAT_X = 1.0  # server: node_feat.dgl bytes -> shared-memory tensors
TRAINER_GRAPH_X = 1.0  # trainer: touched pages of the shared partition graph per graph.dgl byte
TRAINER_FEAT_X = 1.0  # trainer: touched share of its partition's shared feature rows
SAR_GRAPH_X = 3.3  # SAR worker: edges, shards and their sparse formats per graph.dgl byte
BATCH_ACT_X = 1.0  # mini-batch: tensors per (rows x width) of a layer, forward + backward
BATCH_EDGE_BYTES = 40  # mini-batch: one sampled edge in a block (ids, formats)
SAR_ACT_X = 1.5  # full batch: tensors per (local rows x width) of a layer
SAR_POOL_X = 0.45  # compressed full batch: extra float32 copies of the largest layer
EVAL_X = 2.0  # layer-wise evaluation: one batch's inputs, outputs and block, per row width
LOOKUP_BYTES = 8  # the cache's per-node int64 lookup (one per node of the graph)

TRAINER_PHASES = {"mini-batch": "training", "evaluation (shared)": "evaluation",
                  "evaluation": "evaluation"}
# The setting that shrinks each item (check_plan names it; any other: partition.num_parts).
SHRINK = {"runtime": "cluster.trainers_per_machine", "feature cache": "sampled.feature_memory_mb",
          "mini-batch": "sampled.batch_size (or compression.enabled: true)",
          "activations": "compression.enabled: true", "evaluation": "sampled.eval_batch_size",
          "compression buffers": "compression.enabled: false"}


@dataclass
class ProcessPlan:
    """One process's planned peak RSS, item by item (MiB). ``phases`` maps items that peak at
    different times (a training mini-batch, the evaluation) to their phase: the total counts
    every other item and the largest phase only."""

    name: str
    role: str
    machine: int
    items: dict[str, float] = field(default_factory=dict)
    phases: dict[str, str] = field(default_factory=dict)

    def counted(self) -> dict[str, float]:
        """The items the peak is made of: those outside a phase, and the largest phase's."""
        sums: dict[str, float] = {}
        for key, phase in self.phases.items():
            if key in self.items:
                sums[phase] = sums.get(phase, 0.0) + self.items[key]
        top = max(sums, key=sums.get) if sums else None
        return {k: v for k, v in self.items.items()
                if k not in self.phases or self.phases[k] == top}

    @property
    def total_mb(self) -> float:
        """The planned peak RSS (MiB)."""
        return float(sum(self.counted().values()))


@dataclass
class MemoryPlan:
    """Every process of a job and what the planner could not plan."""

    processes: list[ProcessPlan]
    notes: list[str] = field(default_factory=list)

    def machine_mb(self) -> dict[int, float]:
        """MiB per machine: every process's private items, each shared item once."""
        out: dict[int, float] = {}
        for m in sorted({p.machine for p in self.processes}):
            private, shared = 0.0, {}
            for p in self.processes:
                if p.machine != m:
                    continue
                for key, mb in p.counted().items():
                    if key.endswith("(shared)"):
                        shared[key] = max(shared.get(key, 0.0), mb)
                    else:
                        private += mb
            out[m] = private + sum(shared.values())
        return out

    def peak_mb(self) -> float:
        """The largest single process's planned total (MiB)."""
        return max((p.total_mb for p in self.processes), default=0.0)

    def to_dict(self) -> dict:
        """JSON-able: per process role, machine, total and items; per machine totals."""
        return {"processes": {p.name: {"role": p.role, "machine": p.machine,
                                       "total_mb": round(p.total_mb, 1),
                                       "items": {k: round(v, 1) for k, v in p.items.items()}}
                              for p in self.processes},
                "machine_mb": {str(m): round(v, 1) for m, v in self.machine_mb().items()},
                "notes": list(self.notes)}


def _tensor_headers(path: Path) -> dict[str, tuple[tuple[int, ...], int]]:
    """name -> (shape, bytes per value) of a ``save_tensors`` file, read from its headers
    (:func:`dsgraph.partition.ndarray_file.read_headers`); the data is skipped, never read."""
    with open(path, "rb") as fh:
        return {h.name: (h.shape, h.value_bytes) for h in read_headers(fh)}


@dataclass
class _Part:
    nodes: int  # owned
    halo: int
    graph_bytes: int  # graph.dgl
    feat_bytes: int  # node_feat.dgl (every node tensor of the part)
    row_bytes: int  # one row of `feat`


def _read_parts(cfg: Any) -> tuple[dict, list[_Part]]:
    """The partition JSON (verified as training verifies it, sizes not hashed) and per part its
    counts and file sizes; one-line UserError / DataError when something is missing."""
    from dsgraph.partition.reader import partition_json  # imports DGL: only when planning
    path = partition_json(cfg, check_files=False)
    meta = json.loads(path.read_text())
    stats_file = path.parent / "partition_stats.json"
    stats = json.loads(stats_file.read_text()) if stats_file.is_file() else {}
    halos = {p.get("part"): p.get("halo_nodes", 0) for p in stats.get("parts", [])}
    nmaps = list(meta["node_map"].values())  # one per node type (heterogeneous graphs)
    parts = []
    for k in range(meta["num_parts"]):
        files = {}
        for key in ("part_graph", "node_feats"):
            f = path.parent / meta[f"part-{k}"][key]
            if not f.is_file():
                raise UserError(f"{f}: partition file not found; rerun `python -m partition "
                                f"--config {cfg.source} --force`")
            files[key] = f
        try:
            headers = _tensor_headers(files["node_feats"])
        except (OSError, struct.error, UnicodeDecodeError, ValueError):
            raise DataError(f"{files['node_feats']}: not a DGL tensor file; rerun `python -m "
                            f"partition --config {cfg.source} --force`") from None
        # every node type's `feat` (one, `_N/feat`, in a homogeneous graph): the widest row
        rows = [int(math.prod(shape[1:])) * size if len(shape) > 1 else size
                for key, (shape, size) in headers.items() if key.split("/")[-1] == "feat"]
        parts.append(_Part(sum(m[k][1] - m[k][0] for m in nmaps), int(halos.get(k, 0)),
                           files["part_graph"].stat().st_size,
                           files["node_feats"].stat().st_size, max(rows, default=4)))
    return meta, parts


def _widths(cfg: Any, meta: dict, in_width: int, layers: int) -> list[int]:
    """Input width of each layer, then the output width."""
    hidden = int(cfg.model.args.get("hidden", 128))
    out = int(meta.get("num_classes") or meta.get("num_targets") or 1)
    return [in_width] + [hidden] * (layers - 1) + [out]


def _act_ratio(cfg: Any) -> float:
    """Bytes of a saved activation per float32 byte (compression keeps ~bits/32 plus stats)."""
    c = cfg.compression
    return c.bits / 32 + 1 / c.block_size if c.enabled else 1.0


def _sampled_nodes(batch: int, fanouts: list[int], n: int, degree: float) -> list[float]:
    """Expected distinct nodes per block boundary, inputs first (the seeds last)."""
    rows = [float(min(batch, n))]
    for f in reversed(fanouts):
        d, draws = rows[0], rows[0] * min(f, degree)
        rows.insert(0, d + (n - d) * (1 - math.exp(-draws / max(n, 1))))
    return rows


def _minibatch_mb(cfg: Any, meta: dict, row_bytes: int) -> float:
    s, n = cfg.sampled, int(meta["num_nodes"])
    degree = int(meta["num_edges"]) / max(n, 1)
    rows = _sampled_nodes(s.batch_size, list(s.fanouts), n, degree)
    widths = _widths(cfg, meta, row_bytes // 4, len(s.fanouts))
    inputs = rows[0] * row_bytes
    layer = [rows[i + 1] * (widths[i] + widths[i + 1]) * 4 for i in range(len(s.fanouts))]
    edges = sum(rows[i + 1] * min(f, degree) for i, f in enumerate(s.fanouts))
    acts = BATCH_ACT_X * sum(layer) * _act_ratio(cfg)
    if cfg.compression.enabled:  # backward decodes one layer's saved tensors at a time
        acts += BATCH_ACT_X * max(layer)
    return (inputs + acts + BATCH_EDGE_BYTES * edges) / MB


def _cache_mb(cfg: Any, meta: dict, part: _Part) -> float:
    """``feature_budget_bytes`` (ids included; at most every remote row) + an int64 per node."""
    s, T = cfg.sampled, cfg.cluster.trainers_per_machine
    budget = feature_budget_bytes(s.feature_memory_mb, part.nodes, part.row_bytes, T)
    row = cache_row_bytes(part.row_bytes // 4, s.feature_cache_bits)
    every = (int(meta["num_nodes"]) - part.nodes) * row
    return 0.0 if budget < row else (min(budget, every) + LOOKUP_BYTES * meta["num_nodes"]) / MB


def _plan_sampled(cfg: Any, meta: dict, parts: list[_Part]) -> MemoryPlan:
    c, s = cfg.cluster, cfg.sampled
    S, T = c.servers_per_machine, c.trainers_per_machine
    widths = _widths(cfg, meta, 0, len(s.fanouts))[1:]  # each layer's output width
    degree = int(meta["num_edges"]) / max(int(meta["num_nodes"]), 1)
    procs, notes = [], []
    batch = _minibatch_mb(cfg, meta, parts[0].row_bytes)
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
                "feature cache": _cache_mb(cfg, meta, part), "mini-batch": batch,
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
    return MemoryPlan(procs, notes)


def _plan_sar(cfg: Any, meta: dict, parts: list[_Part]) -> MemoryPlan:
    layers = int(cfg.model.args.get("num_layers", 2))
    procs = []
    for m, part in enumerate(parts):
        widths = _widths(cfg, meta, part.row_bytes // 4, layers)
        layer = [part.nodes * (widths[i] + widths[i + 1]) * 4 for i in range(layers)]
        acts = sum(layer)
        remote = max(p.nodes for i, p in enumerate(parts) if i != m) if len(parts) > 1 else 0
        remote_rows = min(part.halo or remote, remote) * part.row_bytes
        procs.append(ProcessPlan(f"worker{m}", "worker", m, {
            "runtime": SAR_RUNTIME_MB, "graph": part.graph_bytes * SAR_GRAPH_X / MB,
            "features": part.feat_bytes / MB, "remote rows": remote_rows / MB,
            "activations": (part.nodes * part.row_bytes + SAR_ACT_X * acts * _act_ratio(cfg))
            / MB}))
        if cfg.compression.enabled:  # float32 tensors alive beside the packed ones, unpack pool
            procs[-1].items["compression buffers"] = SAR_ACT_X * (
                acts * (1 - _act_ratio(cfg)) + SAR_POOL_X * max(layer)) / MB
    return MemoryPlan(procs, [])


def plan_job(cfg: Any) -> MemoryPlan:
    """The memory plan of ``cfg``'s training job (a :class:`dsgraph.config.Config`)."""
    mode = cfg.train.mode
    if mode not in ("sampled", "sar"):  # dsmpnn
        return MemoryPlan([], [f"train.mode {mode!r}: not planned"])
    meta, parts = _read_parts(cfg)
    plan = (_plan_sampled if mode == "sampled" else _plan_sar)(cfg, meta, parts)
    if cfg.task_facts.trains_on != "nodes":
        plan.notes.append(f"task {cfg.task_name!r}: planned as node classification")
    return plan


def host_available_mb() -> float:
    """MemAvailable of /proc/meminfo in MiB (inf when unreadable)."""
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return math.inf


def check_plan(cfg: Any, plan: MemoryPlan, available_mb: Optional[float] = None) -> None:
    """Raise a one-line ConfigError when a machine's plan exceeds ``cluster.memory_limit_mb``
    (0: ``available_mb``, else this host's MemAvailable)."""
    limit = cfg.cluster.memory_limit_mb or (available_mb if available_mb is not None
                                            else host_available_mb())
    for m, total in plan.machine_mb().items():
        if total <= limit:
            continue
        procs = [p for p in plan.processes if p.machine == m]
        proc, item = max(((p, k) for p in procs for k in p.counted()),
                         key=lambda pk: pk[0].items[pk[1]])
        what = "cluster.memory_limit_mb" if cfg.cluster.memory_limit_mb else "available memory"
        raise ConfigError(f"{cfg.source}: machine {m} plans {_mb(total)} MiB, over the "
                          f"{_mb(limit)} MiB limit ({what}); largest item: {proc.name} "
                          f"{item!r} {_mb(proc.items[item])} MiB; shrink it with "
                          f"{_shrink(cfg, item)}")


def _shrink(cfg: Any, item: str) -> str:  # the setting that shrinks an item
    if cfg.compression.enabled and item in ("mini-batch", "activations"):
        return {"mini-batch": "sampled.batch_size"}.get(item, "partition.num_parts")
    return SHRINK.get(item, "partition.num_parts")


def _mb(x: float) -> str:  # MiB with thousands separators, one decimal below 100
    return f"{x:,.1f}" if x < 100 else f"{x:,.0f}"


def format_plan(plan: MemoryPlan) -> str:
    """A plain-text table: one row per process, its items and total (MiB), then machines."""
    keys: list[str] = []
    for p in plan.processes:
        keys += [k for k in p.items if k not in keys]
    head = ["process", "machine"] + keys + ["total"]
    rows = [[p.name, str(p.machine)] + [_mb(p.items[k]) if k in p.items else "-" for k in keys]
            + [_mb(p.total_mb)] for p in plan.processes]
    width = [max(len(r[i]) for r in [head] + rows) for i in range(len(head))]
    fmt = lambda r: "  ".join(c.ljust(w) if i < 2 else c.rjust(w)  # noqa: E731
                              for i, (c, w) in enumerate(zip(r, width)))
    lines = ["memory plan (MiB, planned peak RSS per process; '(shared)' = the machine's shared "
             "memory, counted once per machine)", fmt(head)] + [fmt(r) for r in rows]
    if any(p.phases for p in plan.processes):
        lines.append("items of the 'training' and 'evaluation' phases peak at different times: "
                     "a total counts the larger phase")
    lines += [f"machine {m}: {_mb(v)} MiB" for m, v in plan.machine_mb().items()]
    if plan.processes:
        lines.append(f"largest process: {_mb(plan.peak_mb())} MiB")
    lines += [f"note: {n}" for n in plan.notes]
    return "\n".join(lines)
