"""The fault matrix (``benchmarks.reliability``, run by the harness ``benchmarks.faults``, and
its ``MORE_CASES``): real jobs through ``python -m train``, each hit by one fault (a process
killed or stopped, the launcher killed or interrupted, the run folder turned read-only or full,
...); each must end within 60 s with the right exit code and a one-line message naming the
process (or the run folder), no traceback on the console, listen only on the job's
address, and leave no process, port, shm segment or temp file behind."""
from __future__ import annotations

import pytest

from benchmarks import faults
from benchmarks.faults import EXIT_LIMIT_S
from benchmarks.reliability import CASES


@pytest.fixture
def workspace(fault_workspace):
    return fault_workspace


# The matrix; "SAR worker raises" (blame), "port in use" and "sampled trainer stopped"
# (the hang of a server and of a SAR worker are here) run in the reliability report and, at
# unit level, in tests/test_supervise.py.
MATRIX = [c for c in CASES if c.name not in ("SAR worker raises", "port in use",
                                             "sampled trainer stopped")] + list(faults.MORE_CASES)


@pytest.mark.timeout(240)
@pytest.mark.parametrize("case", MATRIX, ids=[c.name.replace(" ", "_") for c in MATRIX])
def test_fault(workspace, case):
    r = faults.run_case(workspace, case)
    if r.get("skipped"):
        pytest.skip(r["skipped"])
    detail = {k: r[k] for k in ("exit_code", "message", "seconds_to_exit", "left_processes",
                                "left_ports", "left_shm", "left_temp_files", "listening")}
    assert r["exit_code"] == case.code, detail
    if case.code > 0:  # (a launcher killed with -9 says nothing)
        assert r["message"].startswith("error: "), detail
    for part in case.says:
        assert part in r["message"], detail
    if case.fault in faults.STORAGE:  # the one line names the run folder, not a process
        assert r["message"].startswith(f"error: {r['folder']}"), detail
    assert not r["traceback"], detail
    assert r["seconds_to_exit"] <= EXIT_LIMIT_S, detail
    if case.fault != "port":  # (that job is refused before any process starts)
        assert r["processes_seen"] > 0 and r["listening"], detail  # the watch saw the job
    if case.mode == "sampled" and case.fault.startswith(("kill9", "sigstop", *faults.STORAGE)):
        assert r["shm_seen"] > 0, detail  # the servers' segments existed, then were removed
    assert r["wildcard_listeners"] == [], detail
    assert r["left_processes"] == [] and r["left_ports"] == [], detail
    assert r["left_shm"] == [] and r["left_temp_files"] == [], detail
    if case.fault == "ckpt":
        assert r["temp_files_at_kill"], "the kill did not hit a checkpoint write"
        assert r["resume_exit_code"] == 0, r["resume_message"]
        assert r["resumed_epochs"] == list(range(1, 5))
