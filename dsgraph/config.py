"""Run configuration: typed section dataclasses, YAML loading, --set overrides, validation.

A YAML file has one mapping per section (``dataset``, ``partition``, ``model``, ``train``,
``cluster``, ``compression``, ``sar``, ``physics``); every key is optional and defaults to the
dataclass default. Field constraints live in ``field(metadata=...)``: ``ge``/``gt``/``le`` bounds
and ``Literal`` choices; anything invalid raises :class:`ConfigError` with one line naming the
file, the key path and what is allowed.
"""
from __future__ import annotations

import dataclasses
import os
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Optional

import yaml

from dsgraph.compress.config import CompressionConfig
from dsgraph.configfields import bound, items
from dsgraph.errors import ConfigError
from dsgraph.physics.config import PhysicsConfig
from dsgraph.sar.config import SarConfig


@dataclass
class DatasetConfig:
    """Which graph to train on; synthetic parameters or a user file."""

    name: Literal["synthetic", "file", "darcy", "airfoil"] = "synthetic"
    path: Optional[str] = None  # for name=file: a dgl.save_graphs file or an .npz
    cache_dir: str = "data"
    seed: int = 0
    num_nodes: int = bound(100_000, ge=10)
    avg_degree: float = bound(10.0, gt=0)
    num_classes: int = bound(40, ge=2)
    feat_dim: int = bound(100, ge=1)
    homophily: float = bound(0.85, ge=0, le=1)  # fraction of edges inside a community
    feat_signal: float = bound(0.2, ge=0)  # class-mean scale against unit Gaussian noise
    degree_alpha: float = bound(2.5, gt=1)  # Pareto exponent of expected degrees
    train_frac: float = bound(0.1, gt=0, lt=1)
    val_frac: float = bound(0.1, ge=0, lt=1)
    test_frac: float = bound(0.1, gt=0, lt=1)


@dataclass
class PartitionConfig:
    """Offline partitioning: method, number of parts and where the DGL files go."""

    method: Literal["metis", "random"] = "metis"
    num_parts: int = bound(2, ge=1)
    out_dir: str = "partitions/default"
    graph_name: str = "graph"
    halo_hops: int = bound(1, ge=1)
    balance_train: bool = True  # METIS constraint: equal training nodes per part
    balance_edges: bool = True  # METIS constraint: equal in-degree sum per part
    seed: int = 0


@dataclass
class ModelConfig:
    """A registered model name (sage, gcn, gat, mpnn) or ``package.module:ClassName``."""

    name: str = "sage"
    args: dict = field(default_factory=dict)  # constructor keyword arguments


@dataclass
class TrainConfig:
    """Training loop settings shared by every mode."""

    mode: Literal["sampled", "sar", "dsmpnn"] = "sampled"
    epochs: int = bound(3, ge=1)
    batch_size: int = bound(1024, ge=1)
    fanouts: list = items(lambda: [10, 25], ge=1)
    lr: float = bound(0.01, gt=0)
    weight_decay: float = bound(0.0, ge=0)
    seed: int = 0
    eval: Literal["layerwise", "sampled"] = "layerwise"
    cache_halo: bool = True  # sampled mode: keep the partition's halo feature rows in the trainer
    eval_batch_size: int = bound(4096, ge=1)
    out_dir: str = "runs/default"
    dtype: Literal["float32", "float64"] = "float32"


@dataclass
class ClusterConfig:
    """Processes of a distributed job: one machine per partition unless ip_config names hosts."""

    servers_per_machine: int = bound(1, ge=1)
    trainers_per_machine: int = bound(1, ge=1)
    samplers_per_trainer: int = bound(0, ge=0)
    ip_config: Optional[str] = None  # file with one "IP [port]" line per machine; None = loopback
    ssh_port: int = bound(22, ge=1, le=65535)
    netns: list = field(default_factory=list)  # run machine m in network namespace netns[m], not ssh
    workdir: Optional[str] = None  # remote working directory for ssh launches (default: cwd)
    python: Optional[str] = None  # remote python (default: this interpreter's path)
    timeout_s: float = bound(1800.0, gt=0)  # whole-job limit; the supervisor kills on expiry
    num_threads: int = bound(1, ge=1)  # torch/OMP threads per process


