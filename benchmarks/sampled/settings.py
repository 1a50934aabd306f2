"""The ``sampled`` benchmark's settings: every row's system, deployment and overrides."""
from __future__ import annotations

from dataclasses import dataclass

THROTTLE = "1gbit"
STOCK_TRAINER = "benchmarks.stock_dgl_trainer"
WHOLE_GRAPH = "whole_graph.bin"  # the limit row's input, in the run's temp folder
# The tuned rows: every frontier sampled in the trainer's partition (2-hop halo, own seeds).
LOCAL_SAMPLING = ("sampled.local_sampling=true", "partition.halo_hops=2",
                  "sampled.seed_split=owned")
NO_FEATURE_CACHE = ("sampled.feature_memory_mb=0",)  # every remote row pulled per batch
PREFETCH = ("sampled.prefetch=2",)
# A budget that holds every remote row (50k x 100 floats, 20 MB exact) in each encoding, so
# every remote read goes through it: the codec's whole effect on accuracy and speed.
ALL_CACHED = {bits: ("sampled.feature_memory_mb=64", f"sampled.feature_cache_bits={bits}")
              for bits in (32, 8, 4)}


@dataclass(frozen=True)
class Setting:
    """One row: which system, how deployed, and its extra config overrides."""

    name: str
    system: str  # "stock", "dsgraph" or "dgl" (the limit: plain DGL, whole graph in memory)
    hosts: int
    parts: int
    trainers: int  # in all
    link: str  # "local", "veth" or "veth_throttled"
    sets: tuple[str, ...] = ()
    partition: str = ""  # which partitioning (a folder under the temp dir)


def settings() -> list[Setting]:
    """Every row, in table order: one host first, then each emulated link."""
    local = "local"
    rows = [
        Setting("limit: plain DGL in memory, 2 processes", "dgl", 1, 1, 2, local),
        Setting("stock DGL 1 part x 2 trainers", "stock", 1, 1, 2, local, partition="stock1"),
        Setting("dsgraph 2 parts x 1 trainer", "dsgraph", 1, 2, 2, local, partition="p2"),
        Setting("dsgraph 2 parts x 1 trainer, local sampling", "dsgraph", 1, 2, 2, local,
                LOCAL_SAMPLING, partition="p2h2"),
        Setting("dsgraph 2 parts x 1 trainer, no feature cache", "dsgraph", 1, 2, 2, local,
                NO_FEATURE_CACHE, partition="p2"),
        Setting("dsgraph 2 parts x 1 trainer, prefetch 2", "dsgraph", 1, 2, 2, local,
                PREFETCH, partition="p2"),
        Setting("dsgraph 1 part x 2 trainers", "dsgraph", 1, 1, 2, local, partition="p1"),
    ]
    for link in ("veth", "veth_throttled"):
        rows += [
            Setting(f"stock DGL 2 hosts ({link})", "stock", 2, 2, 2, link, partition="stock2"),
            Setting(f"dsgraph 2 hosts ({link})", "dsgraph", 2, 2, 2, link, partition="p2"),
            Setting(f"dsgraph 2 hosts ({link}), local sampling", "dsgraph", 2, 2, 2, link,
                    LOCAL_SAMPLING, partition="p2h2"),
            Setting(f"dsgraph 2 hosts ({link}), no feature cache", "dsgraph", 2, 2, 2, link,
                    NO_FEATURE_CACHE, partition="p2"),
        ]
        if link == "veth":  # the cache's encoding, every remote row cached
            rows += [Setting(f"dsgraph 2 hosts ({link}), all remote rows cached, "
                             f"{'exact' if bits == 32 else f'{bits}-bit'}", "dsgraph", 2, 2, 2,
                             link, sets, partition="p2") for bits, sets in ALL_CACHED.items()]
    return rows
