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


def request_dumps(pids: list[int], wait_s: float = 1.0) -> None:
    """Ask the processes ``pids`` for their stacks; give them ``wait_s`` to write them."""
    for pid in pids:
        try:
            os.kill(pid, DUMP_SIGNAL)
        except (ProcessLookupError, PermissionError):
            pass
    if pids:
        time.sleep(wait_s)


def main_thread_frames(log: Path, depth: int = 3) -> str:
    """The innermost ``depth`` frames of the main thread in the last stack dump of ``log``, as
    ``file:line func < ...`` (paths shortened to the package); "" without a dump."""
    try:
        lines = log.read_text(errors="replace").splitlines()
    except OSError:
        return ""
    starts = [i for i, ln in enumerate(lines) if _THREAD.match(ln.rsplit("\r", 1)[-1])]
    if not starts:
        return ""
    # the last dump: the run of thread headers after the last non-dump line before them
    threads: list[list[tuple[str, str, str]]] = []
    for i in reversed(starts):
        frames = []
        for ln in lines[i + 1:]:
            m = _FRAME.match(ln)
            if m is None:
                break
            frames.append((_short(m["file"]), m["line"], m["func"]))
        threads.append(frames)
        if i == starts[0] or not _follows_dump(lines, starts, i):
            break
    main = [f for f in threads if f and f[-1][2] != _THREAD_START]
    if not main:
        return ""
    return " < ".join(f"{file}:{line} {func}" for file, line, func in main[0][:depth])


def _follows_dump(lines: list[str], starts: list[int], i: int) -> bool:
    """Whether the thread block at line ``i`` belongs to the same dump as the one before it."""
    prev = starts[starts.index(i) - 1]
    between = lines[prev + 1:i]
    return all(_FRAME.match(ln) or not ln.strip() for ln in between)


def _short(path: str) -> str:
    """``dsgraph/x/y.py`` for a path inside a package, else the file's name."""
    parts = Path(path).parts
    for root in ("dsgraph", "dgl", "torch"):
        if root in parts:
            return "/".join(parts[len(parts) - parts[::-1].index(root) - 1:])
    return Path(path).name
