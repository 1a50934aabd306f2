"""The supervisor ends every process of a job on a failure, a timeout or Ctrl-C, and cleans shm."""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from benchmarks.faults import default_sigint
from dsgraph.cluster import shm
from dsgraph.cluster.spec import read_ip_config
from dsgraph.cluster.supervise import Supervisor
from dsgraph.errors import ConfigError, JobFailed, UserError

ROOT = Path(__file__).resolve().parents[1]


def _dead(pids: list[int]) -> bool:
    return all(not psutil.pid_exists(p) or psutil.Process(p).status() == psutil.STATUS_ZOMBIE
               for p in pids)


@pytest.mark.timeout(60)
def test_first_failure_names_process_and_log_tail_and_stops_the_rest(tmp_path):
    with pytest.raises(JobFailed) as info:
        with Supervisor(tmp_path, timeout_s=30) as sup:
            sleeper = sup.spawn("sleeper", ["sleep", "30"], dict(os.environ))
            sup.spawn("bad", ["sh", "-c", "echo starting; echo boom >&2; exit 3"], dict(os.environ))
            sup.wait()
    msg = str(info.value)
    assert "process bad" in msg and "code 3" in msg and "boom" in msg and "\n" not in msg
    assert _dead([sleeper.popen.pid])


@pytest.mark.timeout(60)
def test_timeout_kills_every_process_group_and_removes_job_shm(tmp_path):
    token = f"dsgtest{os.getpid()}"
    shm = Path("/dev/shm") / f"{token}m0_node~feat"
    t0 = time.monotonic()
    with pytest.raises(JobFailed, match="timed out"):
        with Supervisor(tmp_path, timeout_s=1.0, shm_token=token, grace_s=1.0) as sup:
            # a child that ignores SIGTERM and has a grandchild: SIGKILL of the group ends both
            p = sup.spawn("stubborn", ["sh", "-c", f"trap '' TERM; touch {shm}; sleep 30 & wait"],
                          dict(os.environ))
            sup.wait()
    assert time.monotonic() - t0 < 15
    assert not shm.exists()
    assert not [q for q in psutil.process_iter(["cmdline"])
                if q.info["cmdline"] == ["sleep", "30"] and q.ppid() == p.popen.pid]


LAUNCHER = (
    "import sys; from pathlib import Path\n"
    "from dsgraph.cluster.launch import run_workers\n"
    "from dsgraph.config import ClusterConfig\n"
    "from dsgraph.errors import cli_main\n"
    "cli_main(lambda: run_workers(Path(sys.argv[1]), ClusterConfig(), 'tests.sleep_worker', 2, "
    "timeout_s=60))()\n")


def _start_launcher(tmp_path: Path) -> tuple[subprocess.Popen, list[int]]:
    """A launcher of two sleeping gloo workers; returns it and the workers' pids once joined."""
    proc = subprocess.Popen([sys.executable, "-c", LAUNCHER, str(tmp_path)], cwd=ROOT,
                            stderr=subprocess.PIPE, text=True, preexec_fn=default_sigint)
    deadline = time.time() + 40
    workers: list[int] = []
    while time.time() < deadline and len(workers) < 2:
        workers = [c.pid for c in psutil.Process(proc.pid).children()
                   if "tests.sleep_worker" in " ".join(c.cmdline())]
        time.sleep(0.2)
    assert len(workers) == 2
    return proc, workers


@pytest.mark.timeout(90)
def test_ctrl_c_on_the_launcher_ends_all_workers(tmp_path):
    proc, workers = _start_launcher(tmp_path)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode != 0 and "interrupted" in err and "Traceback" not in err
    assert _dead(workers)


def _wait_dead(pids: list[int], timeout_s: float) -> bool:
    deadline = time.time() + timeout_s
    while time.time() < deadline and not _dead(pids):
        time.sleep(0.1)
    return _dead(pids)


REAPED = (
    "import os, sys; from pathlib import Path\n"
    "from dsgraph.cluster.supervise import Supervisor\n"
    "run = Path(sys.argv[1])\n"
    "with Supervisor(run / 'logs', 60, shm_token=sys.argv[2], run_dir=run) as sup:\n"
    "    for k in range(2):\n"
    "        sup.spawn(f'w{k}', ['sh', '-c', f'touch /dev/shm/{sys.argv[2]}m{k}_x; "
    "touch {run}/.checkpoint.pt.$$.w{k}.tmp; echo up; exec sleep 60'], dict(os.environ))\n"
    "    sup.wait()\n")


