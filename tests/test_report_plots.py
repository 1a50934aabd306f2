"""Benchmark reports: every figure draws exactly its table's rows, and the committed reports are
what their committed JSON renders to."""
from __future__ import annotations

import importlib
import json
import os
import shutil
import sys
from collections import Counter
from pathlib import Path

import pytest

from benchmarks import harness
from dsgraph.cluster import preload
from dsgraph.errors import UserError

REPORTS = Path(harness.__file__).resolve().parent / "reports"
NAMES = sorted(p.stem for p in REPORTS.glob("*.json"))  # every committed report


def _view(name: str) -> harness.View:
    return importlib.import_module(f"benchmarks.{name}").VIEW


def _committed(name: str, monkeypatch) -> dict:
    monkeypatch.delenv("DSGRAPH_REPORTS_DIR", raising=False)
    return harness.load_payload(name)


def _check_plot_equals_table(view: harness.View, rows: list[dict]) -> list[tuple]:
    """Assert every drawn value is its row's table value; return what was drawn."""
    keys = [harness.row_key(r, view.key) for r in rows]
    dupes = [k for k, n in Counter(keys).items() if n > 1]
    assert not dupes, f"{view.name}: rows not told apart by {view.key}: {dupes}"
    assert set(view.key) <= set(view.columns), "the table must show every key field"
    by_key = dict(zip(keys, rows))
    drawn = harness.plotted_values(harness.figure(view, rows, layout=False))
    assert drawn, f"{view.name}: the figure draws no tagged value"
    for key, column, value in drawn:
        assert key in by_key, f"{view.name}: drawn row {key!r} is not a table row"
        assert column in view.columns, f"{view.name}: drawn {column!r} is not a table column"
        assert value == pytest.approx(by_key[key][column], rel=1e-12), (key, column)
    columns = {c for _, c, _ in drawn}
    for key in set(keys) - {k for k, _, _ in drawn}:  # only rows with nothing to draw are left out
        assert all(by_key[key].get(c) is None for c in columns), f"{view.name}: {key} not drawn"
    return drawn


@pytest.mark.parametrize("name", NAMES)
def test_committed_plot_draws_the_table_values(name, monkeypatch):
    payload = _committed(name, monkeypatch)
    view = _view(name)
    _check_plot_equals_table(view, view.rows(payload["records"]))


@pytest.mark.parametrize("name", NAMES)
def test_committed_markdown_is_the_render_of_the_committed_json(name, monkeypatch, tmp_path):
    payload = _committed(name, monkeypatch)
    sidecar = REPORTS / f"{name}.notes.md"
    if sidecar.exists():
        shutil.copy(sidecar, tmp_path)
    harness.render(payload, _view(name), tmp_path, figure_too=False)  # the figure: test above
    committed = (REPORTS / f"{name}.md").read_text().replace(f"![{name}]({name}.png)\n\n", "")
    assert (tmp_path / f"{name}.md").read_text() == committed, \
        f"benchmarks/reports/{name}.md is stale: run `python -m benchmarks {name} --render`"
    assert (REPORTS / f"{name}.png").exists()


def _compression_record(bits, block, levels, projection, saved, overhead):
    return {"model": "sage", "mode": "full", "bits": bits, "block_size": block, "levels": levels,
            "projection": projection, "saved_bytes": saved, "ratio_vs_fp32": 800.0 / saved,
            "ratio_vs_rowwise": None, "epoch_s": 1.0, "time_overhead_vs_fp32": overhead,
            "peak_step_mb": None, "test_acc": None}


def test_compression_plot_keeps_projected_and_plain_records_apart():
    view = _view("compression")
    records = [_compression_record(32, None, None, None, 800.0, 0.0),
               _compression_record(2, 256, "uniform", 1.0, 40.0, 0.03),
               _compression_record(2, 256, "uniform", 0.125, 17.0, 0.11)]
    rows = view.rows(records)
    assert [r["setting"] for r in rows] == ["fp32", "G256", "G256+RP/8"]
    drawn = _check_plot_equals_table(view, rows)
    ratios = {k: v for k, c, v in drawn if c == "ratio_vs_fp32"}
    assert ratios == {"sage/full/32/-/-/-": 1.0, "sage/full/2/256/uniform/1": 20.0,
                      "sage/full/2/256/uniform/0.125": pytest.approx(800 / 17)}


