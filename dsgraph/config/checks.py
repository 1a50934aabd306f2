"""Rules that involve more than one field: each names the key to change and why."""
from __future__ import annotations

from dsgraph.config.limits import check_sizes, short_repr
from dsgraph.config.modes import EDGE_DATASETS, GRAPH_DATASETS
from dsgraph.config.sections import Config, TaskConfig, mode_sections
from dsgraph.errors import ConfigError

FILE_DATASETS = ("file", "csv", "ogb", "chunked", "fields")  # the datasets that read dataset.path
# task keys only link prediction reads (others must leave them at their defaults; the edge
# tasks read the first, edge_split)
LINK_KEYS = ("edge_split", "negatives", "negative_sampler", "loss", "decoder", "eval_negatives",
             "hits_k", "hits_negatives")
PATH_WANTED = {"file": "a graph file path", "csv": "a DGL CSV dataset folder (holding meta.yaml)",
               "ogb": "an OGB dataset folder (holding raw/ and split/)",
               "chunked": "a folder in DGL's chunked graph format (holding metadata.json)",
               "fields": "a field file (.npz, or .pt from torch.save)"}
# dataset keys only some datasets read: (readers, the value meaning "not set")
# A chunked folder is partitioned chunk by chunk: its masks are the split (nothing draws one).
DATASET_READERS = {"path": (FILE_DATASETS, None),
                   # chunked: typed folders only (dsgraph.data.chunked.dataset refuses them
                   # for one-type folders, which cannot be told apart without reading them)
                   "split": (("file", "csv", "ogb", "fields", "chunked"), None),
                   "add_reverse_edges": (("file", "csv", "ogb", "synthetic_hetero", "chunked"),
                                         "auto"),
                   "test_path": (("fields",), None), "transfer_path": (("fields",), None),
                   "x_key": (("fields",), "x"), "y_key": (("fields",), "y"),
                   "pos_key": (("fields",), "pos"), "target": (GRAPH_DATASETS, "class")}
PHYSICS_READERS = {"test_resolution": "darcy", "test_points": "airfoil"}


def cross_check(cfg: Config, host: bool = True) -> None:
    """Raise a one-line :class:`ConfigError` for the first inconsistent combination of fields
    (``host``: also sizes against this host's memory, see :func:`check_sizes`)."""
    src, d, t = cfg.source, cfg.dataset, cfg.train
    check_sizes(cfg, host)  # first: the other rules may build what a size refused would make huge
    if d.train_frac + d.val_frac + d.test_frac > 1.0 + 1e-9:
        raise ConfigError(f"{src}: dataset.train_frac: expected train_frac + val_frac + test_frac "
                          f"<= 1, got {d.train_frac + d.val_frac + d.test_frac:g}")
    modes = {section.MODE: section for section in mode_sections(cfg)}
    if t.mode not in modes:
        raise ConfigError(f"{src}: train.mode: expected one of "
                          f"{', '.join(map(repr, modes))}, got {short_repr(t.mode)}")
    section = modes[t.mode]
    runs = [m for m, sec in modes.items() if cfg.task.name in sec.TASKS]
    if cfg.task.name not in section.TASKS and runs:  # a task of another mode: name that mode
        raise ConfigError(f"{src}: task.name: task {cfg.task.name!r} runs in train.mode "
                          f"{' or '.join(map(repr, runs))}, got train.mode {t.mode!r}")
    if cfg.task.name != "auto" and cfg.task.name not in section.TASKS:
        raise ConfigError(f"{src}: task.name: expected 'auto' or one of "
                          f"{', '.join(map(repr, section.TASKS))} for train.mode {t.mode!r}, "
                          f"got {short_repr(cfg.task.name)}")
    check_dataset_inputs(cfg)
    wanted = section.DATASETS
    if d.name not in wanted:
        choices = (" or ".join(map(repr, wanted)) if len(wanted) == 2
                   else "one of " + ", ".join(map(repr, wanted)))
        raise ConfigError(f"{src}: dataset.name: expected {choices} for train.mode {t.mode!r}, "
                          f"got {short_repr(d.name)}")
    section.check(cfg)
    check_task(cfg)
    c = cfg.compression
    if c.levels == "optimal" and c.bits != 2:
        raise ConfigError(f"{src}: compression.levels: 'optimal' needs compression.bits 2, "
                          f"got {c.bits}")
    netns = cfg.cluster.netns
    if netns and len(netns) != cfg.num_machines:
        raise ConfigError(f"{src}: cluster.netns: expected one namespace per machine "
                          f"({cfg.num_machines}), got {short_repr(netns)}")
    if cfg.cluster.netns_shm and not netns:
        raise ConfigError(f"{src}: cluster.netns_shm: true needs cluster.netns (one network "
                          f"namespace per machine), got none")
    if netns and not cfg.cluster.ip_config:
        raise ConfigError(f"{src}: cluster.ip_config: expected the machines' addresses (one "
                          f"'IP [PORT]' line per namespace) with cluster.netns, got null")


