"""The fault matrix: real ``python -m train`` jobs, each hit by one fault, and what they left;
then the misuse scenarios: run folders, stored files, disks and inputs used as an unlucky or
hostile user would.

:data:`CASES` is the matrix; each case runs through the fault-injection harness
(:mod:`benchmarks.faults`: a real job on a tiny graph or fields, 2 partitions / workers, one
fault, then what the launcher said and what the job left behind). The scenarios are
:data:`benchmarks.misuse.SCENARIOS` (exit code, last line, and whether the previous good state
was kept). ``tests/dist/test_faults.py`` and ``tests/dist/test_run_folder_faults.py`` assert
them; :func:`run` writes the report ``benchmarks/reports/reliability.{json,md,png}``.
"""
from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from benchmarks.faults import EXIT_LIMIT_S, FAULTY, HANG, Case, prepare, run_case
from benchmarks.misuse import SCENARIOS, run_scenario
from benchmarks.harness import Report, View, bars, render_saved

CASES = (
    Case("server killed", "sampled", "kill9:server0", 1, ("server0", "SIGKILL")),
    Case("sampled trainer killed", "sampled", "kill9:trainer1", 1, ("trainer1", "SIGKILL")),
    Case("SAR worker killed", "sar", "kill9:worker1", 1, ("worker1", "SIGKILL")),
    Case("DS-MPNN worker killed", "dsmpnn", "kill9:worker1", 1, ("worker1", "SIGKILL")),
    # hung, not dead: stopped with SIGSTOP, named once it made no progress for cluster.heartbeat_s
    Case("server stopped", "sampled", "sigstop:server1", 1,
         ("server1", "no progress", "stopped", "server1.log"), (HANG,)),
    Case("sampled trainer stopped", "sampled", "sigstop:trainer1", 1,
         ("trainer1", "no progress", "stopped", "trainer1.log"), (HANG,)),
    Case("SAR worker stopped", "sar", "sigstop:worker1", 1,
         ("worker1", "no progress", "stopped", "worker1.log"), (HANG,)),
    Case("launcher killed", "sampled", "kill9:launcher", -9),
    Case("Ctrl-C to the launcher", "sampled", "sigint", 1, ("interrupted",)),
    Case("SIGTERM to the launcher", "sar", "sigterm", 1, ("interrupted",)),
    Case("sampled trainer raises", "sampled", "raises", 1,
         ("trainer1", "injected fault in forward on rank 1"), (FAULTY, "model.args.raise_rank=1")),
    Case("SAR worker raises", "sar", "raises", 1,
         ("worker1", "injected fault in forward on rank 1"), (FAULTY, "model.args.raise_rank=1")),
    Case("port in use", "sar", "port", 2, ("already in use", "cluster.ip_config")),
    Case("launcher killed in a checkpoint write, then --resume", "sar", "ckpt", -9, (),
         (FAULTY, "model.args.ballast_mb=64", "train.epochs=4")),
)

COLUMNS = ("kind", "case", "mode", "exit_code", "seconds_to_exit", "scenario_s", "message",
           "left_behind", "handled")


def _rows(records: list[dict]) -> list[dict]:
    """Table rows: the record, with what was left behind in one cell."""
    rows = []
    for r in records:
        if r.get("kind") == "misuse":  # what counts there is the state it had to keep
            left = "previous state kept" if r.get("kept") else "PREVIOUS STATE LOST"
            if r.get("skipped"):
                left = f"skipped: {r['skipped']}"
        else:
            left = "; ".join(f"{k[5:]}: {', '.join(map(str, r[k]))}" for k in
                             ("left_processes", "left_ports", "left_shm", "left_temp_files")
                             if r.get(k)) or "nothing"
        handled = "skipped" if r.get("skipped") else "yes" if r.get("handled") else "NO"
        rows.append({**r, "left_behind": left, "handled": handled})
    return rows


