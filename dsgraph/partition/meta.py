"""Parse and validate a partition JSON: DGL's keys and dsgraph's integrity block, one-line errors.

The integrity block (key ``dsgraph``, ignored by stock ``dgl.distributed.load_partition``) holds:

- ``version`` (1) and ``hash`` (``"sha256"``);
- ``files``: ``{path relative to the JSON: {"size": bytes, "sha256": hex}}`` for every file the
  JSON lists (each part's graph structure and node/edge feature files);
- ``meta``: ``{key: first 16 hex digits of the sha256 of the key's canonical JSON}`` for every
  DGL key of the JSON, so a hand edit is named by its key;
- ``graph_fingerprint``: sha256 over the source graph (:func:`dsgraph.partition.integrity.
  graph_fingerprint`);
- ``source``: the ``dataset`` and ``partition`` config sections that made the files
  (:func:`partition_source`; null when written by library code without a config) and
  ``config_fingerprint``, the sha256 of their canonical JSON.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from pathlib import Path
from typing import Any

from dsgraph.errors import DataError

BLOCK = "dsgraph"
BLOCK_VERSION = 1
REDO = "re-partition (`python -m partition --force` with the run's --config and --set options)"
PART_FILES = ("part_graph", "node_feats", "edge_feats")
# Config keys that do not decide what the partition files hold: where they are written, where
# the generated graph is cached (the cache is keyed by the graph's own parameters), and how the
# partitioner ran (pipeline, memory budget, processes: partition_stats.json records which
# assigner ran).
IGNORED_KEYS = {"partition": ("out_dir", "pipeline", "memory_mb", "workers"),
                "dataset": ("cache_dir",)}
_HEX64 = re.compile(r"[0-9a-f]{64}")
UNSET = "<unset>"  # a key one side of a comparison does not have


def canonical_json(value: Any) -> bytes:
    """A stable serialization (sorted keys, no spaces) for hashing JSON values."""
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()


def key_digest(value: Any) -> str:
    """The short digest the integrity block records for one DGL key's value."""
    return hashlib.sha256(canonical_json(value)).hexdigest()[:16]


def partition_source(cfg: Any) -> dict:
    """The config that decides a partitioning: ``dataset`` and ``partition`` minus IGNORED_KEYS,
    and for link prediction ``task.name`` and ``task.edge_split`` (its held-out edges are
    removed from the partitioned graph), as for the edge tasks (their targets and split are in
    the partitions)."""
    source = {name: {k: v for k, v in dataclasses.asdict(getattr(cfg, name)).items()
                     if k not in IGNORED_KEYS[name]}
              for name in ("dataset", "partition")}
    # node tasks' partitions keep their recorded source
    if cfg.task_facts.reads_edges:
        source["task"] = {"name": cfg.task_name, "edge_split": list(cfg.task.edge_split)}
    return source


def source_differences(recorded: dict, current: dict, defaults: dict
                       ) -> list[tuple[str, Any, Any]]:
    """Every ``section.key`` whose recorded value (a key the record lacks: its default, the key
    having been added to dsgraph later) differs from ``current``'s: ``(key, made, says)``, in the
    record's order; sections and values as :func:`partition_source` builds them."""
    out = []
    for section in ("dataset", "partition", "task"):
        old, new = recorded.get(section, {}), current.get(section, {})
        for key in [*old, *(k for k in new if k not in old)]:
            made = old.get(key, defaults.get(section, {}).get(key, UNSET))
            says = new.get(key, UNSET)
            if made != says:
                out.append((f"{section}.{key}", made, says))
    return out


def describe_differences(diffs: list[tuple[str, Any, Any]]) -> str:
    """``made with K=V, the config says W`` for one difference; for several every key is named
    on both sides, so one message lists everything to repeat."""
    if len(diffs) == 1:
        key, made, says = diffs[0]
        return f"made with {key}={show_value(made)}, the config says {show_value(says)}"
    made = ", ".join(f"{k}={show_value(v)}" for k, v, _ in diffs)
    says = ", ".join(f"{k}={show_value(v)}" for k, _, v in diffs)
    return f"made with {made}; the config says {says}"


