"""Markers and fixtures of the multi-process tests (tests/dist).

Markers: every test here is marked ``slow`` unless it is decorated ``@pytest.mark.fast`` (the
marker is registered in setup.cfg): the unit-level ones (no process started) and one end-to-end
test per train mode (sampled, sar, dsmpnn). ``make test-fast`` (``pytest -m "not slow"``) runs
those and the tests of tests/ not marked ``slow`` themselves; ``make test`` runs everything. A
new test here is slow until it is decorated ``fast``, so the quick subset grows only on purpose;
the marker travels with the function, so renaming a test keeps its place in the subset.

Fixtures: ``two_hosts`` (two hosts with their own addresses on one machine), and finished runs
that several tests only read, each trained once per test process (``make test`` runs files in
two, pytest-xdist ``--dist loadfile``; a test that changes a run, e.g. resumes it, works on a
copy).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

import pytest

from dsgraph.cluster.netns import HostsUnavailable, emulated_hosts
from tests.dist import jobs

HERE = Path(__file__).resolve().parent


@pytest.hookimpl(tryfirst=True)  # before -m deselects by marker
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark ``slow`` every test of tests/dist not decorated ``@pytest.mark.fast``."""
    for item in items:
        if Path(item.path).parent == HERE and item.get_closest_marker("fast") is None:
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
