"""Supervisor: every process of a job in its own process group, one log each; the first failure,
a timeout, Ctrl-C or SIGTERM ends them all and removes the job's shared-memory segments."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from dsgraph.errors import JobFailed
from dsgraph.procstats import peak_rss_mb

SHM_DIR = Path("/dev/shm")


@dataclass
class Proc:
    """One supervised process."""

    name: str
    popen: subprocess.Popen
    log: Path
    required: bool  # the job is done when every required process has exited 0
    ended: float | None = field(default=None)


def log_tail(path: Path, lines: int = 3, width: int = 400) -> str:
    """The last non-empty lines of a log, joined into one line."""
    try:
        text = path.read_text(errors="replace").splitlines()
    except OSError:
        return "(no log)"
    tail = [ln.strip() for ln in text if ln.strip()][-lines:]
    return " | ".join(tail)[-width:] or "(empty log)"


def _terminate_handler(signum, frame):  # SIGTERM behaves like Ctrl-C in the launcher
    raise KeyboardInterrupt


class Supervisor:
    """Start, watch and tear down the processes of one job (use as a context manager)."""

    def __init__(self, log_dir: Path, timeout_s: float, shm_token: str | None = None,
                 grace_s: float = 5.0, snapshot_shm: bool = False) -> None:
        self.log_dir = Path(log_dir)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.timeout_s, self.grace_s, self.shm_token = timeout_s, grace_s, shm_token
        self.procs: list[Proc] = []
        self.peak_rss_mb: dict[str, float] = {}
        self.start = time.monotonic()
        self._old_sigterm = None
        self._threads: list[threading.Thread] = []
        # Stock DGL names its segments without a job token: then remove what appeared during the job.
        self._shm_before = _shm_names() if snapshot_shm else None

    def __enter__(self) -> "Supervisor":
        try:
            self._old_sigterm = signal.signal(signal.SIGTERM, _terminate_handler)
        except ValueError:  # not the main thread: the caller handles signals
            self._old_sigterm = None
        return self

    def __exit__(self, *exc) -> None:
        self.shutdown()
        if self._old_sigterm is not None:
            signal.signal(signal.SIGTERM, self._old_sigterm)

    def spawn(self, name: str, argv: Sequence[str], env: dict[str, str], required: bool = True,
              cwd: str | None = None, echo: bool = False) -> Proc:
        """Start ``argv`` in a new session (own process group), output to ``<log_dir>/<name>.log``.

        ``echo`` also copies the output to this process's stderr (rank 0's progress bar).
        """
        log = self.log_dir / f"{name}.log"
        with log.open("ab") as fh:
            popen = subprocess.Popen(list(argv), env=env, cwd=cwd,
                                     stdout=subprocess.PIPE if echo else fh,
                                     stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     start_new_session=True)
        if echo:
            t = threading.Thread(target=_tee, args=(popen.stdout, log), daemon=True)
            t.start()
            self._threads.append(t)
        proc = Proc(name, popen, log, required)
        self.procs.append(proc)
        return proc

    def _sample_rss(self) -> None:
        for p in self.procs:
            if p.popen.poll() is None:
                mb = peak_rss_mb(p.popen.pid)  # 0 once the process is gone
                self.peak_rss_mb[p.name] = max(mb, self.peak_rss_mb.get(p.name, 0.0))

    def drain(self, timeout_s: float) -> None:
        """Wait up to ``timeout_s`` for the remaining (non-required) processes to exit by themselves."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and any(p.popen.poll() is None for p in self.procs):
            self._sample_rss()
            time.sleep(0.1)

    def wait(self, poll_s: float = 0.1) -> None:
        """Block until every required process exits 0; raise JobFailed on the first fault."""
        try:
            while True:
                self._sample_rss()
                done = True
                failed = []
                for p in self.procs:
                    rc = p.popen.poll()
                    if rc is None:
                        done = done and not p.required
                    elif rc != 0:
                        failed.append((p, rc))
                if failed:
                    # Peers of a killed process fail soon after it; when both are seen in the same
                    # poll, the one killed by a signal is the cause.
                    p, rc = min(failed, key=lambda f: f[1] >= 0)
                    how = f"was killed by signal {-rc}" if rc < 0 else f"exited with code {rc}"
                    raise JobFailed(f"process {p.name} (pid {p.popen.pid}) {how}; "
                                    f"log {p.log}: {log_tail(p.log)}")
                if done:
                    return
                elapsed = time.monotonic() - self.start
                if elapsed > self.timeout_s:
                    alive = [p.name for p in self.procs if p.popen.poll() is None]
                    raise JobFailed(f"job timed out after {self.timeout_s:g} s; still running: "
                                    f"{', '.join(alive)}; log {self.procs[0].log}: "
                                    f"{log_tail(self.procs[0].log)}")
                time.sleep(poll_s)
        except KeyboardInterrupt:
            raise JobFailed("job interrupted; all processes stopped") from None

    def shutdown(self) -> None:
        """SIGTERM every live process group, SIGKILL after the grace period, clean /dev/shm."""
        live = [p for p in self.procs if p.popen.poll() is None]
        for p in self.procs:  # children of exited leaders may still run in the group
            _signal_group(p.popen.pid, signal.SIGTERM)
        deadline = time.monotonic() + self.grace_s
        for p in live:
            try:
                p.popen.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        for p in self.procs:
            _signal_group(p.popen.pid, signal.SIGKILL)
            try:
                p.popen.wait(5)
            except subprocess.TimeoutExpired:
                pass
        for t in self._threads:
            t.join(timeout=2)
        remove_shm(self.shm_token)
        if self._shm_before is not None:
            for name in _shm_names() - self._shm_before:
                try:
                    (SHM_DIR / name).unlink()
                except OSError:
                    pass


def _tee(stream, log: Path) -> None:
    """Copy a child's output to its log and to our stderr until it closes."""
    with log.open("ab") as fh:
        for chunk in iter(lambda: stream.read1(65536), b""):
            fh.write(chunk)
            fh.flush()
            try:
                sys.stderr.buffer.write(chunk)
                sys.stderr.flush()
            except (ValueError, OSError):
                pass


def _shm_names() -> set[str]:
    return {e.name for e in SHM_DIR.iterdir()} if SHM_DIR.is_dir() else set()


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def remove_shm(token: str | None) -> list[str]:
    """Remove /dev/shm entries whose name contains the job's token; return their names."""
    if not token or not SHM_DIR.is_dir():
        return []
    removed = []
    for entry in SHM_DIR.iterdir():
        if token in entry.name:
            try:
                entry.unlink()
                removed.append(entry.name)
            except OSError:
                pass
    return removed
