"""Run configuration: the section dataclasses, YAML loading, ``--set`` overrides, validation.

A YAML file has one mapping per section (``dataset``, ``partition``, ``model``, ``train``,
``task``, ``sampled``, ``sar``, ``physics``, ``seqagg``, ``compression``, ``cluster``); every key
is optional and defaults to the dataclass default. Anything invalid, alone or in combination, raises
:class:`ConfigError` with one line naming the file, the key path and what is allowed.
"""
from __future__ import annotations

import dataclasses
import os
import re
import typing
from typing import Any

import yaml

from dsgraph.config.checks import cross_check
from dsgraph.config.limits import clip, quote_key, short_repr
from dsgraph.config.schema import build_section, migrate_moved_keys, reference_rows
from dsgraph.config.sources import blame_set, format_rows, resolved_rows
from dsgraph.config.yamlfile import YamlRefused, load_text, read_yaml
from dsgraph.config.modes import PhysicsConfig, SampledConfig, SarConfig, SeqaggConfig
from dsgraph.config.sections import (
    ClusterConfig,
    CompressionConfig,
    Config,
    DatasetConfig,
    ModelConfig,
    PartitionConfig,
    TaskConfig,
    TrainConfig,
)
from dsgraph.errors import ConfigError
from dsgraph.fsutil import atomic_write_text

__all__ = ["ClusterConfig", "CompressionConfig", "Config", "ConfigError", "DatasetConfig",
           "ModelConfig", "PartitionConfig", "PhysicsConfig", "SampledConfig", "SarConfig",
           "SeqaggConfig", "TaskConfig", "TrainConfig", "SECTIONS", "add_cli_args", "dump",
           "format_sources", "from_dict", "load", "parse_override", "plain_help",
           "reference_table", "resolved_with_sources"]

SECTIONS = {f.name: f for f in dataclasses.fields(Config) if f.name != "source"}
MAX_SET_CHARS = 2 ** 16  # one --set: a line or two of YAML (an argument is at most 128 KiB)