def test_sar_figure_has_a_panel_per_mode_and_a_colour_per_model(monkeypatch):
    view = _view("sar")
    assert "final_val_acc" not in view.columns
    fig = harness.figure(view, view.rows(_committed("sar", monkeypatch)["records"]), layout=False)
    titles = [ax.get_title() for ax in fig.axes]
    assert titles == [f"{g} graph, {m}" for g in ("community", "random")
                      for m in ("SAR", "SA", "one-shot")]
    for ax in fig.axes:
        colours = {ln.get_gid().split("\t")[2].split("/")[2]: ln.get_color() for ln in ax.lines
                   if ln.get_gid() and "/dgl/" not in ln.get_gid()}
        assert set(colours) == {"sage", "gat"} and len(set(colours.values())) == 2


def test_hand_notes_only_join_the_run_they_discuss(tmp_path, capsys):
    (tmp_path / "x.notes.md").write_text("<!-- run: 2026-01-01T00:00:00 -->\nBy hand.\n")
    assert harness.hand_notes(tmp_path, "x", "2026-01-01T00:00:00") == "By hand."
    assert harness.hand_notes(tmp_path, "x", "2026-02-02T00:00:00") is None
    assert "left out of x.md" in capsys.readouterr().out
    (tmp_path / "x.notes.md").write_text("By hand, no header.\n")
    with pytest.raises(UserError, match="x.notes.md: first line must be"):
        harness.hand_notes(tmp_path, "x", "2026-01-01T00:00:00")


def test_render_saved_without_a_report_is_one_line_error(tmp_path, monkeypatch):
    monkeypatch.setenv("DSGRAPH_REPORTS_DIR", str(tmp_path))
    with pytest.raises(UserError, match=r"sar.json: no such report; run `python -m benchmarks sar"):
        harness.render_saved(_view("sar"))


def test_report_save_writes_json_md_png_and_partial_skips_the_figure(tmp_path, monkeypatch):
    """The end of a benchmark run: what ``Report.save`` writes is what a re-render gives."""
    committed = _committed("compression", monkeypatch)
    monkeypatch.setenv("DSGRAPH_REPORTS_DIR", str(tmp_path))
    report = harness.Report(_view("compression"), quick=False)
    for key in ("profile_c_vs_torch", "settings", "graph"):  # what the notes read besides records
        if key in committed:
            report.extra[key] = committed[key]
    for rec in committed["records"]:
        report.add(dict(rec))
    report.save(partial=True)
    assert not (tmp_path / "compression.png").exists()
    assert harness.load_payload("compression")["notes"] == []
    report.save()
    saved = harness.load_payload("compression")
    assert saved["records"] == committed["records"]
    assert saved["notes"] == _view("compression").notes(committed)
    first = (tmp_path / "compression.md").read_text()
    assert "![compression](compression.png)" in first and (tmp_path / "compression.png").exists()
    harness.render_saved(_view("compression"))
    assert (tmp_path / "compression.md").read_text() == first


def test_dsmpnn_rerun_of_one_dataset_carries_the_others_from_the_saved_report(tmp_path,
                                                                              monkeypatch):
    """``--datasets airfoil``: the Darcy rows, capacity check and settings come from the saved
    report, and the notes name the run they come from; a second carry keeps that run's date."""
    from benchmarks import dsmpnn
    from benchmarks.dsmpnn.settings import FULL
    from benchmarks.dsmpnn.sweep import _carry

    committed = _committed("dsmpnn", monkeypatch)
    committed.pop("carried", None)  # as a run of every dataset saves it
    monkeypatch.setenv("DSGRAPH_REPORTS_DIR", str(tmp_path))
    (tmp_path / "dsmpnn.json").write_text(json.dumps(committed))
    report = harness.Report(dsmpnn.VIEW, quick=False)
    report.extra["settings"] = {"airfoil": FULL["airfoil"]}
    _carry(report, False, ["darcy"])
    darcy = [r for r in committed["records"] if r["dataset"] == "darcy"]
    assert darcy and report.records == darcy
    assert report.extra["carried"] == {"darcy": committed["env"]["date"]}
    assert report.extra["capacity"] == {"darcy": committed["capacity"]["darcy"]}
    assert report.extra["settings"]["darcy"] == committed["settings"]["darcy"]
    notes = report.payload()["notes"]
    assert any(f"run of {committed['env']['date']}" in n and "darcy records carried" in n
               for n in notes)
    again = dict(committed, carried={"darcy": "2026-01-01T00:00:00"})
    (tmp_path / "dsmpnn.json").write_text(json.dumps(again))
    report = harness.Report(dsmpnn.VIEW, quick=False)
    report.extra["settings"] = {}
    _carry(report, False, ["darcy"])
    assert report.extra["carried"] == {"darcy": "2026-01-01T00:00:00"}
    (tmp_path / "dsmpnn.json").write_text(json.dumps(dict(committed, records=[])))
    with pytest.raises(UserError, match="dsmpnn.json: no darcy records to carry"):
        _carry(harness.Report(dsmpnn.VIEW, quick=False), False, ["darcy"])


