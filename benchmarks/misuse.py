"""Run folders and inputs against unlucky and hostile use: real ``python -m train`` / ``predict`` /
``partition`` commands on the fault harness's tiny SAR data (:mod:`benchmarks.faults`).

Each :class:`Scenario` does what a user might: a second job on a live job's folder (``--force``,
``--resume``, ``predict``), a dead job's lock, a byte changed in ``best.pt`` / ``checkpoint.pt`` /
``metrics.json`` / ``config.yaml``, a symlinked ``--out``, a cut ``metrics.jsonl`` line, a disk
that is too small, fills up mid-run or is read-only (tmpfs mounts: root only), ``predict --out``
onto a full or read-only disk, a YAML alias bomb, a width of a billion, a cut
``partition_stats.json``. :func:`run_scenario` records the exit code, the console's last line,
whether a traceback showed, and ``kept``: whether the previous good state is intact (files
unchanged, the live job undisturbed, a checkpoint readable and resumable).
``benchmarks/reliability.py`` (the report) and ``tests/dist/test_run_folder_faults.py`` (the
assertions) both run them through here.
"""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

import torch

from benchmarks.faults import ROOT, Launched, Workspace, config_of
from benchmarks.harness import run_cli
from benchmarks.storage import Skip, fill, tmpfs
from dsgraph import checkpoint
from dsgraph.cluster.preload import start_command

SETS = ("train.lr_schedule=constant",)  # resumed and uninterrupted runs use the same rates


@dataclass(frozen=True)
class Scenario:
    """One misuse: what the user does (``act``), the exit code and words the last line must
    have."""

    name: str
    code: int
    says: tuple[str, ...]
    act: Callable[[Workspace, Path], dict[str, Any]]


# --- commands --------------------------------------------------------------------------------

def cli(ws: Workspace, module: str, *args: str, timeout: float = 120,
        ) -> subprocess.CompletedProcess:
    """``python -m module *args`` in the workspace's environment (:func:`run_cli`)."""
    return run_cli(module, args, ws.env, timeout)


def _sets(ws: Workspace, *sets: str) -> list[str]:
    return [a for s in (*ws.sets("sar"), *SETS, *sets) for a in ("--set", s)]


def train(ws: Workspace, out: Path, *sets: str, flags: tuple[str, ...] = (),
          ) -> subprocess.CompletedProcess:
    """``python -m train`` of the tiny SAR job into ``out``."""
    return cli(ws, "train", "--config", str(config_of("sar")), "--out", str(out),
               *_sets(ws, *sets), *flags)


def partition(ws: Workspace, out: Path, *sets: str) -> subprocess.CompletedProcess:
    """``python -m partition`` of the tiny graph into ``out``."""
    data = [a for s in ws.sets("sar") if s.startswith(("dataset.", "partition."))
            for a in ("--set", s)]
    return cli(ws, "partition", "--config", str(config_of("sar")), "--out", str(out), *data,
               *[a for s in sets for a in ("--set", s)])


def outcome(res: subprocess.CompletedProcess, **extra: Any) -> dict[str, Any]:
    """A record of a finished command: exit code, last console line, traceback shown."""
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    return {"exit_code": res.returncode, "message": lines[-1] if lines else "",
            "traceback": "Traceback" in res.stderr, **extra}


def records(run: Path) -> list[dict]:
    """The epochs of a run's metrics.jsonl."""
    return [json.loads(ln) for ln in (run / "metrics.jsonl").read_text().splitlines()]


