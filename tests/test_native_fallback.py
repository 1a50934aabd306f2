"""The C kernels' fallback: one warning per process naming the reason and DSGRAPH_NATIVE=0,
none when the fallback is deliberate, and ``native_kernels`` in a run's summary."""
from __future__ import annotations

import os
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest

from dsgraph import native

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "dsgraph" / "compress" / "kernels.c"


@pytest.fixture
def fresh(monkeypatch, tmp_path):
    """A process state with no library declared or warned about yet (the real ones untouched),
    kernels cached under ``tmp_path``."""
    monkeypatch.setattr(native, "_libraries", [])
    monkeypatch.setattr(native, "_warned", False)
    monkeypatch.setenv("DSGRAPH_KERNEL_CACHE", str(tmp_path))
    monkeypatch.delenv("DSGRAPH_NATIVE", raising=False)
    return monkeypatch


def _libraries(n: int) -> list[native.CLibrary]:
    return [native.CLibrary(SOURCE, f"test{i}", {}) for i in range(n)]


def test_a_failed_build_warns_once_per_process_with_its_reason(fresh):
    fresh.setenv("CC", "/nonexistent/cc")
    libs = _libraries(2)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(3):  # every call, both libraries: still one warning
            assert all(lib.library() is None and not lib.available() for lib in libs)
    said = [w for w in caught if issubclass(w.category, native.NativeKernelsWarning)]
    assert len(said) == 1, [str(w.message) for w in caught]
    text = str(said[0].message)
    assert "/nonexistent/cc" in text and "DSGRAPH_NATIVE=0" in text and "\n" not in text
    assert libs[0].failure() is not None and native.kernels_available() is False


def test_a_deliberate_fallback_is_silent_and_recorded(fresh):
    fresh.setenv("DSGRAPH_NATIVE", "0")
    lib, = _libraries(1)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert lib.library() is None
    assert not [w for w in caught if issubclass(w.category, native.NativeKernelsWarning)]
    assert native.kernels_available() is False


def test_without_a_compiler_nothing_is_claimed_before_a_build(fresh):
    fresh.setenv("CC", "/nonexistent/cc")
    _libraries(1)  # declared, never built: the run used no kernels, but could not have
    assert native.kernels_available() is False


def test_the_warning_is_one_line_on_a_process_console(tmp_path):
    env = {**os.environ, "CC": "/nonexistent/cc", "DSGRAPH_KERNEL_CACHE": str(tmp_path),
           "OMP_NUM_THREADS": "1"}
    env.pop("DSGRAPH_NATIVE", None)
    code = ("from pathlib import Path\n"
            "from dsgraph.native import CLibrary, kernels_available\n"
            f"libs = [CLibrary(Path({str(SOURCE)!r}), p, {{}}) for p in ('a', 'b')]\n"
            "assert [lib.library() for lib in libs * 2] == [None] * 4\n"
            "print(kernels_available())\n")
    res = subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True,
                         text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "False"
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "NativeKernelsWarning" in lines[0], res.stderr
    assert "DSGRAPH_NATIVE=0" in lines[0]


def test_the_summary_records_native_kernels(fresh, tmp_path):
    from dsgraph.config import load
    from dsgraph.trainer import Strategy, Trainer

    class Idle(Strategy):
        def setup(self, trainer):  # never called: only the summary is built
            raise AssertionError

        def train_epoch(self, trainer, epoch):
            raise AssertionError

    cfg = load(ROOT / "configs" / "default.yaml")
    trainer = Trainer(cfg, tmp_path / "run", Idle(cfg))
    fresh.setenv("DSGRAPH_NATIVE", "0")
    assert trainer._summary(None, {}, time.perf_counter())["native_kernels"] is False
    fresh.delenv("DSGRAPH_NATIVE")
    fresh.setattr(native, "kernels_available", lambda: True)  # as the trainer reads it
    fresh.setattr("dsgraph.trainer.kernels_available", lambda: True)
    assert trainer._summary(None, {}, time.perf_counter())["native_kernels"] is True