def test_datasets_option_is_refused_where_it_means_nothing(tmp_path, monkeypatch, capsys):
    from benchmarks import dsmpnn
    from benchmarks.__main__ import main

    monkeypatch.setenv("DSGRAPH_REPORTS_DIR", str(tmp_path))
    # benchmarks start fresh processes, but leave a test process's preload server named after
    monkeypatch.setenv(preload.ENV_SOCKET, "/nowhere/fork.sock")
    with pytest.raises(SystemExit) as exc:
        main(["sar", "--datasets", "darcy"])
    assert exc.value.code != 0
    assert os.environ[preload.ENV_SOCKET] == "/nowhere/fork.sock"
    assert "--datasets: benchmark 'sar' has no datasets to choose" in capsys.readouterr().err
    with pytest.raises(UserError, match="--datasets wing: expected some of darcy, airfoil"):
        dsmpnn.run(quick=True, datasets=["wing"])


def test_dsmpnn_parity_verdict_is_the_mean_over_training_seeds():
    """One seed 2.5% apart fails alone; over three seeds the means are 0.5% apart and the note
    says so, quoting every seed's gap and both inference passes' times."""
    from benchmarks.dsmpnn import report as dsmpnn

    def row(p, rmse, infer):
        return {"dataset": "airfoil", "sweep": "workers", "workers": p, "test_rmse": rmse,
                "epoch_s": 20.0 / p, "infer_s": infer, "infer_s_all": [infer, infer + 1.0],
                "peak_rss_mb": 900.0}

    records = [row(1, 0.200, 16.0), row(2, 0.205, 10.0)]
    alone = " ".join(dsmpnn._notes({"records": records}))
    assert "+2.50%; target within 2%: NOT met" in alone
    assert "inference 1.60x (10.00 s vs 16.00 s, median passes (P=1 16.00 / 17.00; P=2 " \
           "10.00 / 11.00 s); target >= 1.5x: met" in alone
    parity = [{"seed": s, "workers": p, "test_rmse": v} for s, p, v in
              [(0, 1, 0.200), (0, 2, 0.205), (1, 1, 0.210), (1, 2, 0.2073),
               (2, 1, 0.190), (2, 2, 0.191), (3, 1, 0.5)]]  # seed 3 has no P = 2 run
    seeds = " ".join(dsmpnn._notes({"records": records, "parity": {"airfoil": parity}}))
    assert "over 3 training seeds mean RMSE 0.2011 vs 0.2000, +0.55% (per seed +2.50%, " \
           "-1.29%, +0.53%); target within 2% for the mean: met" in seeds
    assert dsmpnn._seed_means(parity[:2]) is None  # one seed: the single gap decides


def test_dsmpnn_job_pool_gives_a_two_worker_job_both_cores(tmp_path):
    """Two 1-worker jobs share the two slots; the 2-worker job after them runs alone; a job
    whose folder holds a metrics.json is skipped; a failing job raises with its log."""
    from benchmarks.dsmpnn.runner import run_cmds

    def job(name, cores, fail=False):
        code = (f"import time; open({str(tmp_path / name)!r}, 'w').write("
                f"f'{{time.time()}} '); time.sleep(0.6); "
                f"open({str(tmp_path / name)!r}, 'a').write(f'{{time.time()}}')"
                + ("; raise SystemExit('boom')" if fail else ""))
        return [sys.executable, "-c", code], tmp_path / "runs" / name, cores

    done = tmp_path / "runs" / "done"
    done.mkdir(parents=True)
    (done / "metrics.json").write_text("{}")
    run_cmds([job("a", 1), job("b", 1), job("c", 2), job("done", 1)], slots=2)
    span = {n: [float(v) for v in (tmp_path / n).read_text().split()] for n in "abc"}
    assert span["a"][0] < span["b"][1] and span["b"][0] < span["a"][1]  # overlapped
    assert span["c"][0] >= max(span["a"][1], span["b"][1])  # alone, after both
    assert not (tmp_path / "done").exists()
    with pytest.raises(RuntimeError, match="(?s)run bad failed:.*boom"):
        run_cmds([job("bad", 1, fail=True)], slots=2)


