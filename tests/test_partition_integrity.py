"""Partition integrity: corrupt, missing, edited or mismatched partition files are one line each,
through the launcher check (``partition_json``), the worker loader and the CLIs."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import dgl
import pytest

from dsgraph.cluster import preload
from dsgraph.config import from_dict
from dsgraph.data import load_graph
from dsgraph.errors import DataError
from dsgraph.partition import (
    load_local_partition,
    orig_ids,
    partition_fingerprint,
    partition_graph,
    partition_json,
    partition_source,
    read_meta,
)
from dsgraph.partition.meta import key_digest

ROOT = Path(__file__).resolve().parents[1]
DATASET = {"num_nodes": 600, "avg_degree": 5, "num_classes": 3, "feat_dim": 4}


def make_cfg(tmp: Path, parts: Path, num_parts: int = 2, **dataset):
    """A sar-mode config reading partitions from ``parts`` (source named ``c.yaml``)."""
    return from_dict({"dataset": {**DATASET, "cache_dir": str(tmp / "data"), **dataset},
                      "partition": {"num_parts": num_parts, "out_dir": str(parts),
                                    "method": "random"},
                      "train": {"mode": "sar", "epochs": 1}}, "c.yaml")


@pytest.fixture(scope="module")
def pristine(tmp_path_factory):
    """(folder, json) of partitions written as ``python -m partition`` writes them."""
    tmp = tmp_path_factory.mktemp("pristine")
    cfg = make_cfg(tmp, tmp / "parts")
    path = partition_graph(load_graph(cfg.dataset), 2, tmp / "parts", method="random",
                           source=partition_source(cfg))
    return tmp, path


@pytest.fixture
def parts(pristine, tmp_path):
    """A fresh copy of the pristine partitions and a config that matches them."""
    src, _ = pristine
    shutil.copytree(src / "parts", tmp_path / "parts")
    return tmp_path / "parts" / "graph.json", make_cfg(src, tmp_path / "parts")


def one_line(exc: pytest.ExceptionInfo, *fragments: str) -> str:
    """The error's message, checked to be one line holding every fragment."""
    msg = str(exc.value)
    assert "\n" not in msg, msg
    for f in fragments:
        assert f in msg, (f, msg)
    return msg


def fails_everywhere(path: Path, cfg, *fragments: str, ranks=(0, 1)) -> None:
    """Launcher check and worker loader (the given ranks) raise one-line DataErrors."""
    with pytest.raises(DataError) as exc:
        partition_json(cfg)
    one_line(exc, *fragments)
    for rank in ranks:
        with pytest.raises(DataError) as exc:
            load_local_partition(path, rank, 2)
        one_line(exc, *fragments)


def edit_json(path: Path, edit) -> None:
    meta = json.loads(path.read_text())
    edit(meta)
    path.write_text(json.dumps(meta, indent=1))


# --- intact partitions ---------------------------------------------------------------------------

def test_intact_partitions_pass_and_stock_dgl_still_reads_them(parts):
    path, cfg = parts
    assert partition_json(cfg) == path
    for k in range(2):
        sub, nfeat, _, gpb, name, _, _ = dgl.distributed.load_partition(str(path), k)
        assert name == "graph" and gpb.partid == k and "_N/feat" in nfeat
        assert dgl.distributed.load_partition_book(str(path), k)[0].num_partitions() == 2
        assert load_local_partition(path, k, 2).num_global == DATASET["num_nodes"]
    block = read_meta(path)["dsgraph"]
    assert sorted(block["files"]) == sorted(f"part{k}/{f}.dgl" for k in range(2)
                                            for f in ("graph", "node_feat", "edge_feat"))
    for rel, rec in block["files"].items():
        assert (path.parent / rel).stat().st_size == rec["size"]
    assert block["source"]["partition"]["num_parts"] == 2
    assert "out_dir" not in block["source"]["partition"]


def test_fingerprint_names_the_data_not_the_folder(pristine, parts, tmp_path):
    tmp, original = pristine
    copy, cfg = parts
    assert partition_fingerprint(copy) == partition_fingerprint(original)  # moved, same data
    g = load_graph(cfg.dataset)
    other_cfg = make_cfg(tmp, tmp_path / "b", num_parts=2, seed=7)
    other = partition_graph(load_graph(other_cfg.dataset), 2, tmp_path / "b", method="random",
                            source=partition_source(other_cfg))
    same_graph_no_cfg = partition_graph(g, 2, tmp_path / "c", method="random")
    prints = {partition_fingerprint(p) for p in (original, other, same_graph_no_cfg)}
    assert len(prints) == 3
    assert all(len(p) == 64 for p in prints)


# --- damaged files -------------------------------------------------------------------------------

def test_truncated_node_feat(parts):
    path, cfg = parts
    f = path.parent / "part1" / "node_feat.dgl"
    size = f.stat().st_size
    with open(f, "r+b") as fh:
        fh.truncate(size - 100)
    # Every rank checks every part's sizes, so rank 0 blames part 1's file too.
    fails_everywhere(path, cfg, str(f), f"{size - 100} bytes, expected {size}", "truncated")
    with pytest.raises(DataError):
        orig_ids(path)


