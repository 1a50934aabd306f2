"""Supervisor: every process of a job in its own process group, one log each; the first failure,
a hang, a timeout, Ctrl-C or SIGTERM ends them all and removes the job's shared-memory segments.

A hang is a live process (or a child of one: DGL's samplers) that made no progress for
``heartbeat_s``: stopped (SIGSTOP, a debugger) or its heartbeat silent (:mod:`.heartbeat`,
:mod:`.hangs`); it is named as the job's fault, also when a peer's collective timed out first.
A run folder that turned read-only or full is named as the cause of whatever failed with it.
Rank 0's output is echoed to the console without its traceback blocks and DGL's and gloo's chatter
(:mod:`.console`, :mod:`.chatter`; the log keeps everything); why a process failed is read
from its log (:mod:`.logs`); memory, and why a SIGKILL likely means OOM: :mod:`.memwatch`.

However the launcher itself ends, its processes end with it: each gets the parent-death signal
(:mod:`.lifeline`; one forked by a preload server, :mod:`.preload`, is killed by that server
when the launcher's connection closes), and a reaper process (:mod:`.reaper`) kills what is left
and removes the job's segments when the launcher dies without cleaning up.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from functools import partial
from pathlib import Path
from typing import Sequence

from dsgraph.cluster import heartbeat, lifeline, preload, shm, stacks
from dsgraph.cluster.console import tee
from dsgraph.cluster.hangs import HangWatch, Stall
from dsgraph.cluster.logs import is_peer_error, log_cause, log_tail, signal_name
from dsgraph.cluster.memwatch import MemoryWatch, oom_hint
from dsgraph.cluster.proc import Proc
from dsgraph.cluster.reaper import ReaperLink
from dsgraph.errors import JobFailed, StorageError, UserError
from dsgraph.fsutil import storage_errors, storage_fault

# How often the supervisor looks for processes that make no progress.
_CHECK_EVERY_S = 0.5


class ProcessUserError(UserError):
    """A job process rejected the user's input (it exited with code 2 and an ``error:`` line)."""


def _peer_failure(p: Proc) -> bool:
    """Whether exited process ``p`` failed only because a peer did (its log's cause says so)."""
    return is_peer_error(log_cause(p.log))


def _terminate_handler(signum, frame):  # SIGTERM behaves like Ctrl-C in the launcher
    raise KeyboardInterrupt


