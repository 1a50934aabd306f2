"""What a config may cost: how much of a value a message quotes, and the sizes a run would
allocate, checked against this host before anything is allocated.

A config may come from anywhere: a value may be megabytes (a pasted array, an expanded YAML
alias) or a width no host can hold. :func:`short_repr` quotes at most ~100 characters of a
value in any message. :func:`check_sizes` refuses, in one line naming the key, what the fields'
own ceilings (:mod:`dsgraph.config.fields`) cannot see: the width-like ``model.args``, a
built-in model's weights against the memory available now (every process that builds the model
needs them then), a generated dataset against the host's memory (the data outlives the process
that checks it, so "available" would refuse a run's own workers) and more epochs than
``train.timeout_s`` can hold.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Callable, Iterator, Optional

import psutil

from dsgraph.config.fields import MAX_HEADS, MAX_LAYERS, MAX_WIDTH
from dsgraph.errors import ConfigError

if TYPE_CHECKING:  # the sections import this module (for short_repr)
    from dsgraph.config.sections import Config

QUOTE_CHARS = 100  # of a user's value in a message
MIN_EPOCH_S = 1e-3  # no epoch of any mode takes less (a step alone is more): a generous floor
GIB = 2 ** 30

# model.args that size every built-in model (and most plug-in GNNs): bounded wherever they are
# integers, whatever the model (a plug-in's other arguments mean nothing here).
MODEL_ARG_LIMITS = {"hidden": MAX_WIDTH, "width": MAX_WIDTH, "kernel_hidden": MAX_WIDTH,
                    "heads": MAX_HEADS, "num_layers": MAX_LAYERS, "layers": MAX_LAYERS}


# --- quoting a value ------------------------------------------------------------------------

def short_repr(value: Any, limit: int = QUOTE_CHARS) -> str:
    """``repr(value)`` cut to at most ``limit`` characters (``...`` marks a cut), built only as
    far as it is shown: a value from a config may be megabytes."""
    out, size = [], 0
    for piece in _repr_pieces(value, limit):
        out.append(piece)
        size += len(piece)
        if size > limit:
            break
    return clip("".join(out), limit)


def clip(text: str, limit: int = QUOTE_CHARS) -> str:
    """``text`` (not quoted) cut to at most ``limit`` characters; ``...`` marks a cut."""
    return text if len(text) <= limit else text[:limit - 3] + "..."


def quote_key(key: Any) -> str:
    """A mapping key as a key path shows it (a string unquoted), cut like :func:`short_repr`."""
    return clip(key) if isinstance(key, str) else short_repr(key)


def _repr_pieces(value: Any, limit: int) -> Iterator[str]:
    """``repr(value)`` in pieces, each container's items one at a time (the caller stops)."""
    ends = {list: "[]", tuple: "()", dict: "{}"}.get(type(value))
    if ends is not None:
        yield ends[0]
        items = value.items() if isinstance(value, dict) else value
        for i, item in enumerate(items):
            if i:
                yield ", "
            if isinstance(value, dict):
                yield from _repr_pieces(item[0], limit)
                yield ": "
                item = item[1]
            yield from _repr_pieces(item, limit)
        yield "," + ends[1] if isinstance(value, tuple) and len(value) == 1 else ends[1]
    elif isinstance(value, (str, bytes)):
        yield repr(value[:limit + 1])
    elif isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 3 * limit:
        # more than ~limit digits: str() would be slow, or refused past 4300 digits
        yield f"<an integer of ~{int(value.bit_length() * math.log10(2)) + 1} digits>"
    else:
        yield repr(value)[:limit + 1]


# --- sizes ----------------------------------------------------------------------------------

def host_memory() -> tuple[int, int]:
    """(available, total) bytes of this host's memory."""
    vm = psutil.virtual_memory()
    return int(vm.available), int(vm.total)


def check_sizes(cfg: Config, host: bool = True) -> None:
    """Raise a one-line :class:`ConfigError` for a size this host cannot hold or this run's
    ``train.timeout_s`` cannot reach, before anything is allocated. ``host=False`` leaves out
    what depends on this host's memory (a job's processes re-reading the resolved config on
    other hosts, whose memory the launcher's check did not see)."""
    check_model_args(cfg, host)
    check_epochs(cfg)
    if host:
        check_dataset_bytes(cfg)


