"""The supervisor names the real cause: a stopped or silent process (a child of a job process, a
sampler, included) when a peer's collective times out first, whatever cluster.heartbeat_s; and a
run folder that turned read-only or full, where the job's processes could not say so themselves.
(Real jobs: tests/dist/test_faults.py.)"""
from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

from benchmarks import storage
from dsgraph.cluster.supervise import Supervisor
from dsgraph.errors import JobFailed, StorageError

ROOT = Path(__file__).resolve().parents[1]
# What a gloo collective says when its peer never answered within train.collective_timeout_s.
GLOO_TIMEOUT = "echo 'RuntimeError: Application timeout caused pair closure' >&2; exit 1"


def _stopped(pid: int) -> None:
    os.kill(pid, 19)  # SIGSTOP
    deadline = time.time() + 5
    while time.time() < deadline and psutil.Process(pid).status() != psutil.STATUS_STOPPED:
        time.sleep(0.02)


def _children(pid: int, n: int) -> list[psutil.Process]:
    deadline = time.time() + 10
    while time.time() < deadline:
        kids = psutil.Process(pid).children()
        if len(kids) >= n:
            return kids
        time.sleep(0.05)
    raise AssertionError(f"process {pid} did not start {n} children")


@pytest.mark.timeout(60)
def test_a_gloo_timeout_is_blamed_on_the_stopped_peer_under_the_default_heartbeat(tmp_path):
    with pytest.raises(JobFailed) as info:
        with Supervisor(tmp_path, timeout_s=60, heartbeat_s=60.0, grace_s=2.0) as sup:
            stopped = sup.spawn("server1", ["sleep", "60"], dict(os.environ))
            _stopped(stopped.popen.pid)
            sup.spawn("trainer1", ["sh", "-c", f"sleep 1; {GLOO_TIMEOUT}"], dict(os.environ))
            sup.wait()
    msg = str(info.value)
    assert msg.startswith(f"process server1 (pid {stopped.popen.pid}) made no progress"), msg
    assert "it is stopped" in msg and str(tmp_path / "server1.log") in msg


@pytest.mark.timeout(60)
def test_a_stopped_child_of_a_job_process_is_named_not_the_peer_that_timed_out(tmp_path):
    # a trainer whose sampler (a child process) is stopped; the trainer itself runs
    trainer = "sleep 60 & sleep 60 & wait"
    with pytest.raises(JobFailed) as info:
        with Supervisor(tmp_path, timeout_s=60, heartbeat_s=60.0, grace_s=2.0) as sup:
            waiting = sup.spawn("trainer0", ["sh", "-c", trainer], dict(os.environ))
            sampler = _children(waiting.popen.pid, 2)[1]
            _stopped(sampler.pid)
            sup.spawn("trainer1", ["sh", "-c", f"sleep 1; {GLOO_TIMEOUT}"], dict(os.environ))
            sup.wait()
    msg = str(info.value)
    assert msg.startswith(f"process trainer0's child process (pid {sampler.pid}) made no "
                          f"progress"), msg
    assert "it is stopped" in msg and str(tmp_path / "trainer0.log") in msg
    assert not psutil.pid_exists(sampler.pid) or sampler.status() == psutil.STATUS_ZOMBIE


@pytest.mark.timeout(60)
def test_a_silent_heartbeat_is_named_when_a_peer_times_out_before_heartbeat_s(tmp_path):
    beats_then_hangs = 'for i in 1 2 3; do touch "$DSGRAPH_HEARTBEAT"; sleep 0.5; done; sleep 60'
    beats = 'while true; do touch "$DSGRAPH_HEARTBEAT"; sleep 0.5; done'
    with pytest.raises(JobFailed) as info:
        # heartbeat_s = 20: a hang on its own is named after 20 s; after a peer's timeout, a
        # process silent for a few beats (beat_every 2 s: 10 s) is the cause
        with Supervisor(tmp_path, timeout_s=60, heartbeat_s=20.0, grace_s=2.0) as sup:
            sup.spawn("trainer0", ["sh", "-c", beats], dict(os.environ))
            hung = sup.spawn("server0", ["sh", "-c", beats_then_hangs], dict(os.environ))
            sup.spawn("trainer1", ["sh", "-c", f"sleep 13; {GLOO_TIMEOUT}"], dict(os.environ))
            t0 = time.monotonic()
            sup.wait()
    msg = str(info.value)
    assert re.match(rf"process server0 \(pid {hung.popen.pid}\) made no progress for 1\d s: its "
                    rf"heartbeat \(server0.heartbeat\) is silent", msg), msg
    assert time.monotonic() - t0 < 18