def test_flipped_byte_in_graph(parts):
    path, cfg = parts
    f = path.parent / "part0" / "graph.dgl"
    data = bytearray(f.read_bytes())
    data[len(data) // 2] ^= 0xFF
    f.write_bytes(bytes(data))
    fails_everywhere(path, cfg, str(f), "sha256 differs", ranks=(0,))
    # Rank 1 hashes only its own files (and checks the sizes of the others): it loads.
    assert load_local_partition(path, 1, 2).rank == 1


def test_missing_part_folder(parts):
    path, cfg = parts
    shutil.rmtree(path.parent / "part1")
    fails_everywhere(path, cfg, str(path.parent / "part1"), "part folder missing")


# --- edited or broken JSON -----------------------------------------------------------------------

def test_edited_num_parts(parts):
    path, cfg = parts
    edit_json(path, lambda m: m.update(num_parts=3))
    fails_everywhere(path, cfg, str(path), "num_parts: changed after partitioning")


def test_edited_recorded_size(parts):
    path, cfg = parts
    rec = {}

    def bump(meta):
        rec.update(meta["dsgraph"]["files"]["part0/graph.dgl"])
        meta["dsgraph"]["files"]["part0/graph.dgl"]["size"] += 1

    edit_json(path, bump)
    fails_everywhere(path, cfg, str(path.parent / "part0" / "graph.dgl"),
                     f"{rec['size']} bytes, expected {rec['size'] + 1}")


@pytest.mark.parametrize("damage", ["invalid", "truncated"])
def test_invalid_or_truncated_json(parts, damage):
    path, cfg = parts
    text = path.read_text()
    path.write_text(text.replace(":", "=", 1) if damage == "invalid" else text[: len(text) // 2])
    fails_everywhere(path, cfg, str(path), "not valid JSON", "line")


def test_json_without_integrity_block_asks_to_repartition(parts):
    path, cfg = parts
    edit_json(path, lambda m: m.pop("dsgraph"))
    fails_everywhere(path, cfg, str(path), "no 'dsgraph' integrity block", "python -m partition")


@pytest.mark.parametrize("key, value, expected", [
    ("node_map", {"_N": [[0, 300], [300, 601]]}, "node_map: expected contiguous ranges covering "
                                                 "0..num_nodes=600"),
    ("num_nodes", "600", "num_nodes: expected an integer >= 1"),
    ("part-1", {"part_graph": "part1/graph.dgl"}, "part-1: expected a mapping of part_graph"),
])
def test_inconsistent_keys_are_named_even_with_matching_digests(parts, key, value, expected):
    """A writer's bug (digests that match wrong values) is still caught by the structure checks."""
    path, cfg = parts

    def edit(meta):
        meta[key] = value
        meta["dsgraph"]["meta"][key] = key_digest(value)

    edit_json(path, edit)
    fails_everywhere(path, cfg, str(path), expected)


def test_non_utf8_json(parts):
    path, cfg = parts
    path.write_bytes(b"\xff\xfe" + path.read_bytes())
    fails_everywhere(path, cfg, str(path), "expected a UTF-8 partition JSON")


# --- partitions of another graph or config -------------------------------------------------------

def test_partitions_of_another_dataset_seed(parts):
    path, _ = parts
    cfg = make_cfg(Path("unused"), path.parent, seed=1)
    with pytest.raises(DataError) as exc:
        partition_json(cfg)
    one_line(exc, str(path), "made with dataset.seed=0, the config says 1",
             "python -m partition --config c.yaml --force")


def test_partitions_with_another_num_parts(parts):
    path, _ = parts
    cfg = make_cfg(Path("unused"), path.parent, num_parts=3)
    with pytest.raises(DataError) as exc:
        partition_json(cfg)
    one_line(exc, f"{path}: made with partition.num_parts=2, the config says 3; rerun "
                  f"`python -m partition --config c.yaml --force`")
    with pytest.raises(DataError) as exc:
        load_local_partition(path, 0, 3)
    one_line(exc, str(path), "the job has 3 workers", "got 2")


def test_a_setting_added_after_partitioning_counts_as_its_default(parts):
    path, cfg = parts
    edit_json(path, lambda meta: meta["dsgraph"]["source"]["partition"].pop("halo_hops"))
    assert partition_json(cfg) == path
    cfg.partition.halo_hops = 2
    with pytest.raises(DataError) as exc:
        partition_json(cfg)
    one_line(exc, "made with partition.halo_hops=1, the config says 2")


def test_cache_dir_does_not_count(parts, tmp_path):
    path, _ = parts
    assert partition_json(make_cfg(tmp_path / "elsewhere", path.parent)) == path


# --- CLIs ----------------------------------------------------------------------------------------

def run_module(module: str, args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return preload.run_command([sys.executable, "-m", module, *args],
                               {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"},
                               str(cwd), timeout=120)


@pytest.mark.timeout(150)
def test_train_cli_refuses_truncated_partition_before_starting_workers(parts, tmp_path):
    path, cfg = parts
    f = path.parent / "part1" / "node_feat.dgl"
    with open(f, "r+b") as fh:
        fh.truncate(f.stat().st_size // 2)
    (tmp_path / "c.yaml").write_text(
        f"dataset: {json.dumps({**DATASET, 'cache_dir': cfg.dataset.cache_dir})}\n"
        f"partition: {{num_parts: 2, out_dir: {path.parent}, method: random}}\n"
        "train: {mode: sar, epochs: 1}\n")
    t0 = time.perf_counter()
    proc = run_module("train", ["--config", "c.yaml", "--out", "run"], tmp_path)
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {f}: "), proc.stderr
    assert "truncated" in lines[0] and "Traceback" not in proc.stderr
    assert not (tmp_path / "run" / "logs").exists()  # the supervisor never started a process
    assert time.perf_counter() - t0 < 60


def test_partition_cli_unwritable_out_dir(tmp_path):
    (tmp_path / "file").write_text("not a folder")
    (tmp_path / "c.yaml").write_text(f"dataset: {json.dumps(DATASET)}\n"
                                     "partition: {out_dir: file/parts}\n")
    proc = run_module("partition", ["--config", "c.yaml"], tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "error: file/parts: cannot create the output folder: file is not a folder"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.yaml", "file"]
