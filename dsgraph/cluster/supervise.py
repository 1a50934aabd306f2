"""Supervisor: every process of a job in its own process group, one log each; the first failure,
a timeout, Ctrl-C or SIGTERM ends them all and removes the job's shared-memory segments.

However the launcher itself ends, its processes end with it: each gets the parent-death signal
(:mod:`.lifeline`), and a reaper process (:mod:`.reaper`) kills what is left and removes the
job's segments when the launcher dies without cleaning up.
"""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Sequence

from dsgraph.cluster import lifeline, shm
from dsgraph.errors import JobFailed, UserError
from dsgraph.procstats import peak_rss_mb

SHM_DIR = shm.SHM_DIR

# A process that failed because a peer did: its collective or RPC connection broke, or it timed
# out waiting. Such an error is never the cause when another process failed on its own.
_PEER_ERROR = re.compile(
    r"Connection (closed|reset) by peer|Broken pipe|Connection refused|ECONNRESET|EPIPE|"
    r"gloo/transport|ProcessGroupGloo|DistBackendError|DistNetworkError|Socket Timeout|"
    r"Timed out|timed out|DistConnectError|Fail to connect|socket_communicator|"
    r"job interrupted|KeyboardInterrupt|Terminated", re.IGNORECASE)
# The line of a log that states the cause: an "error: ..." line or an exception's last line.
_CAUSE = re.compile(r"^(error: .*|([A-Za-z_][\w.]*)?(Error|Exception|Exit|Interrupt|Failure)"
                    r"\b(: .*)?|dgl\._ffi\.base\.DGLError: .*|.*Check failed.*)$")


@dataclass
class Proc:
    """One supervised process."""

    name: str
    popen: subprocess.Popen
    log: Path
    required: bool  # the job is done when every required process has exited 0
    ended: float | None = field(default=None)  # wall-clock time its exit was first seen


class ProcessUserError(UserError):
    """A job process rejected the user's input (it exited with code 2 and an ``error:`` line)."""


def log_tail(path: Path, lines: int = 3, width: int = 400) -> str:
    """The last non-empty lines of a log, joined into one line."""
    try:
        text = path.read_text(errors="replace").splitlines()
    except OSError:
        return "(no log)"
    tail = [ln.strip() for ln in text if ln.strip()][-lines:]
    return " | ".join(tail)[-width:] or "(empty log)"


def log_cause(path: Path, width: int = 400) -> str:
    """The line of a process's log that states why it failed (else its last lines)."""
    try:
        text = path.read_text(errors="replace").splitlines()
    except OSError:
        return "(no log)"
    for line in reversed(text):
        line = line.strip()
        if _CAUSE.match(line):
            return line[:width]
    return log_tail(path, width=width)


def _signal_name(num: int) -> str:
    try:
        return signal.Signals(num).name
    except ValueError:
        return f"signal {num}"


def _terminate_handler(signum, frame):  # SIGTERM behaves like Ctrl-C in the launcher
    raise KeyboardInterrupt


