"""Run configuration: defaults, YAML parsing, --set overrides and the exact one-line errors."""
from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import pytest

from dsgraph import config as cfgmod
from dsgraph.cluster import preload
from dsgraph.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]
SECTIONS = ("dataset, partition, model, train, task, sampled, sar, physics, seqagg, compression, "
            "cluster")


def blamed(sets: list[str], message: str) -> str:
    """The one line expected for ``message`` (``key: ...``) with no config file: a key one of
    ``sets`` gave is named as the --set's, any other as the defaults'."""
    key = message.split(": ", 1)[0]
    given = {s.split("=", 1)[0] for s in sets}
    return f"--set {message}" if key in given else f"<defaults>: {message}"


def write(tmp_path: Path, text: str, name: str = "run.yaml") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


# --- defaults -----------------------------------------------------------------------------------

def test_defaults_without_file_are_dataclass_defaults():
    cfg = cfgmod.load(None)
    assert cfg == cfgmod.Config()
    assert cfg.partition.num_parts == 2 and cfg.partition.method == "metis"
    assert cfg.dataset.name == "synthetic" and cfg.sampled.fanouts == [10, 25]
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


@pytest.mark.parametrize("path", sorted((ROOT / "configs").glob("*.yaml")), ids=lambda p: p.name)
def test_every_shipped_config_loads(path):
    """Each file under configs/ is a valid config (the README points users at them)."""
    assert cfgmod.load(path).source == str(path)


def test_int_is_accepted_for_float_field(tmp_path):
    cfg = cfgmod.load(write(tmp_path, "dataset:\n  avg_degree: 12\n"))
    assert cfg.dataset.avg_degree == 12.0 and isinstance(cfg.dataset.avg_degree, float)


def test_dump_and_load_round_trip(tmp_path):
    cfg = cfgmod.load(None, ["partition.num_parts=4", "sampled.fanouts=[5, 7]",
                             "model.args={hidden: 32}", "dataset.name=file",
                             "dataset.path=g.npz", "dataset.split=[0.5, 0.25, 0.25]",
                             "dataset.add_reverse_edges=true"])
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
    ("sampled.fanouts=[5, 10, 15]", "sampled", "fanouts", [5, 10, 15]),
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
    # the value the error quotes is the --set's, not the file's: the --set is named
    assert str(err.value) == "--set partition.num_parts: expected an integer >= 1, got 0"


@pytest.mark.parametrize("text, message", [
    ("partition.num_parts", "--set partition.num_parts: expected section.key=value"),
    ("num_parts=3", "--set num_parts=3: expected section.key=value"),
    ("a.b.c=1", f"--set a.b.c=1: a: unknown section; allowed sections: {SECTIONS}"),
    (".num_parts=1", "--set .num_parts=1: expected section.key=value"),
    ("foo.x=1", f"--set foo.x=1: foo: unknown section; allowed sections: {SECTIONS}"),
    ("partition.nparts=2", "--set partition.nparts: unknown key; allowed keys: "
                           "balance_edges, balance_train, graph_name, halo_hops, memory_mb, "
                           "method, num_parts, out_dir, pipeline, seed, workers"),
    ("partition.num_parts=[1", "--set partition.num_parts: expected an integer, got '[1'"),
])
def test_bad_set_syntax(text, message):
    with pytest.raises(ConfigError) as err:
        cfgmod.load(None, [text])
    assert str(err.value) == message


# --- file errors: one line naming file, key path and what is allowed ------------------------------

