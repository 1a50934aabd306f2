"""Run folders and inputs against unlucky and hostile use (:mod:`benchmarks.misuse`, whose rows
the reliability report also shows): real ``python -m train`` / ``predict`` / ``partition``
commands on tiny SAR data. Each scenario must end with the right exit code and one last line
naming the file, folder or setting, show no traceback, and keep the previous good state (files
unchanged, a live job undisturbed, a checkpoint readable and resumable). The storage scenarios
mount tmpfs folders and are skipped, with the reason, where that is not allowed."""
from __future__ import annotations

import pytest

from benchmarks import faults, misuse


@pytest.fixture
def ws(fault_workspace) -> faults.Workspace:
    return fault_workspace


# Run in the reliability report only (each is a real job of its own; the suite keeps to its time
# budget): the same refusal as --force, also asserted at unit level in tests/test_runs.py.
REPORT_ONLY = {"--resume on a live job's folder"}
CASES = [s for s in misuse.SCENARIOS if s.name not in REPORT_ONLY]


@pytest.mark.timeout(300)
@pytest.mark.parametrize("scenario", CASES, ids=[s.name.replace(" ", "_") for s in CASES])
def test_scenario(ws, scenario, tmp_path):
    r = misuse.run_scenario(ws, scenario, tmp_path)
    if r.get("skipped"):
        pytest.skip(r["skipped"])
    detail = {k: r.get(k) for k in ("exit_code", "message", "traceback", "kept")}
    assert r["exit_code"] == scenario.code, detail
    assert not r["traceback"], detail
    for part in scenario.says:
        assert part in r["message"], detail
    if scenario.code:  # a refusal or a failure: one line, naming what and where
        assert r["message"].startswith("error: "), detail
    if "folder" in r:  # a storage fault: the line names the folder that failed
        assert r["folder"] in r["message"], detail
    assert r["kept"], detail
    if "holder_pid" in r:  # a live job's folder: the refusal names that job and the folder
        assert f"pid {r['holder_pid']} on " in r["message"], detail
        assert str(tmp_path / "live") in r["message"], detail