def check_task(cfg: Config) -> None:
    """The data holds what the task trains on (``dataset.target``); ``task.class_weights`` is
    valid for the task (and, for a generated graph, has one weight per class or label)."""
    src, d, name, weights = cfg.source, cfg.dataset, cfg.task_name, cfg.task.class_weights
    facts = cfg.task_facts
    check_link_keys(cfg)
    wanted = facts.target
    if facts.edge_target is not None and d.name not in EDGE_DATASETS:
        raise ConfigError(f"{src}: dataset.name: task {name!r} reads edge targets from "
                          f"{' or '.join(map(repr, EDGE_DATASETS))}, got {short_repr(d.name)}")
    if facts.edge_target is not None and d.target != wanted:
        raise ConfigError(f"{src}: dataset.target: task {name!r} reads its targets from the "
                          f"edges; leave dataset.target at {wanted!r}, got "
                          f"{short_repr(d.target)}")
    if wanted is not None and d.target != wanted:
        raise ConfigError(f"{src}: dataset.target: task {name!r} trains on {wanted!r} targets; "
                          f"expected {wanted!r}, got {short_repr(d.target)}")
    if isinstance(weights, str):
        if weights != "none" and facts.weighted is None:
            raise ConfigError(f"{src}: task.class_weights: task {name!r} has no classes to "
                              f"weight; expected 'none', got {short_repr(weights)}")
        return
    if facts.weighted is None:
        raise ConfigError(f"{src}: task.class_weights: task {name!r} has no classes to weight; "
                          f"expected 'none', got {short_repr(weights)}")
    ok = all(isinstance(w, (int, float)) and not isinstance(w, bool) and 0 <= w < float("inf")
             for w in weights)
    if not ok or not weights or not any(w > 0 for w in weights):
        raise ConfigError(f"{src}: task.class_weights: expected 'none', 'balanced' or a list of "
                          f"numbers >= 0 (one per {facts.weighted}, not all 0), got "
                          f"{short_repr(weights)}")
    if d.name == "synthetic" and facts.count_key is not None:
        key = facts.count_key
        count = getattr(d, key)
        if len(weights) != count:
            raise ConfigError(f"{src}: task.class_weights: expected {count} weights (one per "
                              f"{facts.weighted}, dataset.{key}), got {len(weights)}")


def check_link_keys(cfg: Config) -> None:
    """``task.edge_split`` and the other link-prediction keys: set only for that task, and a
    valid split."""
    src, t = cfg.source, cfg.task
    defaults = TaskConfig()
    trains_on = cfg.task_facts.trains_on
    if trains_on != "links":
        for key in LINK_KEYS[1:] if trains_on == "edges" else LINK_KEYS:
            if getattr(t, key) != getattr(defaults, key):
                raise ConfigError(f"{src}: task.{key}: only task 'link_prediction' reads it; "
                                  f"remove it or set task.name, got {short_repr(getattr(t, key))}")
        if trains_on != "edges":
            return
    if t.negative_sampler != "uniform" and cfg.train.mode != "sampled":
        # full-batch training has no batch to share negatives within
        raise ConfigError(f"{src}: task.negative_sampler: {t.negative_sampler!r} needs "
                          f"mini-batches (train.mode 'sampled'); expected 'uniform' in mode "
                          f"{cfg.train.mode!r}")
    fracs = t.edge_split
    ok = (len(fracs) == 3
          and all(isinstance(f, (int, float)) and not isinstance(f, bool) for f in fracs)
          and all(f >= 0 for f in fracs) and fracs[0] > 0 and fracs[1] > 0 and fracs[2] > 0
          and sum(fracs) <= 1.0 + 1e-9)
    if not ok:
        raise ConfigError(f"{src}: task.edge_split: expected [train, val, test] fractions of the "
                          f"edges, each > 0, summing to <= 1, got {short_repr(fracs)}")


