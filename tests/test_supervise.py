"""The supervisor ends every process of a job on a failure, a timeout or Ctrl-C, and cleans shm."""
from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from dsgraph.cluster import preload, shm
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
    # fresh workers (no preload server): they are looked for among the launcher's children
    proc = subprocess.Popen([sys.executable, "-c", LAUNCHER, str(tmp_path)], cwd=ROOT,
                            stderr=subprocess.PIPE, text=True, preexec_fn=preload.default_sigint,
                            env=preload.fresh_env())
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


# --- hangs: a stopped process, a silent heartbeat -------------------------------------------

def _stop(pid: int) -> None:
    """SIGSTOP ``pid`` and wait until the kernel shows it stopped."""
    os.kill(pid, signal.SIGSTOP)
    deadline = time.time() + 5
    while time.time() < deadline and psutil.Process(pid).status() != psutil.STATUS_STOPPED:
        time.sleep(0.02)


@pytest.mark.timeout(60)
def test_a_stopped_process_is_named_within_heartbeat_s_and_every_process_ends(tmp_path):
    with pytest.raises(JobFailed) as info:
        with Supervisor(tmp_path, timeout_s=60, heartbeat_s=2.0, grace_s=3.0) as sup:
            peer = sup.spawn("trainer0", ["sleep", "60"], dict(os.environ))
            stopped = sup.spawn("server1", ["sleep", "60"], dict(os.environ))
            _stop(stopped.popen.pid)
            t0 = time.monotonic()
            sup.wait()
    took = time.monotonic() - t0
    msg = str(info.value)
    assert re.match(rf"process server1 \(pid {stopped.popen.pid}\) made no progress for [2-4] s: "
                    rf"it is stopped", msg), msg
    assert str(tmp_path / "server1.log") in msg and "\n" not in msg
    assert 2.0 <= took < 5.0, took
    assert _wait_dead([peer.popen.pid, stopped.popen.pid], 1)


@pytest.mark.timeout(60)
def test_a_process_whose_heartbeat_goes_silent_is_named(tmp_path):
    beats_then_hangs = 'for i in 1 2 3; do touch "$DSGRAPH_HEARTBEAT"; sleep 0.3; done; sleep 60'
    with pytest.raises(JobFailed) as info:
        with Supervisor(tmp_path, timeout_s=60, heartbeat_s=2.0, grace_s=3.0) as sup:
            # never beats: a process not yet started (or with no heartbeat) is judged by state
            quiet = sup.spawn("worker0", ["sleep", "60"], dict(os.environ))
            hung = sup.spawn("worker1", ["sh", "-c", beats_then_hangs], dict(os.environ))
            t0 = time.monotonic()
            sup.wait()
    took = time.monotonic() - t0
    msg = str(info.value)
    assert re.match(rf"process worker1 \(pid {hung.popen.pid}\) made no progress for [2-4] s: "
                    rf"its heartbeat \(worker1.heartbeat\) is silent; cluster.heartbeat_s = 2;",
                    msg), msg
    assert "stopped" not in msg and "\n" not in msg
    assert took < 5.0, took
    assert _wait_dead([quiet.popen.pid, hung.popen.pid], 1)
    assert not list(tmp_path.glob("*.heartbeat"))  # gone with their processes


@pytest.mark.timeout(60)
def test_a_job_process_beats_while_it_works(tmp_path):
    """run_process_main beats from a thread while its main thread is busy elsewhere."""
    main = ("import time; from dsgraph.cluster.worker import run_process_main; "
            "run_process_main(time.sleep, 4)")
    with Supervisor(tmp_path, timeout_s=50, heartbeat_s=1.0) as sup:
        p = sup.spawn("worker0", [sys.executable, "-c", main],
                      dict(os.environ, PYTHONPATH=str(ROOT)))
        beats: set[float] = set()
        deadline = time.time() + 30
        while time.time() < deadline and len(beats) < 3 and p.popen.poll() is None:
            if p.beat.exists():
                beats.add(p.beat.stat().st_mtime)
            time.sleep(0.05)
        assert len(beats) >= 3  # every heartbeat_s / 4
        sup.wait()
        assert p.popen.returncode == 0


@pytest.mark.timeout(60)
def test_shutdown_ends_a_stopped_process_group_within_the_grace_period(tmp_path):
    with Supervisor(tmp_path, timeout_s=60, grace_s=3.0) as sup:
        p = sup.spawn("server0", ["sh", "-c", "sleep 60 & wait"], dict(os.environ))
        deadline = time.time() + 10
        while time.time() < deadline and not psutil.Process(p.popen.pid).children():
            time.sleep(0.05)
        group = [p.popen.pid] + [c.pid for c in psutil.Process(p.popen.pid).children()]
        assert len(group) == 2
        os.killpg(p.popen.pid, signal.SIGSTOP)  # the whole group, as Ctrl-Z does
        t0 = time.monotonic()
    assert time.monotonic() - t0 < 3.0  # SIGTERM reached them: no SIGKILL needed
    assert _wait_dead(group, 1)


