"""The streamed partitioning pipeline: a graph read in chunks, assigned from its structure alone,
then dispatched into DGL partition files, each step resumable.

Steps, each leaving its result in a work folder beside the output (``.<out>.work``):

1. **assign** (:func:`dsgraph.partition.streamed.assign.assign_streamed`): only the edges and the
   ``train_mask`` are read; METIS while the structure fits ``partition.memory_mb``, else METIS on
   a coarsened graph. The assignment is saved with a key of what decided it (the config sections
   that make the files, the graph's counts), so a rerun after a kill reuses it.
2. **dispatch** (:func:`.dispatch.dispatch_partitions`): edges and feature rows
   routed to their parts by ``partition.workers`` processes; the part files are written into a
   temporary folder renamed into place. Its own steps resume likewise.

The work folder is removed once the partitions are in place, and when partitioning fails on a
user error (bad input, found however late: fixing it changes what the steps would make). Another
failure (a crash, Ctrl-C, a full disk) keeps it only if it holds a finished step to resume from;
folders the run created for it are removed with it, so a failed run leaves nothing behind.
"""
from __future__ import annotations

import hashlib
import json
import shutil
import time
from pathlib import Path
from typing import Any

import numpy as np

from dsgraph.data.chunked.contract import GraphChunks
from dsgraph.errors import UserError
from dsgraph.fsutil import atomic_write_with
from dsgraph.partition.integrity import config_fingerprint

ASSIGNMENT = "assignment.npy"
ASSIGNMENT_KEY = "assignment.json"


def work_dir_for(out: Path) -> Path:
    """Where the steps of partitioning into ``out`` keep their results until it is complete."""
    return out.parent / f".{out.name}.work"


def partition_streamed(graph: GraphChunks, p: Any, out: Path, *, force: bool = False,
                       source: dict | None = None) -> Path:
    """Partition ``graph`` as the partition config section ``p`` says; return the JSON path."""
    t0 = time.perf_counter()
    work = work_dir_for(out)
    created = [d for d in (work, *work.parents) if not d.exists()]  # innermost first
    work.mkdir(parents=True, exist_ok=True)
    try:
        assign, info = _assignment(graph, p, work, source)
        from dsgraph.partition.streamed.dispatch import dispatch_partitions
        stats = {"source": source, "pipeline": "streamed", "assignment": info,
                 "wall_s": time.perf_counter() - t0}
        path = dispatch_partitions(graph, assign, out, p.graph_name, halo_hops=p.halo_hops,
                                   method=p.method, workers=p.workers, force=force, stats=stats,
                                   source=source, work_dir=work / "dispatch")
    except BaseException as exc:
        _after_failure(work, created, resumable=not isinstance(exc, UserError))
        raise
    shutil.rmtree(work, ignore_errors=True)
    return path


def _after_failure(work: Path, created: list[Path], resumable: bool) -> None:
    """Remove ``work`` unless ``resumable`` and it holds a finished step's file, then the
    folders in ``created`` (made for it) that are left empty."""
    if resumable and any(f.is_file() for f in work.rglob("*")):
        print(f"partition: {work} keeps the finished steps; a rerun with the same inputs "
              f"resumes from them (delete it to start over)", flush=True)
        return
    shutil.rmtree(work, ignore_errors=True)
    for folder in created[1:]:
        try:
            folder.rmdir()  # only if empty: the output folder or a user's file may be there now
        except OSError:
            break


def _assignment(graph: GraphChunks, p: Any, work: Path, source: dict | None
                ) -> tuple[np.ndarray, dict]:
    """The saved assignment if it was made from the same inputs, else a new one (then saved)."""
    key = _assignment_key(graph, p, source)
    key_file, array_file = work / ASSIGNMENT_KEY, work / ASSIGNMENT
    if key_file.is_file() and array_file.is_file():
        try:
            saved = json.loads(key_file.read_text())
            assign = np.load(array_file)
        except (OSError, ValueError):
            saved, assign = None, None
        if saved is not None and saved.get("key") == key and assign.shape == (graph.num_nodes,):
            print(f"assignment: reusing {array_file} (an earlier run of the same inputs)",
                  flush=True)
            return assign, saved["info"]
    from dsgraph.partition.streamed.assign import assign_streamed
    t0 = time.perf_counter()
    assign, info = assign_streamed(graph, p.num_parts, method=p.method,
                                   memory_mb=p.memory_mb or None, seed=p.seed,
                                   balance_train=p.balance_train, balance_edges=p.balance_edges,
                                   work_dir=work / "assign")
    info = {**info, "wall_s": time.perf_counter() - t0}
    atomic_write_with(array_file, lambda f: _save_npy(f, assign))
    atomic_write_with(key_file, lambda f: Path(f).write_text(json.dumps(
        {"key": key, "info": info})))
    shutil.rmtree(work / "assign", ignore_errors=True)
    return assign, info


def _save_npy(path: str, array: np.ndarray) -> None:
    """``np.save`` to exactly ``path`` (given a name, np.save would append ``.npy``)."""
    with open(path, "wb") as fh:
        np.save(fh, array)


def _assignment_key(graph: GraphChunks, p: Any, source: dict | None) -> str:
    """What decides the assignment: the recorded config (or the partition section) and the
    graph's counts and chunking."""
    decided_by = source if source is not None else {
        k: getattr(p, k) for k in ("method", "num_parts", "seed", "balance_train",
                                   "balance_edges")}
    h = hashlib.sha256(config_fingerprint(decided_by).encode())
    h.update(np.asarray([graph.num_nodes, graph.num_edges], dtype=np.int64).tobytes())
    h.update(np.ascontiguousarray(graph.edge_offsets(), dtype=np.int64).tobytes())
    return h.hexdigest()
