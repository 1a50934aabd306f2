"""C kernels compiled with the system C compiler on first use, called through ctypes.

Each package with fused CPU kernels (the compression codec, the sequential-aggregation core)
declares one :class:`CLibrary`: its C source and function signatures. The source is compiled
into a cache folder (``$DSGRAPH_KERNEL_CACHE``, else ``$XDG_CACHE_HOME/dsgraph/kernels`` or
``~/.cache/dsgraph/kernels``), named by a hash of the source, the flags, the compiler and the
CPU, written atomically so concurrent workers can build it at the same time. ctypes releases the
GIL, so :func:`parallel` can split large tensors over ``torch.get_num_threads()`` Python threads.
A library is unavailable when there is no compiler, its build fails, or ``DSGRAPH_NATIVE=0``;
its callers then take their pure-torch path. A failed build says so once per process (a
:class:`NativeKernelsWarning` naming the reason; ``DSGRAPH_NATIVE=0`` falls back silently), and
:func:`kernels_available` is what a run's metrics.json records as ``native_kernels``.
"""
from __future__ import annotations

import contextlib
import ctypes
import hashlib
import os
import platform
import shutil
import subprocess
import threading
import warnings
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable, Iterator, Optional, Sequence

import torch

from dsgraph.fsutil import atomic_write_with

FLAGS = ("-O3", "-march=native", "-fPIC", "-shared", "-std=gnu11")
# Below this many values a tensor is not split over threads (thread hand-off costs ~50 us).
PARALLEL_MIN = 1 << 18

_lock = threading.Lock()
_pool: Optional[ThreadPoolExecutor] = None
_pool_size = 0
_pool_pid = 0

Signature = tuple[Optional[type], list]
ENV_NATIVE = "DSGRAPH_NATIVE"  # "0": no kernels are built, the torch path is taken silently
_libraries: list["CLibrary"] = []  # every library declared in this process
_warned = False  # the fallback warning was given in this process


class NativeKernelsWarning(RuntimeWarning):
    """The C kernels could not be built: this process takes the slower pure-torch path."""


def _disabled_by_env() -> bool:
    return os.environ.get(ENV_NATIVE, "1") == "0"


def cache_dir() -> Path:
    """Folder holding compiled kernels."""
    env = os.environ.get("DSGRAPH_KERNEL_CACHE")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "dsgraph" / "kernels"