@pytest.mark.timeout(60)
def test_a_peer_timeout_is_blamed_on_the_stopped_peer_not_the_process_reporting_it(tmp_path):
    timed_out = ("sleep 1; echo 'RuntimeError: [../third_party/gloo/gloo/transport/tcp/"
                 "unbound_buffer.cc:81] Timed out waiting 60000ms for recv operation' >&2; exit 1")
    with pytest.raises(JobFailed) as info:
        with Supervisor(tmp_path, timeout_s=60, heartbeat_s=60.0) as sup:
            stopped = sup.spawn("worker1", ["sleep", "60"], dict(os.environ))
            _stop(stopped.popen.pid)
            sup.spawn("worker0", ["sh", "-c", timed_out], dict(os.environ))
            sup.wait()
    msg = str(info.value)
    assert msg.startswith("process worker1") and "stopped" in msg, msg


@pytest.mark.timeout(60)
def test_the_job_timeout_names_the_stopped_process_even_with_heartbeats_off(tmp_path):
    with pytest.raises(JobFailed) as info:
        with Supervisor(tmp_path, timeout_s=2.0, heartbeat_s=0.0, grace_s=2.0) as sup:
            sup.spawn("worker0", ["sleep", "60"], dict(os.environ))
            stopped = sup.spawn("worker1", ["sleep", "60"], dict(os.environ))
            _stop(stopped.popen.pid)
            sup.wait()
    msg = str(info.value)
    assert msg.startswith("job timed out after 2 s; process worker1") and "stopped" in msg, msg


# --- the console: rank 0's output without its tracebacks ------------------------------------

RANK0_OUTPUT = (
    b"epoch 1: loss 0.51 val_acc 0.40\n"
    b"\r 10%|#         | 1/10 [00:01<00:09]\r 20%|##        | 2/10 [00:02<00:08]"
    b"Traceback (most recent call last):\n"  # tqdm ends no line: right after the bar
    b'  File "dsgraph/modes/worker.py", line 45, in <module>\n'
    b"    run_process_main(main)\n"
    b"    ^^^^^^^^^^^^^^^^^^^^^^\n"
    b"ValueError: first\n"
    b"\n"
    b"The above exception was the direct cause of the following exception:\n"
    b"\n"
    b"Traceback (most recent call last):\n"
    b'  File "dsgraph/trainer.py", line 9, in run\n'
    b"torch.distributed.DistBackendError: [../gloo/pair.cc:534] Connection closed by peer\n"
    b"Exception raised from recvBytes at ../torch/csrc/distributed/c10d/Utils.hpp:672 (most "
    b"recent call first):\n"
    b"frame #0: c10::Error::Error(c10::SourceLocation) + 0x57 (0x7f in libc10.so)\n"
    b"epoch 2: loss 0.44 val_acc 0.52\n"
    b"dgl._ffi.base.DGLError: [12:00:01] /opt/dgl/src/rpc/rpc.cc:100: Check failed: x\n"
    b"Stack trace:\n"
    b"  [bt] (0) libdgl.so(+0x1234)\n"
    b" 30%|###       | 3/10")


@pytest.mark.parametrize("chunk", [1, 7, 4096])
def test_the_console_filter_drops_traceback_blocks_and_keeps_progress_and_epoch_lines(chunk):
    from dsgraph.cluster.console import TracebackFilter
    shown = TracebackFilter()
    out = b"".join(shown.feed(RANK0_OUTPUT[i:i + chunk])
                   for i in range(0, len(RANK0_OUTPUT), chunk)) + shown.flush()
    assert out == (b"epoch 1: loss 0.51 val_acc 0.40\n"
                   b"\r 10%|#         | 1/10 [00:01<00:09]\r 20%|##        | 2/10 [00:02<00:08]"
                   b"epoch 2: loss 0.44 val_acc 0.52\n"
                   b"dgl._ffi.base.DGLError: [12:00:01] /opt/dgl/src/rpc/rpc.cc:100: "
                   b"Check failed: x\n"
                   b"Stack trace:\n"
                   b"  [bt] (0) libdgl.so(+0x1234)\n"
                   b" 30%|###       | 3/10")


def test_a_progress_bar_is_echoed_before_its_line_ends():
    from dsgraph.cluster.console import TracebackFilter
    shown = TracebackFilter()
    assert shown.feed(b"\r 40%|####") == b"\r 40%|####"
    assert shown.feed(b"      | 4/10]") == b"      | 4/10]"
    assert shown.feed(b"Trace") == b""  # perhaps a traceback: held until that is clear
    assert shown.feed(b"back (most recent call last):\n  File\nKeyError: 1\nepoch 5:\n") == \
        b"epoch 5:\n"
    assert shown.feed(b"\r 50%|#####") == b"\r 50%|#####"
    assert shown.feed(b"Trade") == b"Trade"


