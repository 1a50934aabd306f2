"""Real DistDGL jobs on one host: remote-feature correctness, training, resume, plug-in.

Faults (a killed server, trainer or launcher) are in tests/dist/test_faults.py."""
from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
import torch

from dsgraph.cluster.dgl_job import run_dgl_job
from dsgraph.config import ClusterConfig, DatasetConfig
from dsgraph.data.synthetic import generate
from dsgraph.errors import JobFailed
from dsgraph.partition import partition_graph
from tests.dist import jobs


def _job_shm(run: Path) -> list[str]:
    """/dev/shm entries of the job that ran in ``run`` (their names carry its token)."""
    tokens = {p.stem.split("_")[-2] for p in (run / "parts").glob("*.json")}
    assert tokens, "no per-machine partition configs: the job did not start"
    return [n for n in os.listdir("/dev/shm") if any(t in n for t in tokens)]


def _pull_job(tmp_path: Path, num_parts: int, stock: bool) -> list[dict]:
    g = generate(DatasetConfig(num_nodes=3000, feat_dim=8, num_classes=4))
    # Column 0 carries the node's own id, so a row served from the wrong partition is obvious.
    g.ndata["feat"][:, 0] = torch.arange(g.num_nodes(), dtype=torch.float32)
    part = partition_graph(g, num_parts, tmp_path / "parts", method="random")
    run = tmp_path / "run"
    run.mkdir()
    torch.save(g.ndata["feat"], run / "original_feat.pt")
    run_dgl_job(run, part, ClusterConfig(), "tests.dist.pull_check", timeout_s=90, stock=stock)
    return [json.loads((run / f"pull{r}.json").read_text()) for r in range(num_parts)]


@pytest.mark.timeout(180)
@pytest.mark.parametrize("num_parts", [2, 4])
def test_remote_features_correct_with_several_partitions_on_one_host(tmp_path, num_parts):
    results = _pull_job(tmp_path, num_parts, stock=False)
    assert sorted(r["partid"] for r in results) == list(range(num_parts))
    # Stock DGL gives every process on a host machine id 0, which is what corrupts local reads.
    assert sorted(r["machine_id"] for r in results) == list(range(num_parts))
    for r in results:
        assert r["rows"] == 3000 and r["remote_rows"] > 0
        assert r["mismatched"] == 0 and r["uncached_mismatched"] == 0, r
        assert r["uncached_misses"] == r["remote_rows"], r  # no cache: every remote row pulled
        # Ranked by degree, a budget takes the halo, then the highest out-degree beyond it; a
        # budget for every remote row leaves nothing to pull.
        assert r["halo_cached"] == r["halo"] > 0, r
        assert r["beyond_halo"] >= 30 and r["chosen"] == r["budget_rows"] > 0, r
        assert r["chosen_min_degree"] >= r["passed_max_degree"], r
        assert r["budgeted_mismatched"] == 0 and r["everything_mismatched"] == 0, r
        assert r["budgeted_misses"] == r["beyond_halo"] - r["budget_rows"], r
        assert r["everything_cached"] == r["remote_rows"] and r["everything_misses"] == 0, r
        # 8-bit cached rows: within one step of their row's range, in fewer bytes (ids and
        # block statistics included); own rows still exact
        assert 0 < r["quant_max_steps"] <= 1.0 and r["quant_own_mismatched"] == 0, r
        assert r["quant_misses"] == 0 and r["quant_bytes"] < r["exact_bytes"], r
        assert r["quant_bytes"] == r["remote_rows"] * r["quant_row_bytes"], r
        # pre-sampled: the remote rows read in every batch are ranked first
        assert r["ranked_first"] == r["frequent"] and r["frequent"], r
        assert r["filled_unique"] == r["remote_rows"], r
        assert r["local_id_rows"] > 3000 // num_parts and r["local_id_mismatched"] == 0, r
    assert _job_shm(tmp_path / "run") == [], "job left shared-memory segments behind"


@pytest.mark.timeout(180)
def test_stock_dgl_serves_wrong_features_without_the_compat_fix(tmp_path):
    """The same checks without dgl_compat fail: DGL crashes, serves wrong rows, or (when the
    timing happens to leave the data intact) still misidentifies the machines."""
    try:
        results = _pull_job(tmp_path, 2, stock=True)
    except JobFailed:
        return
    wrong_rows = any(r["mismatched"] > 0 for r in results)
    wrong_ids = sorted(r["machine_id"] for r in results) != [0, 1] or \
        sorted(r["partid"] for r in results) != [0, 1]
    assert wrong_rows or wrong_ids, json.dumps(results)