def check_model_args(cfg: Config, host: bool = True) -> None:
    """Width-like ``model.args`` within their ceilings; with ``host``, a built-in model's
    weights fit the memory this host has available."""
    src, args = cfg.source, cfg.model.args
    # A built-in model takes no width below 1: refused here, not as whatever its constructor
    # raises at the launcher's probe (which builds the model at toy widths).
    floor = 1 if cfg.model.name in BUILTIN_ESTIMATES else None
    for key, ceiling in MODEL_ARG_LIMITS.items():
        value = args.get(key)
        if not isinstance(value, int) or isinstance(value, bool):
            continue
        if value > ceiling:
            raise ConfigError(f"{src}: model.args.{key}: expected an integer <= {ceiling}, "
                              f"got {short_repr(value)}")
        if floor is not None and value < floor:
            raise ConfigError(f"{src}: model.args.{key}: expected an integer >= {floor} "
                              f"(model.name {cfg.model.name!r}), got {short_repr(value)}")
    estimate = weight_estimate(cfg) if host else None
    if estimate is None:
        return
    need, key, value = estimate
    available = host_memory()[0]
    if need > available:
        raise ConfigError(f"{src}: model.args.{key}: {short_repr(value)} needs ~{_gib(need)} GiB "
                          f"of weights ({cfg.model.name}{_input_note(cfg)}), more than this "
                          f"host's {_gib(available)} GiB available")


def weight_estimate(cfg: Config) -> Optional[tuple[int, str, Any]]:
    """(bytes, the model.args key that sizes it, its value) of a built-in model's weights, at
    least; None for a plug-in model or arguments its constructor will refuse."""
    entry = BUILTIN_ESTIMATES.get(cfg.model.name)
    if entry is None:
        return None
    defaults, params = entry
    args = cfg.model.args
    values = {}
    for key, default in defaults.items():
        value = args.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            return None  # the model's constructor says what is wrong with it
        values[key] = value
    synthetic = cfg.dataset.name == "synthetic"
    # Input and output widths come from the data; only a generated graph's are known now.
    in_feats = cfg.dataset.feat_dim if synthetic else 1
    d = cfg.dataset
    classes = (d.num_classes if d.target == "class" else d.num_targets) if synthetic else 1
    count = params(values, args, in_feats, classes)
    # Built in float32 (then cast): float64 weights need twice that.
    nbytes = count * (8 if cfg.train.dtype == "float64" else 4)
    key = next((k for k in defaults if k in args), next(iter(defaults)))
    return nbytes, key, values[key]


def _input_note(cfg: Config) -> str:
    """Where the estimate's input width came from, when it came from the config."""
    if cfg.dataset.name != "synthetic":
        return ""
    return f", dataset.feat_dim {cfg.dataset.feat_dim}"


def _stacked(in_feats: int, hidden: int, classes: int, layers: int) -> list[tuple[int, int]]:
    """(in, out) of each layer of a stack (``dsgraph.models.gnn._dims``)."""
    sizes = [in_feats] + [hidden] * (layers - 1) + [classes]
    return list(zip(sizes[:-1], sizes[1:]))


def _sage(v: dict, args: dict, i: int, c: int) -> int:
    """SAGEConv: fc_neigh, fc_self unless the aggregator is ``gcn``, and the aggregator's own
    in x in maps (``pool``: one, ``lstm``: eight)."""
    aggregator = args.get("aggregator", "mean")
    per = 1 if aggregator == "gcn" else 2
    square = {"pool": 1, "lstm": 8}.get(aggregator, 0) if isinstance(aggregator, str) else 0
    return sum(per * a * b + square * a * a
               for a, b in _stacked(i, v["hidden"], c, v["num_layers"]))


def _linear_stack(v: dict, args: dict, i: int, c: int) -> int:
    """GraphConv or nn.Linear: one in x out matrix per layer."""
    return sum(a * b for a, b in _stacked(i, v["hidden"], c, v["num_layers"]))


def _gat(v: dict, args: dict, i: int, c: int) -> int:
    """GATConv: hidden layers project to ``heads`` x hidden, concatenated; the last to classes."""
    wide = v["hidden"] * v["heads"]
    return i * wide + (v["num_layers"] - 2) * wide * wide + wide * c if v["num_layers"] > 1 \
        else i * c


def _mpnn(v: dict, args: dict, i: int, c: int) -> int:
    """KernelMPNN: encoder, per conv a kernel MLP ending in width x width and a root map,
    decoder."""
    w, kh = v["width"], v["kernel_hidden"]
    # num_layers, or its older name layers (KernelMPNN takes either)
    convs = 1 if args.get("shared") is True else v["layers"] if "layers" in args else \
        v["num_layers"]
    return i * 2 * w + 2 * w * w + convs * (kh * kh + kh * w * w + w * w) + 2 * w * w + 2 * w * c


