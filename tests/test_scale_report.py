"""The ``scale`` benchmark's pure logic: the equal-memory budget, the comparison with stock, the
per-size target lines (met / missed from the numbers), and its figure drawing its table."""
from __future__ import annotations

import pytest

from benchmarks import harness
from benchmarks.scale import settings as st
from benchmarks.scale.report import VIEW, compare, targets


def test_equal_memory_budget_fills_the_headroom_over_stock_per_trainer():
    # 1.04 * 1000 - 900 = 140 MiB left, over 2 trainers
    assert st.equal_memory_budget(1000.0, 900.0, 2) == pytest.approx(70.0)
    assert st.equal_memory_budget(1000.0, 1100.0, 2) == 0.0  # floored
    assert st.equal_memory_budget(None, 900.0, 2) == 0.0  # stock not measured
    assert st.equal_memory_budget(1000.0, None, 4) == 0.0
    assert st.variant_sets("equal_memory", 70.0) == ["sampled.feature_memory_mb=70"]
    assert st.variant_sets("no_cache") == ["sampled.feature_memory_mb=0"]
    assert st.variant_sets("defaults") == []
    # the default budget: a quarter of the trainer's share of its partition's feature bytes
    assert st.default_budget_mb(1_000_000, 2) == pytest.approx(0.25 * 500_000 * 1024 / 2 ** 20)


def _rows(link="veth", speed=1.6, mem=1.03, dmem=1.08, acc=(0.80, 0.802, 0.798), nodes=250_000,
          limit=1300.0, hosts=2):
    """One deployment's rows and, unless ``limit`` is None, its size's limit row."""
    base = {"size": "250k", "nodes": nodes, "hosts": hosts, "parts": hosts, "link": link}
    stock = {**base, "system": "stock", "variant": "stock", "samples_per_s": 1000.0,
             "job_memory_mb": 2000.0, "test_acc": acc[0]}
    rows = [stock,
            {**base, "system": "dsgraph", "variant": "no_cache", "samples_per_s": 900.0,
             "job_memory_mb": 1900.0, "test_acc": acc[0]},
            {**base, "system": "dsgraph", "variant": "equal_memory",
             "samples_per_s": 1000.0 * speed, "job_memory_mb": 2000.0 * mem, "test_acc": acc[1]},
            {**base, "system": "dsgraph", "variant": "defaults", "samples_per_s": 1500.0,
             "job_memory_mb": 2000.0 * dmem, "test_acc": acc[2]}]
    if limit is not None:
        rows.append({"size": "250k", "nodes": nodes, "hosts": 1, "parts": 1, "link": "local",
                     "system": "dgl", "variant": "limit", "samples_per_s": limit,
                     "job_memory_mb": 3000.0, "test_acc": acc[0]})
    return compare(rows)


def test_compare_sets_throughput_and_memory_ratios_against_the_same_deployments_stock():
    rows = _rows() + _rows(link="veth_throttled", speed=2.0)
    eq = [r for r in rows if r["variant"] == "equal_memory"]
    assert [r["ratio_vs_stock"] for r in eq] == pytest.approx([1.6, 2.0])
    assert eq[0]["memory_ratio_vs_stock"] == pytest.approx(1.03)
    assert rows[0]["ratio_vs_stock"] == 1.0


def test_compare_sets_the_ratio_to_the_same_sizes_limit_row():
    rows = _rows(limit=2000.0) + _rows(nodes=1_000_000, limit=500.0)
    by = {(r["nodes"], r["variant"]): r for r in rows}
    assert by[250_000, "equal_memory"]["ratio_vs_limit"] == pytest.approx(0.8)
    assert by[250_000, "stock"]["ratio_vs_limit"] == pytest.approx(0.5)
    assert by[1_000_000, "equal_memory"]["ratio_vs_limit"] == pytest.approx(3.2)
    assert by[250_000, "limit"]["ratio_vs_limit"] == 1.0
    assert by[250_000, "limit"]["ratio_vs_stock"] is None  # no stock row on its deployment
    assert all(r["ratio_vs_limit"] is None for r in _rows(limit=None))


def test_targets_met_when_every_number_is_within_its_limit():
    (line,) = targets(_rows())
    assert line.startswith("**250k, 2 hosts (veth)**: all targets met.")
    assert "missed" not in line and "1.60x" in line


@pytest.mark.parametrize("kw,missed", [
    ({"speed": 1.4}, "throughput (>= 1.5x): missed"),
    ({"link": "veth_throttled", "speed": 1.9}, "throughput (>= 2x): missed"),
    ({"hosts": 4, "speed": 1.2}, "throughput (>= 1.3x): missed"),
    ({"mem": 1.06}, "(<= 1.05x): missed"),
    ({"dmem": 1.11}, "(<= 1.1x): missed"),
    ({"acc": (0.80, 0.794, 0.80)}, "stock's (equal_memory -0.0060, defaults +0.0000): missed"),
    ({"limit": 1700.0}, "0.94x the in-memory limit's (>= 1x): missed"),
    ({"limit": None}, "the in-memory limit's (>= 1x): not measured"),
])
def test_targets_missed_names_the_target_from_the_numbers(kw, missed):
    (line,) = targets(_rows(**kw))
    assert "targets missed" in line and missed in line, line


def test_targets_at_the_limits_are_met_despite_float_rounding():
    (line,) = targets(_rows(speed=1.5, mem=1.05, dmem=1.1, acc=(0.8705, 0.8655, 0.8755),
                            limit=1500.0))
    assert "all targets met" in line, line
    (line,) = targets(_rows(hosts=4, speed=1.3, limit=1300.0))
    assert "all targets met" in line, line


def test_targets_without_a_row_say_not_measured():
    rows = [r for r in _rows() if r["variant"] != "equal_memory"]
    (line,) = targets(rows)
    assert "targets missed" in line and "not measured" in line


def test_scale_figure_draws_its_table_values():
    rows = _rows() + _rows(nodes=1_000_000) + _rows(link="veth_throttled", limit=None)
    for r in rows:
        r["size"] = {250_000: "250k", 1_000_000: "1M"}[r["nodes"]]
    rows = VIEW.rows(rows)
    drawn = harness.plotted_values(harness.figure(VIEW, rows, layout=False))
    by_key = {harness.row_key(r, VIEW.key): r for r in rows}
    assert len(by_key) == len(rows)
    assert {c for _, c, _ in drawn} == {"samples_per_s", "job_memory_mb"}
    assert len(drawn) == 2 * len(rows)
    for key, column, value in drawn:
        assert value == pytest.approx(by_key[key][column])
