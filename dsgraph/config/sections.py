"""The sections of a run configuration, one dataclass each; every field documents itself.

Generic training knobs live in ``train``; what only one mode reads lives in that mode's section
(``sampled``, ``sar``, ``physics``). Cross-field rules are in :mod:`dsgraph.config.checks`.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Literal, Optional

from dsgraph.config.fields import opt


@dataclass
class DatasetConfig:
    """Which data to train on: a generated graph, a user's graph files or physics fields."""

    name: Literal["synthetic", "file", "csv", "ogb", "darcy", "airfoil", "fields"] = opt(
        "synthetic", "graphs (modes `sampled`, `sar`): `synthetic` (generated), `file`, `csv` "
        "(a DGL CSV folder), `ogb` (an OGB node-property folder); physics fields (mode "
        "`dsmpnn`): `darcy`, `airfoil` (generated), `fields` (a file of input and solution "
        "fields)")
    path: Optional[str] = opt(None, "what `file`, `csv`, `ogb` and `fields` read (other datasets "
                                    "take none): a `dgl.save_graphs` file or an `.npz` (`src`, "
                                    "`dst`, `feat`, `label`, masks); a DGL CSV folder "
                                    "(`meta.yaml`); an OGB folder (`raw/`, `split/`); an `.npz` "
                                    "or `torch.save`d dict of tensors (`x_key`, `y_key`, "
                                    "`pos_key`)")
    split: Optional[list] = opt(None, "`file`/`csv`/`ogb`: `[train, val, test]` fractions of "
                                      "the labelled nodes, drawn with `seed`; when set it "
                                      "replaces the file's masks or OGB's official split "
                                      "(needed if the data has none); `fields` without "
                                      "`test_path`: `[train, 0, test]` fractions of the samples")
    test_path: Optional[str] = opt(None, "`fields`: a file of test fields (same keys and "
                                         "channels; any grid size or point count)")
    transfer_path: Optional[str] = opt(None, "`fields`: a second test file, say at another "
                                             "resolution; reported as `transfer_rmse`, "
                                             "`transfer_rel_l2`")
    x_key: str = opt("x", "`fields`: key of the input fields, a grid `(N, s, s[, C])` or "
                          "points `(N, P[, C])`")
    y_key: str = opt("y", "`fields`: key of the solution fields, laid out like `x_key`'s")
    pos_key: str = opt("pos", "`fields`: key of the coordinates, `(N, P, d)` or shared `(P, "
                              "d)` (points: required); a grid without it lies on the unit "
                              "square")
    add_reverse_edges: Literal["auto", True, False] = opt(
        "auto", "`file`/`csv`/`ogb`: append every edge reversed; `auto` = OGB's convention "
                "per dataset (ogbn-products, -proteins: yes; -arxiv, -papers100M: no; by the "
                "folder's name), the edges as stored for `file` and `csv`")
    cache_dir: str = opt("data", "generated datasets and parsed `csv` folders are cached here, "
                                 "keyed by a hash of their parameters or files")
    seed: int = opt(0, "seed of the generated dataset and of `split`")
    num_nodes: int = opt(100_000, "synthetic graph: nodes", ge=10)
    avg_degree: float = opt(10.0, "synthetic graph: mean in-degree", gt=0)
    num_classes: int = opt(40, "synthetic graph: classes (= communities)", ge=2)
    feat_dim: int = opt(100, "synthetic graph: feature width", ge=1)
    homophily: float = opt(0.85, "fraction of edges inside a community", ge=0, le=1)
    feat_signal: float = opt(0.2, "features = `feat_signal * mu[class] + N(0, 1)`", ge=0)
    degree_alpha: float = opt(2.5, "Pareto exponent of the expected degrees", gt=1)
    train_frac: float = opt(0.1, "synthetic graph: fraction of nodes in the training mask "
                                 "(user files: `split`)", gt=0, lt=1)
    val_frac: float = opt(0.1, "synthetic graph: fraction in the validation mask (disjoint)",
                          ge=0, lt=1)
    test_frac: float = opt(0.1, "synthetic graph: fraction in the test mask (disjoint)",
                           gt=0, lt=1)


