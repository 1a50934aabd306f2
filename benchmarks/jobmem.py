"""The memory of a whole job as a user's machines feel it: the peak over time of the summed
proportional set size (PSS) of every process the benchmark started.

PSS charges each shared page (a DistGraph server's shared-memory partition mapped by its
trainers, the libraries' code) to its mappers in equal shares, so the sum over the job's
processes counts shared memory once; the sum of per-process peak RSS would count it once per
mapper. The job's processes are the descendants of this process, read every ``interval_s`` by
a background thread (started by :class:`JobMemory`'s ``with``, never on import).
"""
from __future__ import annotations

import os
import threading
from typing import Optional

import psutil

MB = 1024 * 1024


def job_pss_mb(root: Optional[int] = None) -> float:
    """Summed PSS in MiB of the descendants of ``root`` (this process by default), now."""
    total = 0
    try:
        children = psutil.Process(root or os.getpid()).children(recursive=True)
    except psutil.NoSuchProcess:
        return 0.0
    for child in children:
        try:
            total += child.memory_full_info().pss
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue  # it ended between the listing and the read
    return total / MB


class JobMemory:
    """``with JobMemory() as mem: run_the_job()``; then ``mem.peak_mb`` is the job's peak
    summed PSS (0 if no reading saw a process)."""

    def __init__(self, interval_s: float = 0.2) -> None:
        self.interval_s = interval_s
        self.peak_mb = 0.0
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    def _poll(self) -> None:
        while not self._stop.is_set():
            self.peak_mb = max(self.peak_mb, job_pss_mb())
            self._stop.wait(self.interval_s)

    def __enter__(self) -> "JobMemory":
        self._thread = threading.Thread(target=self._poll, name="job-memory", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
