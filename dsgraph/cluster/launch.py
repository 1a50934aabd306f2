"""Start a job's processes on their machines, here, over ssh or in network namespaces, under one
:class:`Supervisor`; :func:`run_workers` runs a plain gloo job (one worker per machine)."""
from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path
from typing import Sequence

from dsgraph.cluster import shm
from dsgraph.cluster.chatter import quiet_env
from dsgraph.cluster.netns import host_shm
from dsgraph.cluster.spec import Machine, plan_machines
from dsgraph.cluster.supervise import Supervisor
from dsgraph.config import ClusterConfig

# Variables a remote (ssh) process needs; everything else stays local.
_FORWARD = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "PYTHONUNBUFFERED", "PYTHONPATH", "RANK",
            "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "GLOO_SOCKET_IFNAME",
            "DGLBACKEND")


def base_env(cluster: ClusterConfig) -> dict[str, str]:
    """Environment every job process gets: thread limits, unbuffered output, gloo on loopback,
    DGL's backend named (no notice printed)."""
    env = quiet_env(dict(os.environ))
    threads = str(cluster.num_threads)
    env.update(OMP_NUM_THREADS=threads, MKL_NUM_THREADS=threads, PYTHONUNBUFFERED="1",
               GLOO_SOCKET_IFNAME=env.get("GLOO_SOCKET_IFNAME", "lo"))
    # the checkout on the path: its dsgraph when not installed, benchmark and test hooks
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    if cluster.ip_config:  # named in a port-in-use error
        env["DSGRAPH_IP_CONFIG"] = str(cluster.ip_config)
    return env


def reclaim_shared_memory() -> None:
    """Remove the /dev/shm segments of earlier jobs whose launcher is gone, and say so."""
    for token, removed in shm.reclaim_orphans().items():
        if removed:
            print(f"dsgraph: removed {len(removed)} shared-memory segment(s) of job {token}, "
                  f"whose launcher (pid {shm.token_owner(token)}) is gone", file=sys.stderr)


def remote_argv(machine: Machine, cluster: ClusterConfig, argv: Sequence[str],
                env: dict[str, str]) -> list[str]:
    """Wrap ``argv`` for another host as DGL's launch.py does: cd, explicit environment, same
    python; over ssh, or with ``ip netns exec`` when the hosts are network namespaces."""
    keys = [k for k in env if k.startswith(("DGL_", "DSGRAPH_")) or k in _FORWARD]
    workdir = cluster.workdir or os.getcwd()
    remote = (f"cd {shlex.quote(workdir)} && exec env "
              + " ".join(f"{k}={shlex.quote(env[k])}" for k in keys) + " "
              + " ".join(shlex.quote(a) for a in argv))
    if cluster.netns:
        ns = str(cluster.netns[machine.index])
        if cluster.netns_shm:
            # `ip netns exec` gives the process its own mount namespace, so this bind mount is
            # seen by nobody else; every process of the host binds the same folder.
            shared = shlex.quote(str(host_shm(ns)))
            remote = f"mkdir -p {shared} && mount --bind {shared} /dev/shm && {remote}"
        return ["ip", "netns", "exec", ns, "sh", "-c", remote]
    return ["ssh", "-o", "StrictHostKeyChecking=no", "-o", "BatchMode=yes", "-tt",
            "-p", str(cluster.ssh_port), machine.ip, remote]


def gloo_env(rank: int, local_rank: int, world: int, master: Machine, port: int) -> dict[str, str]:
    """What torch.distributed's env:// initialisation reads."""
    return {"RANK": str(rank), "LOCAL_RANK": str(local_rank), "WORLD_SIZE": str(world),
            "MASTER_ADDR": master.ip, "MASTER_PORT": str(port)}


class Launcher:
    """Starts processes on machines under a Supervisor (use as a context manager)."""

    def __init__(self, run_dir: Path, cluster: ClusterConfig, timeout_s: float,
                 shm_token: str | None = None, snapshot_shm: bool = False) -> None:
        self.cluster = cluster
        self.python = cluster.python or sys.executable
        self.supervisor = Supervisor(Path(run_dir) / "logs", timeout_s, shm_token=shm_token,
                                     snapshot_shm=snapshot_shm, run_dir=Path(run_dir),
                                     heartbeat_s=cluster.heartbeat_s)

    def __enter__(self) -> "Launcher":
        reclaim_shared_memory()
        self.supervisor.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self.supervisor.__exit__(*exc)

    def start(self, machine: Machine, name: str, python_args: Sequence[str], env: dict[str, str],
              required: bool = True, echo: bool = False) -> None:
        """Run ``python *python_args`` on ``machine`` with ``env`` added to :func:`base_env`.

        Its heartbeat is watched where its file is this host's: here and in a network namespace
        (which shares the filesystem), not over ssh."""
        env = {**base_env(self.cluster), **env}
        argv = [self.python, *python_args]
        beats_here = machine.is_local or bool(self.cluster.netns)
        if not machine.is_local:
            # gloo must bind the interface that holds this host's address, not loopback
            env.pop("GLOO_SOCKET_IFNAME", None)
            env["DSGRAPH_HOST_IP"] = machine.ip
            if beats_here:  # the wrapped command carries its own environment
                env.update(self.supervisor.heartbeat_env(name))
            argv = remote_argv(machine, self.cluster, argv, env)
        # a process in a network namespace is a local pid; over ssh the pid is the client's
        self.supervisor.spawn(name, argv, env, required=required, echo=echo,
                              beats=beats_here, local=beats_here)

    def wait(self) -> dict[str, float]:
        """Wait for every required process (raise JobFailed on a fault); peak RSS per process.

        The job's memory (summed PSS) is ``self.supervisor.memory`` (:mod:`.memwatch`), and
        :func:`~dsgraph.cluster.memwatch.last_job` once the launcher has exited."""
        self.supervisor.wait()
        return dict(self.supervisor.peak_rss_mb)


def run_workers(run_dir: Path, cluster: ClusterConfig, module: str, num_workers: int,
                args: Sequence[str] = (), timeout_s: float = 1800.0,
                name: str = "worker") -> dict[str, float]:
    """Run ``python -m module --run-dir RUN *args`` as ``num_workers`` gloo ranks, rank r on
    machine r (``cluster.ip_config``/``netns``, or all on this host); rank 0's output is echoed.
    Returns each process's peak RSS in MiB (the job's summed PSS:
    :func:`dsgraph.cluster.memwatch.last_job`); raises JobFailed on a fault."""
    machines = plan_machines(cluster, num_workers)
    with Launcher(run_dir, cluster, timeout_s) as launcher:
        for rank, machine in enumerate(machines):
            # The first machine's port (free on loopback, or as ip_config names it) is gloo's.
            env = gloo_env(rank, 0, num_workers, machines[0], machines[0].port)
            launcher.start(machine, f"{name}{rank}",
                           ["-m", module, "--run-dir", str(Path(run_dir).resolve()), *args], env,
                           echo=rank == 0)
        return launcher.wait()