def show_value(value: Any) -> str:
    """A config value as the user wrote it in YAML (JSON is close enough), markers as they are."""
    return value if value == UNSET else json.dumps(value)


def is_hetero(meta: dict) -> bool:
    """Whether a partition JSON lists several node or edge types."""
    return len(meta["ntypes"]) > 1 or len(meta["etypes"]) > 1


def partitions_are_hetero(cfg: Any) -> bool:
    """Whether the run's partition JSON holds a heterogeneous graph (False while it does not
    exist or cannot be read: the mode's prepare reports that)."""
    path = Path(cfg.partition.out_dir) / f"{cfg.partition.graph_name}.json"
    try:
        return is_hetero(json.loads(path.read_text()))
    except (OSError, ValueError, KeyError, TypeError):
        return False


def read_meta(part_json: str | Path, redo: str = REDO) -> dict:
    """The partition JSON, checked to hold consistent DGL keys and a well-formed integrity block.

    Raises :class:`DataError` with one line naming the file and the key for an unreadable,
    truncated, non-JSON or hand-edited file, or one written before dsgraph recorded checksums.
    """
    path = Path(part_json)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise DataError(f"{path}: partition JSON not found; run `python -m partition` "
                        f"first") from None
    except UnicodeDecodeError as exc:
        raise DataError(f"{path}: expected a UTF-8 partition JSON, got an undecodable byte at "
                        f"offset {exc.start}; {redo}") from None
    except OSError as exc:
        raise DataError(f"{path}: cannot read the partition JSON: {exc.strerror or exc}") from None
    try:
        meta = json.loads(text)
    except json.JSONDecodeError as exc:
        raise DataError(f"{path}: not valid JSON ({exc.msg} at line {exc.lineno} column "
                        f"{exc.colno}; truncated or edited?); {redo}") from None
    if not isinstance(meta, dict):
        raise DataError(f"{path}: expected a JSON object of partition keys, got "
                        f"{type(meta).__name__}; {redo}")
    # The digests first: a hand edit is then named by the key that was edited, not by a key
    # that merely became inconsistent with it.
    _check_block(meta, path, redo)
    _check_digests(meta, path, redo)
    _check_dgl_keys(meta, path, redo)
    _check_files_listed(meta, path, redo)
    return meta


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_dgl_keys(meta: dict, path: Path, redo: str) -> None:
    """DGL's keys: present, of the right type, and the id maps consistent with the counts."""
    def fail(key: str, expected: str) -> None:
        got = json.dumps(meta[key]) if key in meta else "nothing"
        if len(got) > 60:
            got = got[:57] + "..."
        raise DataError(f"{path}: {key}: expected {expected}, got {got}; {redo}")

    if not isinstance(meta.get("graph_name"), str) or not meta["graph_name"]:
        fail("graph_name", "a non-empty string")
    for key, low in (("num_parts", 1), ("num_nodes", 1), ("num_edges", 0), ("halo_hops", 1)):
        if not _is_int(meta.get(key)) or meta[key] < low:
            fail(key, f"an integer >= {low}")
    for key in ("ntypes", "etypes"):  # {type: id}, ids 0..n-1 (one type: a homogeneous graph)
        types = meta.get(key)
        if not (isinstance(types, dict) and types and all(map(_is_int, types.values()))
                and sorted(types.values()) == list(range(len(types)))):
            fail(key, "a mapping of type names to the ids 0..n-1")
    for etype in meta["etypes"]:  # canonical "src:rel:dst", its node types among ntypes
        names = etype.split(":")
        if len(names) != 3 or names[0] not in meta["ntypes"] or names[2] not in meta["ntypes"]:
            fail("etypes", f"canonical 'src:rel:dst' edge types of the ntypes, not {etype!r}")
    parts = meta["num_parts"]
    for key, types, total, count in (("node_map", "ntypes", meta["num_nodes"], "num_nodes"),
                                     ("edge_map", "etypes", meta["num_edges"], "num_edges")):
        value = meta.get(key)
        if not isinstance(value, dict) or set(value) != set(meta[types]):
            fail(key, f"a mapping of the {types} ({', '.join(meta[types])}) to id ranges")
        order = sorted(value, key=meta[types].get)  # by type id
        if not all(isinstance(value[t], list) and len(value[t]) == parts for t in order):
            fail(key, f"num_parts={parts} id ranges")
        if not all(isinstance(r, list) and len(r) == 2 and all(map(_is_int, r))
                   for t in order for r in value[t]):
            fail(key, "[start, end] integer pairs")
        # Ids are part-major, type-major within a part: each range starts where the one before
        # it ends. A part may own no edge and no node of some type, never no node at all.
        end, empty_ok = 0, key == "edge_map"
        for k in range(parts):
            part_start = end
            for t in order:
                lo, hi = value[t][k]
                if lo != end or hi < lo:
                    fail(key, f"contiguous ranges covering 0..{count}={total}")
                end = hi
            if end == part_start and not empty_ok:
                fail(key, f"contiguous ranges covering 0..{count}={total}")
        if end != total:
            fail(key, f"contiguous ranges covering 0..{count}={total}")
    for k in range(parts):
        entry = meta.get(f"part-{k}")
        if not isinstance(entry, dict) or not all(isinstance(entry.get(f), str) and entry[f]
                                                  for f in PART_FILES):
            fail(f"part-{k}", "a mapping of " + ", ".join(PART_FILES) + " to file paths")