@pytest.mark.parametrize("text, message", [
    ("partition:\n  num_parts: 0\n", "partition.num_parts: expected an integer >= 1, got 0"),
    ("foo: {}\n", f"foo: unknown section; allowed sections: {SECTIONS}"),
    ("partition:\n  nparts: 2\n", "partition.nparts: unknown key; allowed keys: balance_edges, "
                                  "balance_train, graph_name, halo_hops, memory_mb, method, "
                                  "num_parts, out_dir, pipeline, seed, workers"),
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
    ("sampled:\n  fanouts: [10, 0]\n",
     "sampled.fanouts: expected a list of integers >= 1, got [10, 0]"),
    ("sampled:\n  fanouts: 10\n", "sampled.fanouts: expected a list, got 10"),
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
    return preload.run_command([sys.executable, "-m", "partition", *args],
                               {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"},
                               str(cwd), timeout=120)


@pytest.mark.timeout(240)
def test_partition_cli_config_errors_exit_2_one_line(tmp_path):
    bad = write(tmp_path, "partition:\n  num_parts: 0\n", "bad.yaml")
    cases = [
        (["--config", "bad.yaml"],
         "error: bad.yaml: partition.num_parts: expected an integer >= 1, got 0"),
        (["--config", "missing.yaml"], "error: missing.yaml: config file not found"),
        (["--config", "bad.yaml", "--set", "partition.num_parts=2", "--set", "nonsense"],
         "error: --set nonsense: expected section.key=value"),
        (["--config", "bad.yaml", "--set", "partition.num_parts=2", "--set",
          "dataset.path=nowhere.npz"],
         "error: --set dataset.path: dataset 'synthetic' does not read it (only file, csv, "
         "ogb, chunked, fields do); remove it or set dataset.name, got 'nowhere.npz'"),
    ]
    assert bad.exists()
    for args, line in cases:
        proc = run_partition_cli(args, tmp_path)
        assert proc.returncode == 2, proc.stderr
        assert proc.stderr.strip().splitlines() == [line]
        assert "Traceback" not in proc.stderr + proc.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.yaml"]  # nothing written


# --- nested overrides, moved keys, cross-field rules, the README table --------------------------

def test_nested_set_reaches_into_model_args(tmp_path):
    p = write(tmp_path, "model:\n  name: sage\n  args: {hidden: 16, num_layers: 3}\n")
    cfg = cfgmod.load(p, ["model.args.hidden=64", "model.args.aggregator=pool"])
    assert cfg.model.args == {"hidden": 64, "num_layers": 3, "aggregator": "pool"}
    assert cfgmod.load(None, ["model.args.hidden=8"]).model.args == {"hidden": 8}


def test_nested_set_into_a_scalar_is_one_line_error(tmp_path):
    p = write(tmp_path, "partition:\n  num_parts: 2\n")
    with pytest.raises(ConfigError) as err:
        cfgmod.load(p, ["partition.num_parts.x=1"])
    assert str(err.value) == ("--set partition.num_parts.x=1: partition.num_parts: expected a "
                              "mapping to set 'x' in, got 2")


@pytest.mark.parametrize("text, message", [
    ("train:\n  fanouts: [5]\n", "train.fanouts: this key is now sampled.fanouts"),
    ("cluster:\n  timeout_s: 9\n", "cluster.timeout_s: this key is now train.timeout_s"),
    ("physics:\n  grad_clip: 1\n", "physics.grad_clip: this key is now train.grad_clip"),
    ("sar:\n  chunk_rows: 64\n", "sar.chunk_rows: this key is now seqagg.chunk_rows"),
    ("train:\n  task: node_regression\n", "train.task: this key is now task.name"),
    ("sampled:\n  remote_cache_mb: 64\n", "sampled.remote_cache_mb: this key was replaced by "
     "sampled.feature_memory_mb (one budget for every remote row a trainer holds)"),
    ("sampled:\n  copy_own_features: true\n", "sampled.copy_own_features: this key was "
     "removed: own rows are read from shared memory, never copied"),
])
def test_moved_keys_say_where_they_went(tmp_path, text, message):
    p = write(tmp_path, text)
    with pytest.raises(ConfigError) as err:
        cfgmod.load(p)
    assert str(err.value) == f"{p}: {message}"


@pytest.mark.parametrize("sets, message", [
    (["train.mode=fullgraph"],
     "train.mode: expected one of 'sampled', 'sar', 'dsmpnn', got 'fullgraph'"),
    (["train.mode=dsmpnn"],
     "dataset.name: expected one of 'darcy', 'airfoil', 'fields' for train.mode 'dsmpnn', got "
     "'synthetic'"),
    (["dataset.name=darcy"],
     "dataset.name: expected one of 'synthetic', 'file', 'csv', 'ogb', 'chunked', "
     "'synthetic_hetero' for train.mode 'sampled', got 'darcy'"),
    (["train.dtype=float64"],
     "train.dtype: expected 'float32' for train.mode 'sampled' (DistGraph serves float32 "
     "features), got 'float64'"),
    (["train.mode=dsmpnn", "dataset.name=airfoil", "physics.workers=4", "physics.sampled_nodes=3"],
     "physics.sampled_nodes: expected >= physics.workers (4), got 3"),
    (["compression.levels=optimal", "compression.bits=4"],
     "compression.levels: 'optimal' needs compression.bits 2, got 4"),
    (["cluster.netns=[a]", "cluster.ip_config=ips.txt"],
     "cluster.netns: expected one namespace per machine (2), got ['a']"),
    (["cluster.netns=[a, b]"],
     "cluster.ip_config: expected the machines' addresses (one 'IP [PORT]' line per namespace) "
     "with cluster.netns, got null"),
    (["cluster.netns_shm=true"],
     "cluster.netns_shm: true needs cluster.netns (one network namespace per machine), got none"),
    (["sampled.rematerialize=true", "sampled.fanouts=[10, 5]", "sampled.remat_layers=3"],
     "sampled.remat_layers: expected at most one per layer (2 fanouts), got 3"),
])
def test_cross_field_rules(sets, message):
    with pytest.raises(ConfigError) as err:
        cfgmod.load(None, sets)
    assert str(err.value) == blamed(sets, message)


def test_process_count_has_one_home_per_mode():
    cfg = cfgmod.load(None, ["partition.num_parts=3", "cluster.trainers_per_machine=2"])
    assert (cfg.num_workers, cfg.num_machines) == (6, 3)
    cfg = cfgmod.load(None, ["train.mode=sar", "partition.num_parts=3"])
    assert (cfg.num_workers, cfg.num_machines) == (3, 3)
    cfg = cfgmod.load(None, ["train.mode=dsmpnn", "dataset.name=darcy", "physics.workers=4"])
    assert (cfg.num_workers, cfg.num_machines) == (4, 4)


def test_non_utf8_config_is_one_line_error(tmp_path):
    p = tmp_path / "latin1.yaml"
    p.write_bytes("train:\n  out_dir: caf\xe9\n".encode("latin-1"))
    with pytest.raises(ConfigError) as err:
        cfgmod.load(p)
    assert str(err.value).startswith(f"{p}: expected UTF-8 text") and "\n" not in str(err.value)


@pytest.mark.parametrize("data, message", [
    (b"train:\n  epochs: 2\n\x00\x01\x02", "expected a YAML text file, got binary data (a NUL "
                                          "byte at offset 19)"),
    (b"\x1f\x8b\x08gzip", "expected UTF-8 text, got undecodable byte at offset 1"),
    (b"train:\n  epochs: 2\x07\n", "expected YAML text, got the control character '\\x07' at "
                                  "offset 18"),
    (b"train:\n\tepochs: 2\n", "malformed YAML at line 2: found character '\\t' that cannot "
                             "start any token"),
    (b"train:\n  epochs: 2\n  epochs: 3\n",
     "malformed YAML at line 3: duplicate key 'epochs' (first given at line 2)"),
    (b"train: {}\npartition: {}\ntrain: {}\n",
     "malformed YAML at line 3: duplicate key 'train' (first given at line 1)"),
    (b"train: {}\n---\npartition: {}\n",
     "malformed YAML at line 2: expected a single document in the stream, but found another "
     "document"),
    (b"just a sentence\n", "expected a mapping of sections at the top level, got str"),
    (b"1: {}\ntrain: {}\n", f"1: unknown section; allowed sections: {SECTIONS}"),
    (b"partition:\n  3: x\n  num_parts: 2\n", "partition.3: unknown key; allowed keys: "
                                              "balance_edges, balance_train, graph_name, "
                                              "halo_hops, memory_mb, method, num_parts, "
                                              "out_dir, pipeline, seed, workers"),
])
def test_every_broken_yaml_is_one_line(tmp_path, data, message):
    p = tmp_path / "run.yaml"
    p.write_bytes(data)
    with pytest.raises(ConfigError) as err:
        cfgmod.load(p)
    assert str(err.value) == f"{p}: {message}"


def test_yaml_merge_keys_may_override(tmp_path):
    # "<<" merges are the one way YAML gives a key twice on purpose: the explicit key wins
    text = "train:\n  <<: {epochs: 2, lr: 0.5}\n  epochs: 4\n"
    cfg = cfgmod.load(write(tmp_path, text))
    assert (cfg.train.epochs, cfg.train.lr) == (4, 0.5)


def test_unreadable_config_is_one_line(tmp_path):
    if os.geteuid() == 0:
        pytest.skip("root reads any file")
    p = write(tmp_path, "train: {}\n")
    p.chmod(0)
    with pytest.raises(ConfigError) as err:
        cfgmod.load(p)
    assert str(err.value) == f"{p}: cannot read the config file (Permission denied)"


@pytest.mark.parametrize("sets, message", [
    (["dataset.path=g.npz"], "dataset.path: dataset 'synthetic' does not read it (only file, "
                             "csv, ogb, chunked, fields do); remove it or set dataset.name, got 'g.npz'"),
    (["train.mode=dsmpnn", "dataset.name=darcy", "dataset.path=/does/not/exist"],
     "dataset.path: dataset 'darcy' does not read it (only file, csv, ogb, chunked, fields do); remove it "
     "or set dataset.name, got '/does/not/exist'"),
    (["train.mode=dsmpnn", "dataset.name=airfoil", "dataset.split=[0.5, 0.5, 0]"],
     "dataset.split: dataset 'airfoil' does not read it (only file, csv, ogb, fields, chunked "
     "do); remove it or set dataset.name, got [0.5, 0.5, 0]"),
    (["dataset.add_reverse_edges=true"],
     "dataset.add_reverse_edges: dataset 'synthetic' does not read it (only file, csv, ogb, "
     "synthetic_hetero, chunked do); remove it or set dataset.name, got True"),
    (["dataset.name=ogb"], "dataset.path: expected an OGB dataset folder (holding raw/ and "
                           "split/) when dataset.name is 'ogb', got None"),
    (["dataset.name=csv", "dataset.path="], "dataset.path: expected a DGL CSV dataset folder "
                                            "(holding meta.yaml) when dataset.name is 'csv', "
                                            "got ''"),
    (["dataset.name=file", "dataset.path=g.npz", "dataset.split=[0.5, 0.5]"],
     "dataset.split: expected [train, val, test] fractions, each >= 0, train > 0, summing to "
     "<= 1, got [0.5, 0.5]"),
    (["dataset.name=file", "dataset.path=g.npz", "dataset.split=[0.8, 0.2, 0.1]"],
     "dataset.split: expected [train, val, test] fractions, each >= 0, train > 0, summing to "
     "<= 1, got [0.8, 0.2, 0.1]"),
    (["dataset.name=file", "dataset.path=g.npz", "dataset.split=[0, 0.5, 0.5]"],
     "dataset.split: expected [train, val, test] fractions, each >= 0, train > 0, summing to "
     "<= 1, got [0, 0.5, 0.5]"),
    (["dataset.name=file", "dataset.path=g.npz", "dataset.split=[0.5, -0.1, 0.1]"],
     "dataset.split: expected [train, val, test] fractions, each >= 0, train > 0, summing to "
     "<= 1, got [0.5, -0.1, 0.1]"),
    (["dataset.name=file", "dataset.path=g.npz", "dataset.split=[0.5, true, 0.1]"],
     "dataset.split: expected [train, val, test] fractions, each >= 0, train > 0, summing to "
     "<= 1, got [0.5, True, 0.1]"),
    (["dataset.name=file", "dataset.path=g.npz", "dataset.split=0.8"],
     "dataset.split: expected a list, got 0.8"),
    (["dataset.name=ogb", "dataset.path=x", "dataset.add_reverse_edges=1"],
     "dataset.add_reverse_edges: expected one of 'auto', true, false, got 1"),
    (["dataset.num_nodes=10", "dataset.train_frac=0.04"],
     "dataset.train_frac: 0.04 of dataset.num_nodes 10 rounds to no training node; expected "
     "train_frac * num_nodes > 0.5"),
])
def test_dataset_inputs_only_where_read(sets, message):
    with pytest.raises(ConfigError) as err:
        cfgmod.load(None, sets)
    assert str(err.value) == blamed(sets, message)


def test_file_dataset_settings_accepted():
    cfg = cfgmod.load(None, ["dataset.name=ogb", "dataset.path=/data/ogbn_arxiv",
                             "dataset.split=[0.8, 0.1, 0.1]", "dataset.add_reverse_edges=false"])
    d = cfg.dataset
    assert (d.name, d.path, d.split, d.add_reverse_edges) == ("ogb", "/data/ogbn_arxiv",
                                                              [0.8, 0.1, 0.1], False)
    assert cfgmod.load(None, ["dataset.name=csv", "dataset.path=x",
                              "dataset.add_reverse_edges=auto"]).dataset.add_reverse_edges == "auto"
    # a path that does not exist is the loader's error (workers on other hosts never read it)
    assert cfgmod.load(None, ["dataset.name=file", "dataset.path=/nope.npz"]).dataset.path


def test_every_field_has_a_doc_and_the_reference_table_is_current():
    from dsgraph.config.schema import reference_rows
    rows = reference_rows(cfgmod.Config)
    assert all(doc for _, _, doc in rows), [key for key, _, doc in rows if not doc]
    page = (ROOT / "docs" / "configuration.md").read_text()
    start, end = "<!-- config-table -->\n", "\n<!-- /config-table -->"
    assert start in page and end in page, "docs/configuration.md has no generated table"
    table = page.split(start, 1)[1].split(end, 1)[0]
    assert table == cfgmod.reference_table(), (
        "docs/configuration.md's table differs from the config fields; regenerate it with "
        "`python -c 'from dsgraph import config; print(config.reference_table())'`")


def test_config_imports_no_seed_package():
    import ast
    for path in (ROOT / "dsgraph" / "config").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                names = [node.module or ""] if isinstance(node, ast.ImportFrom) else \
                    [a.name for a in node.names]
                for name in names:
                    assert not name.startswith(("dsgraph.compress", "dsgraph.sar",
                                                "dsgraph.physics", "dsgraph.data",
                                                "dsgraph.cluster", "dsgraph.models")), (path, name)
