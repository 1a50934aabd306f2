"""The supervisor ends every process of a job on a failure, a timeout or Ctrl-C, and cleans shm."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from dsgraph.cluster.supervise import Supervisor
from dsgraph.errors import JobFailed

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


@pytest.mark.timeout(90)
def test_ctrl_c_on_the_launcher_ends_all_workers(tmp_path):
    script = (
        "import sys; from pathlib import Path\n"
        "from dsgraph.cluster.launch import run_workers\n"
        "from dsgraph.config import ClusterConfig\n"
        "from dsgraph.errors import cli_main\n"
        "cli_main(lambda: run_workers(Path(sys.argv[1]), ClusterConfig(), 'tests.sleep_worker', 2, "
        "timeout_s=60))()\n")
    proc = subprocess.Popen([sys.executable, "-c", script, str(tmp_path)], cwd=ROOT,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 40
    workers: list[int] = []
    while time.time() < deadline and len(workers) < 2:
        workers = [c.pid for c in psutil.Process(proc.pid).children()]
        time.sleep(0.2)
    assert len(workers) == 2
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode != 0 and "interrupted" in err and "Traceback" not in err
    assert _dead(workers)
