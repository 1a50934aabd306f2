"""The memory plan (dsgraph.memplan) on small partitions written by the project's partitioner."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from dsgraph import config as config_mod
from dsgraph.config import DatasetConfig
from dsgraph.data.synthetic import generate
from dsgraph.errors import ConfigError, UserError
from dsgraph.memplan import MemoryPlan, ProcessPlan, check_plan, format_plan
from dsgraph.modes import plan_job
from dsgraph.modes.sampled.memory import shrink_settings
from dsgraph.partition import partition_graph

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def parts(tmp_path_factory):
    """feat_dim -> the folder of a 2-part partitioning of a 3000-node graph of that width."""
    done: dict[int, Path] = {}

    def get(feat_dim: int) -> Path:
        if feat_dim not in done:
            g = generate(DatasetConfig(num_nodes=3000, avg_degree=8.0, num_classes=5,
                                       feat_dim=feat_dim, seed=1))
            out = tmp_path_factory.mktemp(f"w{feat_dim}") / "parts"
            partition_graph(g, 2, out, method="random", seed=0)
            done[feat_dim] = out
        return done[feat_dim]

    return get


def cfg_of(folder: Path, *overrides: str, mode: str = "sampled"):
    return config_mod.load(None, [f"partition.out_dir={folder}", "partition.graph_name=graph",
                                  "partition.num_parts=2", f"train.mode={mode}", *overrides])


def item(plan: MemoryPlan, name: str, key: str) -> float:
    return next(p for p in plan.processes if p.name == name).items[key]


def test_sampled_processes_and_items(parts):
    plan = plan_job(cfg_of(parts(16), "cluster.trainers_per_machine=2"))
    assert [p.name for p in plan.processes] == ["server0", "trainer0", "trainer1",
                                                "server1", "trainer2", "trainer3"]
    t = next(p for p in plan.processes if p.role == "trainer").items
    assert {"runtime", "graph (shared)", "features (shared)", "feature cache", "mini-batch",
            "evaluation"} <= set(t)
    assert all(v >= 0 for p in plan.processes for v in p.items.values())
    assert plan.peak_mb() == max(p.total_mb for p in plan.processes)


def test_items_grow_with_width_batch_and_budget(parts):
    narrow, wide = plan_job(cfg_of(parts(16))), plan_job(cfg_of(parts(128)))
    for key in ("features (shared)", "feature cache", "mini-batch"):
        assert item(wide, "trainer0", key) > item(narrow, "trainer0", key), key
    assert item(wide, "server0", "features (shared)") > item(narrow, "server0",
                                                             "features (shared)")
    small = plan_job(cfg_of(parts(128), "sampled.batch_size=16"))
    big = plan_job(cfg_of(parts(128), "sampled.batch_size=512"))
    assert item(big, "trainer0", "mini-batch") > item(small, "trainer0", "mini-batch")
    lo = plan_job(cfg_of(parts(128), "sampled.feature_memory_mb=0.1"))
    hi = plan_job(cfg_of(parts(128), "sampled.feature_memory_mb=0.5"))
    assert item(hi, "trainer0", "feature cache") > item(lo, "trainer0", "feature cache")
    assert item(plan_job(cfg_of(parts(128), "sampled.feature_memory_mb=0")), "trainer0",
                "feature cache") == 0


def test_compression_shrinks_activations(parts):
    for mode, key in (("sampled", "mini-batch"), ("sar", "activations")):
        plain = plan_job(cfg_of(parts(128), mode=mode))
        packed = plan_job(cfg_of(parts(128), "compression.enabled=true", mode=mode))
        name = plain.processes[-1].name
        assert item(packed, name, key) < item(plain, name, key)
    # SAR keeps float32 tensors beside the packed ones: a separate item, not hidden
    sar = plan_job(cfg_of(parts(128), "compression.enabled=true", mode="sar"))
    assert item(sar, "worker0", "compression buffers") > 0


def test_batch_sources_say_how_many_seed_nodes_a_batch_holds(parts):
    """Edge and link batches start sampling from both endpoints (and the negatives): their
    mini-batch is planned from those seeds, not as a node batch of the same size."""
    from dsgraph.modes.sampled.edges import EdgeBatches
    from dsgraph.modes.sampled.links import LinkBatches
    from dsgraph.modes.sampled.nodes import NodeBatches
    b = "sampled.batch_size=64"
    node = cfg_of(parts(128), b)
    assert NodeBatches.seed_nodes(node) == 64
    assert EdgeBatches.seed_nodes(cfg_of(parts(128), b, "task.name=edge_regression")) == 128
    for sampler, seeds in (("uniform", 64 * 5), ("joint", 128 + 3), ("in_batch", 128)):
        cfg = cfg_of(parts(128), b, "task.name=link_prediction", "task.negatives=3",
                     f"task.negative_sampler={sampler}")
        assert LinkBatches.seed_nodes(cfg) == seeds, sampler
    edge = plan_job(cfg_of(parts(128), b, "task.name=edge_classification"))
    link = plan_job(cfg_of(parts(128), b, "task.name=link_prediction", "task.negatives=3"))
    mini = [item(p, "trainer0", "mini-batch") for p in (plan_job(node), edge, link)]
    assert mini[0] < mini[1] < mini[2]
    assert not any("planned as" in n for n in edge.notes + link.notes)


def test_sar_one_worker_per_partition(parts):
    plan = plan_job(cfg_of(parts(16), mode="sar"))
    assert [(p.name, p.role, p.machine) for p in plan.processes] == [("worker0", "worker", 0),
                                                                     ("worker1", "worker", 1)]
    assert {"runtime", "graph", "features", "remote rows", "activations"} == set(
        plan.processes[0].items)


def test_over_limit_names_largest_item_and_setting(parts):
    cfg = cfg_of(parts(128), "cluster.memory_limit_mb=100")
    with pytest.raises(ConfigError) as exc:
        check_plan(cfg, plan_job(cfg))  # a tiny graph: the runtime is the largest item
    msg = str(exc.value)
    assert "\n" not in msg and "machine 0 plans" in msg and "over the 100 MiB limit" in msg
    assert "'runtime'" in msg
    cfg = cfg_of(parts(128), "cluster.memory_limit_mb=1000")
    plan = MemoryPlan([ProcessPlan("server0", "server", 0, {"runtime": 500}),
                       ProcessPlan("trainer0", "trainer", 0, {"runtime": 500,
                                                              "feature cache": 600})],
                      shrink=shrink_settings(cfg))
    with pytest.raises(ConfigError, match=r"machine 0 plans 1,600 MiB, over the 1,000 MiB "
                                          r"limit.*trainer0 'feature cache' 600 MiB.*"
                                          r"sampled\.feature_memory_mb$"):
        check_plan(cfg, plan)
    plan = MemoryPlan([ProcessPlan("trainer0", "trainer", 0, {"runtime": 10, "mini-batch": 90})],
                      shrink=shrink_settings(cfg))
    with pytest.raises(ConfigError, match=r"trainer0 'mini-batch'.*sampled\.batch_size"):
        check_plan(cfg_of(parts(16)), plan, available_mb=50)
    plan.shrink = {}  # an item no setting of the mode shrinks: more partitions
    with pytest.raises(ConfigError, match=r"trainer0 'mini-batch'.*partition\.num_parts$"):
        check_plan(cfg_of(parts(16)), plan, available_mb=50)
    check_plan(cfg_of(parts(16)), plan, available_mb=1000)  # fits: no error
    check_plan(cfg_of(parts(16), "cluster.memory_limit_mb=200"), plan, available_mb=1)


def test_missing_partition_files_one_line(parts, tmp_path):
    with pytest.raises(UserError) as exc:
        plan_job(cfg_of(tmp_path / "nothing"))
    assert "\n" not in str(exc.value) and "python -m partition" in str(exc.value)
    copy = tmp_path / "copy"
    shutil.copytree(parts(16), copy)
    (copy / "part1" / "node_feat.dgl").unlink()
    with pytest.raises(UserError) as exc:
        plan_job(cfg_of(copy))
    assert "\n" not in str(exc.value) and "node_feat.dgl" in str(exc.value)


def test_to_dict_json_and_machine_mb_counts_shared_once(parts):
    plan = plan_job(cfg_of(parts(16), "cluster.trainers_per_machine=2"))
    d = json.loads(json.dumps(plan.to_dict()))
    assert set(d["processes"]["trainer1"]) == {"role", "machine", "total_mb", "items"}
    assert set(d["machine_mb"]) == {"0", "1"}
    toy = MemoryPlan([ProcessPlan("server0", "server", 0, {"runtime": 5, "features (shared)": 100}),
                      ProcessPlan("trainer0", "trainer", 0, {"runtime": 5,
                                                             "features (shared)": 60}),
                      ProcessPlan("trainer1", "trainer", 1, {"runtime": 7})])
    assert toy.machine_mb() == {0: 110, 1: 7}
    assert toy.peak_mb() == 105


def test_format_plan_and_unplanned_mode(parts):
    text = format_plan(plan_job(cfg_of(parts(16))))
    assert "trainer1" in text and "machine 1:" in text and "feature cache" in text
    big = MemoryPlan([ProcessPlan("w", "worker", 0, {"runtime": 12345.678})])
    assert "12,346" in format_plan(big)
    plan = plan_job(config_mod.load(ROOT / "configs" / "darcy.yaml"))
    assert plan.processes == [] and "not planned" in plan.notes[0]


def test_train_cli_prints_the_plan_and_refuses_an_over_limit_job(parts, tmp_path, capsys):
    from dsgraph.cli.train import main
    sets = ["--set", f"partition.out_dir={parts(16)}", "--set", "partition.num_parts=2"]
    main(["--plan", *sets])
    out = capsys.readouterr().out
    assert "trainer1" in out and "feature cache" in out and "the plan fits" in out
    run = tmp_path / "run"
    with pytest.raises(SystemExit) as exit_:
        main(["--out", str(run), *sets, "--set", "cluster.memory_limit_mb=100"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "over the 100 MiB limit (cluster.memory_limit_mb)" in err \
        and "largest item" in err, err
    assert not run.exists()  # refused before the run folder is touched
