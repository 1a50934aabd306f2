"""Validation of parsed YAML against the section dataclasses: types, bounds, unknown keys.

Types come from the annotations (``Literal`` choices, ``Optional``, int/float/bool/str/list/
dict), bounds from the field metadata (:func:`dsgraph.config.fields.opt`). Every problem is a
:class:`ConfigError` with one line naming the source, the key path and what is allowed.
"""
from __future__ import annotations

import dataclasses
import operator
import types
import typing
from typing import Any, Literal

from dsgraph.config.limits import quote_key, short_repr
from dsgraph.errors import ConfigError

# Keys that moved between sections: a config written for an older layout gets told where to.
MOVED = {
    "train.batch_size": "sampled.batch_size", "train.fanouts": "sampled.fanouts",
    "train.eval": "sampled.eval", "train.eval_batch_size": "sampled.eval_batch_size",
    "sar.eval_every": "train.eval_every",
    "sar.timeout_s": "train.collective_timeout_s", "cluster.timeout_s": "train.timeout_s",
    "physics.lr_schedule": "train.lr_schedule", "physics.grad_clip": "train.grad_clip",
    "physics.eval_every": "train.eval_every", "sar.chunk_rows": "seqagg.chunk_rows",
    "train.task": "task.name",
}
# Keys that gave way to others: a config that still sets one is told what replaced it.
_ONE_BUDGET = ("was replaced by sampled.feature_memory_mb (one budget for every remote row a "
               "trainer holds)")
REPLACED = {
    "sampled.cache_halo": _ONE_BUDGET, "sampled.remote_cache_mb": _ONE_BUDGET,
    "train.cache_halo": _ONE_BUDGET,
    "sampled.copy_own_features": "was removed: own rows are read from shared memory, never "
                                 "copied",
}


def describe(tp: Any) -> str:
    """What a value of annotation ``tp`` must look like, in words."""
    origin = typing.get_origin(tp)
    if origin is Literal:
        return "one of " + ", ".join(_choice(a) for a in typing.get_args(tp))
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        inner = [a for a in args if a is not type(None)]
        return " or ".join(describe(a) for a in inner) + (" or null" if len(inner) < len(args)
                                                          else "")
    return {int: "an integer", float: "a number", bool: "true or false", str: "a string",
            list: "a list", dict: "a mapping"}.get(origin or tp, str(tp))


def _choice(value: Any) -> str:
    """A Literal choice as a YAML user writes it (``true``, not ``True``)."""
    return str(value).lower() if isinstance(value, bool) else repr(value)


def _coerce(tp: Any, value: Any, where: str, src: str) -> Any:
    """Check ``value`` against the annotation ``tp``; return it converted (int -> float)."""
    def fail(expected: str) -> typing.NoReturn:
        raise ConfigError(f"{src}: {where}: expected {expected}, got {short_repr(value)}")

    origin = typing.get_origin(tp)
    if origin is Literal:
        # 1 == True in Python: a choice matches only a value of the same bool-ness.
        if not any(value == c and isinstance(value, bool) == isinstance(c, bool)
                   for c in typing.get_args(tp)):
            fail(describe(tp))
        return value
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        if len(inner) == 1:  # Optional[X]: X's own message
            return _coerce(inner[0], value, where, src)
        for alternative in inner:  # the first that takes it
            try:
                return _coerce(alternative, value, where, src)
            except ConfigError:
                continue
        fail(describe(tp))
    checks = {bool: lambda v: isinstance(v, bool),
              int: lambda v: isinstance(v, int) and not isinstance(v, bool),
              float: lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
              str: lambda v: isinstance(v, str), list: lambda v: isinstance(v, list),
              dict: lambda v: isinstance(v, dict)}
    kind = origin or tp
    if kind in checks and not checks[kind](value):
        fail(describe(kind))
    if kind is float:
        try:
            return float(value)
        except OverflowError:  # an integer past float's range
            fail(describe(kind))
    if kind in (list, dict):
        return kind(value)
    return value


_WORDS = (("ge", ">="), ("gt", ">"), ("le", "<="), ("lt", "<"))
# Python compares an int with a float exactly: no conversion that overflows for a huge int.
_OPS = {"ge": operator.ge, "gt": operator.gt, "le": operator.le, "lt": operator.lt}


