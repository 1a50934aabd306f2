"""Hangs: live processes of a job that make no progress, stopped (SIGSTOP, a debugger) or with
their heartbeat silent, and the one line that names one.

Every process the supervisor started is watched, and so are its children (DGL's sampler
processes, ``cluster.samplers_per_trainer``): they write no heartbeat, so only their state counts.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Iterable

import psutil

from dsgraph.cluster import heartbeat
from dsgraph.cluster.proc import Proc
from dsgraph.errors import JobFailed


@dataclass(frozen=True)
class Stall:
    """A live process making no progress: for how long, and why."""

    proc: Proc  # the supervised process (a stopped child's parent)
    seconds: float
    stopped: bool  # stopped (SIGSTOP, a debugger) rather than only silent
    pid: int  # the process that makes no progress: proc's own, or a child's
    child: str = ""  # "" for proc itself, else what the child is ("sampler", "child process")

    @property
    def who(self) -> str:
        """``process trainer1 (pid 12)``, or ``process trainer1's sampler (pid 34)``."""
        own = f"'s {self.child}" if self.child else ""
        return f"process {self.proc.name}{own} (pid {self.pid})"


class HangWatch:
    """Tracks since when each process of a job has been stopped, and judges silent heartbeats."""

    def __init__(self, heartbeat_s: float) -> None:
        self.heartbeat_s = heartbeat_s
        self._checked = time.time()  # the last look at the processes' progress
        self._judge_from = self._checked  # silence before this moment is not held against anyone
        self._stopped_since: dict[int, float] = {}

    def seconds_since_check(self) -> float:
        """Seconds since the last :meth:`stalls`."""
        return time.time() - self._checked

    def stalls(self, procs: Iterable[Proc], stopped_s: float, silent_s: float) -> list[Stall]:
        """Live processes (and their children) stopped for ``stopped_s`` or more, or whose
        heartbeat has been silent for ``silent_s`` or more (0: not judged); the likeliest cause
        first: stopped ones (a supervised process before a child), then the longest without
        progress."""
        now = time.time()
        if now - self._checked > max(self.heartbeat_s / 4, 2.0):
            # This process did not run for a while (the host slept, the launcher was stopped):
            # beats that were due meanwhile are not late.
            self._judge_from = now
        self._checked = now
        out, seen = [], set()
        for p in procs:
            if p.popen.poll() is not None:
                continue
            pid = p.popen.pid
            seen.add(pid)
            stopped = self._stopped_for(pid, now)
            last = heartbeat.last_beat(p.beat) if p.beat is not None else None
            # before its first beat a process is still starting (imports): only its state counts
            silent = now - max(last, self._judge_from) if last is not None else 0.0
            if (stopped is not None and stopped >= stopped_s) or 0 < silent_s <= silent:
                out.append(Stall(p, max(stopped or 0.0, silent), stopped is not None, pid))
            # its children run no heartbeat of their own (spawned samplers): their state only
            for child in _children(p) if p.local else ():
                seen.add(child.pid)
                held = self._stopped_for(child.pid, now)
                if held is not None and held >= stopped_s:
                    out.append(Stall(p, held, True, child.pid, _kind(child)))
        for pid in set(self._stopped_since) - seen:  # gone: a reused pid starts afresh
            del self._stopped_since[pid]
        return sorted(out, key=lambda s: (not s.stopped, bool(s.child), -s.seconds))

    def _stopped_for(self, pid: int, now: float) -> float | None:
        """Seconds ``pid`` has been seen stopped (None: it runs)."""
        if not heartbeat.is_stopped(pid):
            self._stopped_since.pop(pid, None)
            return None
        return now - self._stopped_since.setdefault(pid, now)

    def describe(self, stall: Stall) -> JobFailed:
        """The one-line error for a process that makes no progress."""
        p = stall.proc
        if stall.stopped:
            why = "it is stopped (SIGSTOP, Ctrl-Z or a debugger)"
        else:
            why = (f"its heartbeat ({p.beat.name}) is silent; cluster.heartbeat_s = "
                   f"{self.heartbeat_s:g}")
        since = f" for {stall.seconds:.0f} s" if stall.seconds >= 1 else ""
        return JobFailed(f"{stall.who} made no progress{since}: {why}; log {p.log}")


def _children(p: Proc) -> list[psutil.Process]:
    try:
        return psutil.Process(p.popen.pid).children(recursive=True)
    except psutil.Error:
        return []


def _kind(child: psutil.Process) -> str:
    """What a job process's child is: DGL's samplers are multiprocessing's spawned workers."""
    try:
        cmd = " ".join(child.cmdline())
    except psutil.Error:
        return "child process"
    return "sampler" if "multiprocessing" in cmd and "spawn_main" in cmd else "child process"
