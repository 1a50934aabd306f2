"""The phase clock (dsgraph.phases): nested phases add up, each thread's CPU is its own, the
servers' CPU is found by their environment, and an epoch's record is per 1,000 seeds."""
from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import pytest

from dsgraph import phases

pytestmark = pytest.mark.fast


def _burn(seconds: float) -> None:
    """Spend about ``seconds`` of this thread's CPU."""
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


def test_nested_phases_are_taken_out_of_the_outer_one():
    clock = phases.PhaseClock()
    with clock("sample"):
        _burn(0.05)
        with clock("block"):
            _burn(0.1)
    got = clock.totals()
    assert 0.09 <= got["block"] <= 0.13, got
    assert 0.04 <= got["sample"] <= 0.08, got  # its own 0.05, not 0.15
    assert got["forward"] == 0.0, got


def test_wait_is_wall_inside_sampling_not_on_the_cpu():
    clock = phases.PhaseClock()
    t0 = time.perf_counter()
    with clock("gather"):
        time.sleep(0.2)
    gathering = time.perf_counter() - t0
    with clock("forward"):
        time.sleep(0.2)  # waiting outside sampling and gathering is not ``wait``
    got = clock.totals()
    # (bounds that hold on a loaded machine too: a descheduled thread waits longer)
    assert 0.18 <= got["wait"] <= gathering, (got, gathering)
    assert got["gather"] < 0.02 and got["forward"] < 0.02, got


def test_a_threads_cpu_is_its_own_and_unphased_cpu_is_other():
    clock = phases.PhaseClock()

    def prefetch() -> None:
        with clock("sample"):
            _burn(0.1)
        _burn(0.1)  # outside every phase: ``other``

    worker = threading.Thread(target=prefetch)
    with clock("forward"):
        worker.start()
        worker.join()  # the trainer thread waits: its phase spends no CPU
    got = clock.totals()
    assert got["forward"] < 0.03, got
    assert 0.09 <= got["sample"] <= 0.13, got
    assert got["other"] >= 0.08, got  # (other threads of the process, a test runner's, add to it)


def test_phase_is_a_no_op_while_the_clock_is_off(monkeypatch):
    monkeypatch.setattr(phases, "_ACTIVE", None)
    with phases.phase("sample"):
        _burn(0.01)
    clock = phases.PhaseClock()
    monkeypatch.setattr(phases, "_ACTIVE", clock)
    with phases.phase("sample"):
        _burn(0.02)
    assert clock.totals()["sample"] >= 0.015


def test_servers_cpu_counts_the_job_servers_only(tmp_path, monkeypatch):
    ip_config = str(tmp_path / "ip_config.txt")
    burn = ("import time\nend = time.process_time() + 0.3\nwhile time.process_time() < end: pass\n"
            "print('burnt', flush=True)\ntime.sleep(60)")
    env = {**os.environ, "DGL_ROLE": "server", "DGL_IP_CONFIG": ip_config}
    other = {**env, "DGL_IP_CONFIG": ip_config + ".other"}  # another job's server
    procs = [subprocess.Popen([sys.executable, "-c", burn], env=e, stdout=subprocess.PIPE,
                              text=True) for e in (env, other)]
    try:
        assert all(p.stdout.readline() == "burnt\n" for p in procs)
        monkeypatch.setenv("DGL_IP_CONFIG", ip_config)
        assert 0.29 <= phases.servers_cpu_s() <= 0.6  # its burn and its start
        monkeypatch.setenv("DGL_IP_CONFIG", str(tmp_path / "nobody"))
        assert phases.servers_cpu_s() == 0.0
        monkeypatch.delenv("DGL_IP_CONFIG")
        assert phases.servers_cpu_s() is None  # not a DGL job
    finally:
        for p in procs:
            p.kill()
            p.wait()


def test_epoch_record_is_per_thousand_seeds_and_says_when_servers_were_not_read():
    keys = phases.RECORD_KEYS
    summed = [float(i + 1) for i in range(len(keys))] + [1.0]
    rec = phases.epoch_record(summed, 2000.0)["phases"]
    assert list(rec) == list(keys)
    assert rec["sample"] == 0.5 and rec["servers"] == len(keys) / 2
    rec = phases.epoch_record(summed[:-1] + [0.0], 2000.0)["phases"]
    assert rec["servers"] is None
