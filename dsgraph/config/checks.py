"""Rules that involve more than one field: each names the key to change and why."""
from __future__ import annotations

from dsgraph.config.sections import Config
from dsgraph.errors import ConfigError

GRAPH_DATASETS = ("synthetic", "file")
FIELD_DATASETS = ("darcy", "airfoil")


def cross_check(cfg: Config) -> None:
    """Raise a one-line :class:`ConfigError` for the first inconsistent combination of fields."""
    src, d, t = cfg.source, cfg.dataset, cfg.train
    if d.train_frac + d.val_frac + d.test_frac > 1.0 + 1e-9:
        raise ConfigError(f"{src}: dataset.train_frac: expected train_frac + val_frac + test_frac "
                          f"<= 1, got {d.train_frac + d.val_frac + d.test_frac:g}")
    if d.name == "file" and not d.path:
        raise ConfigError(f"{src}: dataset.path: expected a graph file path when dataset.name is "
                          f"'file', got {d.path!r}")
    wanted = FIELD_DATASETS if t.mode == "dsmpnn" else GRAPH_DATASETS
    if d.name not in wanted:
        raise ConfigError(f"{src}: dataset.name: expected {' or '.join(map(repr, wanted))} for "
                          f"train.mode {t.mode!r}, got {d.name!r}")
    if t.mode == "sampled" and t.dtype != "float32":
        raise ConfigError(f"{src}: train.dtype: expected 'float32' for train.mode 'sampled' "
                          f"(DistGraph serves float32 features), got {t.dtype!r}")
    if t.mode == "dsmpnn" and cfg.physics.sampled_nodes < cfg.physics.workers:
        raise ConfigError(f"{src}: physics.sampled_nodes: expected >= physics.workers "
                          f"({cfg.physics.workers}), got {cfg.physics.sampled_nodes}")
    c = cfg.compression
    if c.levels == "optimal" and c.bits != 2:
        raise ConfigError(f"{src}: compression.levels: 'optimal' needs compression.bits 2, "
                          f"got {c.bits}")
    netns = cfg.cluster.netns
    if netns and len(netns) != cfg.num_machines:
        raise ConfigError(f"{src}: cluster.netns: expected one namespace per machine "
                          f"({cfg.num_machines}), got {netns!r}")
    if netns and not cfg.cluster.ip_config:
        raise ConfigError(f"{src}: cluster.ip_config: expected the machines' addresses (one "
                          f"'IP [PORT]' line per namespace) with cluster.netns, got null")
