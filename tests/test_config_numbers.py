"""Numbers as YAML 1.2 reads them (``1e-9``, ``5E3``, ``+1e-3``) in config files and ``--set``,
and errors in a ``--set`` value named as the ``--set``'s (issue 46, item 6.1)."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from dsgraph import config as cfgmod
from dsgraph.config import resolved_with_sources
from dsgraph.config.yamlfile import load_text
from dsgraph.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]
DEFAULT = ROOT / "configs" / "default.yaml"


def write(tmp_path: Path, text: str) -> Path:
    """``text`` as the config file run.yaml."""
    p = tmp_path / "run.yaml"
    p.write_text(text)
    return p


@pytest.mark.parametrize("text, value", [
    ("1e-9", 1e-9), ("5E3", 5000.0), ("+1e-3", 1e-3), ("1.5e3", 1500.0), ("2.5E-2", 0.025),
    (".5e1", 5.0), ("1.e2", 100.0), ("1.0e-9", 1e-9), ("0.01", 0.01),
])
def test_exponent_floats_in_a_file_and_in_set(tmp_path, text, value):
    from_file = cfgmod.load(write(tmp_path, f"train:\n  lr: {text}\n"))
    from_set = cfgmod.load(DEFAULT, [f"train.lr={text}"])
    for cfg in (from_file, from_set):
        assert isinstance(cfg.train.lr, float) and cfg.train.lr == value


@pytest.mark.parametrize("text, value", [
    ("-1e-3", -1e-3), ("-.5E+2", -50.0), ("[1e-9, 5E3]", [1e-9, 5000.0]),
    # not floats by either YAML version: ints stay ints, the rest strings
    ("10", 10), ("-7", -7), ("0x1f", 31), ("1e", "1e"), ("e5", "e5"), ("1e-9x", "1e-9x"),
    ("1e-", "1e-"), ("1_0e3", "1_0e3"),
])
def test_what_reads_as_a_number(text, value):
    cfg = cfgmod.load(None, [f"model.args.x={text}"])  # model.args keeps any value as parsed
    assert cfg.model.args["x"] == value and type(cfg.model.args["x"]) is type(value)


def test_only_the_config_loader_reads_yaml_1_2_numbers():
    assert load_text("1e-9") == 1e-9
    assert yaml.safe_load("1e-9") == "1e-9"  # PyYAML's own SafeLoader keeps its YAML 1.1 rules


def test_aliases_and_bounds_still_apply_to_floats(tmp_path):
    p = write(tmp_path, "train:\n  lr: &rate 1e-3\nmodel:\n  args: {dropout: *rate}\n")
    cfg = cfgmod.load(p)
    assert cfg.train.lr == cfg.model.args["dropout"] == 1e-3
    p = write(tmp_path, "train:\n  lr: 1e-3\n  lr: 2e-3\n")
    with pytest.raises(ConfigError, match=r"duplicate key 'lr' \(first given at line 2\)"):
        cfgmod.load(p)
    big = "[" + ", ".join(["&a [" + ", ".join(["1e-9"] * 100) + "]"] + ["*a"] * 200) + "]"
    with pytest.raises(ConfigError, match=r"^--set sampled.fanouts=.*expected aliases to add"):
        cfgmod.load(None, [f"sampled.fanouts={big}"])


def test_an_error_in_a_set_value_names_the_set(tmp_path):
    with pytest.raises(ConfigError) as err:
        cfgmod.load(DEFAULT, ["train.lr=-1"])
    assert str(err.value) == "--set train.lr: expected a number > 0, got -1.0"
    p = write(tmp_path, "train:\n  lr: 0.5\n")
    with pytest.raises(ConfigError) as err:  # the file gave a good value, the --set a bad one
        cfgmod.load(p, ["train.lr=-1e-3"])
    assert str(err.value) == "--set train.lr: expected a number > 0, got -0.001"
    with pytest.raises(ConfigError) as err:  # a key inside a mapping the --set gave
        cfgmod.load(p, ["model.args={hidden: 2000000}"])
    assert str(err.value) == "--set model.args.hidden: expected an integer <= 1048576, got 2000000"


def test_an_error_in_a_file_value_still_names_the_file(tmp_path):
    p = write(tmp_path, "train:\n  lr: -1e-3\n")
    with pytest.raises(ConfigError) as err:  # a --set of another key does not take the blame
        cfgmod.load(p, ["train.epochs=3"])
    assert str(err.value) == f"{p}: train.lr: expected a number > 0, got -0.001"
    with pytest.raises(ConfigError) as err:  # a cross-field rule names the key it quotes
        cfgmod.load(None, ["cluster.netns=[a, b]"])
    assert str(err.value).startswith("<defaults>: cluster.ip_config: expected the machines'")


def test_print_config_names_the_set_as_the_source():
    rows = {key: (value, src) for key, value, src in
            resolved_with_sources(DEFAULT, ["train.lr=1e-9"])}
    assert rows["train.lr"] == (1e-9, "--set")
