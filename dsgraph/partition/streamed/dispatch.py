"""Streamed, parallel, resumable dispatch of a chunk-read graph into DGL partition files.

:func:`dispatch_partitions` writes exactly what :func:`dsgraph.partition.format.write_partitions`
writes for the same graph and assignment (layout: :mod:`dsgraph.partition.format`), reading a
:class:`dsgraph.data.chunked.contract.GraphChunks` chunk by chunk, so memory is a few O(nodes)
arrays plus one part's structure plus a chunk, never every feature or edge at once. Steps (each task of
:mod:`.dispatch_steps`, run by ``workers`` processes): route the edge chunks
to their destination's part; sort each part's edges into new edge ids; per extra halo hop, one
scan over every edge and an expansion per part; build each part's graph; scatter each node key
into the parts' ``node_feat.dgl`` (written in place: :mod:`dsgraph.partition.ndarray_file`);
fingerprint the source graph meanwhile, in a thread of the calling process. Every finished
task leaves a marker in ``work_dir`` (:mod:`.dispatch_run`): a rerun with the
same inputs reuses them. The output folder appears atomically at the end and ``work_dir`` is
removed.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from dsgraph.errors import ConfigError, DataError, UserError
from dsgraph.fsutil import atomic_dir, check_free_space, storage_errors
from dsgraph.partition.streamed import dispatch_steps as steps
from dsgraph.partition.streamed.dispatch_run import Runner, prepare_work_dir
from dsgraph.partition.integrity import integrity_block
from dsgraph.partition.meta import BLOCK
from dsgraph.partition.ndarray_file import TensorSlot, create_tensor_file, probe_layout
from dsgraph.procstats import peak_rss_mb

if TYPE_CHECKING:
    from dsgraph.data.chunked.contract import GraphChunks

FAIL_AFTER = "DSGRAPH_DISPATCH_FAIL_AFTER"  # test hook: stop after the named step
_FORMAT = 1  # bump when the work files change meaning: older work folders are then redone
PART_FILES = ("graph.dgl", "node_feat.dgl", "edge_feat.dgl")


def dispatch_partitions(graph: GraphChunks, assignment: np.ndarray, out_dir: str | os.PathLike,
                        graph_name: str = "graph", *, halo_hops: int = 1,
                        method: str = "custom", workers: int = 1, force: bool = False,
                        stats: dict | None = None, source: dict | None = None,
                        work_dir: str | os.PathLike) -> Path:
    """Write the DGL partition files of ``graph`` (a GraphChunks) split by ``assignment`` into
    ``out_dir``, streaming, with ``workers`` processes; return the partition JSON path.

    Same files as ``write_partitions(g, assignment, out_dir, graph_name, halo_hops, method,
    force, stats=stats, source=source)``. ``work_dir`` holds the intermediate files and the
    markers that let a rerun resume; it is removed after success.
    """
    t0 = time.perf_counter()
    out_dir, work = Path(out_dir), Path(work_dir)
    assign, counts = _check_inputs(graph, assignment, out_dir, force, halo_hops, workers)
    num_parts = len(counts)
    keys = graph.node_keys()
    offsets = np.asarray(graph.edge_offsets(), dtype=np.int64)
    with storage_errors(work / "inputs.json", "the dispatch's work files"):
        resumed = prepare_work_dir(work, _inputs(graph, keys, offsets, assign, halo_hops,
                                                  num_parts))
    _check_space(graph, keys, work, out_dir)
    print(f"dispatch: {graph.num_nodes} nodes, {graph.num_edges} edges in "
          f"{graph.num_edge_chunks} chunks -> {num_parts} parts (halo {halo_hops}), {workers} "
          f"worker(s){', resuming' if resumed else ''}", flush=True)
    node_start = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    with storage_errors(work / "ids", "the dispatch's work files"):
        _write_ids(work, assign, halo_hops)
    del assign
    plan = steps.Plan(str(work), int(graph.num_nodes), num_parts, halo_hops, node_start.tolist())
    with Runner(graph, work, workers) as run:
        fp = run.submit("fingerprint", steps.fingerprint, (plan,))
        # once the parts are sorted, the routed files are gone: their markers alone count
        sorted_all = all(run.reused(f"sort-p{k}") is not None for k in range(num_parts))
        routed, into = _route(run, plan, graph, offsets, check_files=not sorted_all)
        plan.edge_start = np.concatenate([[0], np.cumsum(into)]).astype(np.int64).tolist()
        run.run("sort", [(f"sort-p{k}", steps.sort_part, (plan, k, graph.num_edge_chunks))
                         for k in range(num_parts)])
        shutil.rmtree(work / "route", ignore_errors=True)
        _fail_hook("sort")
        for hop in range(1, halo_hops):
            _hop(run, plan, hop)
        built = run.run("graphs", [(f"graph-p{k}", steps.build_part, (plan, k))
                                   for k in range(num_parts)])
        _fail_hook("graphs")
        scattered = _features(run, plan, keys, workers)
        fp_digest = run.collect("fingerprint", fp)["digest"]
        worker_peak = run.peak_mb
    meta = _meta(graph, plan, graph_name, method, keys, scattered)
    parts = [built[f"graph-p{k}"] for k in range(num_parts)]
    part_stats = _stats(graph, method, counts, routed, parts, scattered, stats)
    with storage_errors(out_dir / graph_name, "the partition files"), \
            atomic_dir(out_dir, force=force) as tmp:
        for k in range(num_parts):
            (tmp / f"part{k}").mkdir()
            for name in PART_FILES:
                _link_or_copy(work / "out" / f"part{k}" / name, tmp / f"part{k}" / name)
        meta[BLOCK] = integrity_block(tmp, meta, fp_digest, source)
        (tmp / f"{graph_name}.json").write_text(json.dumps(meta, indent=1))
        trains = [p["train_nodes"] for p in part_stats["parts"]]
        part_stats["train_balance"] = (max(trains) / max(np.mean(trains), 1e-9) if any(trains)
                                       else 1.0)
        part_stats["wall_s"] = part_stats.get("wall_s", 0.0) + time.perf_counter() - t0
        part_stats["peak_rss_mb"] = max(peak_rss_mb(), worker_peak)
        (tmp / "partition_stats.json").write_text(json.dumps(part_stats, indent=1))
    shutil.rmtree(work, ignore_errors=True)
    print(f"dispatch: wrote {out_dir} in {time.perf_counter() - t0:.1f} s", flush=True)
    return out_dir / f"{graph_name}.json"


def _inputs(graph: GraphChunks, keys, offsets: np.ndarray, assign: np.ndarray,
            halo_hops: int, num_parts: int) -> dict:
    """What the work files were made from: a rerun resumes only from the same inputs."""
    return {"format": _FORMAT, "num_nodes": int(graph.num_nodes),
            "num_edges": int(graph.num_edges), "halo_hops": halo_hops,
            "num_parts": num_parts,
            "edge_offsets": hashlib.sha256(offsets.tobytes()).hexdigest(),
            "assignment": hashlib.sha256(assign.tobytes()).hexdigest(),
            "keys": [[k.name, np.dtype(k.dtype).str, list(k.row_shape)] for k in keys]}


def _route(run: Runner, plan: steps.Plan, graph: GraphChunks, offsets: np.ndarray,
           check_files: bool) -> tuple[dict, np.ndarray]:
    """Route every edge chunk to the parts of its destinations; each chunk's figures and the
    edges into each part. Refuses a part that would have no edges."""
    routed = run.run("route", [(f"route-c{c}", steps.route_chunk,
                                (plan, c, int(offsets[c]), int(offsets[c + 1] - offsets[c])))
                               for c in range(graph.num_edge_chunks)], check_files=check_files)
    into = np.sum([r["into"] for r in routed.values()], axis=0, dtype=np.int64)
    out = np.sum([r["out"] for r in routed.values()], axis=0, dtype=np.int64)
    if ((into + out) == 0).any():  # DGL's partition_graph_with_halo crashes on such a part
        raise UserError(f"partition: part {int(np.argmin(into + out))} would have no edges "
                        f"({graph.num_edges} edges into {plan.num_parts} parts); use fewer parts")
    print(f"dispatch: routed {graph.num_edges} edges: {into.tolist()} into the parts, "
          f"{sum(r['cut'] for r in routed.values())} cut", flush=True)
    _fail_hook("route")
    return routed, into


def _check_inputs(graph, assignment: np.ndarray, out_dir: Path, force: bool, halo_hops: int,
                  workers: int) -> tuple[np.ndarray, np.ndarray]:
    """Refuse what would fail late (an existing output, bad counts, an empty part) before the
    expensive work; the assignment as int64 and the nodes per part."""
    if out_dir.exists() and not force:
        raise UserError(f"{out_dir}: output folder exists; pass --force to replace it")
    for key, value in (("halo_hops", halo_hops), ("workers", workers)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(f"dispatch: {key}: expected an integer >= 1, got {value!r}")
    assign = _check_assignment(graph, assignment)
    num_parts = int(assign.max()) + 1
    counts = np.bincount(assign, minlength=num_parts)
    if (counts == 0).any():
        raise UserError(f"partition: part {int(np.argmin(counts))} would be empty "
                        f"({graph.num_nodes} nodes into {num_parts} parts); use fewer parts")
    return assign, counts


def _check_assignment(graph, assignment: np.ndarray) -> np.ndarray:
    """The assignment as int64, one part id >= 0 per node."""
    a = np.asarray(assignment)
    if a.ndim != 1 or a.shape[0] != graph.num_nodes or a.dtype.kind not in "iu":
        raise DataError(f"assignment: expected {graph.num_nodes} integer part ids, got shape "
                        f"{a.shape} of {a.dtype}")
    if a.size == 0 or int(a.min()) < 0:
        raise DataError(f"assignment: expected part ids >= 0, got "
                        f"{int(a.min()) if a.size else 'none'}")
    return np.ascontiguousarray(a, dtype=np.int64)


def _check_space(graph, keys: list, work: Path, out_dir: Path) -> None:
    """Refuse early when the work folder (or, on another device, the output's) lacks room."""
    node_bytes = sum(k.row_bytes for k in keys) * graph.num_nodes + 8 * graph.num_nodes
    files = 1.1 * (node_bytes + 25 * graph.num_edges + 17 * graph.num_nodes) + (1 << 20)
    work_bytes = files + 56 * graph.num_edges + 24 * graph.num_nodes  # routed + sorted edges
    check_free_space(work, work_bytes, "the dispatch's work files")
    if _device(work) != _device(out_dir.parent):  # the files are copied, not linked, there
        check_free_space(out_dir.parent, files, "the partition files")


def _device(path: Path) -> int:
    while not path.exists() and path != path.parent:
        path = path.parent
    return path.stat().st_dev


def _write_ids(work: Path, assign: np.ndarray, halo_hops: int) -> None:
    """Assignment and id maps in the work folder (read mapped by the workers)."""
    if all((work / "ids" / f"{n}.npy").is_file() for n in ("assign", "new2orig", "orig2new")):
        print(f"dispatch: reusing the id maps in {work / 'ids'}", flush=True)
        return
    if halo_hops == 1:  # split_one_hop's order: part-major, original order within a part
        new2orig = np.argsort(assign.astype(np.int16) if assign.max() < 2**15 else assign,
                              kind="stable")
    else:  # DGL's reshuffle sorts with torch.sort, which is not stable: use the very same
        import torch
        new2orig = torch.sort(torch.from_numpy(assign))[1].numpy()
    orig2new = np.empty_like(new2orig)
    orig2new[new2orig] = np.arange(new2orig.shape[0], dtype=np.int64)
    plan = steps.Plan(str(work), 0, 0, 0, [])
    for name, array in (("assign", assign), ("new2orig", new2orig), ("orig2new", orig2new)):
        plan.save(f"ids/{name}.npy", array)


def _hop(run: Runner, plan: steps.Plan, hop: int) -> None:
    """Halo hop ``hop`` -> ``hop + 1``: a scan of every edge against each part's hop, then an
    expansion per part."""
    masks = np.zeros((plan.num_parts, plan.num_nodes), dtype=bool)
    for k in range(plan.num_parts):
        masks[k][np.load(plan.path(f"front/h{hop}_p{k}.npy"))] = True
    plan.save(f"front/mask{hop}.npy", masks)
    del masks
    blocks = [(q, b) for q in range(plan.num_parts)
              for b in range(max(1, -(-(plan.edge_start[q + 1] - plan.edge_start[q])
                                      // steps.BLOCK_EDGES)))]
    expanded = all(run.reused(f"hop{hop}-p{k}") is not None for k in range(plan.num_parts))
    run.run(f"hop {hop} scan", [(f"hop{hop}-q{q}-b{b}", steps.hop_scan, (plan, hop, q, b))
                                for q, b in blocks], check_files=not expanded)
    found = run.run(f"hop {hop} expand", [(f"hop{hop}-p{k}", steps.hop_expand, (plan, hop, k))
                                          for k in range(plan.num_parts)])
    shutil.rmtree(plan.path("hop"), ignore_errors=True)
    sizes = [found[f"hop{hop}-p{k}"]["size"] for k in range(plan.num_parts)]
    print(f"dispatch: hop {hop + 1}: {sizes} new halo nodes per part", flush=True)
    _fail_hook(f"hop{hop}")


def _features(run: Runner, plan: steps.Plan, keys: list, workers: int) -> dict[str, dict]:
    """Every node key and ``orig_id`` into the parts' ``node_feat.dgl``."""
    tensors = {f"_N/{k.name}": (np.dtype(k.dtype), tuple(k.row_shape)) for k in keys}
    tensors["_N/orig_id"] = (np.dtype(np.int64), ())
    order = probe_layout(tensors, plan.path("probe.dgl"))
    for k in range(plan.num_parts):
        rows = plan.node_start[k + 1] - plan.node_start[k]
        path = plan.path(f"out/part{k}/node_feat.dgl")
        head = run.reused(f"feathead-p{k}")
        if head is None:  # (re)made: whatever was scattered into it before is gone
            run.forget(f"feat-")
            path.parent.mkdir(parents=True, exist_ok=True)
            slots = create_tensor_file(path, order, {n: (d, (rows, *s))
                                                     for n, (d, s) in tensors.items()})
            head = {"slots": [s.__dict__ for s in slots], "files": [str(path.relative_to(
                plan.work))]}
            run.record(f"feathead-p{k}", head)
        plan.slots[k] = {s["name"]: TensorSlot(s["name"], s["dtype"], tuple(s["shape"]),
                                               s["offset"]) for s in head["slots"]}
    groups = [list(range(plan.num_parts))[g::min(workers, plan.num_parts)]
              for g in range(min(workers, plan.num_parts))]
    tasks = [(f"feat-orig-p{k}", steps.write_orig_ids, (plan, k)) for k in range(plan.num_parts)]
    for spec in keys:  # a group reads the key once for all its parts
        many = spec.row_bytes > 64 and len(groups) > 1
        for g, parts in enumerate(groups if many else [list(range(plan.num_parts))]):
            tasks.append((f"feat-{spec.name}-g{g}", steps.scatter_key,
                          (plan, spec.name, np.dtype(spec.dtype).str, tuple(spec.row_shape),
                           parts)))
    done = run.run("features", tasks)
    from dgl.data.utils import save_tensors
    for k in range(plan.num_parts):
        save_tensors(str(plan.path(f"out/part{k}/edge_feat.dgl")), {})
    _fail_hook("features")
    return done


def _meta(graph, plan: steps.Plan, graph_name: str, method: str, keys: list,
          scattered: dict[str, dict]) -> dict:
    """The partition JSON without its integrity block, key for key as write_partitions."""
    ns, es = plan.node_start, plan.edge_start
    meta: dict = {"graph_name": graph_name, "num_nodes": int(graph.num_nodes),
                  "num_edges": int(graph.num_edges), "part_method": method,
                  "num_parts": plan.num_parts, "halo_hops": plan.halo_hops,
                  "node_map": {"_N": [[ns[k], ns[k + 1]] for k in range(plan.num_parts)]},
                  "edge_map": {"_N:_E:_N": [[es[k], es[k + 1]] for k in range(plan.num_parts)]},
                  "ntypes": {"_N": 0}, "etypes": {"_N:_E:_N": 0}}
    label = next((k for k in keys if k.name == "label"), None)
    if label is not None:
        if np.dtype(label.dtype).kind == "f":
            meta["num_targets"] = int(label.row_shape[0]) if label.row_shape else 1
        else:
            meta["num_classes"] = max(r["largest"] for n, r in scattered.items()
                                      if n.startswith("feat-label-")) + 1
    for k in range(plan.num_parts):
        meta[f"part-{k}"] = {"node_feats": f"part{k}/node_feat.dgl",
                             "edge_feats": f"part{k}/edge_feat.dgl",
                             "part_graph": f"part{k}/graph.dgl"}
    return meta


def _stats(graph, method: str, counts: np.ndarray, routed: dict, parts: list[dict],
           scattered: dict[str, dict], stats: dict | None) -> dict:
    """partition_stats.json's content up to train_balance, key for key as write_partitions."""
    cut = sum(r["cut"] for r in routed.values())
    out = {"method": method, "num_parts": int(counts.shape[0]),
           "num_nodes": int(graph.num_nodes), "num_edges": int(graph.num_edges),
           "edge_cut": int(cut), "edge_cut_ratio": cut / max(graph.num_edges, 1),
           "node_balance": float(counts.max() / counts.mean()), **(stats or {}), "parts": []}
    train = {int(k): v for n, r in scattered.items() if n.startswith("feat-train_mask-")
             for k, v in r["sums"].items()}
    for k, p in enumerate(parts):
        out["parts"].append({"part": k, "nodes": p["nodes"], "inner_edges": p["inner_edges"],
                             "halo_nodes": p["halo_nodes"], "train_nodes": train.get(k, 0)})
    return out


def _link_or_copy(src: Path, dst: Path) -> None:
    """A hard link when on one device (the work folder keeps its copy until success)."""
    try:
        os.link(src, dst)
    except OSError:
        shutil.copyfile(src, dst)


def _fail_hook(step: str) -> None:
    """Tests stop a dispatch after a step to check that a rerun resumes from there."""
    if os.environ.get(FAIL_AFTER) == step:
        raise RuntimeError(f"dispatch: stopped after step {step} ({FAIL_AFTER})")
