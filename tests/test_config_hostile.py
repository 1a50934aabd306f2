"""Hostile configs cost little: alias bombs, huge files and values, widths no host can hold are
each refused in one short line, fast and in bounded memory, before anything is allocated."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dsgraph import config as cfgmod
from dsgraph.config import limits
from dsgraph.config.limits import short_repr
from dsgraph.config.yamlfile import MAX_ALIAS_CHARS, MAX_ALIAS_VALUES, MAX_CONFIG_BYTES
from dsgraph.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
GIB = 2 ** 30


def write(tmp_path: Path, text: str, name: str = "run.yaml") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def bomb(levels: int = 9, width: int = 9) -> list[str]:
    """A "billion laughs": ``levels`` anchored lists, each ``width`` aliases of the one before
    (``width ** levels`` values once expanded: 387 million for 9 x 9)."""
    lines = [f"l0: &l0 [{', '.join(['lol'] * width)}]"]
    for i in range(1, levels):
        lines.append(f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * width)}]")
    return lines


def flow_bomb(levels: int = 9, width: int = 9) -> str:
    """:func:`bomb` as one flow mapping (for ``--set model.args=...``)."""
    return "{" + ", ".join(bomb(levels, width)) + "}"


# A child process with its address space capped: a value that did expand would die there with
# MemoryError instead of taking this host's memory.
LOAD_IN_CHILD = r"""
import json, resource, sys, time
cap = 512 << 20
resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
from dsgraph import config
from dsgraph.errors import ConfigError
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
t0 = time.perf_counter()
try:
    config.load(sys.argv[1] if sys.argv[1] != "-" else None, sys.argv[2:])
    error = None
except ConfigError as exc:
    error = str(exc)
print(json.dumps({"error": error, "seconds": time.perf_counter() - t0,
                  "rss_growth_mb": (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
                                    - before) / 1024}))
"""


def load_in_child(path: Path | None, sets: list[str] = ()) -> dict:
    """config.load(path, sets) in a memory-capped child: its error, seconds and RSS growth."""
    proc = subprocess.run([sys.executable, "-c", LOAD_IN_CHILD, str(path) if path else "-",
                           *sets], capture_output=True, text=True, timeout=60, env=ENV)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    return json.loads(proc.stdout)


def assert_cheap_refusal(result: dict, starts: str, contains: str) -> None:
    """Refused in one short line, in under 2 s and 200 MB."""
    error = result["error"]
    assert error is not None, "the config was accepted"
    assert error.startswith(starts) and contains in error, error
    assert "\n" not in error and len(error) < 400, error
    assert result["seconds"] < 2.0, result
    assert result["rss_growth_mb"] < 200, result


# --- YAML aliases ----------------------------------------------------------------------------

ALIAS_LIMIT = (f"expected aliases to add at most {MAX_ALIAS_VALUES} values and "
               f"{MAX_ALIAS_CHARS} characters to the document in all, got ")


def test_alias_bomb_in_model_args_file_is_refused_cheaply(tmp_path):
    p = write(tmp_path, "model:\n  name: sage\n  args:\n"
              + "".join(f"    {line}\n" for line in bomb()))
    # l1..l3's aliases add 90 + 819 + 7380 values; l4's first (*l3, 7381 values) passes 10000
    assert_cheap_refusal(load_in_child(p), f"{p}: line 8: alias *l3: ", ALIAS_LIMIT)


def test_alias_bomb_in_fanouts_file_is_refused_cheaply(tmp_path):
    # the anchors inside the list itself: fanouts [[lol...], [*l0...], ...]
    items = ",\n    ".join(line.split(": ", 1)[1] for line in bomb())
    p = write(tmp_path, f"sampled:\n  fanouts: [\n    {items}]\n")
    assert_cheap_refusal(load_in_child(p), f"{p}: line 7: alias *l3: ", ALIAS_LIMIT)


@pytest.mark.parametrize("key", ["model.args", "sampled.fanouts"])
def test_alias_bomb_in_set_is_refused_cheaply(key):
    value = flow_bomb() if key == "model.args" else \
        "[" + ", ".join(line.split(": ", 1)[1] for line in bomb()) + "]"
    result = load_in_child(None, [f"{key}={value}"])
    assert_cheap_refusal(result, f"--set {key}=", "...: line 1: alias *l3: " + ALIAS_LIMIT)


def test_alias_bound_is_exact(tmp_path):
    """Aliases may add up to the bound (a 100-item list repeated 99 times: 9999 values)."""
    def config(repeats: int) -> Path:
        return write(tmp_path, "model:\n  name: sage\n  args:\n"
                     f"    a: &a [{', '.join(['1'] * 100)}]\n"
                     f"    b: [{', '.join(['*a'] * repeats)}]\n")
    cfg = cfgmod.load(config(99))
    assert len(cfg.model.args["b"]) == 99 and cfg.model.args["b"][0] == [1] * 100
    with pytest.raises(ConfigError) as err:
        cfgmod.load(config(100))
    p = tmp_path / "run.yaml"
    assert str(err.value) == (f"{p}: line 5: alias *a: {ALIAS_LIMIT}10100 values and 10000 "
                              f"characters with this one")


def test_alias_character_bound(tmp_path):
    """An alias to a long string counts its characters: 20 x 5000 fit, 21 do not."""
    def config(repeats: int) -> Path:
        return write(tmp_path, f"model:\n  args:\n    s: &s {'x' * 5000}\n"
                     f"    t: [{', '.join(['*s'] * repeats)}]\n")
    assert len(cfgmod.load(config(20)).model.args["t"]) == 20
    with pytest.raises(ConfigError) as err:
        cfgmod.load(config(21))
    assert str(err.value).endswith("got 21 values and 105000 characters with this one")


@pytest.mark.parametrize("text, line", [
    ("model:\n  args: &a {x: *a}\n", 2),
    ("model:\n  args:\n    x: &x [1, [2, *x]]\n", 3),
])
def test_recursive_alias_is_refused(tmp_path, text, line):
    p = write(tmp_path, text)
    with pytest.raises(ConfigError) as err:
        cfgmod.load(p)
    name = "a" if "&a" in text else "x"
    assert str(err.value) == (f"{p}: line {line}: alias *{name}: expected an alias to a value "
                              f"given before it, got one inside the value it names (a "
                              f"recursive value)")


def test_ordinary_anchors_aliases_and_merge_keys_still_load(tmp_path):
    p = write(tmp_path, """\
