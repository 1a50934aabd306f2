"""The fault-injection harness: start a real ``python -m train`` job, hit it with one fault, and
record what the launcher did and what the job left behind.

A :class:`Case` names the job's mode (tiny graph or fields, 2 partitions / workers) and its fault:
kill -9 of a server, trainer or worker, or of the launcher itself; SIGSTOP of a server, trainer,
worker or a trainer's sampler process (a hung peer: the job is left running until the supervisor
sees it make no progress, or a peer's collective times out first); SIGINT / SIGTERM to the
launcher; a model whose forward raises on rank 1 (:data:`FAULT_MODEL`); a port in use; kill -9 of
the launcher while a checkpoint is being written, then ``--resume``; the run folder (a small tmpfs)
turned read-only or filled up mid-run (:mod:`benchmarks.storage`). :func:`run_case` records the
message shown, the exit code, the seconds from the fault to the end of the job, and what was left
behind: processes of the job, listening ports, ``/dev/shm`` segments of the job, temp files in the
run folder; and every socket a job process listened on, which must be the job's address (loopback),
never a wildcard. ``benchmarks/reliability.py`` (the report) and ``tests/dist/test_faults.py`` (the
assertions) both run their cases through it.
"""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Union

import psutil

from benchmarks import storage
from benchmarks.jobwatch import Watch, alive, job_shm, listening_now, temp_files
from dsgraph.cluster.preload import PreloadedProcess, fresh_env, start_command

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable
EXIT_LIMIT_S = 60.0

GRAPH = ("dataset.num_nodes=2000", "dataset.feat_dim=16", "dataset.num_classes=4",
         "dataset.avg_degree=6", "partition.num_parts=2", "partition.method=random",
         "model.args={hidden: 16, num_layers: 2}", "sampled.batch_size=64",
         "sampled.fanouts=[5, 5]", "train.eval_every=0", "train.timeout_s=150",
         "train.collective_timeout_s=60")
FIELDS = ("physics.resolution=24", "physics.train_samples=8", "physics.test_samples=2",
          "physics.sampled_nodes=200", "physics.radius=0.2", "physics.max_edges=8",
          "physics.infer_repeats=1", "model.args={width: 8, layers: 2, kernel_hidden: 8}",
          "physics.gen_workers=1", "train.timeout_s=150", "train.collective_timeout_s=60")

# A user model in a module of its own (put on PYTHONPATH): GraphSAGE that can raise in forward
# on one rank, or carry a large buffer so that writing a checkpoint takes a while.
FAULT_MODEL = '''
import torch
import torch.distributed as dist
from dsgraph.models.gnn import GraphSAGE


class Faulty(GraphSAGE):
    def __init__(self, in_feats, num_classes, raise_rank=-1, ballast_mb=0, **kw):
        super().__init__(in_feats, num_classes, **kw)
        self.raise_rank = raise_rank
        if ballast_mb:
            self.register_buffer("ballast", torch.zeros(ballast_mb * 262144))

    def forward(self, *args):
        rank = dist.get_rank() if dist.is_initialized() else 0
        if self.training and rank == self.raise_rank:
            raise RuntimeError(f"injected fault in forward on rank {rank}")
        return super().forward(*args)
'''


@dataclass(frozen=True)
class Case:
    """One fault: the job it hits and what the launcher must then do."""

    name: str
    mode: str  # sampled | sar | dsmpnn
    fault: str  # kill9:<process> | kill9:launcher | sigstop:<process> | sigint | sigterm |
    #             raises | port | ckpt | readonly | full (the run folder, mid-run)
    code: int  # expected exit code of the launcher (-9: killed itself)
    says: tuple[str, ...] = ()  # the error line must contain each of these
    sets: tuple[str, ...] = ()  # extra --set overrides

    @property
    def target(self) -> str:
        """The process the fault hits (``launcher`` or a log name like ``server0``)."""
        return self.fault.split(":", 1)[1] if ":" in self.fault else "launcher"


# A started launcher: fresh, or forked by the test suite's preload server.
Launched = Union[subprocess.Popen, PreloadedProcess]
# The --set that makes a job use FAULT_MODEL; a case adds model.args.raise_rank / ballast_mb.
FAULTY = "model.name=faulty_model:Faulty"
# The --set that makes a hung process the job's fault after a few seconds, not a minute.
HANG = "cluster.heartbeat_s=8"
# The --set that makes a collective time out before a hung process's heartbeat_s (60 s by
# default): the process that timed out must not be blamed for the one it waited for.
SHORT_COLLECTIVE = "train.collective_timeout_s=10"
# Faults of the run folder's storage (a tmpfs mounted there): turned read-only, or filled up.
STORAGE = ("readonly", "full")