def from_dict(data: Any, src: str = "<config>", resolved: bool = False) -> Config:
    """Validate a parsed YAML mapping into a :class:`Config` (fields, then cross-field rules).

    ``resolved``: the mapping is a run's resolved config, written by dsgraph and checked by its
    launcher: a key that has moved since is read at its new place (a user's own config is told
    where it went instead), and sizes are not checked against this host's memory (a job
    process may run on another host)."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{src}: expected a mapping of sections at the top level, got "
                          f"{short_repr(data)}")
    if resolved:
        data = migrate_moved_keys(data)
    unknown = sorted(set(data) - set(SECTIONS), key=str)  # YAML keys need not be strings
    if unknown:
        raise ConfigError(f"{src}: {quote_key(unknown[0])}: unknown section; allowed sections: "
                          + ", ".join(SECTIONS))
    hints = typing.get_type_hints(Config)
    sections = {name: build_section(hints[name], data.get(name), name, src) for name in SECTIONS}
    cfg = Config(**sections, source=src)
    cross_check(cfg, host=not resolved)
    return cfg


def parse_override(text: str) -> tuple[list[str], Any]:
    """Split ``section.key[.subkey...]=value`` into its key path and value (parsed as YAML, by
    the config file's bounded loader; malformed YAML is the string itself)."""
    if len(text) > MAX_SET_CHARS:
        raise ConfigError(f"--set {clip(text)}: expected at most {MAX_SET_CHARS} characters, "
                          f"got {len(text)}")
    if "=" not in text:
        raise ConfigError(f"--set {clip(text)}: expected section.key=value")
    path, raw = text.split("=", 1)
    keys = path.split(".")
    if len(keys) < 2 or not all(keys):
        raise ConfigError(f"--set {clip(text)}: expected section.key=value")
    try:
        value = load_text(raw, strict=False) if raw != "" else ""
    except YamlRefused as exc:
        raise ConfigError(f"--set {clip(text)}: {exc}") from None
    except RecursionError:
        raise ConfigError(f"--set {clip(text)}: malformed YAML: nested too deeply") from None
    except yaml.YAMLError:
        value = raw
    return keys, value


def _apply_override(data: dict, text: str) -> None:
    """Set one ``--set`` value in the parsed YAML, creating sections and nested mappings."""
    keys, value = parse_override(text)
    if keys[0] not in SECTIONS:
        raise ConfigError(f"--set {clip(text)}: {clip(keys[0])}: unknown section; allowed "
                          "sections: " + ", ".join(SECTIONS))
    node = data
    for depth, key in enumerate(keys[:-1]):
        child = node.get(key)
        if child is None:
            child = node[key] = {}
        if not isinstance(child, dict):
            where = clip(".".join(keys[:depth + 1]))
            raise ConfigError(f"--set {clip(text)}: {where}: expected a mapping to set "
                              f"{short_repr(keys[depth + 1])} in, got {short_repr(child)}")
        node = child
    node[keys[-1]] = value


def load(path: str | os.PathLike | None, overrides: list[str] | tuple[str, ...] = (),
         resolved: bool = False) -> Config:
    """Read a YAML config file (None = built-in defaults), apply ``--set`` overrides, validate
    (``resolved``: a run folder's config.yaml, see :func:`from_dict`)."""
    src = str(path) if path is not None else "<defaults>"
    data: Any = {}
    if path is not None:
        data = read_yaml(path)
        if data is None:
            data = {}
        if not isinstance(data, dict):
            raise ConfigError(f"{src}: expected a mapping of sections at the top level, "
                              f"got {type(data).__name__}")
    for text in overrides:
        _apply_override(data, text)
    try:
        return from_dict(data, src, resolved)
    except ConfigError as exc:  # a value --set gave is named as the --set's, not the file's
        raise blame_set(exc, src, [parse_override(t)[0] for t in overrides]) from None


def resolved_with_sources(path: str | os.PathLike | None,
                          overrides: list[str] | tuple[str, ...] = (),
                          ) -> list[tuple[str, Any, str]]:
    """``(section.key, value, source)`` of every key of the config :func:`load` resolves (an
    invalid one raises its usual :class:`ConfigError`); source: ``default``, the YAML file's
    path or ``--set``; a mapping's keys (``model.args``) one by one."""
    cfg = load(path, overrides)
    return resolved_rows(cfg.to_dict(), path, [parse_override(t)[0] for t in overrides])


def format_sources(path: str | os.PathLike | None,
                   overrides: list[str] | tuple[str, ...] = ()) -> str:
    """:func:`resolved_with_sources` as aligned text: ``sampled.batch_size: 512   # file``."""
    return format_rows(resolved_with_sources(path, overrides))


def dump(cfg: Config, path: str | os.PathLike) -> None:
    """Write the resolved config as YAML (atomically)."""
    atomic_write_text(path, yaml.safe_dump(cfg.to_dict(), sort_keys=False))


def reference_table() -> str:
    """docs/configuration.md's table (markdown), generated from the fields' docs."""
    lines = ["| key | default | meaning |", "|---|---|---|"]
    lines += [f"| `{key}` | `{default}` | {doc} |" for key, default, doc in reference_rows(Config)]
    return "\n".join(lines)


# reStructuredText in docstrings and field docs: a role (:mod:`x`, :func:`~a.b.c`, with an
# optional "title <target>"), ``literal`` and `default role` / markdown code.
_ROLE = re.compile(r":[\w-]+(?::[\w-]+)*:`(~?)([^`<]*?)\s*(?:<[^`>]*>)?`")
_LITERAL = re.compile(r"``(.+?)``|`([^`]+)`", re.DOTALL)


def plain_help(text: str | None) -> str:
    """``text`` (a docstring or a field's doc shown by ``--help``) without reStructuredText
    markup: ``x`` and `x` become x, :role:`a.b` a.b, :role:`~a.b` b."""
    if not text:
        return ""
    text = _ROLE.sub(lambda m: m.group(2).rsplit(".", 1)[-1] if m.group(1) else m.group(2), text)
    return _LITERAL.sub(lambda m: m.group(1) if m.group(1) is not None else m.group(2), text)


def add_cli_args(parser: Any) -> None:
    """Add the ``--config FILE`` and repeated ``--set section.key=value`` options."""
    parser.add_argument("--config", default="configs/default.yaml",
                        help="YAML run configuration (default: configs/default.yaml)")
    parser.add_argument("--set", dest="overrides", action="append", default=[],
                        metavar="SECTION.KEY=VALUE",
                        help="override one config value, e.g. train.epochs=10 or "
                             "model.args.hidden=64 (repeatable)")
