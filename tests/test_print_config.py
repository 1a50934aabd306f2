"""``python -m train --print-config``: every resolved key with where its value comes from, and
the CLIs' ``--help`` in plain text."""
from __future__ import annotations

import contextlib
import importlib
import re
from pathlib import Path

import pytest

from dsgraph.config import format_sources, plain_help, resolved_with_sources

ROOT = Path(__file__).resolve().parents[1]


def _train_main(*args: str) -> None:
    with contextlib.chdir(ROOT):
        importlib.import_module("dsgraph.cli.train").main(list(args))


def test_each_value_has_its_source(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("train:\n  epochs: 3\n"
                   "model:\n  name: sage\n  args: {hidden: 16, num_layers: 2}\n")
    rows = {key: (value, src) for key, value, src in
            resolved_with_sources(cfg, ["model.args.hidden=32", "sampled.fanouts=[5, 5]"])}
    assert rows["train.epochs"] == (3, str(cfg))
    assert rows["train.lr_schedule"] == ("constant", "default")
    assert rows["model.args.hidden"] == (32, "--set")  # the override wins over the file
    assert rows["model.args.num_layers"] == (2, str(cfg))  # a mapping's keys one by one
    assert rows["sampled.fanouts"] == ([5, 5], "--set")
    # every section and every key, after defaults
    assert {k.split(".")[0] for k in rows} >= {"dataset", "partition", "model", "train", "task",
                                              "sampled", "sar", "physics", "cluster"}
    assert all(src == "default" for k, (_, src) in rows.items() if k.startswith("cluster."))


def test_defaults_only_without_a_file():
    assert {src for _, _, src in resolved_with_sources(None)} == {"default"}


def test_print_config_prints_aligned_lines_and_starts_nothing(tmp_path, capsys):
    out = tmp_path / "run"
    _train_main("--config", "configs/default.yaml", "--out", str(out), "--print-config",
                "--set", "sampled.batch_size=256")
    text = capsys.readouterr().out
    lines = [ln for ln in text.splitlines() if ln]
    assert "sampled.batch_size: 256" in text and re.search(
        r"^sampled\.batch_size: 256 +# --set$", text, re.M)
    assert re.search(r"^train\.mode: sampled +# configs/default\.yaml$", text, re.M)
    assert re.search(r"^train\.lr_schedule: constant +# default$", text, re.M)
    # the sources line up (past the longest key and value, capped)
    assert len({ln.index(" # ") for ln in lines if len(ln.split(" # ")[0].rstrip()) <= 50}) == 1
    assert not out.exists()  # nothing started, no run folder
    with contextlib.chdir(ROOT):
        assert text == format_sources("configs/default.yaml", ["sampled.batch_size=256"]) + "\n"


def test_an_invalid_config_is_the_usual_one_line_error(capsys):
    with pytest.raises(SystemExit) as info:
        _train_main("--print-config", "--set", "sampled.batch_size=0")
    assert info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err == "error: --set sampled.batch_size: expected an integer >= 1, got 0"


def test_plain_help_strips_markup():
    assert plain_help("``python -m x`` writes :mod:`predict.output`, see "
                      ":func:`~dsgraph.cluster.memwatch.last_job` and `file`") == \
        "python -m x writes predict.output, see last_job and file"
    assert plain_help(None) == ""


@pytest.mark.parametrize("module", ["train", "predict", "benchmarks", "partition.chunk"])
def test_cli_help_is_plain_text(module, capsys):
    name = module if "." in module else f"{module}.__main__"
    with pytest.raises(SystemExit) as info:
        importlib.import_module(name).main(["--help"])
    assert info.value.code == 0
    text = capsys.readouterr().out
    assert "usage:" in text and "`" not in text and not re.search(r":\w+:", text), text