@pytest.mark.timeout(300)
def test_training_reaches_accuracy_aim_and_writes_run_folder(tmp_path):
    # The default configuration itself (100k nodes, 2 partitions, 2 trainers), as `make demo` runs it.
    jobs.partition_default(tmp_path, size=())
    run = jobs.train_default(tmp_path, "run", "train.epochs=4", "train.profile=true", size=())
    summary, lines = jobs.summary(run), jobs.epochs(run)
    jobs.check_phases(lines)
    assert [r["epoch"] for r in lines] == [1, 2, 3, 4]
    assert lines[-1]["loss"] < lines[0]["loss"]
    assert summary["test_acc"] >= 0.85, summary
    assert summary["num_workers"] == 2 and summary["num_parts"] == 2
    assert all(len(r["peak_rss_mb_per_worker"]) == 2 for r in lines)
    # The default budget, a quarter of the trainer's partition's feature bytes (~4.8 MiB of
    # ~50k rows x 100 floats), holds ~43k of the other partition's ~50k rows at 8 bits: the
    # cache stays within it and serves most remote reads.
    own_mb = 50_365 * 100 * 4 / 2**20
    assert 0 < summary["feature_cache_mb"] <= 0.25 * own_mb, summary
    assert all(r["cache_hit_rate"] >= 0.8 for r in lines), [r["cache_hit_rate"] for r in lines]
    assert {"server0", "server1", "trainer0", "trainer1"} <= set(summary["peak_rss_mb_per_process"])
    assert (run / "checkpoint.pt").exists() and (run / "config.yaml").exists()
    assert sorted(p.name for p in (run / "logs").iterdir()) == [
        "server0.log", "server1.log", "trainer0.log", "trainer1.log"]


@pytest.mark.timeout(300)
def test_resume_reproduces_uninterrupted_run(tmp_path):
    # One partition: all sampling happens in the trainer (on its prefetch thread, which DGL
    # seeds per thread), so the run is bit-reproducible. Reproducibility does not depend on
    # size or length: a small graph, and one epoch before and one after the resume.
    size = ("dataset.num_nodes=6000", "sampled.batch_size=256")
    jobs.partition_default(tmp_path, "partition.num_parts=1", size=size)
    sets = ("partition.num_parts=1", "sampled.prefetch=2")
    full = jobs.train_default(tmp_path, "full", "train.epochs=2", *sets, size=size)
    part = jobs.train_default(tmp_path, "part", "train.epochs=1", *sets, size=size)
    jobs.train_default(tmp_path, "part", "train.epochs=2", *sets, size=size, resume=True)
    a, b = jobs.epochs(full), jobs.epochs(part)
    assert [r["epoch"] for r in a] == [1, 2] and [r["epoch"] for r in b] == [1, 2]
    assert a[1]["loss"] != a[0]["loss"]  # the resumed epoch trained on: not a copied record
    for ra, rb in zip(a, b):
        for key in ("loss", "train_acc", "val_acc", "test_acc"):
            assert ra[key] == pytest.approx(rb[key], rel=1e-6, abs=1e-9), (key, ra, rb)


def docs_model(folder: Path) -> str:
    """The plug-in model of docs/models.md, its ``# mymodels.py`` block written verbatim as
    ``folder/mymodels.py``; its ``model.name``."""
    text = (jobs.ROOT / "docs" / "models.md").read_text()
    block = next(b.split("\n", 1)[1] for b in text.split("```python")[1:]
                 if b.split("\n", 1)[1].startswith("# mymodels.py"))
    (folder / "mymodels.py").write_text(block.split("```", 1)[0])
    return "mymodels:TwoLayerSage"