class Supervisor:
    """Start, watch and tear down the processes of one job (use as a context manager).

    Start processes from the thread that lives as long as the job (the parent-death signal
    fires when the forking *thread* exits).
    """

    def __init__(self, log_dir: Path, timeout_s: float, shm_token: str | None = None,
                 grace_s: float = 5.0, snapshot_shm: bool = False, settle_s: float = 1.0,
                 reaper: bool = True, run_dir: Path | None = None,
                 heartbeat_s: float = 0.0) -> None:
        self.log_dir = Path(log_dir)
        with storage_errors(self.log_dir, "the job's logs"):
            self.log_dir.mkdir(parents=True, exist_ok=True)
        self.timeout_s, self.grace_s, self.shm_token = timeout_s, grace_s, shm_token
        self.settle_s = settle_s
        self.heartbeat_s = heartbeat_s  # 0: hangs are not watched for (only named on a fault)
        self.hangs = HangWatch(heartbeat_s)
        self.procs: list[Proc] = []
        self.memory = MemoryWatch()
        self.peak_rss_mb = self.memory.peak_rss_mb  # per process, MiB
        self._stopping = False  # shutdown began: a SIGKILL from here on may be its own
        self.start = time.monotonic()
        self._old_sigterm = None
        self._threads: list[threading.Thread] = []
        # Stock DGL names its segments without a job token: then track what our processes map.
        self._shm_before = shm.names() if snapshot_shm else None
        self._shm_seen: set[str] = set()
        # the reaper removes dead writers' temporary files in run_dir if the launcher dies
        self._reaper = ReaperLink(shm_token, run_dir) if reaper else None
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

    def _tell_reaper(self, line: str) -> None:
        if self._reaper is not None:
            self._reaper.tell(line)

    # --- processes ------------------------------------------------------------------------

    def heartbeat_env(self, name: str) -> dict[str, str]:
        """The environment that makes process ``name`` beat into its heartbeat file (empty when
        hangs are not watched for); :meth:`spawn` adds it, a wrapper command must carry it."""
        if self.heartbeat_s <= 0:
            return {}
        return heartbeat.env_for(self._beat_path(name), self.heartbeat_s)

    def _beat_path(self, name: str) -> Path:
        return self.log_dir / f"{name}{heartbeat.SUFFIX}"

    def spawn(self, name: str, argv: Sequence[str], env: dict[str, str], required: bool = True,
              cwd: str | None = None, echo: bool = False, beats: bool = True,
              local: bool = True) -> Proc:
        """Start ``argv`` in a new session (own process group), output to ``<log_dir>/<name>.log``.

        ``echo`` also copies the output to this process's stderr (rank 0's progress bar), less
        traceback blocks. ``beats``: the process can write its heartbeat file here (it runs
        on this host or shares its filesystem); a silent one is then a hang. ``local``: its pid
        is the process (its memory can be read here), not an ssh client's.
        The process dies with this one (parent-death signal, and the reaper).
        """
        log = self.log_dir / f"{name}.log"
        env = {**env, lifeline.ENV_LIFELINE: "1"}
        beat = self._beat_path(name) if beats and self.heartbeat_s > 0 else None
        with storage_errors(log, "the job's logs"):
            if beat is not None:
                beat.unlink(missing_ok=True)  # an earlier run's beats are not this process's
            fh = log.open("ab")
        if beat is not None:
            env.update(self.heartbeat_env(name))
        with fh:
            server = preload.socket_for(argv, env)
            popen = _spawn_preloaded(server, argv, env, cwd, fh, echo) if server else None
            if popen is None:
                popen = subprocess.Popen(list(argv), env=env, cwd=cwd,
                                         stdout=subprocess.PIPE if echo else fh,
                                         stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         start_new_session=True,
                                         preexec_fn=partial(lifeline.child_setup, os.getpid()))
        self._tell_reaper(f"pid {popen.pid}")
        proc = Proc(name, popen, log, required, beat=beat,
                    hush=threading.Event() if echo else None, local=local)
        if echo:
            t = threading.Thread(target=tee, args=(popen.stdout, log, self._echo, proc.hush),
                                 daemon=True)
            t.start()
            self._threads.append(t)
        self.procs.append(proc)
        return proc

    def _sample(self) -> None:
        live = [p for p in self.procs if p.popen.poll() is None]
        self.memory.sample((p.name, p.popen.pid, p.local) for p in live)
        for p in live if self._shm_before is not None else ():
            for name in shm.mapped_segments(p.popen.pid) - self._shm_before - self._shm_seen:
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

        The fault is the process that failed first on its own (see :meth:`culprit`), or a live
        one that made no progress for ``heartbeat_s`` (see :meth:`stalls`; it is also preferred
        to processes that only lost a peer, and named when the job times out); a process that
        rejected the user's input (exit code 2 with an ``error:`` line) raises
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
                    raise self.blame(failed)
                if all(p.popen.poll() is not None for p in self.procs if p.required):
                    return
                if self.hangs.seconds_since_check() >= _CHECK_EVERY_S:
                    # (watching or not, when a process stopped is noted: a fault may name it)
                    limit = self.heartbeat_s if self.heartbeat_s > 0 else float("inf")
                    hung = self.stalls(limit, self.heartbeat_s)
                    if hung:
                        raise self._hang_error(hung[0])
                if time.monotonic() - self.start > self.timeout_s:
                    raise self._timed_out()
                time.sleep(poll_s)
        except KeyboardInterrupt:
            raise JobFailed("job interrupted; all processes stopped") from None

    def _timed_out(self) -> JobFailed:
        head = f"job timed out after {self.timeout_s:g} s"
        stuck = self.stalls(0.0, self._late_s())
        if stuck:  # what the rest waited for
            err = self._hang_error(stuck[0])
            return err if isinstance(err, StorageError) else JobFailed(f"{head}; {err}")
        alive = [p for p in self.procs if p.popen.poll() is None]
        # where each one waits (a deadlock some runs meet is found from this line alone)
        before = stacks.log_sizes([p.log for p in alive])
        stacks.request_dumps([p.popen.pid for p in alive if p.local])
        where = [f"{p.name} in {frames}" for p in alive
                 if (frames := stacks.main_thread_frames(p.log, before[p.log]))]
        return JobFailed(f"{head}; still running: {', '.join(p.name for p in alive)}"
                         f"{'; ' if where else ''}{'; '.join(where)}; log {self.procs[0].log}: "
                         f"{log_tail(self.procs[0].log)}")

    def stalls(self, stopped_s: float, silent_s: float) -> list[Stall]:
        """Live processes (their children included) stopped for ``stopped_s`` or more, or whose
        heartbeat has been silent for ``silent_s`` or more (0: not judged); the likeliest cause
        first (:meth:`HangWatch.stalls`)."""
        return self.hangs.stalls(self.procs, stopped_s, silent_s)

    def describe_stall(self, stall: Stall) -> JobFailed:
        """The one-line error for a process that makes no progress."""
        return self.hangs.describe(stall)

    def _late_s(self) -> float:
        """Silence that names a process once a peer has failed (0: heartbeats are off)."""
        return heartbeat.late_s(self.heartbeat_s) if self.heartbeat_s > 0 else 0.0

    def _hang_error(self, stall: Stall) -> Exception:
        """The error for ``stall``: a silent heartbeat in a folder that can no longer be
        written is that folder's fault, not the process's."""
        if not stall.stopped:
            fault = self.storage_fault(f"the heartbeat of process {stall.proc.name} "
                                       f"({stall.proc.beat}) could not be written")
            if fault is not None:
                return fault
        return self.describe_stall(stall)

    def storage_fault(self, what: str) -> StorageError | None:
        """The one-line error naming the run folder (or logs folder) when it has turned
        read-only, full or unwritable (``what``: what failed with it); None while it is fine."""
        for folder in dict.fromkeys(f for f in (self._run_dir, self.log_dir) if f is not None):
            cause = storage_fault(folder)
            if cause is not None:
                return StorageError(f"{folder}: cannot write the job's files: {cause}; {what}")
        return None

    def blame(self, failed: list[Proc]) -> Exception:
        """The error for a job in which ``failed`` processes exited non-zero: the
        :meth:`culprit`'s, unless it did not state its own cause (an ``error:`` line) while
        another process was stopped, or the run folder turned read-only or full, or (when it
        only lost a peer) another process's heartbeat went silent: a stopped peer makes the
        others' collectives and RPCs time out."""
        p = self.culprit(failed)
        rc = p.popen.returncode
        cause = log_cause(p.log) if rc > 0 else ""
        if rc > 0 and not cause.startswith("error: "):
            stuck = self.stalls(0.0, self._late_s())
            stopped = [s for s in stuck if s.stopped]
            if stopped:
                return self.describe_stall(stopped[0])
            fault = self.storage_fault(f"process {p.name} (pid {p.popen.pid}) exited with code "
                                       f"{rc}; log {p.log}")
            if fault is not None:
                return fault
            if stuck and is_peer_error(cause):
                return self.describe_stall(stuck[0])
        return self.describe(p)

    @staticmethod
    def culprit(failed: list[Proc]) -> Proc:
        """The process to blame among ``failed``: killed by a signal before one that raised on
        its own, before one that lost a peer (a broken collective or connection); within each,
        the earliest to fail (its log's last write, or when its exit was seen)."""
        def rank(p: Proc) -> tuple[int, float]:
            if p.popen.returncode < 0:
                kind = 0
            else:
                kind = 2 if _peer_failure(p) else 1
            try:
                when = min(p.ended or time.time(), p.log.stat().st_mtime) if kind else p.ended
            except OSError:
                when = p.ended
            return kind, when or 0.0

        return min(failed, key=rank)

    def describe(self, p: Proc) -> Exception:
        """The one-line error for process ``p``'s failure."""
        rc = p.popen.returncode
        if rc < 0:  # its log ends wherever the signal hit it: no cause to quote
            why = oom_hint(-rc, self._stopping, self.memory.last_rss_mb.get(p.name))
            return JobFailed(f"process {p.name} (pid {p.popen.pid}) was killed by "
                             f"{signal_name(-rc)}{why}; log {p.log}")
        cause = log_cause(p.log)
        if rc == 2 and cause.startswith("error: "):
            return ProcessUserError(f"{p.name}: {cause[len('error: '):]} (log {p.log})")
        if cause.startswith("error: ") and self.storage_fault("") is not None:
            # it could not write in the run folder, which is full or read-only: the folder first
            return StorageError(f"{cause[len('error: '):]} (process {p.name}, pid "
                                f"{p.popen.pid}; log {p.log})")
        if cause.startswith("error: "):  # a fault it stated itself
            return JobFailed(f"process {p.name} (pid {p.popen.pid}) failed: "
                             f"{cause[len('error: '):]}; log {p.log}")
        return JobFailed(f"process {p.name} (pid {p.popen.pid}) exited with code {rc}: "
                         f"{cause}; log {p.log}")

    def shutdown(self) -> None:
        """SIGTERM every live process group, SIGKILL after the grace period, clean /dev/shm."""
        self._stopping = True
        live = [p for p in self.procs if p.popen.poll() is None]
        for p in live:  # what a process says while it is being stopped is noise on the console
            if p.hush is not None:
                p.hush.set()
        for p in self.procs:  # children of exited leaders may still run in the group
            _signal_group(p.popen.pid, signal.SIGTERM)
        for p in self.procs:  # a stopped process gets its SIGTERM only once it continues
            _signal_group(p.popen.pid, signal.SIGCONT)
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
        for p in self.procs:  # a beat means nothing once its process is gone
            if p.beat is not None:
                try:
                    p.beat.unlink(missing_ok=True)
                except OSError:  # a read-only folder: what failed was said already
                    pass
        shm.remove_token(self.shm_token)
        if self._shm_seen:
            shm.remove_unshared(self._shm_seen, exclude={os.getpid()})
        if self._reaper is not None:
            self._reaper.close()
        self.memory.publish()


def _spawn_preloaded(server: str, argv: Sequence[str], env: dict[str, str], cwd: str | None,
                     log, echo: bool) -> preload.PreloadedProcess | None:
    """:meth:`Supervisor.spawn`'s process, forked by the preload server (:mod:`.preload`);
    None if the server refused it."""
    if not echo:
        return preload.spawn(server, argv, env, cwd, log.fileno())
    read_fd, write_fd = os.pipe()
    stdout = os.fdopen(read_fd, "rb")
    try:
        proc = preload.spawn(server, argv, env, cwd, write_fd, stdout=stdout)
    except BaseException:
        stdout.close()
        raise
    finally:
        os.close(write_fd)  # the child holds its own copy: the pipe ends when it exits
    if proc is None:
        stdout.close()
    return proc


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass
