"""The sections only one training mode reads, each declaring its mode, the datasets it trains
on, its process counts and its cross-field rules (:class:`ModeSection`).

A new mode adds its section here (and a field of :class:`~dsgraph.config.sections.Config`);
:mod:`dsgraph.config.checks` runs the rules of the section whose ``MODE`` is ``train.mode``.
"""
from __future__ import annotations

import reprlib
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, Optional

from dsgraph.config.fields import (MAX_BATCH, MAX_FANOUT, MAX_LAYERS, MAX_NODES, MAX_PER_HOST,
                                   MAX_POINTS, MAX_PROCESSES, MAX_REPEATS, MAX_SAMPLES, opt)
from dsgraph.errors import ConfigError
from dsgraph.config.tasks import tasks_of_mode

GRAPH_DATASETS = ("synthetic", "file", "csv", "ogb", "chunked")
# Heterogeneous graphs (several node and edge types) train in sampled mode only.
HETERO_DATASETS = ("synthetic_hetero",)
FIELD_DATASETS = ("darcy", "airfoil", "fields")
# Datasets that carry edge targets (planted in a generated graph, or the user's edge columns).
EDGE_DATASETS = ("synthetic", "csv", "file")


class ModeSection:
    """What a mode's section declares besides its fields (``cfg`` is the whole Config)."""

    MODE: ClassVar[str]  # the train.mode value this section configures
    DATASETS: ClassVar[tuple[str, ...]]  # dataset.name values the mode trains on
    # Whether it trains partitioned graphs, and heterogeneous ones among them.
    PARTITIONED: ClassVar[bool] = True
    HETERO: ClassVar[bool] = False
    # task.name values the mode runs (each task's facts name its modes); the first is auto's
    TASKS: ClassVar[tuple[str, ...]]

    def num_machines(self, cfg: Any) -> int:
        """Hosts of the job (lines of ``cluster.ip_config``): one per partition by default."""
        return cfg.partition.num_parts

    def num_workers(self, cfg: Any) -> int:
        """Training processes of the job: one per machine by default."""
        return self.num_machines(cfg)

    def check(self, cfg: Any) -> None:
        """Raise a one-line ConfigError for a combination only this mode rules out."""


@dataclass
class SampledConfig(ModeSection):
    """``train.mode: sampled``: mini-batches drawn by DGL's neighbour sampler over DistGraph."""

    MODE: ClassVar[str] = "sampled"
    DATASETS: ClassVar[tuple[str, ...]] = GRAPH_DATASETS + HETERO_DATASETS
    HETERO: ClassVar[bool] = True
    TASKS: ClassVar[tuple[str, ...]] = tasks_of_mode("sampled")

    batch_size: int = opt(1024, "seed nodes (edge tasks, `link_prediction`: training edges) per "
                                "mini-batch and trainer", ge=1, cap=MAX_BATCH)
    fanouts: list = opt(doc="neighbours sampled per layer (input layer first)",
                        factory=lambda: [10, 25], item_ge=1, item_cap=MAX_FANOUT,
                        max_len=MAX_LAYERS)
    eval: Literal["layerwise", "sampled"] = opt(
        "layerwise", "`layerwise` (exact full-neighbour inference, needs `forward_layer`) or "
                     "`sampled` (with `fanouts`)")
    eval_batch_size: int = opt(4096, "nodes per evaluation batch", ge=1, cap=MAX_BATCH)
    feature_memory_mb: Optional[float] = opt(
        None, "MiB per trainer for feature rows owned by other partitions, held in the trainer "
              "(`feature_cache_policy` picks which); the trainer's own partition's rows are read "
              "from its server's shared memory, never copied. null = a quarter of the trainer's "
              "share of its partition's feature bytes; 0 = none (every remote row over RPC)",
        ge=0, cap=2 ** 30)  # 1 PiB: finite, so MiB -> rows cannot overflow
    feature_cache_bits: Literal[32, 8, 4] = opt(
        8, "bits per cached feature value: 8 or 4 keep rows block-wise quantized (a minimum and "
           "scale per block of 64 values), decoded per batch, so the budget holds ~4x / ~8x "
           "the rows; 32 = exact")
    feature_cache_policy: Literal["frequency", "degree"] = opt(
        "frequency", "which remote rows the budget holds: `frequency` (most read in "
                     "mini-batches pre-sampled from the trainer's seeds before training) or "
                     "`degree` (highest global out-degree)")
    rematerialize: bool = opt(False, "aggregate each batch's fetched source nodes one owning "
                                     "partition at a time and rebuild them in backward (SAR-style)")
    remat_layers: int = opt(1, "with `rematerialize`: the leading layers that run that way; the "
                               "first over fetched features, later ones over the previous "
                               "layer's output in groups of `seqagg.chunk_rows` rows (raise it "
                               "when a later layer's backward sets the peak, as GAT's second)",
                            ge=1, cap=MAX_LAYERS)
    prefetch: int = opt(0, "mini-batches a background thread samples and reads ahead of "
                           "the one training (0 = none: with the feature cache little RPC is left "
                           "to hide; off with `rematerialize`, whose forward reads rows itself, "
                           "and with sampler processes)", ge=0,
                       cap=256)  # each one a sampled mini-batch held in memory
    seed_split: Literal["even", "owned"] = opt(
        "even", "training seeds per trainer: `even` (DGL's `node_split`: equal counts, topped "
                "up with nodes of other partitions) or `owned` (the trainer's partition's own "
                "nodes only, so their neighbourhoods stay local; counts may differ)")
    relation_fanouts: dict = opt(doc="heterogeneous graphs: `{relation: [per-layer fanouts]}` "
                                     "for the named relations (the others sample `fanouts`); "
                                     "0 skips a relation in that layer", factory=dict)
    embedding_dim: int = opt(64, "heterogeneous graphs: width of the learnable embedding that "
                                 "nodes of a type without `feat` get (DGL DistEmbedding, held by "
                                 "the servers, sparse Adam updates)", ge=1, cap=MAX_FANOUT)
    embedding_lr: float = opt(0.05, "heterogeneous graphs: learning rate of those embeddings",
                              gt=0)
    aggregate_in_place: bool = opt(True, "built-in SAGE models (mean, gcn) sum the first "
                                         "block's source rows where they are stored (the "
                                         "partition's shared memory, the cache's decoded rows) "
                                         "instead of gathering them into one tensor first: the "
                                         "same function, one copy of every input row fewer")
    local_sampling: bool = opt(False, "sample the neighbourhoods the trainer's partition stores "
                                      "in full (inner nodes, and halo nodes with `partition."
                                      "halo_hops: 2`) locally; only the rest over RPC")

    def num_workers(self, cfg: Any) -> int:
        """Trainers: ``cluster.trainers_per_machine`` on each partition's machine."""
        return cfg.partition.num_parts * cfg.cluster.trainers_per_machine

    def check(self, cfg: Any) -> None:
        """DistGraph serves float32; at most one rematerialized layer per fanout."""
        if cfg.train.dtype != "float32":
            raise ConfigError(f"{cfg.source}: train.dtype: expected 'float32' for train.mode "
                              f"'sampled' (DistGraph serves float32 features), got "
                              f"{cfg.train.dtype!r}")
        if cfg.task_facts.reads_edges:
            # Edge batches are sampled in the trainer (dsgraph.modes.sampled.links / .edges).
            if cfg.cluster.samplers_per_trainer:
                raise ConfigError(f"{cfg.source}: cluster.samplers_per_trainer: task "
                                  f"{cfg.task_name!r} samples in the trainer; expected 0, got "
                                  f"{cfg.cluster.samplers_per_trainer}")
        for rel, fan in self.relation_fanouts.items():
            if (not isinstance(fan, list) or len(fan) != len(self.fanouts)
                    or not all(isinstance(f, int) and not isinstance(f, bool)
                               and 0 <= f <= MAX_FANOUT for f in fan)):
                # reprlib: bounded, whatever a hostile config holds (limits.short_repr would
                # import the sections module that imports this one)
                raise ConfigError(f"{cfg.source}: sampled.relation_fanouts.{reprlib.repr(rel)}: "
                                  f"expected {len(self.fanouts)} fanouts in [0, {MAX_FANOUT}] "
                                  f"(one per layer, as sampled.fanouts), got {reprlib.repr(fan)}")
        if self.rematerialize and self.remat_layers > len(self.fanouts):
            raise ConfigError(f"{cfg.source}: sampled.remat_layers: expected at most one per "
                              f"layer ({len(self.fanouts)} fanouts), got {self.remat_layers}")


