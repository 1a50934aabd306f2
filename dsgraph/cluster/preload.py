"""Job processes forked from one process that imported torch and DGL already (for test suites).

Every job process (a DistGraph server, a trainer, a SAR worker) imports torch and DGL before it
does anything: ~2.5 s of CPU each. A job of tiny graphs spends most of its CPU there, and a test
suite runs hundreds of them. ``python -m dsgraph.cluster.preload SOCKET`` imports them once and
then forks, on request, a process that runs ``python -m MODULE ARGS`` as a fresh interpreter
would (its own session, environment, working directory, stdin/stdout/stderr, fresh random
state), in milliseconds. The supervisor uses it for ``python -m`` processes on this host when
the environment names a server in :data:`ENV_SOCKET` (``tests/conftest.py`` starts one per test
process); otherwise, and always in benchmarks, processes start fresh. Test harnesses start the
commands they run as a user would (``python -m train`` of a fault case, ``python -m partition``
checked for its exit code) through it too (:func:`start_command`, :func:`run_command`), those
commands' own job processes fresh where their environment names no server.

Why not everywhere: a forked process shares the server's pages copy-on-write, so its memory
(PSS) is not what a fresh process would use, and the interpreter was started with the server's
``OMP_NUM_THREADS`` (so only requests with the same value are forked).

Contract with the supervisor (:class:`PreloadedProcess`, a stand-in for ``subprocess.Popen``):
the pid is the job process itself, the leader of its own process group; the server reaps it and
reports its exit status. If the requester goes away (its connection closes) before the process
ends, the server kills its process group; if the server dies, its children die with it
(parent-death signal), so nothing outlives the job either way.
"""
from __future__ import annotations

import contextlib
import json
import os
import random
import runpy
import select
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Sequence

from dsgraph.cluster import lifeline

ENV_SOCKET = "DSGRAPH_PRELOAD_SOCKET"
# What is imported before forking: what every job process imports (the rest is cheap).
PRELOADED = ("torch", "torch.distributed", "dgl", "dgl.distributed", "dgl.nn", "numpy",
             "scipy.sparse")
_MAX_REQUEST = 1 << 20  # bytes: one request (argv, environment, working directory)
_SERVER_THREADS = "1"  # the OMP_NUM_THREADS the server is started with (libgomp reads it once)
_ROOT = str(Path(__file__).resolve().parents[2])  # the checkout whose dsgraph this process runs


def socket_for(argv: Sequence[str], env: dict[str, str]) -> str | None:
    """The preload server that can start ``argv`` with ``env``, or None (start it fresh)."""
    path = env.get(ENV_SOCKET)
    if not path or len(argv) < 3 or argv[0] != sys.executable or argv[1] != "-m":
        return None
    if env.get("OMP_NUM_THREADS") != _SERVER_THREADS:
        return None
    return path


def fresh_env(env: dict[str, str] | None = None) -> dict[str, str]:
    """``env`` (default: this process's) without the preload server: jobs started with it
    start fresh processes (benchmarks' memory figures, tests that watch a process tree)."""
    return {k: v for k, v in (os.environ if env is None else env).items() if k != ENV_SOCKET}


