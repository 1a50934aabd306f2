"""The sections of a run configuration, one dataclass each; every field documents itself.

Generic training knobs live in ``train``; what only one mode reads lives in that mode's section
(:mod:`dsgraph.config.modes`). Cross-field rules are in :mod:`dsgraph.config.checks` and in
the mode sections.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Literal, Optional, Union

from dsgraph.config.fields import (MAX_BATCH, MAX_EPOCHS, MAX_FANOUT, MAX_NODES, MAX_PER_HOST,
                                   MAX_PROCESSES, MAX_SEED, MAX_TIMEOUT_S, MAX_WIDTH, opt)
from dsgraph.config.modes import ModeSection, PhysicsConfig, SampledConfig, SarConfig, SeqaggConfig
from dsgraph.config.tasks import TaskFacts, task_facts


@dataclass
class DatasetConfig:
    """Which data to train on: a generated graph, a user's graph files or physics fields."""

    name: Literal["synthetic", "synthetic_hetero", "file", "csv", "ogb", "chunked", "darcy",
                  "airfoil", "fields"] = opt(
        "synthetic", "graphs (modes `sampled`, `sar`): `synthetic` (generated), `file`, `csv` "
        "(a DGL CSV folder), `ogb` (an OGB node-property folder), `chunked` (a folder in DGL's "
        "chunked graph format, partitioned without loading it whole); heterogeneous graphs "
        "(mode `sampled`): `synthetic_hetero` (generated), `csv` / `ogb` / `chunked` folders "
        "with several node and edge types (ogbn-mag's layout; loaded whole); physics fields (mode "
        "`dsmpnn`): `darcy`, `airfoil` (generated), `fields` (a file of input and solution "
        "fields)")
    path: Optional[str] = opt(None, "what `file`, `csv`, `ogb` and `fields` read (other datasets "
                                    "take none): a `dgl.save_graphs` file or an `.npz` (`src`, "
                                    "`dst`, `feat`, `label`, masks); a DGL CSV folder "
                                    "(`meta.yaml`); an OGB node or link folder (`raw/`, "
                                    "`split/`); a chunked graph folder (`metadata.json`); an "
                                    "`.npz` or `torch.save`d dict of tensors "
                                    "(`x_key`, `y_key`, `pos_key`)")
    split: Optional[list] = opt(None, "`file`/`csv`/`ogb`/typed `chunked`: `[train, val, test]` "
                                      "fractions of "
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
                "folder's name), the edges as stored for `file` and `csv`; heterogeneous graphs "
                "(also `synthetic_hetero`, typed `chunked`): add a reverse relation `rev-<name>` "
                "per relation under `auto` and `true`")
    cache_dir: str = opt("data", "generated datasets and parsed `csv` folders are cached here, "
                                 "keyed by a hash of their parameters or files")
    seed: int = opt(0, "seed of the generated dataset and of `split`", ge=0, cap=MAX_SEED)
    num_nodes: int = opt(100_000, "synthetic graph: nodes", ge=10, cap=MAX_NODES)
    avg_degree: float = opt(10.0, "synthetic graph: mean in-degree", gt=0, cap=MAX_FANOUT)
    num_classes: int = opt(40, "synthetic graph: classes (= communities)", ge=2, cap=MAX_WIDTH)
    target: Literal["class", "regression", "multilabel"] = opt(
        "class", "what a graph's `label` holds (`synthetic`, `file`, `csv`, `ogb`): one class id "
                 "per node, float targets (one column each) or 0/1 labels (one column each); "
                 "it must be what `task.name` trains (docs/tasks.md)")
    num_targets: int = opt(4, "synthetic graph with `target` `regression` / `multilabel`: "
                              "targets / labels per node", ge=1, cap=MAX_WIDTH)
    feat_dim: int = opt(100, "synthetic graph: feature width", ge=1, cap=MAX_WIDTH)
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
                            "`sar`", ge=1, cap=MAX_PROCESSES)
    out_dir: str = opt("partitions/default", "folder of the partition files; training reads "
                                             "them there")
    graph_name: str = opt("graph", "name of the partition JSON (`<graph_name>.json`)")
    halo_hops: int = opt(1, "halo layers stored per part", ge=1,
                         cap=64)  # hops past a graph's diameter add nothing, and cost time
    balance_train: bool = opt(True, "METIS constraint: equal training nodes per part "
                                    "(then capped at 1.01x their mean)")
    balance_edges: bool = opt(True, "METIS constraint: equal degree sum per part")
    seed: int = opt(0, "METIS / random assignment seed", ge=0, cap=MAX_SEED)
    pipeline: Literal["auto", "in_memory", "streamed"] = opt(
        "auto", "`in_memory` loads the whole graph, features included, into one process; "
                "`streamed` reads the structure and then the features chunk by chunk "
                "(`dataset.name` `chunked` of one node and one edge type only); `auto`: streamed "
                "for those, else in memory")
    memory_mb: int = opt(0, "streamed pipeline: the memory the node assignment may use, in MiB "
                            "(METIS while the structure fits, else a coarsened METIS); 0 = this "
                            "host's available memory", ge=0, cap=2 ** 30)
    workers: int = opt(1, "streamed pipeline: processes that route edges and feature rows to "
                          "the parts and write the part files", ge=1, cap=MAX_PER_HOST)


