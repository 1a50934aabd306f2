"""Where each value of a resolved config comes from: a section dataclass's default, the YAML
file or a ``--set`` override (``python -m train --print-config``)."""
from __future__ import annotations

import os
from typing import Any, Iterator, Sequence

import yaml

from dsgraph.config.yamlfile import read_yaml
from dsgraph.errors import ConfigError

DEFAULT = "default"
SET = "--set"


def leaves(path: list[str], value: Any) -> Iterator[tuple[list[str], Any]]:
    """``(key path, value)`` of every leaf of ``value``: a non-empty mapping (``model.args``)
    is shown key by key, since its keys may come from different places."""
    if isinstance(value, dict) and value and all(isinstance(k, str) for k in value):
        for key, child in value.items():
            yield from leaves([*path, key], child)
    else:
        yield path, value


def _in_yaml(data: Any, path: Sequence[str]) -> bool:
    """Whether the parsed YAML ``data`` gives the value at ``path`` (or one around it)."""
    node = data
    for key in path:
        if not isinstance(node, dict) or key not in node:
            return False
        node = node[key]
    return True


def source_of(path: Sequence[str], yaml_data: Any, yaml_src: str | None,
              set_paths: Sequence[Sequence[str]]) -> str:
    """Where the value at key ``path`` comes from: ``--set`` (the last word: an override of it
    or of a mapping holding it), the YAML file (``yaml_src``), else the default."""
    for keys in set_paths:
        n = min(len(keys), len(path))
        if list(keys[:n]) == list(path[:n]):
            return SET
    if yaml_src is not None and _in_yaml(yaml_data, path):
        return yaml_src
    return DEFAULT


def blame_set(exc: ConfigError, src: str, set_paths: Sequence[Sequence[str]]) -> ConfigError:
    """``exc`` (``<src>: <key>: ...``) as ``--set <key>: ...`` when ``--set`` gave that key (or a
    mapping around it): the file did not give the value, so naming the file would mislead."""
    text = str(exc)
    if not text.startswith(f"{src}: "):
        return exc
    rest = text[len(src) + 2:]
    key = rest.split(": ", 1)[0]
    if " " in key or "." not in key:  # not a key path: a message about the whole config
        return exc
    if source_of(key.split("."), None, None, set_paths) != SET:
        return exc
    return ConfigError(f"{SET} {rest}")


def flow_yaml(value: Any) -> str:
    """``value`` as one line of YAML (``[10, 25]``, ``null``, ``{hidden: 64}``)."""
    text = yaml.safe_dump(value, default_flow_style=True, width=10 ** 9, sort_keys=False)
    if text.endswith("\n...\n"):  # a plain scalar is dumped as a document of its own
        text = text[:-len("\n...\n")]
    return text.strip()


def resolved_rows(cfg_dict: dict, path: str | os.PathLike | None,
                  set_paths: Sequence[Sequence[str]]) -> list[tuple[str, Any, str]]:
    """``(section.key, value, source)`` of every leaf of a resolved config (``cfg_dict``: its
    :meth:`~dsgraph.config.Config.to_dict`), read from the YAML file ``path`` (None: none) and
    overridden at ``set_paths`` (the key paths of the ``--set`` options)."""
    data = (read_yaml(path) or {}) if path is not None else {}
    src = str(path) if path is not None else None
    return [(".".join(keys), value, source_of(keys, data, src, set_paths))
            for section, values in cfg_dict.items()
            for keys, value in leaves([section], values)]


def format_rows(rows: list[tuple[str, Any, str]], max_width: int = 56) -> str:
    """The rows as aligned text, a section per paragraph: ``key: value   # source``."""
    texts = [f"{key}: {flow_yaml(value)}" for key, value, _ in rows]
    width = min(max_width, max((len(t) for t in texts), default=0))
    lines: list[str] = []
    section = None
    for text, (key, _, source) in zip(texts, rows):
        if section is not None and key.split(".")[0] != section:
            lines.append("")
        section = key.split(".")[0]
        lines.append(f"{text:<{width}}   # {source}")
    return "\n".join(lines)