def test_repeats_run_round_robin_with_a_fresh_port_per_emulated_job(tmp_path, capsys):
    # the one repeat loop of the sampled, hetero and tasks benchmarks: repeat r of every
    # setting before repeat r + 1, each setting its own count, a new server port per job on an
    # emulated link
    from types import SimpleNamespace

    from benchmarks import jobs
    settings = [SimpleNamespace(name="a", link="local"), SimpleNamespace(name="b", link="veth"),
                SimpleNamespace(name="c", link="local")]
    order = []

    def run_one(s, i, r, host_sets):
        order.append((s.name, r, tuple(host_sets)))
        return {"rate": 10 * r + i}

    hosts = {"veth": (["ns0", "ns1"], ["10.0.0.1", "10.0.0.2"])}
    runs = jobs.round_robin(settings, lambda s: 1 if s.name == "c" else 2, hosts, tmp_path,
                            30000, run_one, lambda got: f"{got['rate']} seeds/s")
    assert [(n, r) for n, r, _ in order] == [("a", 0), ("b", 0), ("c", 0), ("a", 1), ("b", 1)]
    ports = [sets for n, _, sets in order if n == "b"]
    assert ports[0] != ports[1] and all(ports) and not any(s for n, _, s in order if n != "b")
    assert runs == {"a": [{"rate": 0}, {"rate": 10}], "b": [{"rate": 1}, {"rate": 11}],
                    "c": [{"rate": 2}]}
    assert "[2/2] b: 11 seeds/s" in capsys.readouterr().out


def test_a_row_is_the_median_of_its_runs_with_the_spread_asked_for():
    from benchmarks import jobs
    runs = [{"samples_per_s": 10.0, "mrr": None, "acc": 0.5},
            {"samples_per_s": 30.0, "mrr": 0.2, "acc": 0.7},
            {"samples_per_s": 20.0, "mrr": 0.4}]
    row = jobs.median_row({"setting": "s"}, runs, ("samples_per_s", "mrr", "absent"))
    assert row == {"setting": "s", "samples_per_s": 20.0, "mrr": 0.30000000000000004,
                   "acc": 0.6, "samples_per_s_min": 10.0, "samples_per_s_max": 30.0,
                   "mrr_min": 0.2, "mrr_max": 0.4}


def test_tasks_rows_name_their_task_and_the_committed_report_has_each(monkeypatch):
    """``--datasets`` of the tasks benchmark picks rows by the task they train (overrides
    included: the edge regression rows run the edge classification config), and the committed
    report holds a record of every row, carried ones included, in table order."""
    from benchmarks.tasks.runner import _task_of
    from benchmarks.tasks.settings import settings
    rows = settings()
    task = {s.name: _task_of(s) for s in rows}
    assert task["edge regression SAGE"] == "edge_regression"
    assert task["edge classification MLP (features only)"] == "edge_classification"
    assert set(task.values()) == {"link_prediction", "node_regression", "multilabel",
                                  "edge_classification", "edge_regression"}
    saved = _committed("tasks", monkeypatch)
    assert [r["setting"] for r in saved["records"]] == [s.name for s in rows]
    assert all(r["task"] == task[r["setting"]] for r in saved["records"])
    assert set(saved.get("carried", {})) <= set(task.values())


def test_carry_keeps_the_saved_values_it_is_asked_for(tmp_path, monkeypatch):
    """:func:`harness.carry`: the kept values' records and extras, the run each came from; a
    value without records is left out; no saved report, nothing carried."""
    monkeypatch.setenv("DSGRAPH_REPORTS_DIR", str(tmp_path))
    view = harness.View("toy", "toy", ("size", "x"), ("size",))
    report = harness.Report(view, quick=False)
    harness.carry(report, False, "size", ["a"])
    assert report.records == [] and "carried" not in report.extra
    saved = {"name": "toy", "env": {"date": "2026-01-02T03:04:05"}, "carried": {"b": "old"},
             "records": [{"size": "a", "x": 1}, {"size": "b", "x": 2}, {"size": "c", "x": 3}],
             "capacity": {"a": 7}, "skipped": {"veth": "no namespaces"}}
    (tmp_path / "toy.json").write_text(json.dumps(saved))
    harness.carry(report, False, "size", ["a", "b", "d"], extras=("capacity",))
    assert report.records == saved["records"][:2]
    assert report.extra["carried"] == {"a": "2026-01-02T03:04:05", "b": "old"}
    assert report.extra["capacity"] == {"a": 7}
    assert report.extra["skipped"] == {"veth": "no namespaces"}
