"""Packaging: only the dsgraph package is installed (no generic top-level names such as train or
predict in site-packages), its commands are console entry points, and the checkout's
``python -m train|partition|predict`` shims run the same ``main``."""
from __future__ import annotations

import configparser
import importlib
import importlib.metadata
import subprocess
import sys
from pathlib import Path

import pytest
import setuptools

ROOT = Path(__file__).resolve().parents[1]
ENTRY_POINTS = {"dsgraph-partition": "dsgraph.cli.partition:main",
                "dsgraph-train": "dsgraph.cli.train:main",
                "dsgraph-predict": "dsgraph.cli.predict:main"}


def _setup_cfg() -> configparser.ConfigParser:
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    return cfg


def test_only_dsgraph_is_installed():
    include = [p.strip() for p in _setup_cfg()["options.packages.find"]["include"].split(",")]
    found = setuptools.find_packages(where=str(ROOT), include=include)
    assert found and all(p == "dsgraph" or p.startswith("dsgraph.") for p in found), found
    # every package of the library ships, the command, mode and prediction packages included
    on_disk = {".".join(p.parent.relative_to(ROOT).parts)
               for p in (ROOT / "dsgraph").rglob("__init__.py")}
    assert on_disk == set(found)
    assert {"dsgraph.cli", "dsgraph.modes", "dsgraph.predict"} <= set(found)


def test_setup_cfg_declares_the_entry_points():
    lines = _setup_cfg()["options.entry_points"]["console_scripts"].strip().splitlines()
    declared = dict(tuple(p.strip() for p in line.split("=")) for line in lines)
    assert declared == ENTRY_POINTS


def test_entry_points_resolve_to_callables():
    installed = {ep.name: ep for ep in importlib.metadata.entry_points(group="console_scripts")
                 if ep.name in ENTRY_POINTS}
    if not installed:
        pytest.skip("dsgraph is not installed (make install)")
    assert set(installed) == set(ENTRY_POINTS)
    for name, ep in installed.items():
        assert ep.value == ENTRY_POINTS[name]
        assert callable(ep.load()), name


def test_installed_command_runs_outside_the_checkout(tmp_path):
    script = Path(sys.executable).parent / "dsgraph-train"
    if not script.exists():
        pytest.skip(f"{script} is not installed (make install)")
    proc = subprocess.run([str(script), "--help"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "usage:" in proc.stdout and "--config" in proc.stdout


def test_checkout_names_are_not_importable_outside_it(tmp_path):
    """Outside the checkout none of its shims is importable: they were never installed."""
    code = ("import importlib.util, sys; "
            "sys.exit(any(importlib.util.find_spec(m) is not None "
            "for m in ('train', 'partition', 'predict')))")
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120, env={"PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("shim, target", [("train.__main__", "dsgraph.cli.train"),
                                          ("partition.__main__", "dsgraph.cli.partition"),
                                          ("partition.chunk", "dsgraph.cli.chunk"),
                                          ("predict.__main__", "dsgraph.cli.predict")])
def test_shims_re_export_main(shim, target):
    module = importlib.import_module(shim)
    assert module.main is importlib.import_module(target).main
    # a shim is only that: the re-exported main
    assert [n for n in vars(module) if not n.startswith("__")] == ["main"]