def _check_block(meta: dict, path: Path, redo: str) -> None:
    """The integrity block: present, of this format version, every field of the right type."""
    block = meta.get(BLOCK)
    if block is None:
        raise DataError(f"{path}: no '{BLOCK}' integrity block (written before dsgraph recorded "
                        f"checksums, or not by dsgraph); {redo}")

    def fail(key: str, expected: str) -> None:
        raise DataError(f"{path}: {BLOCK}{'.' if key else ''}{key}: expected {expected}; {redo}")

    if not isinstance(block, dict):
        fail("", "a mapping")
    if block.get("version") != BLOCK_VERSION:
        fail("version", f"{BLOCK_VERSION} (this dsgraph's format), got {block.get('version')!r}")
    if block.get("hash") != "sha256":
        fail("hash", f"'sha256', got {block.get('hash')!r}")
    for key in ("graph_fingerprint", "config_fingerprint"):
        if not isinstance(block.get(key), str) or not _HEX64.fullmatch(block[key]):
            fail(key, "a sha256 hex digest")
    if block.get("source") is not None and not (
            isinstance(block["source"], dict)
            and all(isinstance(v, dict) for v in block["source"].values())):
        fail("source", "a mapping of config sections or null")
    if not isinstance(block.get("meta"), dict):
        fail("meta", "a mapping of key digests")
    files = block.get("files")
    if not isinstance(files, dict):
        fail("files", "a mapping of file paths to size and sha256")
    for rel, rec in files.items():
        if not (isinstance(rec, dict) and _is_int(rec.get("size")) and rec["size"] >= 0
                and isinstance(rec.get("sha256"), str) and _HEX64.fullmatch(rec["sha256"])):
            fail(f"files.{rel}", '{"size": bytes, "sha256": hex digest}')


def _check_digests(meta: dict, path: Path, redo: str) -> None:
    """Every DGL key as written: none added, removed or changed since partitioning."""
    recorded = meta[BLOCK]["meta"]
    keys = [k for k in meta if k != BLOCK]
    for key in keys + sorted(set(recorded) - set(keys)):
        if recorded.get(key) != (key_digest(meta[key]) if key in meta else None):
            what = "added" if key not in recorded else "removed" if key not in meta else "changed"
            raise DataError(f"{path}: {key}: {what} after partitioning (the integrity block's "
                            f"digest of it differs; hand-edited?); {redo}")


def _check_files_listed(meta: dict, path: Path, redo: str) -> None:
    """Every file a part lists has a recorded size and checksum."""
    files = meta[BLOCK]["files"]
    for k in range(meta["num_parts"]):
        for f in PART_FILES:
            if meta[f"part-{k}"][f] not in files:
                raise DataError(f"{path}: {BLOCK}.files: expected an entry for part-{k}.{f} "
                                f"({meta[f'part-{k}'][f]}); {redo}")