class PreloadedProcess:
    """A process the preload server forked: what the supervisor uses of ``subprocess.Popen``."""

    def __init__(self, args: Sequence[str], sock: socket.socket, pid: int, stdout=None) -> None:
        self.args, self.pid, self.stdout = list(args), pid, stdout
        self.returncode: int | None = None
        self._sock = sock

    def poll(self) -> int | None:
        """The exit code (negative: killed by that signal) once the process ended, else None."""
        if self.returncode is None:
            try:
                msg = self._sock.recv(64, socket.MSG_DONTWAIT)
            except BlockingIOError:
                return None
            except OSError:
                msg = b""
            # No message: the server is gone, and its children were killed with it.
            self.returncode = (os.waitstatus_to_exitcode(int(msg.split()[1])) if msg
                               else -signal.SIGKILL)
            self._sock.close()
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        """Wait for the process to end (``subprocess.TimeoutExpired`` after ``timeout`` s)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            left = 0.1 if deadline is None else deadline - time.monotonic()
            if left <= 0:
                raise subprocess.TimeoutExpired(self.args, timeout)
            select.select([self._sock], [], [], min(left, 0.1))
        return self.returncode

    def send_signal(self, sig: int) -> None:
        """Signal the process, unless it has ended."""
        if self.poll() is None:
            os.kill(self.pid, sig)

    def kill(self) -> None:
        """SIGKILL the process, unless it has ended."""
        self.send_signal(signal.SIGKILL)


def spawn(path: str, argv: Sequence[str], env: dict[str, str], cwd: str | None,
          stdout_fd: int, stdout=None, stderr_fd: int | None = None) -> PreloadedProcess | None:
    """Ask the server at ``path`` to run ``argv`` (``python -m MODULE ...``), its output to
    ``stdout_fd`` (its stderr too, unless ``stderr_fd``), stdin from /dev/null; ``stdout`` is
    the reading end the caller keeps, if any. None: the server refused (it imported dsgraph from
    another checkout than the caller's)."""
    request = {"module": argv[2], "args": list(argv[3:]), "env": env,
               "cwd": os.path.abspath(cwd or os.getcwd()), "root": _ROOT}
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        sock.connect(path)
        with open(os.devnull, "rb") as devnull:
            fds = [devnull.fileno(), stdout_fd, stdout_fd if stderr_fd is None else stderr_fd]
            socket.send_fds(sock, [json.dumps(request).encode()], fds)
        reply = sock.recv(64)
    except OSError:
        sock.close()
        raise
    if not reply.isdigit():
        sock.close()
        return None
    return PreloadedProcess(argv, sock, int(reply), stdout)


def start_command(argv: Sequence[str], env: dict[str, str], cwd: str | None, stdout=None,
                  stderr=None) -> "subprocess.Popen | PreloadedProcess":
    """``argv`` in a session of its own, its output to the open files ``stdout`` and ``stderr``
    (None: /dev/null), stdin from /dev/null, Ctrl-C acting as in a terminal: forked by the
    preload server this process's environment names when it can start it, else fresh.

    For test harnesses that run a command (a launcher) as a user would: ``env`` need not name
    the server, and then the command's own job processes start fresh, as its children.
    """
    path = os.environ.get(ENV_SOCKET)
    with open(os.devnull, "wb") as devnull:
        out = (stdout or devnull).fileno()
        err = (stderr or devnull).fileno()
        if path and socket_for(argv, {**env, ENV_SOCKET: path}):
            proc = spawn(path, argv, env, cwd, out, stderr_fd=err)
            if proc is not None:
                return proc
        return subprocess.Popen(list(argv), cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                                stdout=out, stderr=err, start_new_session=True,
                                preexec_fn=default_sigint)


def default_sigint() -> None:
    """In a started command: Ctrl-C acts as in a terminal. A command started in the background
    by a shell without job control inherits SIGINT ignored, and Python then keeps it ignored,
    so a test run that way would see a launcher shrug off the Ctrl-C under test."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def run_command(argv: Sequence[str], env: dict[str, str] | None, cwd: str | None,
                timeout: float) -> subprocess.CompletedProcess:
    """``subprocess.run(argv, capture_output=True, text=True, timeout=timeout)`` through
    :func:`start_command` (``env`` None: this process's); on a timeout its whole session is
    killed before ``TimeoutExpired`` is raised."""
    env = dict(os.environ if env is None else env)
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = start_command(argv, env, cwd, out, err)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            raise
        texts = []
        for fh in (out, err):
            fh.seek(0)
            texts.append(fh.read().decode("utf-8", "replace"))
    return subprocess.CompletedProcess(list(argv), proc.returncode, *texts)


def _become(request: dict, fds: list[int], server_pid: int, started: int,
            inherited: list[socket.socket]) -> None:
    """In the forked child: turn into ``python -m MODULE ARGS`` as the request describes
    (``started``: written to once it leads a session of its own)."""
    for s in inherited:
        s.close()
    os.setsid()  # a process group of its own, as the supervisor's fresh processes have
    lifeline.die_with_parent(signal.SIGKILL, server_pid)
    os.write(started, b"1")
    os.close(started)
    for target, fd in enumerate(fds):  # stdin, stdout, stderr
        os.dup2(fd, target)
    for fd in set(fds):
        if fd > 2:
            os.close(fd)
    for sig in (signal.SIGTERM, signal.SIGCHLD, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    # As `python -m` builds it: the working directory first, then PYTHONPATH, then the rest.
    extra = [p for p in request["env"].get("PYTHONPATH", "").split(os.pathsep) if p]
    sys.path[:] = [request["cwd"], *extra, *(p for p in sys.path[1:] if p not in extra)]
    random.seed()  # each fresh interpreter draws its own (ports, for one)
    import numpy as np
    np.random.seed()
    sys.argv = [request["module"], *request["args"]]
    runpy.run_module(request["module"], run_name="__main__", alter_sys=True)


def serve(path: str) -> None:
    """Accept requests on ``path`` and fork one job process per request, until stdin closes.

    No ``try``/``finally`` encloses the fork: the child runs its module from inside this loop,
    and its exceptions (and ``SystemExit``) must reach the interpreter's top level untouched.
    """
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener.bind(path)
    listener.listen(128)
    pending: list[socket.socket] = []  # connected, no request yet
    running: dict[socket.socket, int] = {}  # connection -> the pid it started
    owners: dict[int, socket.socket | None] = {}  # pid -> its connection (None: requester gone)
    print("ready", flush=True)
    while True:
        ready, _, _ = select.select([sys.stdin, listener, *pending, *running], [], [], 0.05)
        if sys.stdin in ready and not sys.stdin.buffer.read1(64):
            for pid in owners:
                _kill_group(pid)
            return
        for conn in ready:
            if conn is listener:
                pending.append(listener.accept()[0])
            elif conn in running:  # a requester only ever closes: its process must not outlive it
                if not conn.recv(64):
                    pid = running.pop(conn)
                    owners[pid] = None
                    _kill_group(pid)
                    conn.close()
            elif conn in pending:
                pending.remove(conn)
                msg, fds, _, _ = socket.recv_fds(conn, _MAX_REQUEST, 3)
                if not msg or len(fds) != 3:
                    conn.close()
                    for fd in fds:
                        os.close(fd)
                    continue
                request = json.loads(msg)
                if request.get("root") != _ROOT:  # its modules are not the ones imported here
                    conn.send(b"refused")
                    conn.close()
                    for fd in fds:
                        os.close(fd)
                    continue
                started_r, started_w = os.pipe()
                pid = os.fork()
                if pid == 0:
                    os.close(started_r)
                    _become(request, fds, os.getppid(), started_w,
                            [listener, conn, *pending, *running])
                    sys.exit(0)  # the module returned: exit as `python -m` would
                os.close(started_w)
                os.read(started_r, 1)  # its session exists before anyone may signal its group
                os.close(started_r)
                for fd in fds:
                    os.close(fd)
                running[conn], owners[pid] = pid, conn
                conn.send(str(pid).encode())
        _reap(running, owners)


def _reap(running: dict[socket.socket, int], owners: dict[int, socket.socket | None]) -> None:
    """Collect ended children and tell each one's requester its wait status."""
    while owners:
        pid, status = os.waitpid(-1, os.WNOHANG)
        if pid == 0:
            return
        conn = owners.pop(pid, None)
        if conn is not None:
            running.pop(conn, None)
            try:
                conn.send(f"exit {status}".encode())
            except OSError:
                pass
            conn.close()


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def start(path: Path) -> subprocess.Popen:
    """Start a server on socket ``path`` (it ends when the returned handle's stdin closes, or
    with this process); returns once it is ready to fork."""
    env = {**os.environ, "OMP_NUM_THREADS": _SERVER_THREADS, "MKL_NUM_THREADS": _SERVER_THREADS,
           "PYTHONUNBUFFERED": "1"}
    env.pop(ENV_SOCKET, None)
    proc = subprocess.Popen([sys.executable, "-u", "-m", "dsgraph.cluster.preload", str(path)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env,
                            preexec_fn=lambda: lifeline.die_with_parent(signal.SIGKILL))
    line = proc.stdout.readline()
    if line.strip() != b"ready":
        proc.kill()
        raise RuntimeError(f"the preload server did not start (it said {line!r})")
    return proc


def main() -> None:
    """``python -m dsgraph.cluster.preload SOCKET``: import, then serve."""
    import importlib
    for name in PRELOADED:
        importlib.import_module(name)
    serve(sys.argv[1])


if __name__ == "__main__":
    main()
