"""What a job's memory plan is made of, whatever its mode: each process's peak RSS (VmHWM),
item by item, the partition sizes a mode's model reads (counts, file sizes and tensor headers:
no feature is loaded), and the check and table of ``python -m train --plan``.

Each mode owns its memory model (:meth:`dsgraph.trainer.Strategy.plan_memory`: the sampled
runtime's in :mod:`dsgraph.modes.sampled.memory`, SAR's in :mod:`dsgraph.modes.sar.memory`).
Items named ``... (shared)`` are a machine's shared memory (DistGraph servers' partition and
evaluation outputs; the pages a trainer touches count in its RSS too): :meth:`MemoryPlan.
machine_mb` counts each once per machine.
"""
from __future__ import annotations

import json
import math
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from dsgraph.errors import ConfigError, DataError, UserError
from dsgraph.partition.ndarray_file import read_headers

MB = float(1 << 20)


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
    # item -> the setting that shrinks it (check_plan names it; any other: partition.num_parts)
    shrink: dict[str, str] = field(default_factory=dict)

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
class PartSizes:
    """What a mode's memory model reads of one partition, without loading it."""

    nodes: int  # owned
    halo: int
    graph_bytes: int  # graph.dgl
    feat_bytes: int  # node_feat.dgl (every node tensor of the part)
    row_bytes: int  # one row of `feat`


def read_parts(cfg: Any) -> tuple[dict, list[PartSizes]]:
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
        parts.append(PartSizes(sum(m[k][1] - m[k][0] for m in nmaps), int(halos.get(k, 0)),
                               files["part_graph"].stat().st_size,
                               files["node_feats"].stat().st_size, max(rows, default=4)))
    return meta, parts


def layer_widths(cfg: Any, meta: dict, in_width: int, layers: int) -> list[int]:
    """Input width of each layer, then the output width."""
    hidden = int(cfg.model.args.get("hidden", 128))
    out = int(meta.get("num_classes") or meta.get("num_targets") or 1)
    return [in_width] + [hidden] * (layers - 1) + [out]


def act_ratio(cfg: Any) -> float:
    """Bytes of a saved activation per float32 byte (compression keeps ~bits/32 plus stats)."""
    c = cfg.compression
    return c.bits / 32 + 1 / c.block_size if c.enabled else 1.0


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
                          f"{plan.shrink.get(item, 'partition.num_parts')}")


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
