"""The supervisor records a job's memory (shared memory counted once) and names a process killed
by SIGKILL as likely out of memory; real processes and real /proc readings."""
from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import pytest

from dsgraph.cluster.memwatch import forget_last_job, last_job, pss_mb
from dsgraph.cluster.supervise import Supervisor
from dsgraph.errors import JobFailed

MIB = 2**20
SEGMENT_MIB = 50

# Map the segment (or not), touch every page, then wait until all four are ready and stay a
# second longer, so the supervisor's PSS readings (every 0.5 s) see all of them at once.
CHILD = """
import mmap, os, sys, time
path, ready, name = sys.argv[1], sys.argv[2], sys.argv[3]
if name.startswith("mapped"):
    fd = os.open(path, os.O_RDWR)
    mem = mmap.mmap(fd, 0)
    mem[::4096] = b"\\1" * (len(mem) // 4096)
open(os.path.join(ready, name), "w").close()
deadline = time.monotonic() + 30
while len(os.listdir(ready)) < 4 and time.monotonic() < deadline:
    time.sleep(0.02)
time.sleep(1.2)
"""


@pytest.mark.timeout(60)
def test_job_memory_counts_a_shared_segment_once_and_peak_rss_twice(tmp_path):
    segment = Path("/dev/shm") / f"dsgtest_memwatch_{os.getpid()}"
    ready = tmp_path / "ready"
    ready.mkdir()
    try:
        with open(segment, "wb") as fh:
            fh.truncate(SEGMENT_MIB * MIB)
        forget_last_job()
        with Supervisor(tmp_path / "logs", timeout_s=30) as sup:
            for name in ("mapped0", "mapped1", "plain0", "plain1"):
                sup.spawn(name, [sys.executable, "-c", CHILD, str(segment), str(ready), name],
                          dict(os.environ))
            # a process whose pid is an ssh client's: not readable, recorded as None
            sup.spawn("remote", ["sleep", "0.5"], dict(os.environ), required=False, local=False)
            sup.wait()
    finally:
        segment.unlink(missing_ok=True)
    mem = sup.memory
    at_peak, rss = mem.pss_at_peak, mem.peak_rss_mb
    assert set(at_peak) == {"mapped0", "mapped1", "plain0", "plain1", "remote"}, at_peak
    assert at_peak["remote"] is None and "remote" not in rss
    # the job's memory less what its four processes take besides the segment (two that map
    # nothing show it): the segment, once
    base = at_peak["plain0"] + at_peak["plain1"]
    assert mem.job_mb == pytest.approx(sum(v for v in at_peak.values() if v is not None))
    assert abs(mem.job_mb - 2 * base - SEGMENT_MIB) <= 0.1 * SEGMENT_MIB, (mem.job_mb, at_peak)
    # the sum of the peak RSS counts it once per mapper
    extra_rss = rss["mapped0"] + rss["mapped1"] - rss["plain0"] - rss["plain1"]
    assert extra_rss >= 1.8 * SEGMENT_MIB, rss
    # published for the launcher once the supervisor has ended
    record = last_job()
    assert record["job_memory_mb"] == round(mem.job_mb, 1)
    assert record["pss_mb_per_process_at_job_peak"]["remote"] is None
    assert record["unreadable_processes"] == ["remote"]


ALLOCATE_AND_DIE = """
import os, time
b = bytearray(100 * 2**20)
b[::4096] = b"\\1" * (len(b) // 4096)
time.sleep(0.6)
os.kill(os.getpid(), 9)
"""


@pytest.mark.timeout(60)
def test_a_process_killed_by_sigkill_is_named_likely_out_of_memory_with_its_last_rss(tmp_path):
    with pytest.raises(JobFailed) as info:
        with Supervisor(tmp_path, timeout_s=30, settle_s=0.2) as sup:
            sup.spawn("sleeper", ["sleep", "30"], dict(os.environ))
            sup.spawn("hog", [sys.executable, "-c", ALLOCATE_AND_DIE], dict(os.environ))
            sup.wait()
    msg = str(info.value)
    assert msg.startswith("process hog") and "killed by SIGKILL" in msg, msg
    assert "likely out of memory (the kernel's OOM killer)" in msg and "\n" not in msg, msg
    last = re.search(r"last RSS (\d+) MiB", msg)
    assert last and int(last.group(1)) >= 80, msg


@pytest.mark.timeout(60)
def test_other_signals_are_not_called_out_of_memory(tmp_path):
    with pytest.raises(JobFailed) as info:
        with Supervisor(tmp_path, timeout_s=30) as sup:
            sup.spawn("killed", ["sh", "-c", "kill -TERM $$"], dict(os.environ))
            sup.wait()
    msg = str(info.value)
    assert "killed by SIGTERM" in msg and "out of memory" not in msg, msg


def test_pss_of_this_process_is_read_and_of_a_missing_one_is_none():
    assert 0 < pss_mb() < 10_000
    assert pss_mb(2**22 + 1) is None  # above the kernel's largest pid
