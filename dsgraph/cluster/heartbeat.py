"""Liveness of a job's processes: a heartbeat file each process touches, and its process state.

A job process (every one that exits through :func:`dsgraph.cluster.worker.run_process_main`:
train and predict workers, DistGraph servers) runs a daemon thread that touches the file named
by ``DSGRAPH_HEARTBEAT`` every ``DSGRAPH_HEARTBEAT_S`` seconds (the supervisor sets both when it
spawns the process: ``cluster.heartbeat_s / 4``, at most :data:`MAX_EVERY_S`, into
``logs/<name>.heartbeat``). The thread
beats as long as the process is scheduled and its main thread lets go of the GIL now and then
(DGL's and torch's blocking C++ calls do, the DistGraph server's receive loop included), so a
silent heartbeat means a process stopped or wedged while holding the GIL. A deadlocked
collective still beats: the collective timeout (``train.collective_timeout_s``) ends that one.
Before its first beat (while it imports) a process is judged by its state alone. Beats come often
(every few seconds even under a long ``cluster.heartbeat_s``) so that, once a peer has failed
(a collective timed out), a process silent for a few beats can be named as the cause; on its
own, silence is a hang only after ``cluster.heartbeat_s``.

The supervisor (:mod:`.supervise`) reads the files and each process's state (stopped by SIGSTOP
or a debugger). Only where the file is on this host's filesystem: processes on this host and in
network namespaces of it; a process on another host (ssh) gets neither the file nor the check of
its state (only the local ssh client's state is seen).
"""
from __future__ import annotations

import os
import threading
from pathlib import Path

import psutil

ENV_PATH = "DSGRAPH_HEARTBEAT"
ENV_EVERY = "DSGRAPH_HEARTBEAT_S"
SUFFIX = ".heartbeat"
MAX_EVERY_S = 2.0  # the longest time between two beats, whatever cluster.heartbeat_s

# States in which a process runs no code of its own until someone resumes it.
_STOPPED = (psutil.STATUS_STOPPED, psutil.STATUS_TRACING_STOP)


class Beater:
    """A daemon thread touching ``path`` every ``every_s`` seconds until :meth:`stop`."""

    def __init__(self, path: Path, every_s: float) -> None:
        self.path, self.every_s = Path(path), every_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="dsgraph-heartbeat", daemon=True)

    def start(self) -> "Beater":
        """Beat once now, then in the background."""
        beat(self.path)
        self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stop.wait(self.every_s):
            beat(self.path)

    def stop(self) -> None:
        """Stop beating (the file stays)."""
        self._stop.set()
        self._thread.join(timeout=5)


def beat(path: Path) -> None:
    """Set ``path``'s modification time to now (creating it); a vanished run folder is ignored."""
    try:
        Path(path).touch()
    except OSError:
        pass


def start_from_env() -> Beater | None:
    """In a job process: beat as the supervisor asked in the environment (else do nothing)."""
    path, every = os.environ.get(ENV_PATH), os.environ.get(ENV_EVERY)
    if not path or not every or float(every) <= 0:
        return None
    return Beater(Path(path), float(every)).start()


def env_for(path: Path, heartbeat_s: float) -> dict[str, str]:
    """The variables that make a job process beat into ``path`` often enough for ``heartbeat_s``."""
    return {ENV_PATH: str(Path(path).resolve()), ENV_EVERY: f"{beat_every(heartbeat_s):g}"}


def beat_every(heartbeat_s: float) -> float:
    """Seconds between two beats under ``heartbeat_s``."""
    # At least four beats per period: one late beat (a busy host) is no hang.
    return min(heartbeat_s / 4, MAX_EVERY_S)


def late_s(heartbeat_s: float) -> float:
    """How long a silent heartbeat makes its process the likely cause once a peer has failed
    (a collective or an RPC timed out): several missed beats, at most half of ``heartbeat_s``."""
    return min(heartbeat_s / 2, max(5 * beat_every(heartbeat_s), 10.0))


def last_beat(path: Path) -> float | None:
    """Wall-clock time of the last beat into ``path``; None before the first."""
    try:
        return Path(path).stat().st_mtime
    except OSError:
        return None


def is_stopped(pid: int) -> bool:
    """Whether process ``pid`` is stopped (SIGSTOP, Ctrl-Z, a debugger) rather than running."""
    try:
        return psutil.Process(pid).status() in _STOPPED
    except psutil.Error:
        return False