@pytest.fixture
def disk(tmp_path):
    """A small tmpfs (skipped where mounting is not allowed)."""
    try:
        with storage.tmpfs(tmp_path / "disk", "4m") as path:
            yield path
    except storage.Skip as exc:
        pytest.skip(str(exc))


@pytest.mark.timeout(60)
def test_a_run_folder_turned_read_only_is_named_and_shutdown_survives_it(disk):
    # beats until the folder turns read-only (a beat that fails is skipped, as Beater does)
    beats = 'while true; do touch "$DSGRAPH_HEARTBEAT" 2>/dev/null; sleep 0.3; done'
    try:
        with pytest.raises(StorageError) as info:
            with Supervisor(disk / "logs", timeout_s=60, heartbeat_s=2.0, grace_s=2.0,
                            run_dir=disk) as sup:
                procs = [sup.spawn(f"worker{r}", ["sh", "-c", beats], dict(os.environ))
                         for r in range(2)]
                time.sleep(1.0)
                storage.make_read_only(disk)
                sup.wait()  # every heartbeat goes silent: the folder is why
    finally:
        storage.unmount(disk)
    msg = str(info.value)
    assert msg.startswith(f"{disk}: cannot write the job's files: the file system is read-only "
                          f"(EROFS); the heartbeat of process worker"), msg
    assert all(p.popen.poll() is not None for p in procs)


@pytest.mark.timeout(60)
def test_a_process_that_could_not_say_why_in_a_full_folder_is_named_by_the_folder(disk):
    filler = storage.fill(disk)
    with pytest.raises(StorageError) as info:
        with Supervisor(disk / "logs", timeout_s=60, run_dir=disk) as sup:
            failed = sup.spawn("worker1", ["sh", "-c", "sleep 0.5; exit 1"], dict(os.environ))
            sup.spawn("worker0", ["sleep", "60"], dict(os.environ))
            sup.wait()
    filler.unlink()
    assert str(info.value) == (f"{disk}: cannot write the job's files: no space left on the "
                               f"device (ENOSPC); process worker1 (pid {failed.popen.pid}) "
                               f"exited with code 1; log {disk / 'logs' / 'worker1.log'}")


@pytest.mark.timeout(60)
def test_rank_0s_echo_keeps_draining_when_its_log_cannot_be_written(disk, capfd):
    from dsgraph.cluster.console import tee

    log = disk / "worker0.log"
    log.write_bytes(b"")
    storage.fill(disk)
    child = subprocess.Popen([sys.executable, "-c", "import sys\nfor i in range(3000): "
                              "print('epoch', i, 'x' * 200)"], stdout=subprocess.PIPE)
    t = threading.Thread(target=tee, args=(child.stdout, log, {"mid_line": False},
                                           threading.Event()))
    t.start()
    assert child.wait(30) == 0  # not blocked on a full pipe
    t.join(10)
    assert not t.is_alive()
    err = capfd.readouterr().err
    assert "epoch 2999" in err and "Traceback" not in err


@pytest.mark.timeout(60)
def test_a_worker_whose_log_cannot_take_its_error_line_still_exits_with_its_code():
    main = ("import atexit, time\n"
            "atexit.register(time.sleep, 60)  # as DGL's exit barrier waits for its peers\n"
            "from dsgraph.cluster.worker import run_process_main\n"
            "from dsgraph.errors import StorageError\n"
            "def main(): raise StorageError('/x: cannot write metrics.jsonl: no space left')\n"
            "run_process_main(main)\n")
    with open("/dev/full", "w") as full:  # every write: ENOSPC
        done = subprocess.run([sys.executable, "-c", main], stderr=full, timeout=30,
                              env=dict(os.environ, PYTHONPATH=str(ROOT)))  # never the 60 s
    assert done.returncode == 1