@dataclass
class SarConfig(ModeSection):
    """``train.mode: sar``: full-batch sequential aggregation and rematerialization."""

    MODE: ClassVar[str] = "sar"
    DATASETS: ClassVar[tuple[str, ...]] = GRAPH_DATASETS
    TASKS: ClassVar[tuple[str, ...]] = tasks_of_mode("sar")

    mode: Literal["sar", "sa", "one_shot"] = opt(
        "sar", "`sar` (one remote part at a time, recompute in backward), `sa` (keep fetched "
               "parts), `one_shot` (all halo rows at once)")
    prefetch: bool = opt(False, "post the next ring round's transfers before aggregating this "
                                "one (one more remote block alive)")
    rebuild_inputs: bool = opt(True, "`sar` mode: an aggregate of the input features that a layer "
                                     "saves for backward (SAGE mean with in_feats <= out_feats) "
                                     "is computed again in backward instead of kept: one "
                                     "destination-sized tensor less through every later peak, "
                                     "one more ring at the input width")


@dataclass
class PhysicsConfig(ModeSection):
    """``train.mode: dsmpnn``: physics data, graph sampling and domain decomposition."""

    MODE: ClassVar[str] = "dsmpnn"
    DATASETS: ClassVar[tuple[str, ...]] = FIELD_DATASETS
    PARTITIONED: ClassVar[bool] = False
    TASKS: ClassVar[tuple[str, ...]] = tasks_of_mode("dsmpnn")

    resolution: int = opt(64, "Darcy grid nodes per side", ge=8, le=421)
    test_resolution: Optional[int] = opt(None, "Darcy: also test on `test_samples` fields at "
                                               "this grid size (`transfer_rmse`, "
                                               "`transfer_rel_l2`)", ge=8, le=421)
    train_samples: int = opt(100, "training fields (`darcy`, `airfoil`)", ge=1, cap=MAX_SAMPLES)
    test_samples: int = opt(20, "test fields (`darcy`, `airfoil`)", ge=1, cap=MAX_SAMPLES)
    points: int = opt(5000, "airfoil points per field", ge=100, cap=MAX_POINTS)
    test_points: Optional[int] = opt(None, "airfoil: also test on `test_samples` fields of "
                                           "this many points (`transfer_rmse`, "
                                           "`transfer_rel_l2`)", ge=100, cap=MAX_POINTS)
    batch_fields: int = opt(1, "fields per optimizer step (their gradients averaged)", ge=1,
                            cap=MAX_SAMPLES)
    sampled_nodes: int = opt(1000, "s: nodes drawn per field (resampled every epoch)", ge=2,
                             cap=MAX_POINTS)
    radius: float = opt(0.1, "neighbourhood radius (dataset coordinates)", gt=0)
    max_edges: int = opt(16, "n_e: cap on incoming edges per node", ge=1, cap=MAX_FANOUT)
    workers: int = opt(1, "P: subdomains, one worker process each", ge=1, cap=MAX_PROCESSES)
    decomposition: Literal["bisection", "metis"] = opt("bisection", "how nodes are split into "
                                                                    "subdomains")
    gen_workers: int = opt(2, "processes generating the dataset", ge=1, cap=MAX_PER_HOST)
    infer_repeats: int = opt(2, "full-field inference: random covers averaged", ge=1,
                             cap=MAX_REPEATS)
    infer_passes: int = opt(1, "evaluation predicts the test fields this many times; "
                               "`infer_s` is the median pass (steadier timings)", ge=1,
                             cap=MAX_REPEATS)

    def num_machines(self, cfg: Any) -> int:
        """One host (and one worker) per subdomain."""
        return self.workers

    def check(self, cfg: Any) -> None:
        """Every subdomain gets at least one sampled node."""
        if self.sampled_nodes < self.workers:
            raise ConfigError(f"{cfg.source}: physics.sampled_nodes: expected >= physics.workers "
                              f"({self.workers}), got {self.sampled_nodes}")


@dataclass
class SeqaggConfig:
    """The sequential-aggregation core shared by ``sar`` and ``sampled.rematerialize``."""

    chunk_rows: int = opt(0, "source rows per chunk of the sequential-aggregation core (`sar`, "
                             "where remote rows also move in pieces of this many rows, and "
                             "`sampled.rematerialize`, where it also bounds the destination rows "
                             "of each output run); 0 = a whole group at once", ge=0,
                             cap=MAX_NODES)