def _check_bounds(f: dataclasses.Field, value: Any, where: str, src: str) -> None:
    """The field's range (``opt``'s ``ge`` ... ``lt``, ``item_ge``) and ceilings (``cap``,
    ``item_cap``, ``max_len``)."""
    md = f.metadata
    if value is None:
        return
    kind = "an integer" if isinstance(value, int) else "a number"
    for key, _ in _WORDS:
        limit = md.get(key)
        if limit is not None and not _OPS[key](value, limit):
            raise ConfigError(f"{src}: {where}: expected {kind} {_bounds(md, '')}, got "
                              f"{short_repr(value)}")
    if md.get("cap") is not None and value > md["cap"]:
        raise ConfigError(f"{src}: {where}: expected {kind} {_bounds(md, '', md['cap'])}, got "
                          f"{short_repr(value)}")
    max_len = md.get("max_len")
    if max_len is not None and len(value) > max_len:
        raise ConfigError(f"{src}: {where}: expected a list of at most {max_len} items, got "
                          f"{len(value)} items")
    item_ge, item_cap = md.get("item_ge"), md.get("item_cap")
    if item_ge is None and item_cap is None:
        return
    for v in value:
        if isinstance(v, bool) or not isinstance(v, int) or (item_ge is not None and v < item_ge):
            raise ConfigError(f"{src}: {where}: expected a list of integers "
                              f"{_bounds(md, 'item_')}, got {short_repr(value)}")
        if item_cap is not None and v > item_cap:
            raise ConfigError(f"{src}: {where}: expected a list of integers "
                              f"{_bounds(md, 'item_', item_cap)}, got {short_repr(value)}")


def _bounds(md: Any, prefix: str, cap: Any = None) -> str:
    """The range ``prefix + ge`` ... in words (``>= 1 and <= 1000``), and ``<= cap`` if given."""
    parts = [f"{w} {md[prefix + k]}" for k, w in _WORDS if md.get(prefix + k) is not None]
    return " and ".join(parts + ([f"<= {cap}"] if cap is not None else []))


def migrate_moved_keys(data: dict) -> dict:
    """``data`` with every :data:`MOVED` key read at its new place (unless that is set too):
    run folders written before a key moved stay readable."""
    data = {name: dict(section) if isinstance(section, dict) else section
            for name, section in data.items()}
    for old, new in MOVED.items():
        old_section, old_key = old.split(".")
        new_section, new_key = new.split(".")
        section = data.get(old_section)
        if not isinstance(section, dict) or old_key not in section:
            continue
        value = section.pop(old_key)
        target = data.setdefault(new_section, {})
        if isinstance(target, dict):
            target.setdefault(new_key, value)
    return data


def build_section(cls: type, data: Any, section: str, src: str) -> Any:
    """Validate one section's mapping into an instance of its dataclass ``cls``."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{src}: {section}: expected a mapping of keys, got "
                          f"{short_repr(data)}")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - set(fields), key=str)  # YAML keys need not be strings
    if unknown:
        where = f"{section}.{quote_key(unknown[0])}"
        if where in MOVED:
            raise ConfigError(f"{src}: {where}: this key is now {MOVED[where]}")
        if where in REPLACED:
            raise ConfigError(f"{src}: {where}: this key {REPLACED[where]}")
        raise ConfigError(f"{src}: {where}: unknown key; allowed keys: " + ", ".join(sorted(fields)))
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


def reference_rows(config_cls: type) -> list[tuple[str, str, str]]:
    """(``section.key``, default, doc) of every field, in declaration order."""
    rows = []
    hints = typing.get_type_hints(config_cls)
    for sec in dataclasses.fields(config_cls):
        if sec.name == "source":
            continue
        for f in dataclasses.fields(hints[sec.name]):
            default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
            rows.append((f"{sec.name}.{f.name}", _yaml_scalar(default), f.metadata.get("doc", "")))
    return rows


def _yaml_scalar(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float) and value.is_integer():
        return str(int(value)) if abs(value) >= 1 else str(value)
    return str(value)