@dataclass
class Config:
    """A whole run: one instance of every section."""

    dataset: DatasetConfig = field(default_factory=DatasetConfig)
    partition: PartitionConfig = field(default_factory=PartitionConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    cluster: ClusterConfig = field(default_factory=ClusterConfig)
    compression: CompressionConfig = field(default_factory=CompressionConfig)
    sar: SarConfig = field(default_factory=SarConfig)
    physics: PhysicsConfig = field(default_factory=PhysicsConfig)
    source: str = field(default="<defaults>", compare=False, repr=False)

    def to_dict(self) -> dict:
        """The resolved config as plain data (what a run folder's config.yaml holds)."""
        out = dataclasses.asdict(self)
        out.pop("source")
        return out


# --- validation -------------------------------------------------------------------------------

def _describe(tp: Any) -> str:
    origin = typing.get_origin(tp)
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in typing.get_args(tp))
    if origin in (typing.Union, types.UnionType):
        inner = [a for a in typing.get_args(tp) if a is not type(None)]
        return _describe(inner[0]) + " or null"
    return {int: "an integer", float: "a number", bool: "true or false", str: "a string",
            list: "a list", dict: "a mapping"}.get(origin or tp, str(tp))


def _coerce(tp: Any, value: Any, where: str, src: str) -> Any:
    """Check ``value`` against the annotation ``tp``; return it converted (int -> float)."""
    def fail(expected: str) -> typing.NoReturn:
        raise ConfigError(f"{src}: {where}: expected {expected}, got {value!r}")

    origin = typing.get_origin(tp)
    if origin is Literal:
        choices = typing.get_args(tp)
        if value not in choices or isinstance(value, bool) != any(isinstance(c, bool) for c in choices):
            fail(_describe(tp))
        return value
    if origin in (typing.Union, types.UnionType):
        if value is None:
            return None
        inner = [a for a in typing.get_args(tp) if a is not type(None)][0]
        return _coerce(inner, value, where, src)
    if tp is bool:
        if not isinstance(value, bool):
            fail("true or false")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            fail("an integer")
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            fail("a number")
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            fail("a string")
        return value
    if (origin or tp) is list:
        if not isinstance(value, list):
            fail("a list")
        return list(value)
    if (origin or tp) is dict:
        if not isinstance(value, dict):
            fail("a mapping")
        return dict(value)
    return value


def _check_bounds(f: dataclasses.Field, value: Any, where: str, src: str) -> None:
    md = f.metadata
    if value is None:
        return
    kind = "an integer" if isinstance(value, int) else "a number"
    for key, op, word in (("ge", float.__ge__, ">="), ("gt", float.__gt__, ">"),
                          ("le", float.__le__, "<="), ("lt", float.__lt__, "<")):
        limit = md.get(key)
        if limit is not None and not op(float(value), float(limit)):
            parts = [f"{w} {md[k]}" for k, w in (("ge", ">="), ("gt", ">"), ("le", "<="), ("lt", "<"))
                     if md.get(k) is not None]
            raise ConfigError(f"{src}: {where}: expected {kind} {' and '.join(parts)}, got {value!r}")
    item_ge = md.get("item_ge")
    if item_ge is not None:
        for v in value:
            if isinstance(v, bool) or not isinstance(v, int) or v < item_ge:
                raise ConfigError(
                    f"{src}: {where}: expected a list of integers >= {item_ge}, got {value!r}")


def _build_section(cls: type, data: Any, section: str, src: str) -> Any:
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{src}: {section}: expected a mapping of keys, got {data!r}")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise ConfigError(f"{src}: {section}.{unknown[0]}: unknown key; allowed keys: "
                          + ", ".join(sorted(fields)))
    kwargs = {}
    for name, value in data.items():
        where = f"{section}.{name}"
        kwargs[name] = _coerce(hints[name], value, where, src)
        _check_bounds(fields[name], kwargs[name], where, src)
    obj = cls(**kwargs)
    for name, f in fields.items():  # defaults are checked too, so a bad default cannot slip by
        if name not in kwargs:
            _check_bounds(f, getattr(obj, name), f"{section}.{name}", src)
    return obj


