"""Reading a YAML config file: every way a file can be broken is one line naming the file.

A binary or non-UTF-8 file, malformed YAML (tabs, unclosed brackets, several documents) and a key
given twice in one mapping (which PyYAML would silently resolve to the last value) are each a
:class:`ConfigError` with the line where the problem is.

What a config costs to read is bounded too: the file's size, and what its aliases add. An alias
(``*name``) repeats the value anchored as ``&name``; aliases of aliases multiply, so a few lines
can stand for billions of values (a "billion laughs"). PyYAML builds such a value once and
shares it, but anything that walks it (a message quoting it, a copy, the resolved config.yaml)
pays for every repeat. The loader counts, on the composed nodes and before any value is built,
how many values and characters the aliases add, and refuses past a small bound.
"""
from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, BinaryIO

import yaml

from dsgraph.config.limits import clip, short_repr
from dsgraph.errors import ConfigError

MAX_CONFIG_BYTES = 2 ** 20  # a config is a few KiB; pure-Python PyYAML takes seconds per MiB
# What all aliases of one document may add: plenty for "<<: *base" and repeated lists, and
# small enough that the expanded config (a run folder's config.yaml) stays a small file.
MAX_ALIAS_VALUES = 10_000
MAX_ALIAS_CHARS = 100_000
MAX_INT_CHARS = 100  # an integer literal: longer ones overflow every use, or take long to read
# YAML 1.2's float rule for exponent forms. PyYAML follows YAML 1.1, whose floats need a dot and a
# signed exponent (1.0e-9), so 1e-9, 5E3 and 1.5e3 read as strings and "expected a number"
# refusals. Ints stay ints: a literal with no exponent never matches this.
EXPONENT_FLOAT = re.compile(r"^[-+]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)[eE][-+]?[0-9]+$")


class YamlRefused(Exception):
    """YAML that would cost more to build than a config may: one line (``line N: ...``).

    Not a ``yaml.YAMLError``: a caller that falls back on malformed YAML (``--set`` values are
    strings then) must not fall back on this."""


