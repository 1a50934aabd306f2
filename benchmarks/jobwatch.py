"""What a job's process tree does and leaves behind, for the fault harnesses
(:mod:`benchmarks.faults`): the processes and listening sockets of a launcher's job, sampled while
it runs, then which of them, its ports, ``/dev/shm`` segments and temporary files remain."""
from __future__ import annotations

import os
import threading
from pathlib import Path

import psutil


class Watch:
    """Samples a launcher's process tree (pids, listening sockets) until stopped."""

    def __init__(self, launcher: int) -> None:
        self.launcher = launcher
        self.pids: set[int] = set()
        self.listening: set[tuple[str, int]] = set()
        self.shm: set[str] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(0.2)

    def sample(self) -> None:
        """Record the launcher's descendants and every socket they listen on."""
        try:
            kids = psutil.Process(self.launcher).children(recursive=True)
        except psutil.Error:
            return
        self.shm.update(job_shm(self.launcher))
        for p in kids:
            self.pids.add(p.pid)
            try:
                for c in p.net_connections(kind="inet"):
                    if c.status == psutil.CONN_LISTEN:
                        self.listening.add((c.laddr.ip, c.laddr.port))
            except psutil.Error:
                pass

    def stop(self) -> None:
        """Stop sampling."""
        self._stop.set()
        self._thread.join(timeout=5)


def alive(pids: set[int]) -> list[int]:
    out = []
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                out.append(pid)
        except psutil.Error:
            pass
    return sorted(out)


def listening_now(ports: set[int]) -> list[int]:
    try:
        conns = psutil.net_connections(kind="inet")
    except psutil.Error:
        return []
    return sorted({c.laddr.port for c in conns
                   if c.status == psutil.CONN_LISTEN and c.laddr.port in ports})


def job_shm(launcher: int) -> list[str]:
    """/dev/shm segments whose job token names ``launcher`` as their owner."""
    tag = f"dsg{launcher}p"
    return sorted(n for n in os.listdir("/dev/shm") if tag in n) if os.path.isdir("/dev/shm") \
        else []


def temp_files(run: Path) -> list[str]:
    return sorted(str(p.relative_to(run)) for p in run.rglob(".*.tmp")) if run.exists() else []