def snapshot(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` (but the lock) and its bytes."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file() and p.name != ".dsgraph-lock"}


def finished_copy(ws: Workspace, tmp: Path) -> Path:
    """A copy of a finished 2-epoch run (trained once per workspace)."""
    done = ws.root / "finished"
    if not (done / "metrics.json").is_file():
        res = train(ws, done, "train.epochs=2", flags=("--force",) if done.exists() else ())
        if res.returncode != 0:
            raise RuntimeError(f"the finished run failed: {res.stderr[-2000:]}")
    shutil.copytree(done, tmp / "run")
    return tmp / "run"


@contextlib.contextmanager
def live_job(ws: Workspace, run: Path, stderr: Optional[Path] = None) -> Iterator[Launched]:
    """A job that trains until stopped, once it has written its first epoch; Ctrl-C at the end.
    Its console goes to ``stderr`` (default: ``<run>.stderr`` beside the run folder)."""
    stderr = stderr or run.parent / f"{run.name}.stderr"
    run.parent.mkdir(parents=True, exist_ok=True)
    with stderr.open("w") as fh:
        proc = start_command([sys.executable, "-m", "train", "--config", str(config_of("sar")),
                              "--out", str(run), *_sets(ws, "train.epochs=100000")], ws.env,
                             str(ROOT), stderr=fh)
    try:
        deadline = time.monotonic() + 90
        while not ((run / "metrics.jsonl").is_file() and (run / "metrics.jsonl").stat().st_size):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the live job did not start: {stderr.read_text()[-2000:]}")
            time.sleep(0.2)
        yield proc
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C: its own session, as in a terminal
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def flip_payload_byte(path: Path) -> None:
    """Flip one byte in the middle of a checkpoint's payload (same size, still a valid zip)."""
    data = bytearray(path.read_bytes())
    payload = torch.load(path, weights_only=True)["data"].numpy().tobytes()
    at = data.find(payload)  # stored verbatim in the file
    data[at + len(payload) // 2] ^= 0x01
    path.write_bytes(bytes(data))


# --- the scenarios ---------------------------------------------------------------------------

def _on_live_job(flags: tuple[str, ...]) -> Callable[[Workspace, Path], dict[str, Any]]:
    def act(ws: Workspace, tmp: Path) -> dict[str, Any]:
        run = tmp / "live"
        with live_job(ws, run) as live:
            before = (run / "config.yaml").read_bytes()
            if flags == ("predict",):
                res = cli(ws, "predict", "--run", str(run))
            else:
                res = train(ws, run, "train.epochs=3", flags=flags)
            undisturbed = live.poll() is None and (run / "config.yaml").read_bytes() == before
        epochs = [r["epoch"] for r in records(run)]
        return outcome(res, holder_pid=live.pid,
                       kept=undisturbed and epochs == list(range(1, len(epochs) + 1)))
    return act


def _stale_lock(ws: Workspace, tmp: Path) -> dict[str, Any]:
    run = finished_copy(ws, tmp)
    (run / ".dsgraph-lock").write_text(json.dumps(  # a launcher killed with -9 leaves this
        {"pid": 4194000, "host": "elsewhere", "action": "train", "started": "yesterday"}))
    res = train(ws, run, "train.epochs=3", flags=("--resume",))
    notice = [ln for ln in res.stderr.splitlines() if "taking over the lock" in ln]
    return {**outcome(res), "message": notice[0] if notice else "",
            "kept": [r["epoch"] for r in records(run)] == [1, 2, 3]
            and (run / ".dsgraph-lock").read_text() == ""}


def _flipped(name: str, command: str) -> Callable[[Workspace, Path], dict[str, Any]]:
    def act(ws: Workspace, tmp: Path) -> dict[str, Any]:
        run = finished_copy(ws, tmp)
        if name.endswith(".pt"):
            flip_payload_byte(run / name)
        else:  # a text file edited: one value changed
            text = (run / name).read_text()
            old, new = ('"epochs": 2', '"epochs": 3') if name == "metrics.json" else \
                ("hidden: 16", "hidden: 17")
            (run / name).write_text(text.replace(old, new))
        before = snapshot(run)
        res = (cli(ws, "predict", "--run", str(run)) if command == "predict" else
               train(ws, run, "train.epochs=3", flags=("--resume",)))
        return outcome(res, kept=snapshot(run) == before)
    return act


def _symlinked_out(ws: Workspace, tmp: Path) -> dict[str, Any]:
    real = finished_copy(ws, tmp)
    link = tmp / "link"
    link.symlink_to(real)
    before = snapshot(real)
    res = train(ws, link, "train.epochs=2", flags=("--force",))
    return outcome(res, kept=snapshot(real) == before and link.is_symlink())


def _cut_metrics_line(ws: Workspace, tmp: Path) -> dict[str, Any]:
    run = finished_copy(ws, tmp)
    original = records(run)
    text = (run / "metrics.jsonl").read_text()
    last = text.splitlines()[-1]
    (run / "metrics.jsonl").write_text(text[:len(text) - len(last) - 1] + last[:20])
    res = train(ws, run, "train.epochs=3", flags=("--resume",))
    resumed = records(run)
    return outcome(res, message="(resumed: epochs " + ",".join(str(r["epoch"]) for r in resumed)
                   + ")", kept=[r["epoch"] for r in resumed] == [1, 2, 3]
                   and resumed[1] == original[1])


def _partition_disk_too_small(ws: Workspace, tmp: Path) -> dict[str, Any]:
    with tmpfs(tmp / "disk", "256k") as disk:
        res = partition(ws, disk / "parts")
        return outcome(res, kept=list(disk.iterdir()) == [])


def _train_disk_too_small(ws: Workspace, tmp: Path) -> dict[str, Any]:
    with tmpfs(tmp / "disk", "600k") as disk:
        res = train(ws, disk / "run", "train.epochs=2")
        return outcome(res, kept=not (disk / "run" / "checkpoint.pt").exists())


def _disk_fills_mid_run(ws: Workspace, tmp: Path) -> dict[str, Any]:
    with tmpfs(tmp / "disk", "16m") as disk:
        run, console = disk / "run", tmp / "live.stderr"  # the console off the full disk
        with live_job(ws, run, console) as live:
            filler = fill(disk)
            live.wait(90)
        res = outcome(subprocess.CompletedProcess([], live.returncode, "", console.read_text()))
        kept_epoch = checkpoint.read(run / "checkpoint.pt")["epoch"]  # intact: checksum holds
        temps = [p.name for p in run.iterdir() if p.name.endswith(".tmp")]
        filler.unlink()
        again = train(ws, run, f"train.epochs={kept_epoch + 2}", flags=("--resume",))
        return {**res, "checkpoint_epoch": kept_epoch, "resume_exit_code": again.returncode,
                "kept": not temps and again.returncode == 0
                and [r["epoch"] for r in records(run)] == list(range(1, kept_epoch + 3))}


def _curves_on_full_disk(ws: Workspace, tmp: Path) -> dict[str, Any]:
    with tmpfs(tmp / "disk", "4m") as disk:
        run = disk / "run"
        shutil.copytree(finished_copy(ws, tmp), run)
        (run / "curves.png").unlink()
        fill(disk)
        before = snapshot(run)
        res = cli(ws, "train", "--plot", str(run))
        return outcome(res, kept=snapshot(run) == before)


def _predict_out(size: str, read_only: bool = False
                 ) -> Callable[[Workspace, Path], dict[str, Any]]:
    def act(ws: Workspace, tmp: Path) -> dict[str, Any]:
        run = finished_copy(ws, tmp)
        before = snapshot(run)
        with tmpfs(tmp / "disk", size, read_only=read_only) as disk:
            if not read_only:
                fill(disk)
            res = cli(ws, "predict", "--run", str(run), "--out", str(disk / "pred.csv"))
            left = sorted(p.name for p in disk.iterdir() if p.name != "filler")
        # the run folder gets only the prediction job's logs
        same = {k: v for k, v in snapshot(run).items() if not k.startswith("predictions")}
        return outcome(res, folder=str(disk), kept=left == [] and same == before)
    return act


def _read_only(ws: Workspace, tmp: Path) -> dict[str, Any]:
    with tmpfs(tmp / "disk", "4m", read_only=True) as disk:
        return outcome(train(ws, disk / "run", "train.epochs=2"), kept=True)


ALIAS_BOMB = """\
a: &a [x, x, x, x, x, x, x, x, x, x]
b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]
c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b]
d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c, *c]
e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d, *d]
f: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e, *e]
g: &g [*f, *f, *f, *f, *f, *f, *f, *f, *f, *f]
h: &h [*g, *g, *g, *g, *g, *g, *g, *g, *g, *g]
i: &i [*h, *h, *h, *h, *h, *h, *h, *h, *h, *h]
model:
  name: sage
  args: {hidden: 16, bomb: *i}
"""


def _alias_bomb(ws: Workspace, tmp: Path) -> dict[str, Any]:
    path = tmp / "bomb.yaml"
    path.write_text(ALIAS_BOMB)
    res = cli(ws, "train", "--config", str(path), "--out", str(tmp / "run"), timeout=60)
    return outcome(res, kept=not (tmp / "run").exists())


def _huge_width(ws: Workspace, tmp: Path) -> dict[str, Any]:
    res = train(ws, tmp / "run", "model.args.hidden=1000000000")
    return outcome(res, kept=not (tmp / "run").exists())


def _cut_partition_stats(ws: Workspace, tmp: Path) -> dict[str, Any]:
    parts = tmp / "parts"
    first = partition(ws, parts)
    if first.returncode != 0:
        raise RuntimeError(first.stderr[-2000:])
    stats = parts / "partition_stats.json"
    stats.write_text(stats.read_text()[:40])
    res = cli(ws, "partition", "--config", str(config_of("sar")), "--out", str(parts),
              "--if-missing", *[a for s in ws.sets("sar") if s.startswith(("dataset.",
                                                                           "partition."))
                                for a in ("--set", s)])
    rebuilt = [ln for ln in res.stdout.splitlines() if ln.startswith("rebuilding")]
    return outcome(res, message=rebuilt[0] if rebuilt else res.stdout[-200:],
                   kept=bool(json.loads(stats.read_text())["parts"]))


SCENARIOS = (
    Scenario("--force on a live job's folder", 2, ("in use by a live job", "pid"),
             _on_live_job(("--force",))),
    Scenario("--resume on a live job's folder", 2, ("in use by a live job", "pid"),
             _on_live_job(("--resume",))),
    Scenario("predict on a live job's folder", 2, ("in use by a live job", "pid"),
             _on_live_job(("predict",))),
    Scenario("a killed job's stale lock, then --resume", 0,
             ("taking over the lock of a job that is gone", "pid 4194000"), _stale_lock),
    Scenario("one flipped byte in best.pt, predict", 2, ("best.pt: checksum mismatch",),
             _flipped("best.pt", "predict")),
    Scenario("one flipped byte in checkpoint.pt, --resume", 2,
             ("checkpoint.pt: checksum mismatch",), _flipped("checkpoint.pt", "resume")),
    Scenario("metrics.json edited, predict", 2, ("metrics.json: checksum mismatch",),
             _flipped("metrics.json", "predict")),
    Scenario("config.yaml edited, predict", 2, ("config.yaml: checksum mismatch",),
             _flipped("config.yaml", "predict")),
    Scenario("--out a symlink to a run folder, --force", 2, ("is a symbolic link",),
             _symlinked_out),
    Scenario("last metrics.jsonl line cut, --resume", 0, ("epochs 1,2,3",), _cut_metrics_line),
    Scenario("partition onto a disk too small", 1,
             ("not enough free space for the partition files",), _partition_disk_too_small),
    Scenario("train onto a disk too small for its checkpoints", 1,
             ("not enough free space for the checkpoints",), _train_disk_too_small),
    Scenario("disk fills up mid-run, then --resume", 1,
             ("cannot write", "no space left on the device"), _disk_fills_mid_run),
    Scenario("curves.png onto a full disk (train --plot)", 1,
             ("cannot write curves.png", "no space left"), _curves_on_full_disk),
    Scenario("run folder on a read-only file system", 1, ("read-only",), _read_only),
    Scenario("predict --out onto a full disk", 1, ("cannot write pred.csv", "no space left"),
             _predict_out("1m")),
    Scenario("predict --out onto a read-only disk", 1, ("cannot write pred.csv", "read-only"),
             _predict_out("1m", read_only=True)),
    Scenario("YAML alias bomb in model.args", 2, ("alias",), _alias_bomb),
    Scenario("model.args.hidden: 1000000000", 2, ("model.args.hidden",), _huge_width),
    Scenario("partition --if-missing, partition_stats.json cut", 0,
             ("rebuilding", "partition_stats.json"), _cut_partition_stats),
)


def run_scenario(ws: Workspace, scenario: Scenario, tmp: Path) -> dict[str, Any]:
    """Run one scenario in the empty folder ``tmp``; its record (``skipped``: why it could not
    run here)."""
    record: dict[str, Any] = {"case": scenario.name, "mode": "sar", "expected_code": scenario.code}
    t0 = time.monotonic()
    try:
        record.update(scenario.act(ws, tmp))
    except Skip as exc:
        return {**record, "skipped": str(exc), "handled": None}
    record["scenario_s"] = round(time.monotonic() - t0, 2)
    record["handled"] = (record["exit_code"] == scenario.code and not record["traceback"]
                         and all(s in record["message"] for s in scenario.says)
                         and record["kept"])
    return record