@dataclass
class ModelConfig:
    """The model: a registered name or ``package.module:ClassName`` and its constructor args."""

    name: str = opt("sage", "`sage`, `gcn`, `gat`, `mlp`, `mpnn` or `package.module:ClassName`")
    args: dict = opt(doc="constructor keyword arguments (`--set model.args.hidden=64` sets one)",
                     factory=dict)


@dataclass
class TrainConfig:
    """The training loop every mode shares."""

    mode: str = opt("sampled", "`sampled` (DistGraph + mini-batches), `sar` (full-batch), "
                               "`dsmpnn` (physics)")
    epochs: int = opt(3, "epochs to train (a resumed run continues up to this)", ge=1,
                      cap=MAX_EPOCHS)
    lr: float = opt(0.01, "Adam learning rate", gt=0)
    lr_schedule: Literal["constant", "cosine"] = opt(
        "constant", "per-epoch learning rate: constant, or cosine decay from `lr` towards 0")
    weight_decay: float = opt(0.0, "Adam weight decay", ge=0)
    grad_clip: float = opt(0.0, "clip the (summed) gradient's norm to this; 0 = off", ge=0)
    seed: int = opt(0, "seed of model initialisation, shuffling, sampling and dropout", ge=0,
                    cap=MAX_SEED)
    eval_every: int = opt(1, "evaluate every k epochs and after the last; 0 = only after the "
                             "last", ge=0, cap=MAX_EPOCHS)
    dtype: Literal["float32", "float64"] = opt("float32", "model and feature precision "
                                                          "(`float64` for exactness checks)")
    out_dir: str = opt("runs/default", "run folder (`--out` overrides it)")
    timeout_s: float = opt(1800.0, "whole-job limit: every process is stopped after it", gt=0,
                           cap=MAX_TIMEOUT_S)
    collective_timeout_s: float = opt(600.0, "limit of one gloo operation: a dead peer fails "
                                             "the job instead of hanging it", gt=0,
                                      cap=MAX_TIMEOUT_S)
    profile: bool = opt(False, "`sampled`: each epoch's record gains `phases`, the CPU "
                               "seconds per 1,000 seeds of sampling, block building, feature "
                               "gather, forward, backward, all-reduce, optimizer, other threads "
                               "and the servers, and the wall seconds waiting on them "
                               "(dsgraph.phases)")


@dataclass
class TaskConfig:
    """What the model learns (docs/tasks.md): the task and its options for imbalanced labels."""

    name: str = opt("auto", "`node_classification`, `node_regression`, `multilabel`, "
                            "`link_prediction` (modes `sampled`, `sar`), "
                            "`edge_classification`, `edge_regression` (`sampled`), "
                            "`field_regression` (`dsmpnn`); `auto` = the mode's first")
    class_weights: Union[Literal["none", "balanced"], list] = opt(
        "none", "`node_classification`: loss weight per class; `multilabel`: weight of each "
                "label's positives; `balanced` = from the training nodes' label counts over all "
                "ranks (n / (classes * count), negatives / positives), or a list, one number "
                ">= 0 per class or label", max_len=MAX_WIDTH)
    edge_split: list = opt(doc="edge tasks: `[train, val, test]` fractions of the labelled "
                               "edges, drawn with `dataset.seed` when the data has no edge masks; "
                               "`link_prediction`: fractions of the graph's "
                               "undirected edges, drawn with `dataset.seed` when partitioning; "
                               "validation and test edges (and any rest) are removed from the "
                               "partitioned graph; not used when the dataset ships its own "
                               "split (an OGB link folder, a DGL CSV folder's edge masks), "
                               "where it must stay at its default",
                           factory=lambda: [0.85, 0.05, 0.1], max_len=3)
    negatives: int = opt(1, "`link_prediction`: negative destinations per training edge "
                            "(`uniform`) or per batch, shared by its edges (`joint`)", ge=1,
                         cap=MAX_FANOUT)
    negative_sampler: Literal["uniform", "joint", "in_batch"] = opt(
        "uniform", "`link_prediction`: `uniform` (each edge's source with `negatives` uniform "
                   "destinations), `joint` (`negatives` uniform destinations shared by every edge "
                   "of a batch) or `in_batch` (each edge's source with the batch's other "
                   "destinations; `sampled` mode only for `joint` and `in_batch`)")
    loss: Literal["bce", "contrastive"] = opt(
        "bce", "`link_prediction`: `bce` (binary cross-entropy of every positive and negative "
               "pair) or `contrastive` (InfoNCE: each positive against its own negatives)")
    decoder: Literal["dot", "distmult"] = opt(
        "dot", "`link_prediction`: edge score from the two node embeddings: `dot` (h_u . h_v) "
               "or `distmult` (h_u . diag(r) . h_v, r learned)")
    eval_negatives: int = opt(100, "`link_prediction`: uniform negative destinations per "
                                   "validation / test edge for MRR (one fixed draw)", ge=1,
                              cap=MAX_FANOUT)
    hits_k: int = opt(50, "`link_prediction`: K of Hits@K: a positive counts if it scores above "
                          "the K-th best of `hits_negatives` shared negative pairs", ge=1,
                      cap=MAX_FANOUT)
    hits_negatives: int = opt(1000, "`link_prediction`: shared negative node pairs of Hits@K "
                                    "(one fixed draw)", ge=1, cap=MAX_BATCH)


