"""Run configuration: defaults, YAML parsing, --set overrides and the exact one-line errors."""
from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import pytest

from dsgraph import config as cfgmod
from dsgraph.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]


def write(tmp_path: Path, text: str, name: str = "run.yaml") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


# --- defaults -----------------------------------------------------------------------------------

def test_defaults_without_file_are_dataclass_defaults():
    cfg = cfgmod.load(None)
    assert cfg == cfgmod.Config()
    assert cfg.partition.num_parts == 2 and cfg.partition.method == "metis"
    assert cfg.dataset.name == "synthetic" and cfg.train.fanouts == [10, 25]
    assert cfg.source == "<defaults>"


def test_empty_file_and_empty_sections_give_defaults(tmp_path):
    assert cfgmod.load(write(tmp_path, "")) == cfgmod.Config()
    assert cfgmod.load(write(tmp_path, "partition:\ntrain: {}\n")) == cfgmod.Config()


def test_default_yaml_loads_and_partial_sections_keep_defaults(tmp_path):
    cfg = cfgmod.load(ROOT / "configs" / "default.yaml")
    assert cfg.partition.out_dir == "partitions/default"
    assert cfg.dataset.num_nodes == 100_000
    cfg = cfgmod.load(write(tmp_path, "partition:\n  num_parts: 4\n"))
    assert cfg.partition.num_parts == 4
    assert cfg.partition.method == cfgmod.PartitionConfig().method
    assert cfg.dataset == cfgmod.DatasetConfig()


def test_int_is_accepted_for_float_field(tmp_path):
    cfg = cfgmod.load(write(tmp_path, "dataset:\n  avg_degree: 12\n"))
    assert cfg.dataset.avg_degree == 12.0 and isinstance(cfg.dataset.avg_degree, float)


def test_dump_and_load_round_trip(tmp_path):
    cfg = cfgmod.load(None, ["partition.num_parts=4", "train.fanouts=[5, 7]",
                             "model.args={hidden: 32}", "dataset.path=g.npz"])
    cfgmod.dump(cfg, tmp_path / "resolved.yaml")
    back = cfgmod.load(tmp_path / "resolved.yaml")
    assert back == cfg
    assert back.to_dict() == cfg.to_dict() and "source" not in back.to_dict()
    assert set(back.to_dict()) == {f.name for f in dataclasses.fields(cfgmod.Config)} - {"source"}


# --- --set overrides ----------------------------------------------------------------------------

@pytest.mark.parametrize("text, section, key, expected", [
    ("partition.num_parts=8", "partition", "num_parts", 8),
    ("partition.balance_train=false", "partition", "balance_train", False),
    ("dataset.homophily=0.5", "dataset", "homophily", 0.5),
    ("train.fanouts=[5, 10, 15]", "train", "fanouts", [5, 10, 15]),
    ("model.args={hidden: 64, num_layers: 3}", "model", "args", {"hidden": 64, "num_layers": 3}),
    ("dataset.path=null", "dataset", "path", None),
    ("partition.out_dir=parts/a=b", "partition", "out_dir", "parts/a=b"),  # only the first '='
    ("partition.graph_name=", "partition", "graph_name", ""),
])
def test_set_values_are_parsed_as_yaml(text, section, key, expected):
    cfg = cfgmod.load(None, [text])
    assert getattr(getattr(cfg, section), key) == expected


def test_set_overrides_file_and_later_set_wins(tmp_path):
    p = write(tmp_path, "partition:\n  num_parts: 4\n  method: random\n")
    cfg = cfgmod.load(p, ["partition.num_parts=3", "partition.num_parts=5"])
    assert cfg.partition.num_parts == 5
    assert cfg.partition.method == "random"  # keys not overridden keep the file's value


def test_set_result_is_validated(tmp_path):
    p = write(tmp_path, "partition:\n  num_parts: 4\n")
    with pytest.raises(ConfigError) as err:
        cfgmod.load(p, ["partition.num_parts=0"])
    assert str(err.value) == f"{p}: partition.num_parts: expected an integer >= 1, got 0"


@pytest.mark.parametrize("text, message", [
    ("partition.num_parts", "--set partition.num_parts: expected section.key=value"),
    ("num_parts=3", "--set num_parts=3: expected section.key=value"),
    ("a.b.c=1", "--set a.b.c=1: expected section.key=value"),
    (".num_parts=1", "--set .num_parts=1: expected section.key=value"),
    ("foo.x=1", "--set foo.x=1: foo: unknown section; allowed sections: dataset, partition, "
                "model, train, cluster, compression, sar, physics"),
    ("partition.nparts=2", "<defaults>: partition.nparts: unknown key; allowed keys: "
                           "balance_edges, balance_train, graph_name, halo_hops, method, "
                           "num_parts, out_dir, seed"),
    ("partition.num_parts=[1", "<defaults>: partition.num_parts: expected an integer, got '[1'"),
])
def test_bad_set_syntax(text, message):
    with pytest.raises(ConfigError) as err:
        cfgmod.load(None, [text])
    assert str(err.value) == message


