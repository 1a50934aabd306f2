"""``python -m dsgraph.cluster.reaper``: ends a job whose launcher died, and removes its shm
and the temporary files its processes were writing.

The supervisor starts one per job, in its own session, and writes to its stdin one line per
event: ``pid N`` (a process group it started), ``token T`` (the job's shm token), ``shm NAME``
(a segment a job process mapped), ``dir PATH`` (the job's run folder), ``done`` (the launcher
cleaned up by itself). When stdin reaches end-of-file without ``done`` the launcher is gone,
however it died (kill -9 included): the reaper kills every recorded process group, waits for
them, removes the job's segments and the temporary files of writes they left unfinished in the
run folder (a checkpoint being written, say), and exits. It imports nothing heavy, so it starts
in a fraction of a second.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from dsgraph import fsutil
from dsgraph.cluster import shm


class ReaperLink:
    """The launcher's side: starts the reaper on the first event, tells it each one."""

    def __init__(self, token: str | None, run_dir: Path | None) -> None:
        self.token, self.run_dir = token, run_dir
        self._proc: subprocess.Popen | None = None

    def tell(self, line: str) -> None:
        """Send one event line (starting the reaper first if needed)."""
        if self._proc is None:
            # No log of its own: the run folder's logs/ holds exactly the job's processes.
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "dsgraph.cluster.reaper"], stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
                env=light_env())
            if self.token:
                self.tell(f"token {self.token}")
            if self.run_dir is not None:
                self.tell(f"dir {Path(self.run_dir).resolve()}")
        try:
            self._proc.stdin.write(f"{line}\n".encode())
            self._proc.stdin.flush()
        except (BrokenPipeError, OSError, ValueError):
            pass

    def close(self) -> None:
        """The launcher cleaned up by itself: tell the reaper, which then exits."""
        if self._proc is None:
            return
        self.tell("done")
        try:
            self._proc.stdin.close()
            self._proc.wait(10)
        except (OSError, ValueError, subprocess.TimeoutExpired):
            pass
        self._proc = None


def light_env() -> dict[str, str]:
    """The reaper's environment: this one, with dsgraph importable from anywhere."""
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    try:  # a zombie of a dead launcher is reaped by init soon; count it as gone
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return True


def reap(pids: list[int], token: str | None, segments: set[str], wait_s: float = 15.0,
         run_dirs: tuple[str, ...] = ()) -> None:
    """Kill the process groups ``pids``, wait for them, remove the job's segments and the
    temporary files of dead writers in ``run_dirs``."""
    for pid in pids:
        try:
            os.killpg(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline and not all(_gone(p) for p in pids):
        time.sleep(0.05)
    shm.remove_token(token)
    shm.remove_unshared(segments, exclude={os.getpid()})
    for path in run_dirs:
        fsutil.remove_orphaned_temps_in(path)


def main() -> None:
    """Read events from stdin until end-of-file; reap unless the launcher said ``done``."""
    pids: list[int] = []
    token: str | None = None
    segments: set[str] = set()
    run_dirs: list[str] = []
    done = False
    for line in sys.stdin:
        kind, _, value = line.strip().partition(" ")
        if kind == "pid":
            pids.append(int(value))
        elif kind == "token":
            token = value
        elif kind == "shm":
            segments.add(value)
        elif kind == "dir":
            run_dirs.append(value)
        elif kind == "done":
            done = True
    if not done:
        reap(pids, token, segments, run_dirs=tuple(run_dirs))


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C meant for the launcher is not ours
    main()