@dataclass
class PartitionConfig:
    """Offline partitioning: method, number of parts and where the DGL files go."""

    method: Literal["metis", "random"] = opt("metis", "node assignment: METIS k-way (pymetis) or "
                                                      "balanced random")
    num_parts: int = opt(2, "partitions; one machine each in `sampled`, one worker each in "
                            "`sar`", ge=1)
    out_dir: str = opt("partitions/default", "folder of the partition files; training reads "
                                             "them there")
    graph_name: str = opt("graph", "name of the partition JSON (`<graph_name>.json`)")
    halo_hops: int = opt(1, "halo layers stored per part", ge=1)
    balance_train: bool = opt(True, "METIS constraint: equal training nodes per part "
                                    "(then capped at 1.01x their mean)")
    balance_edges: bool = opt(True, "METIS constraint: equal degree sum per part")
    seed: int = opt(0, "METIS / random assignment seed")


@dataclass
class ModelConfig:
    """The model: a registered name or ``package.module:ClassName`` and its constructor args."""

    name: str = opt("sage", "`sage`, `gcn`, `gat`, `mlp`, `mpnn` or `package.module:ClassName`")
    args: dict = opt(doc="constructor keyword arguments (`--set model.args.hidden=64` sets one)",
                     factory=dict)


@dataclass
class TrainConfig:
    """The training loop every mode shares."""

    mode: Literal["sampled", "sar", "dsmpnn"] = opt(
        "sampled", "`sampled` (DistGraph + mini-batches), `sar` (full-batch), `dsmpnn` (physics)")
    epochs: int = opt(3, "epochs to train (a resumed run continues up to this)", ge=1)
    lr: float = opt(0.01, "Adam learning rate", gt=0)
    lr_schedule: Literal["constant", "cosine"] = opt(
        "constant", "per-epoch learning rate: constant, or cosine decay from `lr` towards 0")
    weight_decay: float = opt(0.0, "Adam weight decay", ge=0)
    grad_clip: float = opt(0.0, "clip the (summed) gradient's norm to this; 0 = off", ge=0)
    seed: int = opt(0, "seed of model initialisation, shuffling, sampling and dropout")
    eval_every: int = opt(1, "evaluate every k epochs and after the last; 0 = only after the "
                             "last", ge=0)
    dtype: Literal["float32", "float64"] = opt("float32", "model and feature precision "
                                                          "(`float64` for exactness checks)")
    out_dir: str = opt("runs/default", "run folder (`--out` overrides it)")
    timeout_s: float = opt(1800.0, "whole-job limit: every process is stopped after it", gt=0)
    collective_timeout_s: float = opt(600.0, "limit of one gloo operation: a dead peer fails "
                                             "the job instead of hanging it", gt=0)