def _plot(rows: list[dict], fig) -> None:
    rows = [r for r in rows if r.get("kind") != "misuse"]  # the fault matrix's exit times
    ax = fig.add_subplot(1, 1, 1)
    colors = ["tab:green" if r["handled"] == "yes" and r["left_behind"] == "nothing"
              else "tab:red" for r in rows]
    bars(ax, range(len(rows)), rows, "seconds_to_exit", ("case",), horizontal=True,
         color=colors)
    ax.set_yticks(range(len(rows)), [r["case"] for r in rows])
    ax.invert_yaxis()
    ax.axvline(EXIT_LIMIT_S, color="grey", linestyle="--", label=f"limit {EXIT_LIMIT_S:g} s")
    ax.set_xlabel("seconds from the fault until every process of the job is gone")
    ax.set_title("Fault matrix: time to exit (green: handled and nothing left behind)")
    ax.legend(loc="lower right")


def _notes(payload: dict) -> list[str]:
    misuse = [r for r in payload["records"] if r.get("kind") == "misuse"]
    records = [r for r in payload["records"] if r.get("kind") != "misuse"]
    ok = sum(bool(r["handled"] and r["cleaned_up"]) for r in records)
    hosts = sorted({a.rsplit(":", 1)[0] for r in records for a in r["listening"]})
    wild = sorted({a for r in records for a in r["wildcard_listeners"]})
    return [f"{ok} of {len(records)} cases handled and cleaned up. Each case is a real "
            f"`python -m train` job on a 2,000-node graph (2 partitions) or 24x24 Darcy fields, "
            f"2 workers. Seconds count from the fault until the launcher and every process it "
            f"started are gone. Left behind: processes of the job, its listening ports, "
            f"`/dev/shm` segments carrying its job token, `.*.tmp` files in the run folder.",
            f"Addresses job processes listened on: {', '.join(hosts) or 'none seen'}; "
            f"wildcard (0.0.0.0 / ::) listeners: {', '.join(wild) or 'none'}.",
            "The checkpoint case kills the launcher while rank 0's `.checkpoint.pt.*.tmp` "
            "exists; `--resume` then removes the temp file and finishes the run.",
            f"Misuse scenarios (kind `misuse`, {sum(bool(r.get('handled')) for r in misuse)} "
            f"of {len(misuse)} handled, {sum(bool(r.get('skipped')) for r in misuse)} "
            f"skipped): real commands on a 2,000-node graph; handled means the expected exit "
            f"code, a last line naming the file, folder or setting, no traceback, and the "
            f"previous good state kept (files unchanged, the live job undisturbed, the last "
            f"checkpoint readable and resumable). `scenario_s` is the whole scenario's time "
            f"(including the jobs it runs), not a time to exit; the plot shows the fault "
            f"matrix only. Disk scenarios use size-limited or read-only tmpfs mounts."]


VIEW = View("reliability", "Reliability: the fault matrix and misuse scenarios", COLUMNS,
            ("case",), rows=_rows, plot=_plot, notes=_notes, figsize=(11.0, 6.0))


def run(quick: bool) -> Path:
    """Run every case (quick and full runs alike: each is already small); write the report."""
    report = Report(VIEW, quick)
    with tempfile.TemporaryDirectory(prefix="dsgraph-faults-") as tmp:
        ws = prepare(Path(tmp))
        for case in CASES:
            r = run_case(ws, case)
            if case.fault == "ckpt":
                r["message"] = (f"(killed while writing {', '.join(r['temp_files_at_kill'])}"
                                f"; --resume: exit {r['resume_exit_code']}, epochs "
                                f"{','.join(map(str, r['resumed_epochs']))})")
            elif case.code == -9 and not r["message"]:
                r["message"] = "(launcher killed: no message)"
            report.add({"kind": "fault", **r})
        for i, scenario in enumerate(SCENARIOS):
            folder = Path(tmp) / f"misuse{i}"
            folder.mkdir()
            report.add({"kind": "misuse", **run_scenario(ws, scenario, folder)})
    return report.save()


def render(quick: bool = False) -> Path:
    """Redraw reliability.md and .png from the saved reliability.json."""
    return render_saved(VIEW, quick)


if __name__ == "__main__":
    print(run(quick="--quick" in sys.argv))