# --- file errors: one line naming file, key path and what is allowed ------------------------------

@pytest.mark.parametrize("text, message", [
    ("partition:\n  num_parts: 0\n", "partition.num_parts: expected an integer >= 1, got 0"),
    ("foo: {}\n", "foo: unknown section; allowed sections: dataset, partition, model, train, "
                  "cluster, compression, sar, physics"),
    ("partition:\n  nparts: 2\n", "partition.nparts: unknown key; allowed keys: balance_edges, "
                                  "balance_train, graph_name, halo_hops, method, num_parts, "
                                  "out_dir, seed"),
    ("partition:\n  num_parts: two\n", "partition.num_parts: expected an integer, got 'two'"),
    ("partition:\n  num_parts: 2.5\n", "partition.num_parts: expected an integer, got 2.5"),
    ("partition:\n  num_parts: true\n", "partition.num_parts: expected an integer, got True"),
    ("partition:\n  method: kmeans\n",
     "partition.method: expected one of 'metis', 'random', got 'kmeans'"),
    ("partition:\n  balance_train: 1\n", "partition.balance_train: expected true or false, got 1"),
    ("partition:\n  out_dir: 5\n", "partition.out_dir: expected a string, got 5"),
    ("partition: 3\n", "partition: expected a mapping of keys, got 3"),
    ("dataset:\n  homophily: 1.5\n", "dataset.homophily: expected a number >= 0 and <= 1, got 1.5"),
    ("dataset:\n  avg_degree: -1\n", "dataset.avg_degree: expected a number > 0, got -1.0"),
    ("dataset:\n  num_nodes: 5\n", "dataset.num_nodes: expected an integer >= 10, got 5"),
    ("train:\n  fanouts: [10, 0]\n",
     "train.fanouts: expected a list of integers >= 1, got [10, 0]"),
    ("train:\n  fanouts: 10\n", "train.fanouts: expected a list, got 10"),
    ("model:\n  args: [1]\n", "model.args: expected a mapping, got [1]"),
    ("cluster:\n  ssh_port: 70000\n",
     "cluster.ssh_port: expected an integer >= 1 and <= 65535, got 70000"),
    ("dataset:\n  train_frac: 0.5\n  val_frac: 0.4\n  test_frac: 0.3\n",
     "dataset.train_frac: expected train_frac + val_frac + test_frac <= 1, got 1.2"),
    ("dataset:\n  name: file\n",
     "dataset.path: expected a graph file path when dataset.name is 'file', got None"),
    ("- 1\n- 2\n", "expected a mapping of sections at the top level, got list"),
    ("partition: [1\n", "malformed YAML at line 2: expected ',' or ']', but got '<stream end>'"),
    ("partition:\n  num_parts: 2\n   method: metis\n",
     "malformed YAML at line 3: mapping values are not allowed here"),
])
def test_file_errors_exact_messages(tmp_path, text, message):
    p = write(tmp_path, text)
    with pytest.raises(ConfigError) as err:
        cfgmod.load(p)
    assert str(err.value) == f"{p}: {message}"
    assert "\n" not in str(err.value)


def test_missing_file(tmp_path):
    with pytest.raises(ConfigError) as err:
        cfgmod.load(tmp_path / "nope.yaml")
    assert str(err.value) == f"{tmp_path / 'nope.yaml'}: config file not found"
    with pytest.raises(ConfigError):  # a folder is not a config file either
        cfgmod.load(tmp_path)


# --- CLI: exit code 2, one line on stderr, no traceback -----------------------------------------

def run_partition_cli(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "partition", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"})


@pytest.mark.timeout(240)
def test_partition_cli_config_errors_exit_2_one_line(tmp_path):
    bad = write(tmp_path, "partition:\n  num_parts: 0\n", "bad.yaml")
    cases = [
        (["--config", "bad.yaml"],
         "error: bad.yaml: partition.num_parts: expected an integer >= 1, got 0"),
        (["--config", "missing.yaml"], "error: missing.yaml: config file not found"),
        (["--config", "bad.yaml", "--set", "partition.num_parts=2", "--set", "nonsense"],
         "error: --set nonsense: expected section.key=value"),
    ]
    assert bad.exists()
    for args, line in cases:
        proc = run_partition_cli(args, tmp_path)
        assert proc.returncode == 2, proc.stderr
        assert proc.stderr.strip().splitlines() == [line]
        assert "Traceback" not in proc.stderr + proc.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.yaml"]  # nothing written
