"""The host lock that lets one stock (unpatched) DGL job run at a time: stock DGL names its
shared-memory segments by feature name alone, so two stock jobs at once map each other's."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from dsgraph.cluster.dgl_compat import stock_host_lock

_HOLDER = """
import sys, time
from pathlib import Path
from dsgraph.cluster.dgl_compat import stock_host_lock
with stock_host_lock(Path(sys.argv[1])):
    print("held", flush=True)
    time.sleep(float(sys.argv[2]))
    print(time.time(), flush=True)
"""


def _holder(path, hold_s: float) -> subprocess.Popen:
    """A process that takes the lock, says so, holds it ``hold_s`` seconds, prints its release time."""
    proc = subprocess.Popen([sys.executable, "-c", _HOLDER, str(path), str(hold_s)],
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "held"
    return proc


@pytest.mark.timeout(60)
def test_second_holder_waits_for_the_first(tmp_path):
    path = tmp_path / "stock.lock"
    proc = _holder(path, 1.5)
    with stock_host_lock(path):
        acquired = time.time()
    released = float(proc.stdout.readline())
    assert proc.wait() == 0
    assert acquired >= released


@pytest.mark.timeout(60)
def test_a_killed_holder_releases_the_lock(tmp_path):
    path = tmp_path / "stock.lock"
    proc = _holder(path, 600)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    start = time.monotonic()
    with stock_host_lock(path):
        pass
    assert time.monotonic() - start < 10


def test_a_symlink_at_the_lock_path_is_not_followed(tmp_path):
    target = tmp_path / "victim"
    target.write_text("keep")
    link = tmp_path / "stock.lock"
    link.symlink_to(target)
    with pytest.raises(OSError):
        with stock_host_lock(link):
            pass
    assert target.read_text() == "keep"
