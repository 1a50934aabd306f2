"""A run folder's lock (:class:`RunLock`): one job at a time per folder, held for the job's life
by the process that launched it (:func:`hold`, :func:`let_go`)."""
from __future__ import annotations

import fcntl
import json
import os
import socket
import sys
import time
from pathlib import Path
from typing import Any, Optional

from dsgraph.errors import UserError
from dsgraph.fsutil import storage_errors


class RunLock:
    """A run folder's lock: an exclusive ``flock`` on :data:`LOCK`, held by the job's launcher
    until it ends (the kernel drops it when the process dies, however it dies); the file names
    the holder (pid, host, action, start time), so a refusal can say which job, and a lock left
    by a dead job is taken over with a notice."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: Optional[int] = None

    def acquire(self, action: str) -> None:
        """Take the lock for ``action`` or raise a one-line UserError naming the live holder."""
        with storage_errors(self.path, "the run folder's lock"):
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _describe(_read_owner(fd))
            os.close(fd)
            raise UserError(f"{self.path.parent}: {action}: the run folder is in use by a live "
                            f"job ({holder}); wait for it to end or stop it first") from None
        stale = _read_owner(fd)
        if stale:
            print(f"dsgraph: {self.path.parent}: taking over the lock of a job that is gone "
                  f"({_describe(stale)})", file=sys.stderr)
        owner = {"pid": os.getpid(), "host": socket.gethostname(), "action": action,
                 "started": time.strftime("%Y-%m-%d %H:%M:%S")}
        with storage_errors(self.path, "the run folder's lock"):
            os.ftruncate(fd, 0)
            os.pwrite(fd, json.dumps(owner).encode(), 0)
        self._fd = fd

    def release(self) -> None:
        """Empty the holder record (an empty lock file is not stale) and unlock."""
        if self._fd is None:
            return
        try:
            os.ftruncate(self._fd, 0)
        except OSError:  # a full or read-only disk: the next job reports a stale lock instead
            pass
        fcntl.flock(self._fd, fcntl.LOCK_UN)
        os.close(self._fd)
        self._fd = None


# The locks this process holds: [the lock, how many hold() calls hold it].
HELD: dict[Path, list] = {}


def hold(path: Path, action: str) -> None:
    """Take the lock file ``path`` for ``action``. Re-entrant: a process that holds it already
    (a benchmark running job after job in one folder) keeps it until every :func:`hold` has
    had its :func:`let_go`."""
    key = path.resolve()
    if key not in HELD:
        lock = RunLock(path)
        lock.acquire(action)
        HELD[key] = [lock, 0]
    HELD[key][1] += 1


def let_go(path: Path) -> None:
    """Undo one :func:`hold` of ``path``."""
    key = path.resolve()
    if key in HELD:
        HELD[key][1] -= 1
        if HELD[key][1] <= 0:
            HELD.pop(key)[0].release()


def _read_owner(fd: int) -> dict[str, Any]:
    try:
        owner = json.loads(os.pread(fd, 4096, 0) or b"{}")
    except (OSError, ValueError):
        return {}
    return owner if isinstance(owner, dict) else {}


def _describe(owner: dict[str, Any]) -> str:
    if not owner:
        return "holder unknown"
    return (f"{owner.get('action', 'a job')}, pid {owner.get('pid')} on {owner.get('host')}, "
            f"started {owner.get('started')}")
