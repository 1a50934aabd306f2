"""The memory-measurement protocol every benchmark that reports RSS follows.

- **Allocator**: allocations >= 64 KiB are mmap-served (:data:`MMAP_ENV`) from process start, so
  a freed tensor leaves RSS at once and RSS follows the live tensors. glibc otherwise raises its
  threshold after frees and keeps later large tensors on the heap, where freed memory stays
  resident (RSS then reflects allocator history, not the live peak). glibc reads the variable at
  start, so it goes into the environment of every measured process: set later, the heap that
  loading left behind absorbs part of training's allocations (1.7 MB of 11 in the ``sar``
  benchmark at --quick size).
- **Fresh processes**: a measured configuration runs in a process of its own
  (:func:`run_fresh`: :data:`MMAP_ENV`, one OpenMP / MKL thread), so no earlier setting's
  allocations count.
- **Readings** (:class:`Mark`): a span starts by reading RSS and file-backed RSS and resetting
  the high-water mark (Linux ``clear_refs``); its figure is the peak since, minus RSS at the
  start. A span after loading first pages in the libraries' code (:func:`page_in_libraries`).
"""
from __future__ import annotations

import ctypes
import dataclasses
import importlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from dsgraph.fsutil import atomic_write_text
from dsgraph.procstats import file_rss_mb, peak_rss_mb, reset_peak_rss, rss_mb

MMAP_ENV = {"MALLOC_MMAP_THRESHOLD_": str(64 * 1024)}
ROOT = Path(__file__).resolve().parents[1]
_CUDA_ONLY = ("libtorch_cuda", "libc10_cuda", "libcaffe2_nvrtc", "libnccl", "libcu", "libnvJitLink",
              "libnvrtc", "libnvToolsExt")


def page_in_libraries() -> None:
    """Fault in every readable file mapping (library code and data) except CUDA-only ones.

    RSS counts a library's code pages once they are first executed, which for torch and DGL
    happens during the first training step: several MB that are neither activations nor
    proportional to the graph. Paging them in as part of loading (MADV_POPULATE_READ, Linux
    >= 5.14) keeps them out of "peak RSS minus RSS after loading". CUDA libraries, which a
    CPU run never executes, are left alone (gigabytes).
    """
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
    except OSError:
        return
    libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    for mapping in Path("/proc/self/maps").read_text().splitlines():
        parts = mapping.split()
        if len(parts) < 6 or not parts[5].startswith("/") or parts[1][0] != "r":
            continue
        path = parts[5]
        if "/nvidia/" in path or os.path.basename(path).startswith(_CUDA_ONLY):
            continue
        a, b = (int(v, 16) for v in parts[0].split("-"))
        libc.madvise(a, b - a, 22)  # MADV_POPULATE_READ; fails harmlessly on old kernels


@dataclasses.dataclass(frozen=True)
class Mark:
    """RSS and file-backed RSS (MiB) of this process at the start of a measured span."""

    rss_mb: float
    file_mb: float

    def peak_mb(self) -> float:
        """This process's peak RSS (MiB) since the span started (or since it began, unreset)."""
        return peak_rss_mb()

    def peak_growth_mb(self) -> float:
        """Peak RSS since the span started minus RSS at its start."""
        return self.peak_mb() - self.rss_mb

    def file_growth_mb(self) -> float:
        """How much file-backed RSS (library code first run) grew since the span started."""
        return file_rss_mb() - self.file_mb


def mark(page_in: bool = False, reset: bool = True) -> Mark:
    """Start a measured span: page in the libraries' code (``page_in``, at the end of loading),
    read RSS, then reset the high-water mark to it (``reset``)."""
    if page_in:
        page_in_libraries()
    start = Mark(rss_mb(), file_rss_mb())
    if reset:
        reset_peak_rss()
    return start


def fresh_env() -> dict[str, str]:
    """The environment of a measured fresh process: :data:`MMAP_ENV`, one OpenMP / MKL thread
    (as every dsgraph worker runs), this checkout importable."""
    return {**os.environ, **MMAP_ENV, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
            "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}


def run_fresh(target: str, spec: dict[str, Any], workdir: Path, timeout: float = 900) -> dict:
    """Run ``target`` (``module:function``, called with ``spec``, returning a JSON object) in a
    fresh one-thread python process under :func:`fresh_env`; return what it returned."""
    workdir.mkdir(parents=True, exist_ok=True)
    spec_file, result_file = workdir / "spec.json", workdir / "result.json"
    result_file.unlink(missing_ok=True)
    spec_file.write_text(json.dumps(spec))
    subprocess.run([sys.executable, "-m", "benchmarks.memory", target, str(spec_file),
                    str(result_file)], env=fresh_env(), cwd=ROOT, check=True, timeout=timeout)
    return json.loads(result_file.read_text())


def _fresh_main(target: str, spec_file: str, result_file: str) -> None:
    """The fresh process of :func:`run_fresh`."""
    import torch
    torch.set_num_threads(1)
    module, function = target.split(":")
    spec = json.loads(Path(spec_file).read_text())
    result = getattr(importlib.import_module(module), function)(spec)
    atomic_write_text(Path(result_file), json.dumps(result))


if __name__ == "__main__":
    _fresh_main(*sys.argv[1:])