def check_dataset_inputs(cfg: Config) -> None:
    """``path``, ``split`` and the other per-dataset keys: given exactly where the dataset reads
    them."""
    src, d = cfg.source, cfg.dataset
    if d.name in FILE_DATASETS and not d.path:
        raise ConfigError(f"{src}: dataset.path: expected {PATH_WANTED[d.name]} when "
                          f"dataset.name is {d.name!r}, got {short_repr(d.path)}")
    # Silently ignoring these would train on other data than the user meant.
    for key, (readers, unset) in DATASET_READERS.items():
        value = getattr(d, key)
        if d.name not in readers and value != unset:
            raise ConfigError(f"{src}: dataset.{key}: dataset {d.name!r} does not read it "
                              f"(only {', '.join(readers)} do{'es' if len(readers) == 1 else ''});"
                              f" remove it or set dataset.name, got {short_repr(value)}")
    for key, reader in PHYSICS_READERS.items():
        value = getattr(cfg.physics, key)
        if value is not None and d.name != reader:
            raise ConfigError(f"{src}: physics.{key}: dataset {d.name!r} does not read it (only "
                              f"{reader} does); remove it or set dataset.name, got "
                              f"{short_repr(value)}")
    if d.split is not None:
        fracs = d.split
        ok = (len(fracs) == 3
              and all(isinstance(f, (int, float)) and not isinstance(f, bool) for f in fracs)
              and all(f >= 0 for f in fracs) and fracs[0] > 0 and sum(fracs) <= 1.0 + 1e-9)
        if not ok:
            raise ConfigError(f"{src}: dataset.split: expected [train, val, test] fractions, "
                              f"each >= 0, train > 0, summing to <= 1, got {short_repr(fracs)}")
    if d.name == "fields":
        _check_field_split(cfg)
    p = cfg.partition
    if p.pipeline == "streamed" and d.name != "chunked":
        raise ConfigError(f"{src}: partition.pipeline: 'streamed' reads a chunked graph folder "
                          f"(dataset.name 'chunked'); expected 'auto' or 'in_memory' for dataset "
                          f"{d.name!r}")
    if d.name == "chunked" and p.pipeline != "in_memory" and cfg.task_facts.holds_out_edges:
        raise ConfigError(f"{src}: partition.pipeline: the streamed pipeline partitions node "
                          f"tasks only (link prediction draws its held-out edges in memory); "
                          f"expected 'in_memory' for task 'link_prediction', got {p.pipeline!r}")
    if d.name == "synthetic" and round(d.train_frac * d.num_nodes) < 1:
        raise ConfigError(f"{src}: dataset.train_frac: {d.train_frac:g} of "
                          f"dataset.num_nodes {d.num_nodes} rounds to no training node; "
                          f"expected train_frac * num_nodes > 0.5")


def _check_field_split(cfg: Config) -> None:
    """``fields``: test samples come from ``test_path`` or from ``split`` (no validation set)."""
    src, d = cfg.source, cfg.dataset
    if d.test_path is None and d.split is None:
        raise ConfigError(f"{src}: dataset.split: expected [train, 0, test] fractions of the "
                          f"samples or a dataset.test_path for dataset 'fields', got null")
    if d.test_path is not None and d.split is not None:
        raise ConfigError(f"{src}: dataset.split: dataset.test_path holds the test fields; "
                          f"expected null beside it, got {short_repr(d.split)}")
    if d.split is not None and (d.split[1] != 0 or d.split[2] <= 0):
        raise ConfigError(f"{src}: dataset.split: expected [train, 0, test] for dataset 'fields' "
                          f"(DS-MPNN keeps no validation set; test > 0), got {short_repr(d.split)}")