@dataclass
class Workspace:
    """Data, partitions and the fault model, made once and shared by every case."""

    root: Path
    env: dict[str, str] = field(default_factory=dict)

    def sets(self, mode: str) -> list[str]:
        """The --set overrides that put a job of ``mode`` on this workspace's tiny data."""
        base = [f"dataset.cache_dir={self.root / 'data'}"]
        if mode == "dsmpnn":
            return base + list(FIELDS)
        return base + [f"partition.out_dir={self.root / 'parts'}", f"train.mode={mode}",
                       *GRAPH]


def config_of(mode: str) -> Path:
    """The shipped config a case of ``mode`` starts from."""
    return ROOT / "configs" / ("darcy.yaml" if mode == "dsmpnn" else "default.yaml")


def prepare(root: Path) -> Workspace:
    """Partition the tiny graph and write the fault model module under ``root``."""
    ws = Workspace(Path(root))
    (ws.root / "models").mkdir(parents=True, exist_ok=True)
    (ws.root / "models" / "faulty_model.py").write_text(FAULT_MODEL)
    # Fresh job processes (no preload server named to the launcher): the cases watch the
    # launcher's own process tree. Under test the launcher itself may be forked by the suite's
    # preload server (start_command); its job processes are still its own fresh children.
    ws.env = dict(fresh_env(), OMP_NUM_THREADS="1", PYTHONPATH=os.pathsep.join(
        [str(ROOT), str(ws.root / "models")] + ([os.environ["PYTHONPATH"]]
                                                if os.environ.get("PYTHONPATH") else [])))
    args = [PY, "-m", "partition", "--config", str(config_of("sampled"))]
    for s in ws.sets("sampled"):
        if s.startswith(("dataset.", "partition.")):
            args += ["--set", s]
    done = subprocess.run(args, cwd=ROOT, env=ws.env, capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        raise RuntimeError(f"partitioning failed: {done.stderr[-2000:]}")
    return ws


def _log(run: Path, name: str) -> str:
    try:
        return (run / "logs" / f"{name}.log").read_text(errors="replace")
    except OSError:
        return ""


def _find(launcher: int, target: str) -> Optional[psutil.Process]:
    """The job process whose log is ``target`` (server<i>, trainer<r>, worker<r>), or trainer
    <r>'s sampler process (sampler<r>: DGL's, a spawned child of the trainer)."""
    kind, index = target.rstrip("0123456789"), target[len(target.rstrip("0123456789")):]
    if kind == "sampler":
        trainer = _find(launcher, f"trainer{index}")
        kids = trainer.children() if trainer is not None else []
        return next((k for k in kids if "spawn_main" in " ".join(k.cmdline())), None)
    try:
        kids = psutil.Process(launcher).children()
    except psutil.Error:
        return None
    for p in kids:
        try:
            env, cmd = p.environ(), " ".join(p.cmdline())
        except psutil.Error:
            continue
        if kind == "server" and env.get("DGL_SERVER_ID") == index and "dgl_server" in cmd:
            return p
        if (kind in ("trainer", "worker") and env.get("RANK") == index
                and "dsgraph.modes.worker" in cmd):
            return p
    return None


def _launch(ws: Workspace, case: Case, run: Path, extra: tuple[str, ...] = (),
            resume: bool = False) -> tuple[Launched, Path]:
    args = [PY, "-m", "train", "--config", str(config_of(case.mode)), "--out", str(run)]
    for s in [*ws.sets(case.mode), "train.epochs=2000", *case.sets, *extra]:
        args += ["--set", s]
    if resume:
        args.append("--resume")
    run.parent.mkdir(parents=True, exist_ok=True)
    err = run.parent / f"{run.name}.{'resume.' if resume else ''}stderr"
    with err.open("w") as fh:
        proc = start_command(args, ws.env, str(ROOT), stderr=fh)
    return proc, err


def _wait_until(cond, timeout_s: float, proc: Launched, poll_s: float = 0.1) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if cond():
            return True
        if proc.poll() is not None:
            return False
        time.sleep(poll_s)
    return False


def _error_line(stderr: str) -> str:
    lines = [ln for ln in stderr.splitlines() if ln.startswith("error:")]
    return lines[-1] if lines else ""


def run_case(ws: Workspace, case: Case) -> dict[str, Any]:
    """Run one case; return its record (what happened and what was left behind; ``skipped``:
    why a storage fault could not run here)."""
    run = ws.root / "runs" / case.name.replace(" ", "_").replace(",", "").replace("-", "")
    if case.fault not in STORAGE:
        return _run_case(ws, case, run)
    # The run folder on a small file system of its own, turned read-only or filled mid-run.
    mounted: list[Path] = []
    try:
        with storage.tmpfs(run, "24m"):
            try:
                return {**_run_case(ws, case, run, mounted), "folder": str(run)}
            finally:
                for path in mounted:
                    storage.unmount(path)
    except storage.Skip as exc:
        return {"case": case.name, "mode": case.mode, "fault": case.fault,
                "skipped": str(exc), "handled": None}


def _run_case(ws: Workspace, case: Case, run: Path,
              mounted: Optional[list[Path]] = None) -> dict[str, Any]:
    holder, extra = _hold_port(ws) if case.fault == "port" else (None, ())
    record: dict[str, Any] = {"case": case.name, "mode": case.mode, "fault": case.fault}
    proc, err_path = _launch(ws, case, run, extra)
    watch = Watch(proc.pid)
    stopped: Optional[psutil.Process] = None
    try:
        fault_at, stopped = _inject(ws, case, run, proc, err_path, watch, record, mounted)
        try:
            proc.wait(EXIT_LIMIT_S + 30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if case.fault == "raises":  # the fault is the moment the process raised
            culprit = run / "logs" / f"{'trainer' if case.mode == 'sampled' else 'worker'}1.log"
            if culprit.exists():
                fault_at = time.monotonic() - (time.time() - culprit.stat().st_mtime)
        record["launcher_exit_s"] = round(time.monotonic() - fault_at, 2)
        # The job has ended when the launcher and every process it started are gone, and their
        # ports closed (a process killed by its parent's death is gone a moment before them).
        watch.sample()
        ports = {port for _, port in watch.listening}
        deadline = time.monotonic() + EXIT_LIMIT_S
        while time.monotonic() < deadline and (alive(watch.pids) or listening_now(ports)):
            time.sleep(0.05)
        record["seconds_to_exit"] = round(time.monotonic() - fault_at, 2)
    finally:
        watch.stop()
        if holder is not None:
            holder.close()
    stderr = err_path.read_text(errors="replace")
    # The console (the launcher's stderr, rank 0's output echoed in it) shows no traceback at
    # all: a job process's stays in its log.
    record.update(exit_code=proc.returncode, message=_error_line(stderr),
                  traceback="Traceback" in stderr)
    if case.fault == "ckpt":
        record.update(_resume(ws, case, run))
    record.update(_left_behind(watch, proc, run))
    if stopped is not None and stopped.pid in record["left_processes"]:
        stopped.kill()  # recorded; a stopped process would otherwise never end
    record["handled"] = handled(case, record)
    return record


def _hold_port(ws: Workspace) -> tuple[socket.socket, tuple[str, ...]]:
    """A listening socket on the port an ip_config names as the job's first: the port fault."""
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen(1)
    port = holder.getsockname()[1]
    ip_config = ws.root / f"ip_config_{port}.txt"
    ip_config.write_text(f"127.0.0.1 {port}\n127.0.0.1 {port + 1}\n")
    return holder, (f"cluster.ip_config={ip_config}",)


def _inject(ws: Workspace, case: Case, run: Path, proc: Launched, err_path: Path,
            watch: Watch, record: dict[str, Any], mounted: Optional[list[Path]]
            ) -> tuple[float, Optional[psutil.Process]]:
    """Wait for the moment the case's fault needs, then inject it; when it was injected, and
    the process it stopped (SIGSTOP), if any. Faults that come from the job's own input (a
    held port, a raising hook) are injected at launch."""
    first = "worker0" if case.mode != "sampled" else "trainer0"
    if case.fault.startswith(("kill9", "sigstop", "sigint", "sigterm")) or case.fault in STORAGE:
        if not _wait_until(lambda: "epoch 1:" in _log(run, first), 150, proc):
            raise RuntimeError(f"{case.name}: the job never reached epoch 1: "
                               f"{err_path.read_text()[-2000:]}")
        watch.sample()
        if case.fault in STORAGE:
            fault_at = time.monotonic()
            if case.fault == "readonly":
                storage.make_read_only(run)
                mounted.append(run)
            else:
                storage.fill(run)
            return fault_at, None
        target = psutil.Process(proc.pid) if case.target == "launcher" else \
            _find(proc.pid, case.target)
        if target is None:
            raise RuntimeError(f"{case.name}: no process {case.target}")
        sig = {"sigint": signal.SIGINT, "sigterm": signal.SIGTERM,
               "sigstop": signal.SIGSTOP}.get(case.fault.split(":")[0], signal.SIGKILL)
        fault_at = time.monotonic()
        target.send_signal(sig)
        return fault_at, target if sig == signal.SIGSTOP else None
    if case.fault == "ckpt":
        # Kill -9 the launcher while rank 0 writes a checkpoint (its temp file exists).
        # (not the first write: --resume needs an earlier checkpoint)
        caught_files: list[list[str]] = [[]]

        def writing() -> bool:
            caught_files[0] = temp_files(run)
            return (run / "checkpoint.pt").exists() and bool(caught_files[0])
        if not _wait_until(writing, 150, proc, poll_s=0.002):
            raise RuntimeError(f"{case.name}: no checkpoint write was caught: "
                               f"{err_path.read_text()[-2000:]}")
        watch.sample()
        fault_at = time.monotonic()
        proc.kill()
        # what the kill interrupted (the job's reaper then removes it: dead writers' temps)
        record["temp_files_at_kill"] = caught_files[0]
        return fault_at, None
    return time.monotonic(), None


def _resume(ws: Workspace, case: Case, run: Path) -> dict[str, Any]:
    """``--resume`` after the checkpoint-write kill: its exit, message and the epochs it wrote."""
    again, again_err = _launch(ws, case, run, resume=True)
    again.wait(240)
    out: dict[str, Any] = {"resume_exit_code": again.returncode,
                           "resume_message": _error_line(again_err.read_text(errors="replace"))}
    try:
        lines = (run / "metrics.jsonl").read_text().splitlines()
        out["resumed_epochs"] = [json.loads(ln)["epoch"] for ln in lines]
    except (OSError, ValueError):
        out["resumed_epochs"] = []
    return out


def _left_behind(watch: Watch, proc: Launched, run: Path) -> dict[str, Any]:
    """What the job opened, and what of it outlived the job (processes, ports, shm, temps)."""
    ports = {port for _, port in watch.listening}
    out = dict(listening=sorted(f"{ip}:{port}" for ip, port in watch.listening),
               wildcard_listeners=sorted(f"{ip}:{port}" for ip, port in watch.listening
                                         if ip in ("0.0.0.0", "::")),
               processes_seen=len(watch.pids), shm_seen=len(watch.shm),
               left_processes=alive(watch.pids), left_ports=listening_now(ports),
               left_shm=job_shm(proc.pid), left_temp_files=temp_files(run))
    out["cleaned_up"] = not (out["left_processes"] or out["left_ports"] or out["left_shm"]
                             or out["left_temp_files"])
    return out


def handled(case: Case, r: dict[str, Any]) -> bool:
    """Whether the record shows the behaviour the case expects."""
    if r.get("skipped"):
        return False
    ok = (r["exit_code"] == case.code and all(s in r["message"] for s in case.says)
          and r.get("folder", "") in r["message"]
          and not r["traceback"] and r["seconds_to_exit"] <= EXIT_LIMIT_S
          and not r["wildcard_listeners"])
    if case.fault == "ckpt":
        ok = ok and bool(r["temp_files_at_kill"]) and r["resume_exit_code"] == 0 \
            and r["resumed_epochs"] == list(range(1, 5))
    return ok


# Cases the tests run beside benchmarks/reliability.py's matrix: hangs under the default
# cluster.heartbeat_s with a collective timeout that comes first, and the run folder's storage.
MORE_CASES = (
    Case("server stopped, collective timeout first", "sampled", "sigstop:server1", 1,
         ("process server1 ", "no progress", "stopped", "server1.log"), (SHORT_COLLECTIVE,)),
    Case("sampled trainer stopped, collective timeout first", "sampled", "sigstop:trainer1", 1,
         ("process trainer1 ", "no progress", "stopped", "trainer1.log"), (SHORT_COLLECTIVE,)),
    # (its trainer waits for batches without a timeout, beating: named after heartbeat_s)
    Case("sampler stopped", "sampled", "sigstop:sampler1", 1,
         ("process trainer1's sampler", "no progress", "stopped", "trainer1.log"),
         (HANG, "cluster.samplers_per_trainer=1")),
    Case("run folder turns read-only", "sampled", "readonly", 1, ("cannot write", "read-only")),
    Case("run folder fills up", "sampled", "full", 1, ("cannot write", "no space left")),
)
