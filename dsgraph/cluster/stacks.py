"""Where a timed-out job's processes were waiting: each job process dumps its threads' Python
stacks into its log on SIGUSR1 (:mod:`faulthandler`), and the supervisor names the innermost
frames of each one's main thread in the timeout's line.

A deadlock that only some runs meet (a collective one rank never reaches, an RPC nobody answers)
leaves live processes whose heartbeat still beats; without the frames a timeout could only say
which processes were still running.
"""
from __future__ import annotations

import faulthandler
import os
import re
import signal
import sys
import time
from pathlib import Path

DUMP_SIGNAL = signal.SIGUSR1
_THREAD = re.compile(r"^(Current thread|Thread) 0x[0-9a-f]+ \(most recent call first\):$")
_FRAME = re.compile(r'^\s+File "(?P<file>[^"]+)", line (?P<line>\d+) in (?P<func>\S+)$')
# Frames of a thread that is not the main one: it began in threading's bootstrap.
_THREAD_START = "_bootstrap"


def enable_dump() -> None:
    """In a job process: dump every thread's stack to stderr (the log) on SIGUSR1."""
    try:
        faulthandler.register(DUMP_SIGNAL, file=sys.stderr, all_threads=True, chain=False)
    except (ValueError, RuntimeError, OSError):  # no usable stderr: nothing to dump into
        pass


def log_sizes(logs: list[Path]) -> dict[Path, int]:
    """Each log's size now (0 where it cannot be read): where a dump requested next starts."""
    sizes = {}
    for log in logs:
        try:
            sizes[log] = log.stat().st_size
        except OSError:
            sizes[log] = 0
    return sizes


def request_dumps(pids: list[int], wait_s: float = 1.0) -> None:
    """Ask the processes ``pids`` for their stacks; give them ``wait_s`` to write them."""
    for pid in pids:
        try:
            os.kill(pid, DUMP_SIGNAL)
        except (ProcessLookupError, PermissionError):
            pass
    if pids:
        time.sleep(wait_s)


def main_thread_frames(log: Path, start: int = 0, depth: int = 3) -> str:
    """The innermost ``depth`` frames of the main thread in the stack dump written to ``log``
    from byte ``start`` on (:func:`log_sizes`, taken before :func:`request_dumps`), as
    ``file:line func < ...`` (paths shortened to the package); "" without a dump."""
    try:
        with open(log, "rb") as fh:
            fh.seek(start)
            lines = fh.read().decode(errors="replace").splitlines()
    except OSError:
        return ""
    threads: list[list[tuple[str, str, str]]] = []
    for ln in lines:
        if _THREAD.match(ln.rsplit("\r", 1)[-1]):
            threads.append([])
        elif threads and (m := _FRAME.match(ln)):
            threads[-1].append((_short(m["file"]), m["line"], m["func"]))
    # the main thread: the one that did not begin in threading's bootstrap
    main = [f for f in threads if f and f[-1][2] != _THREAD_START]
    if not main:
        return ""
    return " < ".join(f"{file}:{line} {func}" for file, line, func in main[0][:depth])


def _short(path: str) -> str:
    """``dsgraph/x/y.py`` for a path inside a package, else the file's name."""
    parts = Path(path).parts
    for root in ("dsgraph", "dgl", "torch"):
        if root in parts:
            return "/".join(parts[len(parts) - parts[::-1].index(root) - 1:])
    return Path(path).name
