"""Reading a YAML config file: every way a file can be broken is one line naming the file.

A binary or non-UTF-8 file, malformed YAML (tabs, unclosed brackets, several documents) and a key
given twice in one mapping (which PyYAML would silently resolve to the last value) are each a
:class:`ConfigError` with the line where the problem is.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from dsgraph.errors import ConfigError


class _StrictLoader(yaml.SafeLoader):
    """``SafeLoader`` that refuses a key repeated within one mapping."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        """A mapping; a repeated key is an error at the repeat's line."""
        if any(k.tag == "tag:yaml.org,2002:merge" for k, _ in node.value):
            # "<<: *base" keys may be overridden on purpose; PyYAML's merge rules apply.
            return super().construct_mapping(node, deep=deep)
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            try:
                first = seen.setdefault(key, key_node.start_mark.line + 1)
            except TypeError:  # an unhashable key (a list, say): SafeLoader reports it
                break
            if first != key_node.start_mark.line + 1:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r} (first given at line {first})",
                    key_node.start_mark)
        return super().construct_mapping(node, deep=deep)


def yaml_problem(exc: yaml.YAMLError) -> str:
    """One line for a PyYAML error: where (line) and what, without its multi-line excerpt."""
    mark = getattr(exc, "problem_mark", None)
    at = f" at line {mark.line + 1}" if mark is not None else ""
    problem = getattr(exc, "problem", None)
    if problem is None:
        return f"malformed YAML{at}: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"
    context = getattr(exc, "context", None)
    if context and problem.startswith("but "):  # "expected a single document ..., but found ..."
        problem = f"{context}, {problem}"
    return f"malformed YAML{at}: {problem}"


def read_yaml(path: str | Path) -> Any:
    """The parsed content of the YAML file ``path``, or a one-line :class:`ConfigError`."""
    src = str(path)
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"{src}: config file not found")
    try:
        data = p.read_bytes()
    except OSError as exc:
        raise ConfigError(f"{src}: cannot read the config file ({exc.strerror})") from None
    nul = data.find(b"\0")
    if nul >= 0:
        raise ConfigError(f"{src}: expected a YAML text file, got binary data (a NUL byte at "
                          f"offset {nul})")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{src}: expected UTF-8 text, got undecodable byte at offset "
                          f"{exc.start}") from None
    try:
        return yaml.load(text, Loader=_StrictLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.reader.ReaderError as exc:  # a control character PyYAML does not accept
        char = chr(exc.character) if isinstance(exc.character, int) else exc.character
        raise ConfigError(f"{src}: expected YAML text, got the control character "
                          f"{char!r} at offset {exc.position}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{src}: {yaml_problem(exc)}") from None
    except RecursionError:
        raise ConfigError(f"{src}: malformed YAML: nested too deeply") from None