@dataclass
class ClusterConfig:
    """Processes of a job and the hosts they run on (loopback unless ``ip_config`` names hosts)."""

    servers_per_machine: int = opt(1, "`sampled`: DistGraph servers per machine", ge=1,
                                   cap=MAX_PER_HOST)
    trainers_per_machine: int = opt(1, "`sampled`: trainers per machine", ge=1,
                                    cap=MAX_PER_HOST)
    samplers_per_trainer: int = opt(0, "`sampled`: sampler processes per trainer", ge=0,
                                    cap=MAX_PER_HOST)
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
    num_threads: int = opt(1, "torch/OpenMP threads per process", ge=1, cap=MAX_PER_HOST)
    memory_limit_mb: float = opt(0.0, "MiB the job's processes on one machine may use "
                                      "together; `python -m train` refuses a job whose memory "
                                      "plan (`--plan`) exceeds it. 0 = the host's available "
                                      "memory", ge=0, cap=2 ** 30)
    heartbeat_s: float = opt(60.0, "a job process that makes no progress this long (stopped, "
                                   "or its heartbeat silent) is named as the job's fault and "
                                   "every process is stopped; 0 = off", ge=0,
                          cap=MAX_TIMEOUT_S)


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
    seed: int = opt(0, "seed of the stochastic rounding", ge=0, cap=MAX_SEED)


@dataclass
class Config:
    """A whole run: one instance of every section."""

    dataset: DatasetConfig = field(default_factory=DatasetConfig)
    partition: PartitionConfig = field(default_factory=PartitionConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    task: TaskConfig = field(default_factory=TaskConfig)
    sampled: SampledConfig = field(default_factory=SampledConfig)
    sar: SarConfig = field(default_factory=SarConfig)
    physics: PhysicsConfig = field(default_factory=PhysicsConfig)
    seqagg: SeqaggConfig = field(default_factory=SeqaggConfig)
    compression: CompressionConfig = field(default_factory=CompressionConfig)
    cluster: ClusterConfig = field(default_factory=ClusterConfig)
    source: str = field(default="<defaults>", compare=False, repr=False)

    @property
    def mode_section(self) -> ModeSection:
        """The section of ``train.mode`` (which declares its process counts and rules)."""
        return next(s for s in mode_sections(self) if s.MODE == self.train.mode)

    @property
    def task_name(self) -> str:
        """The task trained: ``task.name``, or the mode's first for ``auto``."""
        return self.mode_section.TASKS[0] if self.task.name == "auto" else self.task.name

    @property
    def task_facts(self) -> TaskFacts:
        """The trained task's facts (what it trains on, the data it needs; valid once the
        config is checked)."""
        return task_facts(self.task_name)

    @property
    def num_workers(self) -> int:
        """Training processes of the run (the mode's section counts them)."""
        return self.mode_section.num_workers(self)

    @property
    def num_machines(self) -> int:
        """Hosts (lines of ``cluster.ip_config``), as the mode's section counts them."""
        return self.mode_section.num_machines(self)

    def to_dict(self) -> dict:
        """The resolved config as plain data (what a run folder's config.yaml holds)."""
        out = dataclasses.asdict(self)
        out.pop("source")
        return out


def mode_sections(cfg: Config) -> list[ModeSection]:
    """Every section that configures a mode, in field order."""
    return [s for s in (getattr(cfg, f.name) for f in dataclasses.fields(cfg))
            if isinstance(s, ModeSection)]
