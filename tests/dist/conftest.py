"""Markers and fixtures of the multi-process tests (tests/dist).

Markers: every test here is marked ``slow`` except those :data:`FAST` names: the unit-level ones
(no process started) and one end-to-end test per train mode (sampled, sar, dsmpnn).
``make test-fast`` (``pytest -m "not slow"``) runs those and the tests of tests/ not marked
``slow`` themselves; ``make test`` runs everything. A new test here is slow until it is added
to FAST, so the quick subset grows only on purpose; a name in FAST that its file no longer
defines is reported as a warning.

Fixtures: ``two_hosts`` (two hosts with their own addresses on one machine), and finished runs
that several tests only read, each trained once per session (a test that changes a run, e.g.
resumes it, works on a copy).
"""
from __future__ import annotations

import dataclasses

import warnings
from dataclasses import dataclass
from pathlib import Path

import pytest

from dsgraph.cluster.netns import HostsUnavailable, emulated_hosts
from tests.dist import jobs

HERE = Path(__file__).resolve().parent

FAST = {
    # unit level: in-process, on blocks sampled from a local graph
    "test_sampled_remat.py": {"test_loss_and_gradients_equal_stock",
                              "test_learnable_input_embeddings",
                              "test_later_layer_rematerialized",
                              "test_gat_with_residual_and_activation",
                              "test_composes_with_int2_compression",
                              "test_unsupported_first_layer_is_one_line"},
    "test_stock_link_trainer.py": {"test_stock_trainers_import_no_dsgraph_code",
                                   "test_stock_link_metrics_equal_dsgraphs",
                                   "test_stock_link_inputs_refuse_what_the_stock_trainer_cannot_run"},
    # one end-to-end test per train mode (`python -m train`; the sar and dsmpnn ones resume)
    "test_sampled.py": {"test_plug_in_model_from_user_module"},
    "test_sar_train.py": {"test_train_partition_resume_and_modes_agree"},
    "test_dsmpnn_train.py": {"test_darcy_two_workers_train_resume"},
}


@pytest.hookimpl(tryfirst=True)  # before -m deselects by marker
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark every test of tests/dist that FAST does not name ``slow``."""
    checked = set()
    for item in items:
        path = Path(item.path)
        if path.parent != HERE:
            continue
        fast = FAST.get(path.name, set())
        if path.name not in checked:
            checked.add(path.name)
            stale = sorted(n for n in fast if not hasattr(item.module, n))
            if stale:
                warnings.warn(pytest.PytestConfigWarning(
                    f"tests/dist/conftest.py FAST names {', '.join(stale)}, which {path.name} "
                    f"does not define"))
        if item.originalname not in fast:
            item.add_marker(pytest.mark.slow)


@pytest.fixture
def two_hosts():
    """Two emulated hosts (namespace names, addresses); skipped where they cannot be made."""
    try:
        with emulated_hosts() as hosts:
            yield hosts
    except HostsUnavailable as exc:
        pytest.skip(str(exc))


@dataclass(frozen=True)
class Run:
    """A finished run: its folder, and the config and ``--set`` overrides it was trained with
    (a test's own run with the same settings adds its overrides after these)."""

    path: Path
    config: Path
    sets: tuple[str, ...]
    console: str = ""  # what the job wrote to stderr (the epoch lines, warnings, errors)


@pytest.fixture(scope="session")
def fault_workspace(tmp_path_factory):
    """:func:`benchmarks.faults.prepare`'s workspace (tiny data, partitions, the fault model),
    shared as the reliability report shares it: by the fault matrix (test_faults.py) and the
    run-folder scenarios (test_run_folder_faults.py), each case in a folder of its own."""
    from benchmarks import faults
    return faults.prepare(tmp_path_factory.mktemp("faults"))


@pytest.fixture(scope="session")
def sampled_graph(tmp_path_factory) -> Path:
    """configs/default.yaml's graph at :data:`jobs.SMALL` size in its 2 partitions with 2-hop
    halos (:data:`jobs.SHARED`), under the folder returned; tests train on it
    (:func:`jobs.train_default` with ``size=jobs.SHARED``) into run folders there."""
    root = tmp_path_factory.mktemp("sampled")
    jobs.partition_default(root, size=jobs.SHARED)
    return root


@pytest.fixture(scope="session")
def sampled_run(sampled_graph) -> Run:
    """configs/default.yaml (GraphSAGE, 2 trainers) trained 3 epochs on ``sampled_graph``."""
    run = Run(sampled_graph / "three_epochs", jobs.DEFAULT,
              (*jobs.default_sets(sampled_graph, jobs.SHARED), "train.epochs=3"))
    return dataclasses.replace(run, console=jobs.train(run.config, run.path, *run.sets))


def _darcy_run(root: Path, name: str, *sets: str) -> Run:
    run = Run(root / name, jobs.DARCY,
              (*jobs.DARCY_TINY, f"dataset.cache_dir={root / 'data'}", *sets))
    jobs.train(run.config, run.path, *run.sets)
    return run


@pytest.fixture(scope="session")
def darcy_two_epochs(tmp_path_factory) -> Run:
    """A tiny DS-MPNN run (2 workers, :data:`jobs.DARCY_TINY`) of 2 epochs."""
    return _darcy_run(tmp_path_factory.mktemp("darcy"), "two_epochs", "train.epochs=2")


@pytest.fixture(scope="session")
def darcy_three_epochs(tmp_path_factory) -> Run:
    """The same run as ``darcy_two_epochs`` trained for 3 epochs, its test fields predicted in
    3 timed passes (``physics.infer_passes``)."""
    return _darcy_run(tmp_path_factory.mktemp("darcy"), "three_epochs", "train.epochs=3",
                      "physics.infer_passes=3")