def _cpu_id() -> str:
    """The CPU's flags line: -march=native code must not run on another CPU sharing the cache."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return line
    except OSError:
        pass
    return platform.processor()


def _compiler() -> Optional[str]:
    return os.environ.get("CC") or shutil.which("gcc") or shutil.which("cc")


def kernels_available() -> bool:
    """Whether this process has its C kernels: False under ``DSGRAPH_NATIVE=0`` or when a
    library failed to build; a library not built yet counts when a compiler is found."""
    if _disabled_by_env() or any(lib.failure() is not None for lib in _libraries):
        return False
    if _libraries and all(lib.built() for lib in _libraries):
        return True
    cc = _compiler()
    return cc is not None and shutil.which(cc) is not None


def _warn_fallback(reason: str) -> None:
    """Say once per process that the kernels are unavailable, why, and how to silence it."""
    global _warned
    if _warned:
        return
    _warned = True
    reason = (reason.strip().splitlines() or ["unknown reason"])[0][:200]
    # warn_explicit without a source line: the warning is one line on the console
    warnings.warn_explicit(
        f"C kernels unavailable ({reason}); using the slower pure-torch path (set "
        f"{ENV_NATIVE}=0 to silence this when deliberate)", NativeKernelsWarning,
        filename=__name__, lineno=0, module=__name__)


class CLibrary:
    """One C source compiled to a shared library on first use (see the module docstring)."""

    def __init__(self, source: Path, prefix: str, signatures: dict[str, Signature],
                 extra_flags: Sequence[str] = ()) -> None:
        self.source, self.prefix, self.signatures = source, prefix, signatures
        self.flags = list(FLAGS) + list(extra_flags)
        self._lib: Optional[ctypes.CDLL] = None
        self._failed: Optional[str] = None
        self._disabled = 0  # > 0 inside disabled(): callers take the pure-torch path
        _libraries.append(self)

    def build(self) -> ctypes.CDLL:
        """Compile (or reuse) the shared library and load it."""
        cc = _compiler()
        if cc is None:
            raise RuntimeError("no C compiler (gcc/cc) on PATH")
        src = self.source.read_bytes()
        version = subprocess.run([cc, "--version"], capture_output=True, text=True,
                                 check=False).stdout
        key = hashlib.sha256(b"\0".join([src, " ".join(self.flags).encode(), version.encode(),
                                         platform.machine().encode(),
                                         _cpu_id().encode()])).hexdigest()[:16]
        out = cache_dir() / f"{self.prefix}-{key}.so"
        if not out.exists():
            def compile_to(tmp: str) -> None:
                res = subprocess.run([cc, *self.flags, "-o", tmp, str(self.source)],
                                     capture_output=True, text=True, check=False)
                if res.returncode != 0:
                    raise RuntimeError(f"{cc} failed on {self.source}: {res.stderr.strip()[:500]}")

            # Atomic: a concurrent build of the same key writes the same bytes.
            atomic_write_with(out, compile_to, mode=0o755)
        lib = ctypes.CDLL(str(out))
        for name, (res_type, args) in self.signatures.items():
            fn = getattr(lib, name)
            fn.restype, fn.argtypes = res_type, args
        return lib

    def library(self) -> Optional[ctypes.CDLL]:
        """The loaded kernels, building them on first call; None if disabled or the build
        failed."""
        if self._lib is not None or self._failed is not None:
            return self._lib
        failed = None
        with _lock:
            if self._lib is None and self._failed is None:
                if _disabled_by_env():
                    self._failed = f"disabled by {ENV_NATIVE}=0"
                else:
                    try:
                        self._lib = self.build()
                    except (OSError, RuntimeError) as exc:
                        self._failed = failed = str(exc) or type(exc).__name__
        if failed is not None:  # outside the lock: a warning filter may raise
            _warn_fallback(failed)
        return self._lib

    def built(self) -> bool:
        """Whether the library is loaded (built or reused from the cache)."""
        return self._lib is not None

    def available(self) -> bool:
        """True if the kernels can be used (compiler present, not disabled)."""
        return self._disabled == 0 and self.library() is not None

    @contextlib.contextmanager
    def disabled(self) -> Iterator[None]:
        """Inside this block callers take their pure-torch path (tests and profiles compare
        both)."""
        self._disabled += 1
        try:
            yield
        finally:
            self._disabled -= 1

    def failure(self) -> Optional[str]:
        """Why the kernels are unavailable (None if they are available or not tried yet)."""
        return self._failed


def parallel(total: int, units: int, align: int, fn: Callable[[int, int], object]) -> list:
    """Run ``fn(u0, u1)`` over [0, units) split into chunks (boundaries multiples of ``align``)
    on ``torch.get_num_threads()`` threads when ``total`` values make it worth it."""
    global _pool, _pool_size, _pool_pid
    threads = max(1, torch.get_num_threads())
    if threads == 1 or total < PARALLEL_MIN or units < 2 * align:
        return [fn(0, units)]
    # A forked child inherits the pool object but not its threads: make a new one there.
    if _pool is None or _pool_size != threads or _pool_pid != os.getpid():
        with _lock:
            if _pool is None or _pool_size != threads or _pool_pid != os.getpid():
                _pool = ThreadPoolExecutor(threads, thread_name_prefix="dsgraph-native")
                _pool_size, _pool_pid = threads, os.getpid()
    step = -(-units // threads)
    step = -(-step // align) * align
    bounds = [(a, min(a + step, units)) for a in range(0, units, step)]
    futures = [_pool.submit(fn, a, b) for a, b in bounds[1:]]
    first = fn(*bounds[0])  # the calling thread takes a share too
    return [first] + [f.result() for f in futures]