@pytest.mark.fast
@pytest.mark.timeout(300)
def test_plug_in_model_from_user_module(sampled_graph, tmp_path, monkeypatch):
    """docs/models.md's model, from a user's module (on PYTHONPATH, outside dsgraph), trains in
    sampled mode here and in sar mode in tests/dist/test_sar_train.py."""
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))  # the job's processes import it too
    run = jobs.train_default(sampled_graph, "plug_in", "train.epochs=3",
                             f"model.name={docs_model(tmp_path)}",
                             "model.args={hidden: 64}", size=jobs.SHARED)
    summary, lines = jobs.summary(run), jobs.epochs(run)
    assert lines[-1]["loss"] < lines[0]["loss"]
    assert summary["test_acc"] > 0.3  # sampled evaluation; chance is 1/40
    # The job's memory: its processes' summed PSS at its peak (tests/test_memwatch.py), which
    # counts the servers' shared partitions and the libraries' code once, not once per process.
    at_peak, peaks = summary["pss_mb_per_process_at_job_peak"], summary["peak_rss_mb_per_process"]
    assert {"server0", "server1", "trainer0", "trainer1"} <= set(at_peak), at_peak
    assert 0 < summary["job_memory_mb"] < sum(peaks.values()), (summary["job_memory_mb"], peaks)


def test_console_holds_no_dgl_chatter_and_the_logs_do(sampled_run):
    """A real job's console (the shared 3-epoch run's stderr) shows its epoch lines, with
    integer throughputs, and none of DGL's or gloo's notices (dsgraph/cluster/chatter.py), which
    stay in the processes' logs."""
    from dsgraph.cluster.chatter import is_chatter
    console = sampled_run.console.replace("\r", "\n").splitlines()
    assert [ln for ln in console if is_chatter(ln.strip())] == []
    assert not any(head in sampled_run.console for head in (
        "graphbolt", "waits on", "connect to server", "is exiting", "DGL backend"))
    epoch_line = next(ln for ln in console if ln.startswith("epoch 1:"))
    assert re.search(r"samples_per_s [\d,]+(,|$)", epoch_line) and "e+0" not in epoch_line
    logged = "\n".join(p.read_text(errors="replace")
                       for p in (sampled_run.path / "logs").glob("*.log"))
    assert any(is_chatter(ln) for ln in logged.replace("\r", "\n").splitlines())
    # every DGL client listened outside the ephemeral range (dgl_compat, dsgraph/cluster/ports.py)
    from dsgraph.cluster.ports import ephemeral_range
    lo, hi = ephemeral_range()
    waits = [int(p) for p in re.findall(r"waits on [\d.]+:(\d+)", logged)]
    assert len(waits) == 2 and not any(lo <= p <= hi for p in waits), (waits, lo, hi)


@pytest.mark.timeout(300)
def test_sampled_training_with_int2_activation_compression(sampled_graph, sampled_run):
    plain = sampled_run.path  # the default model, 3 epochs
    packed = jobs.train_default(sampled_graph, "int2", "train.epochs=3",
                                "compression.enabled=true", size=jobs.SHARED)
    a, b = jobs.summary(plain), jobs.summary(packed)
    la, lb = ([r["loss"] for r in jobs.epochs(run)] for run in (plain, packed))
    assert la != lb  # the saved tensors really were quantized
    # Close to fp32 after 3 epochs on 20k nodes: 0.650-0.654 vs 0.715-0.720 (6 runs each,
    # 2026-12-02, 1-hop halos; a 0.07 margin failed once in CI at 0.648 vs 0.7195); on the
    # shared graph's 2-hop halos 0.653 vs 0.6945-0.699 (2026-12-03). Quantizing the loss's
    # saved log-softmax as well gave 0.45, which this margin still catches.
    assert b["test_acc"] > a["test_acc"] - 0.10, (a, b)


@pytest.mark.timeout(300)
def test_aggregating_inputs_in_place_trains_as_gathering_them(sampled_graph, sampled_run):
    # sampled_run aggregates the first block's rows where they are stored (the default); the
    # same run gathering them first computes the same function, so the same seed gives the
    # same losses up to float32 summation order.
    gathered = jobs.train_default(sampled_graph, "gathered", "train.epochs=3",
                                  "sampled.aggregate_in_place=false", size=jobs.SHARED)
    la, lb = ([r["loss"] for r in jobs.epochs(run)] for run in (sampled_run.path, gathered))
    assert la == pytest.approx(lb, rel=1e-4), (la, lb)
    a, b = jobs.summary(sampled_run.path), jobs.summary(gathered)
    assert abs(a["test_acc"] - b["test_acc"]) <= 0.002, (a, b)