class Supervisor:
    """Start, watch and tear down the processes of one job (use as a context manager).

    Start processes from the thread that lives as long as the job (the parent-death signal
    fires when the forking *thread* exits).
    """

    def __init__(self, log_dir: Path, timeout_s: float, shm_token: str | None = None,
                 grace_s: float = 5.0, snapshot_shm: bool = False, settle_s: float = 1.0,
                 reaper: bool = True, run_dir: Path | None = None) -> None:
        self.log_dir = Path(log_dir)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.timeout_s, self.grace_s, self.shm_token = timeout_s, grace_s, shm_token
        self.settle_s = settle_s
        self.procs: list[Proc] = []
        self.peak_rss_mb: dict[str, float] = {}
        self.start = time.monotonic()
        self._old_sigterm = None
        self._threads: list[threading.Thread] = []
        # Stock DGL names its segments without a job token: then track what our processes map.
        self._shm_before = shm.names() if snapshot_shm else None
        self._shm_seen: set[str] = set()
        self._use_reaper = reaper
        self._reaper: subprocess.Popen | None = None
        # where the reaper removes dead writers' temporary files if the launcher dies
        self._run_dir = run_dir
        self._echo = {"mid_line": False}  # an echoed progress bar may end without a newline

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

    # --- the reaper -----------------------------------------------------------------------

    def _tell_reaper(self, line: str) -> None:
        if not self._use_reaper:
            return
        if self._reaper is None:
            # No log of its own: the run folder's logs/ holds exactly the job's processes.
            self._reaper = subprocess.Popen(
                [sys.executable, "-m", "dsgraph.cluster.reaper"], stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
                env=_light_env())
            if self.shm_token:
                self._tell_reaper(f"token {self.shm_token}")
            if self._run_dir is not None:
                self._tell_reaper(f"dir {Path(self._run_dir).resolve()}")
        try:
            self._reaper.stdin.write(f"{line}\n".encode())
            self._reaper.stdin.flush()
        except (BrokenPipeError, OSError, ValueError):
            pass

    def _close_reaper(self) -> None:
        if self._reaper is None:
            return
        self._tell_reaper("done")
        try:
            self._reaper.stdin.close()
            self._reaper.wait(10)
        except (OSError, ValueError, subprocess.TimeoutExpired):
            pass
        self._reaper = None

    # --- processes ------------------------------------------------------------------------

    def spawn(self, name: str, argv: Sequence[str], env: dict[str, str], required: bool = True,
              cwd: str | None = None, echo: bool = False) -> Proc:
        """Start ``argv`` in a new session (own process group), output to ``<log_dir>/<name>.log``.

        ``echo`` also copies the output to this process's stderr (rank 0's progress bar).
        The process dies with this one (parent-death signal, and the reaper).
        """
        log = self.log_dir / f"{name}.log"
        env = {**env, lifeline.ENV_LIFELINE: "1"}
        with log.open("ab") as fh:
            popen = subprocess.Popen(list(argv), env=env, cwd=cwd,
                                     stdout=subprocess.PIPE if echo else fh,
                                     stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     start_new_session=True,
                                     preexec_fn=partial(lifeline.child_setup, os.getpid()))
        self._tell_reaper(f"pid {popen.pid}")
        if echo:
            t = threading.Thread(target=_tee, args=(popen.stdout, log, self._echo),
                                 daemon=True)
            t.start()
            self._threads.append(t)
        proc = Proc(name, popen, log, required)
        self.procs.append(proc)
        return proc

    def _sample(self) -> None:
        for p in self.procs:
            if p.popen.poll() is None:
                mb = peak_rss_mb(p.popen.pid)  # 0 once the process is gone
                self.peak_rss_mb[p.name] = max(mb, self.peak_rss_mb.get(p.name, 0.0))
                if self._shm_before is not None:
                    for name in shm.mapped_segments(p.popen.pid) - self._shm_before \
                            - self._shm_seen:
                        self._shm_seen.add(name)
                        self._tell_reaper(f"shm {name}")

    def drain(self, timeout_s: float) -> None:
        """Wait up to ``timeout_s`` for the remaining (non-required) processes to exit by themselves."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and any(p.popen.poll() is None for p in self.procs):
            self._sample()
            time.sleep(0.1)

    def _failed(self) -> list[Proc]:
        now = time.time()
        out = []
        for p in self.procs:
            rc = p.popen.poll()
            if rc is not None and p.ended is None:
                p.ended = now
            if rc not in (None, 0):
                out.append(p)
        return out

    def wait(self, poll_s: float = 0.1) -> None:
        """Block until every required process exits 0; raise on the first fault.

        The fault is the process that failed first on its own (see :meth:`culprit`); a process
        that rejected the user's input (exit code 2 with an ``error:`` line) raises
        :class:`ProcessUserError`, anything else :class:`JobFailed`.
        """
        try:
            while True:
                self._sample()
                failed = self._failed()
                if failed:
                    # Peers of a failed process fail soon after it, often with a louder error:
                    # let them settle, then blame the one that failed first on its own.
                    deadline = time.monotonic() + self.settle_s
                    while time.monotonic() < deadline and \
                            any(p.popen.poll() is None for p in self.procs if p not in failed):
                        time.sleep(0.05)
                        failed = self._failed()
                    raise self.describe(self.culprit(failed))
                if all(p.popen.poll() is not None for p in self.procs if p.required):
                    return
                if time.monotonic() - self.start > self.timeout_s:
                    alive = [p.name for p in self.procs if p.popen.poll() is None]
                    raise JobFailed(f"job timed out after {self.timeout_s:g} s; still running: "
                                    f"{', '.join(alive)}; log {self.procs[0].log}: "
                                    f"{log_tail(self.procs[0].log)}")
                time.sleep(poll_s)
        except KeyboardInterrupt:
            raise JobFailed("job interrupted; all processes stopped") from None

    @staticmethod
    def culprit(failed: list[Proc]) -> Proc:
        """The process to blame among ``failed``: killed by a signal before one that raised on
        its own, before one that lost a peer (a broken collective or connection); within each,
        the earliest to fail (its log's last write, or when its exit was seen)."""
        def rank(p: Proc) -> tuple[int, float]:
            if p.popen.returncode < 0:
                kind = 0
            else:
                kind = 2 if _PEER_ERROR.search(log_cause(p.log)) else 1
            try:
                when = min(p.ended or time.time(), p.log.stat().st_mtime) if kind else p.ended
            except OSError:
                when = p.ended
            return kind, when or 0.0

        return min(failed, key=rank)

    @staticmethod
    def describe(p: Proc) -> Exception:
        """The one-line error for process ``p``'s failure."""
        rc = p.popen.returncode
        if rc < 0:  # its log ends wherever the signal hit it: no cause to quote
            return JobFailed(f"process {p.name} (pid {p.popen.pid}) was killed by "
                             f"{_signal_name(-rc)}; log {p.log}")
        cause = log_cause(p.log)
        if rc == 2 and cause.startswith("error: "):
            return ProcessUserError(f"{p.name}: {cause[len('error: '):]} (log {p.log})")
        return JobFailed(f"process {p.name} (pid {p.popen.pid}) exited with code {rc}: "
                         f"{cause}; log {p.log}")

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
        if self._echo["mid_line"]:  # the launcher's own message starts on a line of its own
            try:
                sys.stderr.write("\n")
                sys.stderr.flush()
            except (ValueError, OSError):
                pass
            self._echo["mid_line"] = False
        shm.remove_token(self.shm_token)
        if self._shm_seen:
            shm.remove_unshared(self._shm_seen, exclude={os.getpid()})
        self._close_reaper()


def _light_env() -> dict[str, str]:
    """The reaper's environment: this one, with dsgraph importable from anywhere."""
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def _tee(stream, log: Path, state: dict) -> None:
    """Copy a child's output to its log and to our stderr until it closes."""
    with log.open("ab") as fh:
        for chunk in iter(lambda: stream.read1(65536), b""):
            fh.write(chunk)
            fh.flush()
            try:
                sys.stderr.buffer.write(chunk)
                sys.stderr.flush()
                state["mid_line"] = not chunk.endswith(b"\n")
            except (ValueError, OSError):
                pass


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def remove_shm(token: str | None) -> list[str]:
    """Remove /dev/shm entries whose name contains the job's token; return their names."""
    return shm.remove_token(token)