@pytest.mark.timeout(60)
def test_an_echoed_process_traceback_stays_in_its_log_not_on_the_console(tmp_path, capfd):
    script = ("import sys, time; print('epoch 1: loss 0.5', flush=True); "
              "sys.stderr.write(' 50%|#####     | 1/2\\r'); sys.stderr.flush(); time.sleep(0.2); "
              "raise ValueError('boom')")
    with pytest.raises(JobFailed) as info:
        with Supervisor(tmp_path, timeout_s=30) as sup:
            sup.spawn("trainer0", [sys.executable, "-c", script], dict(os.environ), echo=True)
            sup.wait()
    err = capfd.readouterr().err
    assert "epoch 1: loss 0.5" in err and "50%|#####" in err
    assert "Traceback" not in err and "boom" not in err
    log = (tmp_path / "trainer0.log").read_text()
    assert "Traceback (most recent call last)" in log and "ValueError: boom" in log
    assert "ValueError: boom" in str(info.value)


@pytest.mark.timeout(60)
def test_what_an_echoed_process_says_while_it_is_stopped_stays_off_the_console(tmp_path, capfd):
    dying = "trap 'echo dying noise; exit 1' TERM; echo 'epoch 1: up'; sleep 60 & wait"
    with pytest.raises(JobFailed, match="process worker1"):
        with Supervisor(tmp_path, timeout_s=30) as sup:
            sup.spawn("worker0", ["sh", "-c", dying], dict(os.environ), echo=True)
            deadline = time.time() + 10
            while time.time() < deadline and "up" not in (tmp_path / "worker0.log").read_text():
                time.sleep(0.05)
            sup.spawn("worker1", ["sh", "-c", "exit 3"], dict(os.environ))
            sup.wait()
    err = capfd.readouterr().err
    assert "epoch 1: up" in err and "dying noise" not in err
    assert "dying noise" in (tmp_path / "worker0.log").read_text()


def test_the_cause_after_a_progress_bar_on_the_same_line_is_found(tmp_path):
    from dsgraph.cluster.logs import log_cause

    log = tmp_path / "worker0.log"
    log.write_text("epoch 1: loss 0.5\ntrain:  1%| | 7/100 [00:01<00:10]\rtrain:  2%| | 8/100"
                   " [00:01<00:10]error: /run: cannot write checkpoint.pt: no space left\n")
    assert log_cause(log) == "error: /run: cannot write checkpoint.pt: no space left"
    log.write_text("RuntimeError: gloo error: connection reset\n")  # a cause line kept whole
    assert log_cause(log) == "RuntimeError: gloo error: connection reset"


WAITER = ("from dsgraph.cluster.worker import run_process_main\n"
          "import sys, time\n"
          "def waits_for_a_peer():\n"
          "    open(sys.argv[1], 'w').close(); time.sleep(60)\n"
          "run_process_main(waits_for_a_peer)\n")


@pytest.mark.timeout(60)
def test_the_job_timeout_names_where_each_live_process_waits(tmp_path):
    # live, beating processes that never finish (a deadlock some runs meet): the line says in
    # which function each one's main thread was when the job timed out
    with pytest.raises(JobFailed) as info:
        with Supervisor(tmp_path, timeout_s=4.0, heartbeat_s=60.0, grace_s=1.0) as sup:
            for name in ("trainer0", "trainer1"):
                sup.spawn(name, [sys.executable, "-c", WAITER, str(tmp_path / f"{name}.in")],
                          dict(os.environ))
            # Both must be waiting when the job times out: a fresh interpreter importing torch
            # on a busy machine can take longer than the timeout to get there.
            deadline = time.monotonic() + 45
            while time.monotonic() < deadline and \
                    not all((tmp_path / f"trainer{r}.in").exists() for r in (0, 1)):
                time.sleep(0.05)
            sup.wait()
    msg = str(info.value)
    assert msg.startswith("job timed out after 4 s; still running: trainer0, trainer1"), msg
    for name in ("trainer0", "trainer1"):
        assert (f"{name} in <string>:4 waits_for_a_peer < dsgraph/cluster/worker.py:"
                in msg), msg
    assert "\n" not in msg


@pytest.mark.timeout(60)
def test_benchmarks_read_the_job_memory_the_supervisor_measured(tmp_path):
    # one instrument: a benchmark's job_memory_mb is the supervisor's (metrics.json's) figure
    from benchmarks.jobs import SupervisedMemory
    hold = "b = bytearray(200 * 2**20); b[::4096] = b'x' * len(b[::4096]); import time; " \
           "time.sleep(2)"
    with SupervisedMemory() as mem:
        with Supervisor(tmp_path, timeout_s=30) as sup:
            sup.spawn("worker0", [sys.executable, "-c", hold], dict(os.environ))
            sup.wait()
    assert mem.peak_mb is not None and 200 <= mem.peak_mb < 400, mem.peak_mb
    assert mem.peak_mb == sup.memory.record()["job_memory_mb"]