@dataclass
class SampledConfig:
    """``train.mode: sampled``: mini-batches drawn by DGL's neighbour sampler over DistGraph."""

    batch_size: int = opt(1024, "seed nodes per mini-batch and trainer", ge=1)
    fanouts: list = opt(doc="neighbours sampled per layer (input layer first)",
                        factory=lambda: [10, 25], item_ge=1)
    eval: Literal["layerwise", "sampled"] = opt(
        "layerwise", "`layerwise` (exact full-neighbour inference, needs `forward_layer`) or "
                     "`sampled` (with `fanouts`)")
    eval_batch_size: int = opt(4096, "nodes per evaluation batch", ge=1)
    cache_halo: bool = opt(True, "each trainer pulls its partition's halo feature rows once "
                                 "and serves them locally")
    remote_cache_mb: float = opt(256.0, "MiB per trainer for feature rows beyond the halo owned "
                                        "by other partitions, pulled once at start: the nodes "
                                        "with the most out-edges first (0 = halo only)", ge=0)
    rematerialize: bool = opt(False, "aggregate each batch's fetched source nodes one owning "
                                     "partition at a time and rebuild them in backward (SAR-style)")
    remat_layers: int = opt(1, "with `rematerialize`: the leading layers that run that way; the "
                               "first over fetched features, later ones over the previous "
                               "layer's output in groups of `sar.chunk_rows` rows (raise it "
                               "when a later layer's backward sets the peak, as GAT's second)",
                            ge=1)
    copy_own_features: bool = opt(True, "each trainer copies its partition's feature rows "
                                        "next to the remote cache, so a batch's rows are one "
                                        "gather from one table (costs the partition's feature "
                                        "bytes once more per trainer)")
    prefetch: int = opt(0, "mini-batches a background thread samples and reads ahead of "
                           "the one training (0 = none: with the remote cache little RPC is left "
                           "to hide; off with `rematerialize`, whose forward reads rows itself, "
                           "and with sampler processes)", ge=0)
    seed_split: Literal["even", "owned"] = opt(
        "even", "training seeds per trainer: `even` (DGL's `node_split`: equal counts, topped "
                "up with nodes of other partitions) or `owned` (the trainer's partition's own "
                "nodes only, so their neighbourhoods stay local; counts may differ)")
    local_sampling: bool = opt(False, "sample the neighbourhoods the trainer's partition stores "
                                      "in full (inner nodes, and halo nodes with `partition."
                                      "halo_hops: 2`) locally; only the rest over RPC")


@dataclass
class ClusterConfig:
    """Processes of a job and the hosts they run on (loopback unless ``ip_config`` names hosts)."""

    servers_per_machine: int = opt(1, "`sampled`: DistGraph servers per machine", ge=1)
    trainers_per_machine: int = opt(1, "`sampled`: trainers per machine", ge=1)
    samplers_per_trainer: int = opt(0, "`sampled`: sampler processes per trainer", ge=0)
    ip_config: Optional[str] = opt(None, "file with one `IP [PORT]` line per machine; none = "
                                         "every machine on this host")
    ssh_port: int = opt(22, "ssh port of the other hosts", ge=1, le=65535)
    netns: list = opt(doc="start machine m's processes in network namespace `netns[m]` "
                          "instead of over ssh", factory=list)
    netns_shm: bool = opt(False, "with `netns`: each namespace host's processes see "
                                 "`/dev/shm/<netns[m]>` as their /dev/shm, as separate machines "
                                 "have separate shared memory (stock DGL needs it on 2+ hosts)")
    workdir: Optional[str] = opt(None, "working directory on the other hosts (default: this "
                                       "one's)")
    python: Optional[str] = opt(None, "interpreter on the other hosts (default: this one's "
                                      "path)")
    num_threads: int = opt(1, "torch/OpenMP threads per process", ge=1)


@dataclass
class CompressionConfig:
    """Activation compression of tensors saved for backward (EXACT / i-EXACT)."""

    enabled: bool = opt(False, "compress every tensor saved for backward")
    bits: Literal[1, 2, 4, 8] = opt(2, "bits per value")
    block_size: int = opt(256, "flat block length G of the statistics", ge=32, le=4096)
    granularity: Literal["block", "row"] = opt("block", "`block` (i-EXACT) or `row` (EXACT, "
                                                        "statistics per node)")
    levels: Literal["uniform", "optimal"] = opt("uniform", "`optimal`: i-EXACT's non-uniform "
                                                           "INT2 levels (needs `bits: 2`)")
    stats_dtype: Literal["float16", "bfloat16"] = opt("bfloat16", "dtype of each block's "
                                                                  "minimum and range")
    projection: float = opt(1.0, "kept fraction of EXACT's random projection of linear-map "
                                 "inputs; 1 = off", gt=0, le=1)
    min_numel: int = opt(4096, "tensors with fewer values stay exact", ge=0)
    seed: int = opt(0, "seed of the stochastic rounding")