SECTIONS = {f.name: f for f in dataclasses.fields(Config) if f.name != "source"}


def from_dict(data: Any, src: str = "<config>") -> Config:
    """Validate a parsed YAML mapping into a :class:`Config`."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{src}: expected a mapping of sections at the top level, got {data!r}")
    unknown = sorted(set(data) - set(SECTIONS))
    if unknown:
        raise ConfigError(f"{src}: {unknown[0]}: unknown section; allowed sections: "
                          + ", ".join(SECTIONS))
    hints = typing.get_type_hints(Config)
    sections = {name: _build_section(hints[name], data.get(name), name, src) for name in SECTIONS}
    cfg = Config(**sections, source=src)
    _cross_check(cfg, src)
    return cfg


def _cross_check(cfg: Config, src: str) -> None:
    d = cfg.dataset
    if d.train_frac + d.val_frac + d.test_frac > 1.0 + 1e-9:
        raise ConfigError(f"{src}: dataset.train_frac: expected train_frac + val_frac + test_frac "
                          f"<= 1, got {d.train_frac + d.val_frac + d.test_frac:g}")
    if d.name == "file" and not d.path:
        raise ConfigError(f"{src}: dataset.path: expected a graph file path when dataset.name is "
                          f"'file', got {d.path!r}")


def parse_override(text: str) -> tuple[str, str, Any]:
    """Split ``section.key=value`` (value parsed as YAML) into its parts."""
    if "=" not in text:
        raise ConfigError(f"--set {text}: expected section.key=value")
    path, raw = text.split("=", 1)
    if path.count(".") != 1 or not all(path.split(".")):
        raise ConfigError(f"--set {text}: expected section.key=value")
    section, key = path.split(".")
    try:
        value = yaml.safe_load(raw) if raw != "" else ""
    except yaml.YAMLError:
        value = raw
    return section, key, value


def load(path: str | os.PathLike | None, overrides: list[str] | tuple[str, ...] = ()) -> Config:
    """Read a YAML config file (None = built-in defaults), apply ``--set`` overrides, validate."""
    src = str(path) if path is not None else "<defaults>"
    data: Any = {}
    if path is not None:
        p = Path(path)
        if not p.is_file():
            raise ConfigError(f"{src}: config file not found")
        try:
            data = yaml.safe_load(p.read_text()) or {}
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            at = f" at line {mark.line + 1}" if mark is not None else ""
            raise ConfigError(f"{src}: malformed YAML{at}: {getattr(exc, 'problem', exc)}") from None
        if not isinstance(data, dict):
            raise ConfigError(f"{src}: expected a mapping of sections at the top level, "
                              f"got {type(data).__name__}")
    for text in overrides:
        section, key, value = parse_override(text)
        if section not in SECTIONS:
            raise ConfigError(f"--set {text}: {section}: unknown section; allowed sections: "
                              + ", ".join(SECTIONS))
        sec = data.setdefault(section, {}) or {}
        if not isinstance(sec, dict):
            raise ConfigError(f"{src}: {section}: expected a mapping of keys, got {sec!r}")
        sec[key] = value
        data[section] = sec
    return from_dict(data, src)


def dump(cfg: Config, path: str | os.PathLike) -> None:
    """Write the resolved config as YAML (atomically)."""
    from dsgraph.fsutil import atomic_write_text
    atomic_write_text(path, yaml.safe_dump(cfg.to_dict(), sort_keys=False))


def add_cli_args(parser: Any) -> None:
    """Add the ``--config FILE`` and repeated ``--set section.key=value`` options."""
    parser.add_argument("--config", default="configs/default.yaml",
                        help="YAML run configuration (default: configs/default.yaml)")
    parser.add_argument("--set", dest="overrides", action="append", default=[],
                        metavar="SECTION.KEY=VALUE", help="override one config value (repeatable)")