dataset: {name: synthetic, num_nodes: &nodes 2000, seed: *nodes}
model:
  name: sage
  args:
    <<: &common {num_layers: 2, dropout: 0.1}
    hidden: 64
sampled:
  fanouts: &fan [5, 5]
train:
  <<: {epochs: 2, lr: 0.5}
  epochs: 4
cluster:
  netns: []
seqagg:
  <<: {chunk_rows: *nodes}
""")
    cfg = cfgmod.load(p)
    assert cfg.model.args == {"num_layers": 2, "dropout": 0.1, "hidden": 64}
    assert cfg.dataset.num_nodes == cfg.dataset.seed == cfg.seqagg.chunk_rows == 2000
    assert (cfg.train.epochs, cfg.train.lr, cfg.sampled.fanouts) == (4, 0.5, [5, 5])
    # the same through --set, and a merge of an aliased mapping
    cfg = cfgmod.load(None, ["model.args={base: &b {hidden: 8}, <<: *b, num_layers: 3}"])
    assert cfg.model.args == {"base": {"hidden": 8}, "hidden": 8, "num_layers": 3}


# --- sizes of what is read -----------------------------------------------------------------------

def test_config_file_larger_than_the_bound_is_refused_unread(tmp_path):
    p = tmp_path / "huge.yaml"
    with p.open("wb") as f:  # sparse: 5 GiB claimed, nothing written
        f.truncate(5 * GIB)
    t0 = time.perf_counter()
    with pytest.raises(ConfigError) as err:
        cfgmod.load(p)
    assert time.perf_counter() - t0 < 1.0
    assert str(err.value) == (f"{p}: expected a config file of at most {MAX_CONFIG_BYTES} bytes "
                              f"(1 MiB), got {5 * GIB} bytes")
    p.write_text("# a comment\n" * (MAX_CONFIG_BYTES // 12 + 1))
    with pytest.raises(ConfigError, match=r"at most 1048576 bytes \(1 MiB\), got 1048584 bytes"):
        cfgmod.load(p)


def test_set_longer_than_the_bound_is_refused():
    text = "model.args.x=" + "y" * 70_000
    with pytest.raises(ConfigError) as err:
        cfgmod.load(None, [text])
    assert str(err.value) == f"--set {text[:97]}...: expected at most 65536 characters, got 70013"


@pytest.mark.parametrize("how", ["file", "set"])
def test_integer_literal_longer_than_100_characters_is_refused(tmp_path, how):
    digits = "9" * 5000
    if how == "file":
        p = write(tmp_path, f"train:\n  epochs: {digits}\n")
        with pytest.raises(ConfigError) as err:
            cfgmod.load(p)
        assert str(err.value) == (f"{p}: line 2: expected an integer of at most 100 characters, "
                                  f"got 5000")
    else:
        with pytest.raises(ConfigError) as err:
            cfgmod.load(None, [f"train.epochs={digits}"])
        assert str(err.value) == (f"--set train.epochs={digits[:84]}...: line 1: expected an "
                                  f"integer of at most 100 characters, got 5000")


def test_scalar_python_cannot_build_is_one_line(tmp_path):
    p = write(tmp_path, "train:\n  out_dir: 2020-13-45\n")
    with pytest.raises(ConfigError) as err:
        cfgmod.load(p)
    assert str(err.value) == (f"{p}: malformed YAML at line 2: cannot read '2020-13-45': month "
                              f"must be in 1..12")
    # a --set value that is not valid YAML stays the string it is
    assert cfgmod.load(None, ["train.out_dir=2020-13-45"]).train.out_dir == "2020-13-45"


def test_huge_integers_from_python_are_one_line():
    """from_dict (no YAML) with integers past float's range: no OverflowError, no 4300-digit
    conversion."""
    with pytest.raises(ConfigError) as err:
        cfgmod.from_dict({"train": {"lr": 10 ** 400}})
    assert str(err.value) == ("<config>: train.lr: expected a number, got <an integer of ~401 "
                              "digits>")
    with pytest.raises(ConfigError) as err:
        cfgmod.from_dict({"train": {"epochs": 10 ** 5000}})
    assert str(err.value) == ("<config>: train.epochs: expected an integer >= 1 and <= 1000000, "
                              "got <an integer of ~5001 digits>")


# --- quoting values ------------------------------------------------------------------------

def test_short_repr():
    for value in ([10, 0], {"a": [1, (2,)]}, (), (1,), "x", 1.5, None, True, b"ab", {}, -3):
        assert short_repr(value) == repr(value)
    assert short_repr("x" * 1000) == "'" + "x" * 96 + "..."
    long = short_repr(list(range(10 ** 6)))
    assert len(long) == 100 and long.startswith("[0, 1, 2, ") and long.endswith("...")
    assert short_repr(10 ** 1000) == "<an integer of ~1001 digits>"
    nested = []
    for _ in range(10_000):  # deeper than Python's stack: only the shown part is walked
        nested = [nested]
    assert short_repr(nested) == "[" * 97 + "..."


@pytest.mark.parametrize("sets, key", [
    (["partition.num_parts=" + "x" * 10_000], "partition.num_parts"),
    (["sampled.fanouts=[" + "1, " * 500 + "0]"], "sampled.fanouts"),
    (["dataset.path=" + "/p" * 10_000], "dataset.path"),
    (["train.mode=" + "m" * 10_000], "train.mode"),
    (["model.args=" + "[" + "1, " * 10_000 + "1]"], "model.args"),
    (["cluster.netns=[" + "a, " * 5000 + "b]", "cluster.ip_config=x"], "cluster.netns"),
    (["partition." + "k" * 10_000 + "=1"], "partition.kkkk"),
    (["k" * 10_000 + ".x=1"], "--set kkkk"),
    (["dataset.name=file", "dataset.path=x", "dataset.split=[" + "0.1, " * 5000 + "0]"],
     "dataset.split"),
])
def test_long_values_are_cut_in_messages(sets, key):
    with pytest.raises(ConfigError) as err:
        cfgmod.load(None, sets)
    message = str(err.value)
    assert key in message and "..." in message and "\n" not in message
    assert len(message) < 400, message


def test_long_values_are_cut_in_model_errors():
    from dsgraph.models.registry import build_model, resolve
    with pytest.raises(ConfigError) as err:
        resolve("x" * 100_000)
    assert len(str(err.value)) < 300 and str(err.value).endswith("...")
    with pytest.raises(ConfigError) as err:
        build_model("mlp", 4, 2, {"hidden": 8, "bogus" * 50_000: list(range(100_000))})
    message = str(err.value)
    assert message.startswith("model.args.bogusbogus") and "..." in message
    assert "takes no argument 'bogusbogus" in message and len(message) < 400
    with pytest.raises(ConfigError) as err:  # a value the constructor refuses: quoted cut
        build_model("sage", 4, 2, {"hidden": 8, "aggregator": "x" * 100_000})
    message = str(err.value)
    assert message.startswith("model.args: GraphSAGE(in_feats=4, num_classes=2, **{'hidden': 8, "
                              "'aggregator': 'xxx")
    assert "..." in message and len(message) < 400


def test_file_error_quoting_a_huge_value_stays_short(tmp_path):
    """A value as large as the loader allows, quoted whole before, is cut now."""
    p = write(tmp_path, "partition:\n  num_parts: [" + "123456789, " * 20_000 + "1]\n")
    with pytest.raises(ConfigError) as err:
        cfgmod.load(p)
    assert str(err.value) == (f"{p}: partition.num_parts: expected an integer, got "
                              f"{short_repr([123456789] * 20_001)}")
    assert len(str(err.value)) < 100 + len(str(p)) + 60


# --- size-like settings ----------------------------------------------------------------------

@pytest.mark.parametrize("sets, message", [
    (["model.args.hidden=1048577"],
     "model.args.hidden: expected an integer <= 1048576, got 1048577"),
    (["model.name=mpnn", "model.args.width=2000000"],
     "model.args.width: expected an integer <= 1048576, got 2000000"),
    (["model.args.kernel_hidden=2000000"],
     "model.args.kernel_hidden: expected an integer <= 1048576, got 2000000"),
    (["model.name=gat", "model.args.heads=1025"],
     "model.args.heads: expected an integer <= 1024, got 1025"),
    (["model.args.num_layers=1025"],
     "model.args.num_layers: expected an integer <= 1024, got 1025"),
    (["model.name=mymodels.net:Net", "model.args.layers=5000"],  # a plug-in: the known names
     "model.args.layers: expected an integer <= 1024, got 5000"),
    (["sampled.fanouts=[10, 1000001]"],
     "sampled.fanouts: expected a list of integers >= 1 and <= 1000000, got [10, 1000001]"),
    (["sampled.fanouts=[" + "2, " * 1024 + "2]"],
     "sampled.fanouts: expected a list of at most 1024 items, got 1025 items"),
    (["sampled.batch_size=100000001"],
     "sampled.batch_size: expected an integer >= 1 and <= 100000000, got 100000001"),
    (["sampled.eval_batch_size=100000001"],
     "sampled.eval_batch_size: expected an integer >= 1 and <= 100000000, got 100000001"),
    (["sampled.prefetch=257"], "sampled.prefetch: expected an integer >= 0 and <= 256, got 257"),
    (["sampled.feature_memory_mb=.inf"],
     "sampled.feature_memory_mb: expected a number >= 0 and <= 1073741824, got inf"),
    (["cluster.memory_limit_mb=.inf"],
     "cluster.memory_limit_mb: expected a number >= 0 and <= 1073741824, got inf"),
    (["seqagg.chunk_rows=2147483649"],
     "seqagg.chunk_rows: expected an integer >= 0 and <= 2147483648, got 2147483649"),
    (["compression.block_size=8192"],
     "compression.block_size: expected an integer >= 32 and <= 4096, got 8192"),
    (["train.epochs=1000001"],
     "train.epochs: expected an integer >= 1 and <= 1000000, got 1000001"),
    (["train.timeout_s=2", "train.epochs=2001"],
     "train.epochs: expected at most 2000 epochs within train.timeout_s 2 (an epoch takes at "
     "least 1 ms), got 2001"),
    (["train.timeout_s=.inf"], "train.timeout_s: expected a number > 0 and <= 10000000, got inf"),
    (["train.collective_timeout_s=1.0e+300"],
     "train.collective_timeout_s: expected a number > 0 and <= 10000000, got 1e+300"),
    (["dataset.num_nodes=2147483649"],
     "dataset.num_nodes: expected an integer >= 10 and <= 2147483648, got 2147483649"),
    (["dataset.feat_dim=1048577"],
     "dataset.feat_dim: expected an integer >= 1 and <= 1048576, got 1048577"),
    (["dataset.num_classes=1048577"],
     "dataset.num_classes: expected an integer >= 2 and <= 1048576, got 1048577"),
    (["dataset.avg_degree=1.0e+7"],
     "dataset.avg_degree: expected a number > 0 and <= 1000000, got 10000000.0"),
    (["partition.num_parts=4097"],
     "partition.num_parts: expected an integer >= 1 and <= 4096, got 4097"),
    (["partition.halo_hops=65"], "partition.halo_hops: expected an integer >= 1 and <= 64, got 65"),
    (["cluster.trainers_per_machine=1025"],
     "cluster.trainers_per_machine: expected an integer >= 1 and <= 1024, got 1025"),
    (["train.mode=dsmpnn", "dataset.name=airfoil", "physics.points=10000001"],
     "physics.points: expected an integer >= 100 and <= 10000000, got 10000001"),
    (["train.mode=dsmpnn", "dataset.name=darcy", "physics.train_samples=1000001"],
     "physics.train_samples: expected an integer >= 1 and <= 1000000, got 1000001"),
])
def test_each_size_setting_has_a_ceiling(sets, message):
    with pytest.raises(ConfigError) as err:
        cfgmod.load(None, sets)
    assert str(err.value) == f"--set {message}"  # each named key is a --set's


def test_ranges_below_are_reported_as_before():
    """A ceiling is named only when it is passed: the range messages users know stay."""
    with pytest.raises(ConfigError) as err:
        cfgmod.load(None, ["physics.batch_fields=0"])
    assert str(err.value) == "--set physics.batch_fields: expected an integer >= 1, got 0"


@pytest.fixture
def small_host(monkeypatch):
    """This host seen as 1 GiB available, 2 GiB in all."""
    monkeypatch.setattr(limits, "host_memory", lambda: (GIB, 2 * GIB))


@pytest.mark.parametrize("sets, message", [
    # 2 x 16384^2 float32 weights (fc_self, fc_neigh) in the middle layer alone: 2 GiB
    (["model.args={hidden: 16384, num_layers: 3}"],
     "model.args.hidden: 16384 needs ~2.0 GiB of weights (sage, dataset.feat_dim 100), more "
     "than this host's 1.0 GiB available"),
    (["model.name=gcn", "model.args={hidden: 16384, num_layers: 3}", "train.mode=sar",
      "dataset.name=ogb", "dataset.path=x"],  # in_feats unknown: the middle layer is enough
     "model.args.hidden: 16384 needs ~1.0 GiB of weights (gcn), more than this host's 1.0 GiB "
     "available"),
    (["model.name=gat", "model.args={hidden: 1024, heads: 16, num_layers: 3}"],
     "model.args.hidden: 1024 needs ~1.0 GiB of weights (gat, dataset.feat_dim 100), more than "
     "this host's 1.0 GiB available"),
    (["train.mode=dsmpnn", "dataset.name=darcy", "model.name=mpnn",
      "model.args={width: 512, kernel_hidden: 1024}"],  # 3 kernels of 1024 x 512^2
     "model.args.width: 512 needs ~3.0 GiB of weights (mpnn), more than this host's 1.0 GiB "
     "available"),
    (["dataset.num_nodes=10000000"],
     "dataset.num_nodes: 10000000 makes the synthetic graph ~5.3 GiB, more than this host's "
     "2.0 GiB of memory"),
    (["dataset.feat_dim=10000", "model.args.hidden=4"],
     "dataset.feat_dim: 10000 makes the synthetic graph ~3.7 GiB, more than this host's 2.0 GiB "
     "of memory"),
    (["train.mode=dsmpnn", "dataset.name=darcy", "physics.train_samples=100000"],
     "physics.train_samples: 100000 makes the Darcy fields ~3.1 GiB, more than this host's "
     "2.0 GiB of memory"),
    (["train.mode=dsmpnn", "dataset.name=airfoil", "physics.points=1000000"],
     "physics.points: 1000000 makes the airfoil fields ~4.5 GiB, more than this host's 2.0 GiB "
     "of memory"),
])
def test_sizes_past_this_hosts_memory_are_refused(small_host, sets, message):
    with pytest.raises(ConfigError) as err:
        cfgmod.load(None, sets)
    assert str(err.value) == f"--set {message}"  # each named key is a --set's


def test_sizes_within_this_hosts_memory_load(small_host):
    cfgmod.load(ROOT / "configs" / "default.yaml")
    cfgmod.load(None, ["model.args={hidden: 8192, num_layers: 3}"])  # 0.5 GiB
    # a plug-in model's widths are its own (only the ceilings apply)
    cfgmod.load(None, ["model.name=mymodels.net:Net", "model.args={hidden: 1048576, "
                                                      "num_layers: 1024}"])


def test_float64_weights_count_twice(small_host):
    cfgmod.load(None, ["model.args={hidden: 8192, num_layers: 3}", "train.mode=sar"])
    with pytest.raises(ConfigError, match="needs ~1.0 GiB of weights"):
        cfgmod.load(None, ["model.args={hidden: 8192, num_layers: 3}", "train.mode=sar",
                           "train.dtype=float64"])


@pytest.mark.parametrize("name, args", [
    ("sage", {"hidden": 16, "num_layers": 3}),
    ("sage", {"hidden": 16, "num_layers": 1, "aggregator": "gcn"}),
    ("sage", {"hidden": 16, "num_layers": 2, "aggregator": "pool"}),
    ("gcn", {"hidden": 32, "num_layers": 4}),
    ("mlp", {}),
    ("gat", {"hidden": 8, "heads": 3, "num_layers": 3}),
    ("gat", {"num_layers": 1}),
    ("mpnn", {"width": 8, "layers": 2, "kernel_hidden": 6}),
    ("mpnn", {"width": 8, "num_layers": 5, "kernel_hidden": 6}),
    ("mpnn", {"shared": True}),
    ("dsgraph.models.gnn:GraphSAGE", {"hidden": 12}),
])
def test_weight_estimate_is_a_close_lower_bound(name, args):
    """The estimate refuses only models that are at least that big, and is not far off."""
    from dsgraph.models.registry import build_model
    cfg = cfgmod.load(None, ["dataset.feat_dim=20", "dataset.num_classes=7",
                             f"model.name={name}", f"model.args={json.dumps(args)}"])
    nbytes, _, _ = limits.weight_estimate(cfg)
    params = sum(p.numel() for p in build_model(name, 20, 7, args).parameters())
    assert nbytes / 4 <= params <= 1.6 * nbytes / 4, (nbytes / 4, params)


@pytest.mark.parametrize("name, args", [
    ("sage", {"hidden": 2 ** 20, "num_layers": 3}),
    ("gat", {"hidden": 2 ** 20, "heads": 1024, "num_layers": 4}),
    ("mpnn", {"width": 2 ** 20, "kernel_hidden": 2 ** 20, "layers": 5}),
])
def test_launcher_probe_is_tiny_whatever_the_widths(name, args):
    from dsgraph.models.gnn import layer_count
    from dsgraph.models.registry import probe_model
    model = probe_model(name, args)
    assert sum(p.numel() for p in model.parameters()) < 50_000
    assert layer_count(model) == args.get("num_layers", args.get("layers"))


# --- the launcher, end to end ----------------------------------------------------------------

# Runs a command and reports the peak RSS of it (the only child waited for here).
MEASURE = r"""
import json, resource, subprocess, sys, time
t0 = time.perf_counter()
p = subprocess.run(sys.argv[1:], capture_output=True, text=True, timeout=120)
print(json.dumps({"rc": p.returncode, "stderr": p.stderr, "stdout": p.stdout,
                  "seconds": time.perf_counter() - t0,
                  "peak_mb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024}))
"""


def run_train(args: list[str], cwd: Path) -> dict:
    """``python -m train ARGS`` in ``cwd``: exit code, output, seconds and peak RSS."""
    proc = subprocess.run([sys.executable, "-c", MEASURE, sys.executable, "-m", "train", *args],
                          cwd=cwd, capture_output=True, text=True, timeout=180, env=ENV)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


@pytest.mark.timeout(240)
def test_train_refuses_huge_hidden_and_alias_bombs_before_allocating(tmp_path):
    bombed = write(tmp_path, "model:\n  name: sage\n  args:\n"
                   + "".join(f"    {line}\n" for line in bomb()), "bomb.yaml")
    cases = [
        (["--config", str(ROOT / "configs" / "default.yaml"), "--set",
          "model.args.hidden=1000000000"],
         f"error: --set model.args.hidden: expected an integer "
         f"<= 1048576, got 1000000000"),
        (["--config", str(bombed)], f"error: {bombed}: line 8: alias *l3: {ALIAS_LIMIT}"),
        (["--config", str(ROOT / "configs" / "default.yaml"), "--set",
          f"model.args={flow_bomb()}"], f"error: --set model.args={{l0: &l0 [lol, lol,"),
    ]
    for args, start in cases:
        result = run_train(args, tmp_path)
        lines = result["stderr"].strip().splitlines()
        assert result["rc"] == 2, result["stderr"][-3000:]
        assert len(lines) == 1 and lines[0].startswith(start), lines
        assert "Traceback" not in result["stderr"] + result["stdout"]
        # refused before torch and DGL are imported (with them a process holds ~0.4 GB); a
        # 1e9-wide layer would be 16 GB
        assert result["peak_mb"] < 200, result["peak_mb"]
        assert result["seconds"] < 30, result["seconds"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bomb.yaml"]  # nothing written