@dataclass
class SarConfig:
    """``train.mode: sar``: full-batch sequential aggregation and rematerialization."""

    mode: Literal["sar", "sa", "one_shot"] = opt(
        "sar", "`sar` (one remote part at a time, recompute in backward), `sa` (keep fetched "
               "parts), `one_shot` (all halo rows at once)")
    prefetch: bool = opt(False, "post the next ring round's transfers before aggregating this "
                                "one (one more remote block alive)")
    chunk_rows: int = opt(0, "source rows per chunk of the sequential-aggregation core (SAR, "
                             "where remote rows also move in pieces of this many rows, and "
                             "`sampled.rematerialize`, where it also bounds the destination rows "
                             "of each output run); 0 = a whole group at once", ge=0)
    rebuild_inputs: bool = opt(True, "`sar` mode: an aggregate of the input features that a layer "
                                     "saves for backward (SAGE mean with in_feats <= out_feats) "
                                     "is computed again in backward instead of kept: one "
                                     "destination-sized tensor less through every later peak, "
                                     "one more ring at the input width")


@dataclass
class PhysicsConfig:
    """``train.mode: dsmpnn``: physics data, graph sampling and domain decomposition."""

    resolution: int = opt(64, "Darcy grid nodes per side", ge=8, le=421)
    test_resolution: Optional[int] = opt(None, "Darcy: also test on `test_samples` fields at "
                                               "this grid size (`transfer_rmse`, "
                                               "`transfer_rel_l2`)", ge=8, le=421)
    train_samples: int = opt(100, "training fields (`darcy`, `airfoil`)", ge=1)
    test_samples: int = opt(20, "test fields (`darcy`, `airfoil`)", ge=1)
    points: int = opt(5000, "airfoil points per field", ge=100)
    test_points: Optional[int] = opt(None, "airfoil: also test on `test_samples` fields of "
                                           "this many points (`transfer_rmse`, "
                                           "`transfer_rel_l2`)", ge=100)
    batch_fields: int = opt(1, "fields per optimizer step (their gradients averaged)", ge=1)
    sampled_nodes: int = opt(1000, "s: nodes drawn per field (resampled every epoch)", ge=2)
    radius: float = opt(0.1, "neighbourhood radius (dataset coordinates)", gt=0)
    max_edges: int = opt(16, "n_e: cap on incoming edges per node", ge=1)
    workers: int = opt(1, "P: subdomains, one worker process each", ge=1)
    decomposition: Literal["bisection", "metis"] = opt("bisection", "how nodes are split into "
                                                                    "subdomains")
    gen_workers: int = opt(2, "processes generating the dataset", ge=1)
    infer_repeats: int = opt(2, "full-field inference: random covers averaged", ge=1)
    infer_passes: int = opt(1, "evaluation predicts the test fields this many times; "
                               "`infer_s` is the median pass (steadier timings)", ge=1)


@dataclass
class Config:
    """A whole run: one instance of every section."""

    dataset: DatasetConfig = field(default_factory=DatasetConfig)
    partition: PartitionConfig = field(default_factory=PartitionConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    sampled: SampledConfig = field(default_factory=SampledConfig)
    sar: SarConfig = field(default_factory=SarConfig)
    physics: PhysicsConfig = field(default_factory=PhysicsConfig)
    compression: CompressionConfig = field(default_factory=CompressionConfig)
    cluster: ClusterConfig = field(default_factory=ClusterConfig)
    source: str = field(default="<defaults>", compare=False, repr=False)

    @property
    def num_workers(self) -> int:
        """Training processes of the run: partitions x trainers (``sampled``), partitions
        (``sar``) or subdomains (``dsmpnn``)."""
        if self.train.mode == "sampled":
            return self.partition.num_parts * self.cluster.trainers_per_machine
        if self.train.mode == "sar":
            return self.partition.num_parts
        return self.physics.workers

    @property
    def num_machines(self) -> int:
        """Hosts (lines of ``cluster.ip_config``): one per partition, or per DS-MPNN subdomain."""
        return self.physics.workers if self.train.mode == "dsmpnn" else self.partition.num_parts

    def to_dict(self) -> dict:
        """The resolved config as plain data (what a run folder's config.yaml holds)."""
        out = dataclasses.asdict(self)
        out.pop("source")
        return out