# name -> (the sizing args with their constructor defaults, parameter count at least), after
# the constructors in dsgraph/models/gnn.py and mpnn.py (tests/test_config_hostile.py checks
# each count against the model built).
_STACK = {"hidden": 128, "num_layers": 2}
BUILTIN_ESTIMATES: dict[str, tuple[dict[str, int], Callable[[dict, dict, int, int], int]]] = {
    "sage": (_STACK, _sage), "gcn": (_STACK, _linear_stack), "mlp": (_STACK, _linear_stack),
    "gat": ({"hidden": 32, "heads": 4, "num_layers": 2}, _gat),
    "mpnn": ({"width": 16, "kernel_hidden": 32, "num_layers": 3, "layers": 3}, _mpnn),
}
for _name, _target in (("sage", "GraphSAGE"), ("gcn", "GCN"), ("gat", "GAT"), ("mlp", "MLP")):
    BUILTIN_ESTIMATES[f"dsgraph.models.gnn:{_target}"] = BUILTIN_ESTIMATES[_name]
BUILTIN_ESTIMATES["dsgraph.models.mpnn:KernelMPNN"] = BUILTIN_ESTIMATES["mpnn"]


def check_epochs(cfg: Config) -> None:
    """No more epochs than ``train.timeout_s`` could hold at :data:`MIN_EPOCH_S` each."""
    t = cfg.train
    most = int(t.timeout_s / MIN_EPOCH_S)
    if t.epochs > most:
        raise ConfigError(f"{cfg.source}: train.epochs: expected at most {most} epochs within "
                          f"train.timeout_s {t.timeout_s:g} (an epoch takes at least "
                          f"{MIN_EPOCH_S * 1000:g} ms), got {t.epochs}")


def check_dataset_bytes(cfg: Config) -> None:
    """A generated dataset (synthetic graph, Darcy or airfoil fields) fits this host's memory."""
    d, p = cfg.dataset, cfg.physics
    if d.name == "synthetic":
        n = d.num_nodes
        # float32 features, int64 labels (float32 targets), three masks; int64 src and dst of
        # every directed edge (the generator's own temporaries come on top); the community means
        label = 8 if d.target == "class" else 4 * d.num_targets
        nbytes = int(n * (4 * d.feat_dim + label + 3) + n * d.avg_degree * 16
                     + 4 * d.num_classes * d.feat_dim)
        sizes = {"num_nodes": (n, 100_000), "feat_dim": (d.feat_dim, 100),
                 "avg_degree": (d.avg_degree, 10.0), "num_classes": (d.num_classes, 40)}
        what = "the synthetic graph"
    elif d.name == "darcy":
        # float32 coefficient and solution, resolution^2 each, per field
        nbytes = (p.train_samples + p.test_samples) * p.resolution ** 2 * 8
        if p.test_resolution is not None:
            nbytes += p.test_samples * p.test_resolution ** 2 * 8
        sizes = {"train_samples": (p.train_samples, 100), "test_samples": (p.test_samples, 20),
                 "resolution": (p.resolution, 64)}
        what = "the Darcy fields"
    elif d.name == "airfoil":
        # float32 pos (2), x (5) and y (3) per point and field
        nbytes = (p.train_samples + p.test_samples) * p.points * 40
        if p.test_points is not None:
            nbytes += p.test_samples * p.test_points * 40
        sizes = {"train_samples": (p.train_samples, 100), "test_samples": (p.test_samples, 20),
                 "points": (p.points, 5000), "test_points": (p.test_points or 0, 5000)}
        what = "the airfoil fields"
    else:
        return  # a user's files: their size is the loader's to check
    total = host_memory()[1]
    if nbytes > total:
        # name the setting furthest above its default: the one that was raised
        key = max(sizes, key=lambda k: sizes[k][0] / sizes[k][1])
        section = "dataset" if d.name == "synthetic" else "physics"
        raise ConfigError(f"{cfg.source}: {section}.{key}: {short_repr(sizes[key][0])} makes "
                          f"{what} ~{_gib(nbytes)} GiB, more than this host's {_gib(total)} "
                          f"GiB of memory")


def _gib(nbytes: float) -> str:
    """Bytes in GiB, for a message."""
    gib = nbytes / GIB
    return f"{gib:.1f}" if gib < 1e6 else f"{gib:.3g}"
