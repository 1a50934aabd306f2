"""The ``hetero`` benchmark's settings: graph size, shared training settings, and every row's
system, model, deployment and partitioning."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the settings load without dsgraph's config module
    from dsgraph.config import Config

THROTTLE = "1gbit"
STOCK_TRAINER = "benchmarks.stock_dgl_rgcn_trainer"
CONFIG = "configs/hetero.yaml"  # RGCN on the generated heterograph (both systems' settings)
HOMO_CONFIG = "configs/default.yaml"  # GraphSAGE, pointed at the homogeneous projection file
REPEATS = 3
EPOCHS = 5
# Papers (the target type); as many authors, fields and institutions besides. Half the papers
# train, so an epoch is ~25 batches of 512 per trainer with 2 trainers, not loader start-up.
PAPERS = 50_000
QUICK_PAPERS = 4_000
# Model sizes where configs/hetero.yaml's model.args leave them out (RGCN's defaults); every
# row takes the config's, the homogeneous row as GraphSAGE of the same width and depth.
HIDDEN, LAYERS, DROPOUT = 64, 2, 0.5
# Tensors the relational layers save for backward, block-wise INT2 (the accuracy question).
INT2 = ("compression.enabled=true", "compression.bits=2")


@dataclass(frozen=True)
class Setting:
    """One row: which system and model, how deployed, on which partitioning."""

    name: str
    system: str  # "stock" or "dsgraph"
    model: str  # "rgcn" or "sage_homogeneous"
    link: str  # "local", "veth" or "veth_throttled"
    hosts: int
    parts: int
    trainers: int  # in all
    partition: str  # a folder under the run's temporary directory
    sets: tuple[str, ...] = ()  # the row's own config overrides

    @property
    def config(self) -> str:
        """The config file the row's job starts from."""
        return HOMO_CONFIG if self.model == "sage_homogeneous" else CONFIG


def settings() -> list[Setting]:
    """Every row, in table order: one host first (the accuracy questions: RGCN on 1 vs 2
    partitions, RGCN vs the same-size homogeneous model), then each emulated link (stock vs
    dsgraph, one partition and one trainer per host)."""
    rows = [
        Setting("dsgraph rgcn 1 part x 2 trainers", "dsgraph", "rgcn", "local", 1, 1, 2, "p1"),
        Setting("dsgraph rgcn 2 parts x 1 trainer", "dsgraph", "rgcn", "local", 1, 2, 2, "p2"),
        Setting("dsgraph rgcn 2 parts x 1 trainer, INT2 activations", "dsgraph", "rgcn",
                "local", 1, 2, 2, "p2", INT2),
        Setting("dsgraph sage (homogeneous) 2 parts x 1 trainer", "dsgraph",
                "sage_homogeneous", "local", 1, 2, 2, "h2"),
    ]
    for link in ("veth", "veth_throttled"):
        rows += [Setting(f"stock DGL rgcn 2 hosts ({link})", "stock", "rgcn", link, 2, 2, 2,
                         "stock2"),
                 Setting(f"dsgraph rgcn 2 hosts ({link})", "dsgraph", "rgcn", link, 2, 2, 2,
                         "p2")]
    return rows


def base_sets(papers: int, epochs: int, cache_dir: Path) -> list[str]:
    """Overrides every hetero job shares: the graph's size and splits, one evaluation of the
    test nodes on sampled neighbourhoods after training (as the stock trainer does)."""
    return [f"dataset.num_nodes={papers}", f"dataset.cache_dir={cache_dir}",
            "dataset.train_frac=0.5", "dataset.val_frac=0.1", "dataset.test_frac=0.2",
            f"train.epochs={epochs}", "train.eval_every=0", "train.timeout_s=1800",
            "sampled.eval=sampled"]


def homogeneous_sets(hetero: Config, npz: Path) -> list[str]:
    """Overrides that train GraphSAGE on the projection file ``npz`` with the hetero config's
    (``hetero``) training settings and the same model size."""
    m, s, t = hetero.model.args, hetero.sampled, hetero.train
    fanouts = ", ".join(str(f) for f in s.fanouts)
    return ["dataset.name=file", f"dataset.path={npz}",
            f"model.args={{hidden: {m.get('hidden', HIDDEN)}, "
            f"num_layers: {m.get('num_layers', LAYERS)}, aggregator: mean, "
            f"dropout: {m.get('dropout', DROPOUT)}}}",
            f"train.epochs={t.epochs}", f"train.lr={t.lr}", f"train.seed={t.seed}",
            "train.eval_every=0", f"train.timeout_s={t.timeout_s}",
            f"sampled.batch_size={s.batch_size}", f"sampled.fanouts=[{fanouts}]",
            "sampled.eval=sampled", f"sampled.eval_batch_size={s.eval_batch_size}"]


def stock_args(cfg: Config) -> list[str]:
    """The stock RGCN trainer's command line for the hetero config ``cfg``."""
    m, s, t = cfg.model.args, cfg.sampled, cfg.train
    return ["--fanouts", ",".join(str(f) for f in s.fanouts), "--batch-size", str(s.batch_size),
            "--epochs", str(t.epochs), "--hidden", str(m.get("hidden", HIDDEN)),
            "--num-layers", str(m.get("num_layers", LAYERS)),
            "--dropout", str(m.get("dropout", DROPOUT)), "--lr", str(t.lr),
            "--seed", str(t.seed), "--eval-batch-size", str(s.eval_batch_size),
            "--embedding-dim", str(s.embedding_dim), "--sparse-lr", str(s.embedding_lr)]