class _BoundedLoader(yaml.SafeLoader):
    """``SafeLoader`` whose aliases may add only :data:`MAX_ALIAS_VALUES` values and
    :data:`MAX_ALIAS_CHARS` characters to a document, and whose integers are short."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        # node -> (values, scalar characters) of its value with every alias in it expanded;
        # an alias is the anchored node itself, so each is measured once
        self._sizes: dict[yaml.Node, tuple[int, int]] = {}
        self._added = (0, 0)  # what the aliases so far add to the document

    def compose_node(self, parent: Any, index: Any) -> yaml.Node:
        """The next node; an alias is counted against the bound before it is used."""
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            node = super().compose_node(parent, index)
            self._add_alias(event, node)
            return node
        node = super().compose_node(parent, index)  # composes (and measures) its children
        self._sizes[node] = self._expanded(node)
        return node

    def _expanded(self, node: yaml.Node) -> tuple[int, int]:
        """(values, characters) of a composed node whose children are measured."""
        if isinstance(node, yaml.ScalarNode):
            return 1, len(node.value)
        children = node.value if isinstance(node, yaml.SequenceNode) else \
            [child for pair in node.value for child in pair]
        values, chars = 1, 0
        for child in children:
            v, c = self._sizes[child]
            values, chars = values + v, chars + c
        return values, chars

    def _add_alias(self, event: yaml.AliasEvent, node: yaml.Node) -> None:
        """Count what alias ``event`` (to ``node``) adds; refuse past the bound or a cycle."""
        where = f"line {event.start_mark.line + 1}: alias *{clip(event.anchor, 40)}"
        size = self._sizes.get(node)
        if size is None:  # its anchor's value is still being read: the value contains itself
            raise YamlRefused(f"{where}: expected an alias to a value given before it, got one "
                              f"inside the value it names (a recursive value)")
        values, chars = self._added[0] + size[0], self._added[1] + size[1]
        if values > MAX_ALIAS_VALUES or chars > MAX_ALIAS_CHARS:
            raise YamlRefused(f"{where}: expected aliases to add at most {MAX_ALIAS_VALUES} "
                              f"values and {MAX_ALIAS_CHARS} characters to the document in all, "
                              f"got {values} values and {chars} characters with this one")
        self._added = (values, chars)

    def construct_yaml_int(self, node: yaml.ScalarNode) -> int:
        """An integer literal of at most :data:`MAX_INT_CHARS` characters."""
        if len(node.value) > MAX_INT_CHARS:
            raise YamlRefused(f"line {node.start_mark.line + 1}: expected an integer of at most "
                              f"{MAX_INT_CHARS} characters, got {len(node.value)}")
        return super().construct_yaml_int(node)

    def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
        """A node's value; a scalar Python refuses (``2020-13-45``, ``!!int x``) is a
        ``ConstructorError`` at its line instead of a bare ``ValueError``."""
        try:
            return super().construct_object(node, deep=deep)
        except (ValueError, OverflowError) as exc:
            what = node.value if isinstance(node, yaml.ScalarNode) else node.tag
            raise yaml.constructor.ConstructorError(
                None, None, f"cannot read {short_repr(what, 40)}: {clip(str(exc), 80)}",
                node.start_mark) from None


_BoundedLoader.add_constructor("tag:yaml.org,2002:int", _BoundedLoader.construct_yaml_int)
# Copied onto this class by PyYAML (SafeLoader's resolvers stay YAML 1.1's); tried after 1.1's own.
_BoundedLoader.add_implicit_resolver("tag:yaml.org,2002:float", EXPONENT_FLOAT,
                                     list("-+0123456789."))


class _StrictLoader(_BoundedLoader):
    """Bounded loader that refuses a key repeated within one mapping."""

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
                    None, None, f"duplicate key {short_repr(key)} (first given at line {first})",
                    key_node.start_mark)
        return super().construct_mapping(node, deep=deep)


def yaml_problem(exc: yaml.YAMLError) -> str:
    """One line for a PyYAML error: where (line) and what, without its multi-line excerpt (and
    at most ~200 characters of it: PyYAML quotes keys and anchors whole)."""
    mark = getattr(exc, "problem_mark", None)
    at = f" at line {mark.line + 1}" if mark is not None else ""
    problem = getattr(exc, "problem", None)
    if problem is None:
        text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        return f"malformed YAML{at}: {clip(text, 200)}"
    context = getattr(exc, "context", None)
    if context and problem.startswith("but "):  # "expected a single document ..., but found ..."
        problem = f"{context}, {problem}"
    return f"malformed YAML{at}: {clip(problem, 200)}"


def load_text(text: str, strict: bool = True) -> Any:
    """``text`` parsed by the bounded loader (``strict``: a repeated key is an error too).

    Raises ``yaml.YAMLError`` for malformed YAML, :class:`YamlRefused` for YAML that would cost
    too much, ``RecursionError`` for nesting deeper than Python's stack."""
    return yaml.load(text, Loader=_StrictLoader if strict else _BoundedLoader)  # noqa: S506


def read_yaml(path: str | Path) -> Any:
    """The parsed content of the YAML file ``path``, or a one-line :class:`ConfigError`."""
    src = str(path)
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"{src}: config file not found")
    try:
        with p.open("rb") as f:  # at most one byte past the bound, whatever the file claims
            data = f.read(MAX_CONFIG_BYTES + 1)
            size = max(len(data), _file_size(f))
    except OSError as exc:
        raise ConfigError(f"{src}: cannot read the config file ({exc.strerror})") from None
    if size > MAX_CONFIG_BYTES:
        raise ConfigError(f"{src}: expected a config file of at most {MAX_CONFIG_BYTES} bytes "
                          f"(1 MiB), got {size} bytes")
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
        return load_text(text)
    except YamlRefused as exc:
        raise ConfigError(f"{src}: {exc}") from None
    except yaml.reader.ReaderError as exc:  # a control character PyYAML does not accept
        char = chr(exc.character) if isinstance(exc.character, int) else exc.character
        raise ConfigError(f"{src}: expected YAML text, got the control character "
                          f"{char!r} at offset {exc.position}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{src}: {yaml_problem(exc)}") from None
    except RecursionError:
        raise ConfigError(f"{src}: malformed YAML: nested too deeply") from None


def _file_size(f: BinaryIO) -> int:
    """The size an open file reports (0 where it reports none)."""
    try:
        return os.fstat(f.fileno()).st_size
    except OSError:
        return 0
