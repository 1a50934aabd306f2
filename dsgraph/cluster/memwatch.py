"""The memory of a supervised job, sampled by the :class:`~.supervise.Supervisor`.

Per process: its peak RSS (VmHWM) and the last RSS seen (VmRSS; named when the process is
killed by SIGKILL, the OOM killer's signal). For the job: the peak over time of the summed
proportional set size (PSS, ``/proc/<pid>/smaps_rollup``) of its live processes, so shared
memory (a DistGraph server's shared-memory partition mapped by its trainers, the libraries'
code) counts once where the sum of peak RSS counts it once per mapper; and each process's PSS
at the moment of that peak. A process counts with its whole process group (each supervised
process leads its own: DGL's sampler processes count with their trainer).

Reading smaps_rollup walks the process's page tables: 22-35 ms for a process with 1 GiB
resident in 4 KiB pages (0.04 ms for ``/proc/<pid>/status``; measured 2026-12-03, 2 cores). So
PSS is read at most every :data:`PSS_EVERY_S`, and less often when a reading takes longer than
a tenth of that (at most a tenth of the supervisor's time); RSS is read at every sample.

Processes in network namespaces (``cluster.netns``) are local pids and are read like any
other. Processes on another host (started over ssh) cannot be read from here: the local pid is
the ssh client's. Their RSS is not recorded and their PSS is None; the job's memory is then
that of this host's processes only.

The last job a Supervisor ended in this thread is published as :func:`last_job` (the launcher
of ``python -m train`` writes it into the run's metrics.json).
"""
from __future__ import annotations

import contextvars
import os
import signal
import time
from typing import Any, Iterable, Optional

from dsgraph.procstats import peak_rss_mb, rss_mb

PSS_EVERY_S = 0.5  # the least time between two readings of the job's PSS

_LAST_JOB: contextvars.ContextVar[Optional[dict[str, Any]]] = \
    contextvars.ContextVar("dsgraph_last_job_memory", default=None)


def pss_mb(pid: int | str = "self") -> Optional[float]:
    """Proportional set size of ``pid`` in MiB (``Pss:`` of smaps_rollup), or None when it
    cannot be read (the process is gone, a zombie, or not ours)."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as fh:
            for line in fh:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) / 1024.0
    except (OSError, ValueError):
        return None
    return None


def group_members(pgids: Iterable[int]) -> dict[int, list[int]]:
    """The live pids of each process group in ``pgids`` (read from ``/proc/<pid>/stat``)."""
    out: dict[int, list[int]] = {g: [] for g in pgids}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as fh:
                stat = fh.read()
            pgrp = int(stat[stat.rindex(b")") + 2:].split()[2])  # state ppid pgrp ...
        except (OSError, ValueError, IndexError):
            continue
        if pgrp in out:
            out[pgrp].append(int(name))
    return out


class MemoryWatch:
    """Memory figures of one job's processes, updated by :meth:`sample`.

    ``peak_rss_mb`` / ``last_rss_mb``: per local process, MiB. ``job_mb``: the job's peak
    summed PSS in MiB (None until a reading saw a process). ``pss_at_peak``: each process's
    PSS (its group's) at that peak; None for a process on another host.
    """

    def __init__(self, pss_every_s: float = PSS_EVERY_S) -> None:
        self.pss_every_s = pss_every_s
        self.peak_rss_mb: dict[str, float] = {}
        self.last_rss_mb: dict[str, float] = {}
        self.job_mb: Optional[float] = None
        self.pss_at_peak: dict[str, Optional[float]] = {}
        self.remote: set[str] = set()
        self._next_pss = 0.0

    def sample(self, live: Iterable[tuple[str, int, bool]]) -> None:
        """Read the live processes ``(name, pid, local)``: RSS every call, PSS when due. Each
        supervised pid leads its own process group."""
        live = list(live)
        local = [(name, pid) for name, pid, here in live if here]
        self.remote.update(name for name, _, here in live if not here)
        for name, pid in local:
            now_mb = rss_mb(pid)  # 0 once the process is gone
            if now_mb > 0:
                self.last_rss_mb[name] = now_mb
            self.peak_rss_mb[name] = max(peak_rss_mb(pid), self.peak_rss_mb.get(name, 0.0))
        if not local or time.monotonic() < self._next_pss:
            return
        start = time.monotonic()
        members = group_members(pid for _, pid in local)
        per: dict[str, Optional[float]] = {}
        for name, pid in local:
            values = [pss_mb(m) for m in members[pid]]
            read = [v for v in values if v is not None]
            if read:
                per[name] = sum(read)
        cost = time.monotonic() - start
        self._next_pss = start + max(self.pss_every_s, 10 * cost)
        if not per:
            return
        total = sum(per.values())
        if self.job_mb is None or total > self.job_mb:
            self.job_mb = total
            self.pss_at_peak = {**per, **{name: None for name in self.remote}}

    def record(self) -> dict[str, Any]:
        """The figures as ``metrics.json`` holds them (MiB, rounded to 0.1)."""
        def r(v: Optional[float]) -> Optional[float]:
            return None if v is None else round(v, 1)
        return {"job_memory_mb": r(self.job_mb),
                "pss_mb_per_process_at_job_peak": {k: r(v) for k, v in self.pss_at_peak.items()},
                "peak_rss_mb_per_process": dict(self.peak_rss_mb),
                "unreadable_processes": sorted(self.remote)}

    def publish(self) -> None:
        """Make this job's :meth:`record` the :func:`last_job` of this thread."""
        _LAST_JOB.set(self.record())


def last_job() -> Optional[dict[str, Any]]:
    """The :meth:`MemoryWatch.record` of the last job a Supervisor ended in this thread (None:
    none since :func:`forget_last_job`)."""
    return _LAST_JOB.get()


def forget_last_job() -> None:
    """Clear :func:`last_job` (before starting a job whose record is wanted)."""
    _LAST_JOB.set(None)


def oom_hint(signum: int, stopping: bool, last_rss_mb: Optional[float]) -> str:
    """What to add to "killed by <signal>": for a SIGKILL the supervisor did not send (it was
    not ``stopping`` the job), that the kernel's OOM killer likely sent it (its own report, in
    dmesg or a cgroup's memory.events, is not readable here), with the last RSS seen."""
    if signum != signal.SIGKILL or stopping:
        return ""
    seen = f"; last RSS {last_rss_mb:.0f} MiB" if last_rss_mb is not None else ""
    return f", likely out of memory (the kernel's OOM killer){seen}"
