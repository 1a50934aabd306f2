"""A process the preload server forks is what ``python -m`` would start (its own session,
environment, working directory, argv, output, exit status, atexit handlers, fresh random state),
and it never outlives its requester or the server."""
from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

import pytest

from dsgraph.cluster import preload

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """A preload server of these tests' own (the suite's may be off: DSGRAPH_TEST_PRELOAD=0)."""
    path = tmp_path_factory.mktemp("preload") / "fork.sock"
    proc = preload.start(path)
    yield str(path)
    proc.stdin.close()
    proc.wait(30)


def _spawn(server: str, log: Path, mode: str, cwd: Path) -> preload.PreloadedProcess:
    env = {**os.environ, "PROBE_MARKER": mode, "OMP_NUM_THREADS": "1",
           "PYTHONPATH": str(ROOT), preload.ENV_SOCKET: server}
    argv = [sys.executable, "-m", "tests.preload_probe", mode]
    assert preload.socket_for(argv, env) == server
    with log.open("wb") as fh:
        return preload.spawn(server, argv, env, str(cwd), fh.fileno())


def _gone(pid: int, within_s: float = 10.0) -> bool:
    """Whether ``pid`` ends within ``within_s`` (a zombie has ended: who reaps it is not ours)."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError):
            return True
        if state == "Z":
            return True
        time.sleep(0.05)
    return False


@pytest.mark.timeout(60)
def test_a_forked_process_is_what_python_m_starts(server, tmp_path):
    seen = []
    for k in range(2):
        log = tmp_path / f"probe{k}.log"
        proc = _spawn(server, log, "ok", tmp_path)
        assert proc.wait(30) == 0
        lines = log.read_text().splitlines()
        seen.append(json.loads(lines[0]))
        assert lines[1:] == ["atexit ran"]
        assert seen[-1]["pid"] == proc.pid
    for s in seen:
        assert s["pgid"] == s["sid"] == s["pid"]  # a session and process group of its own
        assert s["cwd"] == str(tmp_path) and s["path0"] == str(tmp_path)
        assert s["argv"][1:] == ["ok"] and s["argv"][0].endswith("preload_probe.py")
        assert s["marker"] == "ok" and s["name"] == "__main__"
        assert s["torch_loaded"]  # what it was forked for
    assert seen[0]["random"] != seen[1]["random"]  # each draws its own, as fresh processes do


@pytest.mark.timeout(60)
@pytest.mark.parametrize("mode, code, says", [("raise", 1, "RuntimeError: probe failed"),
                                              ("exit3", 3, "atexit ran")])
def test_exit_status_and_traceback_reach_the_requester(server, tmp_path, mode, code, says):
    log = tmp_path / "probe.log"
    proc = _spawn(server, log, mode, tmp_path)
    assert proc.wait(30) == code
    assert says in log.read_text()


@pytest.mark.timeout(60)
def test_a_signalled_process_reports_the_signal(server, tmp_path):
    proc = _spawn(server, tmp_path / "probe.log", "sleep", tmp_path)
    assert proc.poll() is None
    with pytest.raises(preload.subprocess.TimeoutExpired):
        proc.wait(0.3)
    os.killpg(proc.pid, signal.SIGTERM)
    assert proc.wait(30) == -signal.SIGTERM


@pytest.mark.timeout(60)
def test_the_process_dies_when_its_requester_goes(server, tmp_path):
    proc = _spawn(server, tmp_path / "probe.log", "sleep", tmp_path)
    time.sleep(0.5)
    assert proc.poll() is None
    proc._sock.close()  # what the kernel does when the requester dies, however it dies
    assert _gone(proc.pid), "the forked process outlived its requester"


@pytest.mark.timeout(60)
def test_the_processes_die_with_the_server(tmp_path):
    path = tmp_path / "own.sock"
    own = preload.start(path)
    try:
        proc = _spawn(str(path), tmp_path / "probe.log", "sleep", tmp_path)
        time.sleep(0.5)
        own.kill()
        own.wait(10)
        assert _gone(proc.pid), "the forked process outlived the server"
        assert proc.wait(10) == -signal.SIGKILL
    finally:
        own.kill()
        own.wait(10)


@pytest.mark.timeout(90)
def test_a_command_runs_forked_when_the_caller_names_a_server(server, tmp_path, monkeypatch):
    """:func:`preload.run_command`: forked by the server this process names (torch already
    loaded in it), its stdout and stderr apart, its exit code, the environment given (without
    the server: the command's own processes would start fresh); fresh where no server is named;
    an overrunning command's session killed and ``TimeoutExpired`` raised."""
    env = {**preload.fresh_env(), "PROBE_MARKER": "cmd", "OMP_NUM_THREADS": "1",
           "PYTHONPATH": str(ROOT)}
    argv = [sys.executable, "-m", "tests.preload_probe", "raise"]
    monkeypatch.setenv(preload.ENV_SOCKET, server)
    res = preload.run_command(argv, env, str(tmp_path), timeout=60)
    seen = json.loads(res.stdout.splitlines()[0])
    assert res.returncode == 1 and "RuntimeError: probe failed" in res.stderr
    assert "probe failed" not in res.stdout and "atexit ran" in res.stdout
    assert seen["torch_loaded"] and seen["marker"] == "cmd" and seen["cwd"] == str(tmp_path)
    assert seen["pid"] == seen["sid"]  # a session of its own
    monkeypatch.delenv(preload.ENV_SOCKET)
    fresh = preload.run_command([*argv[:-1], "exit3"], env, str(tmp_path), timeout=60)
    assert fresh.returncode == 3 and not json.loads(fresh.stdout.splitlines()[0])["torch_loaded"]
    monkeypatch.setenv(preload.ENV_SOCKET, server)
    log = tmp_path / "pid"
    with pytest.raises(preload.subprocess.TimeoutExpired):
        preload.run_command([sys.executable, "-c", "import os, time; open(%r, 'w').write("
                             "str(os.getpid())); time.sleep(120)" % str(log)], env,
                            str(tmp_path), timeout=3)
    assert _gone(int(log.read_text()))


@pytest.mark.timeout(60)
def test_a_started_command_can_be_signalled_and_killed(server, tmp_path, monkeypatch):
    """:func:`preload.start_command`'s process (forked) takes signals and ``kill`` as a
    ``Popen`` would; its stderr goes to the file given."""
    monkeypatch.setenv(preload.ENV_SOCKET, server)
    env = {**preload.fresh_env(), "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    with (tmp_path / "err").open("w") as err:
        proc = preload.start_command([sys.executable, "-m", "tests.preload_probe", "sleep"],
                                     env, str(ROOT), stderr=err)
    assert isinstance(proc, preload.PreloadedProcess)
    time.sleep(0.5)
    proc.send_signal(signal.SIGINT)  # Ctrl-C: KeyboardInterrupt, then ended by SIGINT as python is
    assert proc.wait(30) == -signal.SIGINT
    assert "KeyboardInterrupt" in (tmp_path / "err").read_text()
    proc.kill()  # ended: nothing to signal, no error
    again = preload.start_command([sys.executable, "-m", "tests.preload_probe", "sleep"], env,
                                  str(ROOT))
    again.kill()
    assert again.wait(30) == -signal.SIGKILL