@pytest.mark.timeout(60)
def test_kill_9_of_the_launcher_ends_its_processes_and_the_reaper_removes_job_shm(tmp_path):
    """... and the temporary files its processes were writing in the run folder (a live
    writer's stay)."""
    token = shm.new_token()  # owned by this live test process: no other run reclaims it
    live = tmp_path / f".metrics.json.{os.getpid()}.x.tmp"
    live.touch()
    launcher = subprocess.Popen([sys.executable, "-c", REAPED, str(tmp_path), token], cwd=ROOT)
    try:
        deadline = time.time() + 30
        kids: list[psutil.Process] = []
        while time.time() < deadline and not (
                len(kids) == 3 and len(list(shm.SHM_DIR.glob(f"{token}*"))) == 2
                and len(list(tmp_path.glob(".checkpoint.pt.*.tmp"))) == 2):
            kids = psutil.Process(launcher.pid).children()
            time.sleep(0.1)
        assert len(kids) == 3, kids  # two job processes and the reaper
        launcher.kill()
        launcher.wait()
        t0 = time.time()
        assert _wait_dead([k.pid for k in kids], 20), "processes outlived their launcher"
        assert time.time() - t0 < 20
        assert list(shm.SHM_DIR.glob(f"{token}*")) == []
        while time.time() - t0 < 20 and list(tmp_path.glob(".checkpoint.pt.*.tmp")):
            time.sleep(0.1)  # the reaper removes them right after the segments
        assert list(tmp_path.glob(".checkpoint.pt.*.tmp")) == [] and live.exists()
    finally:
        for seg in shm.SHM_DIR.glob(f"{token}*"):
            seg.unlink()


def test_shm_of_dead_launchers_is_reclaimed_and_live_jobs_are_untouched():
    dead = subprocess.Popen(["true"])
    dead.wait()
    gone, live = shm.new_token(dead.pid), shm.new_token(os.getpid())
    segs = [shm.SHM_DIR / f"{gone}m0_node~feat", shm.SHM_DIR / f"graph_{gone}_m1",
            shm.SHM_DIR / f"{live}m0_node~feat"]
    try:
        for seg in segs:
            seg.touch()
        removed = shm.reclaim_orphans()
        assert sorted(removed[gone]) == sorted(s.name for s in segs[:2])
        assert live not in removed and segs[2].exists()
        assert not segs[0].exists() and not segs[1].exists()
    finally:
        for seg in segs:
            seg.unlink(missing_ok=True)


def test_untagged_segments_are_removed_only_when_no_other_process_maps_them(tmp_path):
    """The stock-DGL path: a segment our job mapped is removed, one another live process maps
    (another job's) is not."""
    mine, theirs = (shm.SHM_DIR / f"dsgtest{os.getpid()}_{k}" for k in ("mine", "theirs"))
    try:
        for seg in (mine, theirs):
            seg.write_bytes(b"\0" * 4096)
        holder = subprocess.Popen([sys.executable, "-c",
                                   "import mmap,sys,time; f=open(sys.argv[1],'r+b'); "
                                   "m=mmap.mmap(f.fileno(),4096); print('ok',flush=True); "
                                   "time.sleep(60)", str(theirs)], stdout=subprocess.PIPE)
        try:
            assert holder.stdout.readline().strip() == b"ok"
            assert shm.mapped_segments(holder.pid) == {theirs.name}
            removed = shm.remove_unshared({mine.name, theirs.name}, exclude={os.getpid()})
            assert removed == [mine.name] and theirs.exists() and not mine.exists()
        finally:
            holder.kill()
            holder.wait()
    finally:
        mine.unlink(missing_ok=True)
        theirs.unlink(missing_ok=True)


@pytest.mark.timeout(60)
def test_blame_goes_to_the_process_that_failed_on_its_own_not_to_its_peers(tmp_path):
    # worker0 fails first but only because its peer went away; worker1 has the real cause.
    with pytest.raises(JobFailed) as info:
        with Supervisor(tmp_path, timeout_s=30) as sup:
            sup.spawn("worker0", ["sh", "-c", "echo 'RuntimeError: [../third_party/gloo/gloo/"
                                  "transport/tcp/pair.cc:534] Connection closed by peer' >&2; "
                                  "exit 1"], dict(os.environ))
            sup.spawn("worker1", ["sh", "-c", "sleep 0.3; echo 'Traceback (most recent call "
                                  "last):' >&2; echo 'ValueError: part1/graph.dgl is truncated'"
                                  " >&2; exit 1"], dict(os.environ))
            sup.wait()
    msg = str(info.value)
    assert msg.startswith("process worker1") and "ValueError: part1/graph.dgl is truncated" in msg


@pytest.mark.timeout(60)
def test_a_user_error_in_a_worker_is_one_line_with_exit_code_2(tmp_path):
    with pytest.raises(UserError) as info:
        with Supervisor(tmp_path, timeout_s=30) as sup:
            sup.spawn("worker1", ["sh", "-c", "echo 'error: part1/graph.dgl: size 10, expected "
                                  "20' >&2; exit 2"], dict(os.environ))
            sup.wait()
    assert info.value.exit_code == 2
    assert str(info.value).startswith("worker1: part1/graph.dgl: size 10, expected 20")


def test_a_port_in_use_in_the_ip_config_is_one_line_naming_port_and_setting(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        path = tmp_path / "ip_config.txt"
        path.write_text(f"127.0.0.1 {port}\n")
        with pytest.raises(ConfigError) as info:
            read_ip_config(str(path), 1, 1)
    msg = str(info.value)
    assert f"port {port}" in msg and "cluster.ip_config" in msg and str(path) in msg
