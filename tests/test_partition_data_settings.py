"""Partition and train must read the same data: partitions made with other dataset settings than
the run's config are refused in one line naming every differing key, both values and the fix."""
from __future__ import annotations

from pathlib import Path

import pytest

from dsgraph.config import from_dict
from dsgraph.data import load_graph
from dsgraph.errors import DataError
from dsgraph.partition import partition_graph, partition_json, partition_source
from dsgraph.partition.meta import describe_differences, source_differences

DATASET = {"num_nodes": 300, "avg_degree": 4, "num_classes": 3, "feat_dim": 4}


def make_cfg(tmp: Path, **dataset):
    """A sar-mode config reading partitions from ``tmp/parts`` (source named ``c.yaml``)."""
    return from_dict({"dataset": {**DATASET, "cache_dir": str(tmp / "data"), **dataset},
                      "partition": {"num_parts": 2, "out_dir": str(tmp / "parts"),
                                    "method": "random"},
                      "train": {"mode": "sar", "epochs": 1}}, "c.yaml")


@pytest.fixture(scope="module")
def parts(tmp_path_factory) -> Path:
    """Partitions of the default test graph, recording the config that made them."""
    tmp = tmp_path_factory.mktemp("settings")
    cfg = make_cfg(tmp)
    partition_graph(load_graph(cfg.dataset), 2, tmp / "parts", method="random",
                    source=partition_source(cfg))
    return tmp


def test_same_settings_pass(parts):
    assert partition_json(make_cfg(parts)) == parts / "parts" / "graph.json"


def test_every_differing_key_is_named_in_one_line(parts):
    with pytest.raises(DataError) as exc:
        partition_json(make_cfg(parts, seed=3, homophily=0.5))
    msg = str(exc.value)
    assert "\n" not in msg
    assert msg.startswith(f"{parts / 'parts' / 'graph.json'}: made with dataset.seed=0, "
                          f"dataset.homophily=0.85; the config says dataset.seed=3, "
                          f"dataset.homophily=0.5; rerun `python -m partition"), msg
    assert msg.endswith("(give `python -m partition` and `python -m train` the same --config and "
                        "--set options)"), msg


def test_one_differing_key_keeps_the_short_form(parts):
    with pytest.raises(DataError) as exc:
        partition_json(make_cfg(parts, seed=3))
    assert "made with dataset.seed=0, the config says 3; rerun" in str(exc.value)


def test_another_num_parts_is_reported_as_before(parts):
    cfg = make_cfg(parts, seed=3)
    cfg.partition.num_parts = 3
    with pytest.raises(DataError, match="made with partition.num_parts=2, the config says 3"):
        partition_json(cfg)


def test_partitions_recording_no_settings_are_not_compared(tmp_path):
    cfg = make_cfg(tmp_path)
    partition_graph(load_graph(cfg.dataset), 2, tmp_path / "parts", method="random")
    assert partition_json(make_cfg(tmp_path, seed=5)) == tmp_path / "parts" / "graph.json"


def test_a_forgotten_set_names_name_and_path():
    """The usual mistake: the ``--set dataset...`` options given to ``python -m partition``
    only; all three are named at once."""
    base = from_dict({"train": {"mode": "sar"}})
    made = from_dict({"dataset": {"name": "ogb", "path": "arxiv", "add_reverse_edges": True},
                      "train": {"mode": "sar"}})
    diffs = source_differences(partition_source(made), partition_source(base),
                               partition_source(base))
    assert [d[0] for d in diffs] == ["dataset.name", "dataset.path", "dataset.add_reverse_edges"]
    assert describe_differences(diffs) == (
        'made with dataset.name="ogb", dataset.path="arxiv", dataset.add_reverse_edges=true; '
        'the config says dataset.name="synthetic", dataset.path=null, '
        'dataset.add_reverse_edges="auto"')


def test_a_key_the_record_lacks_counts_as_its_default():
    base = from_dict({"train": {"mode": "sar"}})
    recorded = partition_source(base)
    del recorded["dataset"]["homophily"]
    assert source_differences(recorded, partition_source(base), partition_source(base)) == []
    other = from_dict({"dataset": {"homophily": 0.5}, "train": {"mode": "sar"}})
    assert source_differences(recorded, partition_source(other), partition_source(base)) == [
        ("dataset.homophily", 0.85, 0.5)]
