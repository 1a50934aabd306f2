"""Launch a DistDGL job: DistGraph servers and trainers per machine, supervised, with the
one-host fixes of :mod:`dsgraph.cluster.dgl_compat` applied in every process."""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from dsgraph.cluster import dgl_compat, shm
from dsgraph.cluster.launch import Launcher, gloo_env
from dsgraph.cluster.ports import free_port_range
from dsgraph.cluster.spec import plan_machines, write_ip_config
from dsgraph.config import ClusterConfig
from dsgraph.fsutil import storage_errors

# What a trainer is told by :func:`run_dgl_job` (read back by :meth:`TrainerContext.from_env`).
_ENV_IP_CONFIG, _ENV_PART_CONFIG, _ENV_GRAPH = "DGL_IP_CONFIG", "DGL_CONF_PATH", "DSGRAPH_DGL_GRAPH"


@dataclass(frozen=True)
class TrainerContext:
    """A trainer's view of its DGL job: the servers' address file, the name its DistGraph
    opens and its machine's partition JSON (the one home of these environment names)."""

    ip_config: str
    graph_name: str
    part_config: Path

    @classmethod
    def from_env(cls) -> "TrainerContext":
        """The context :func:`run_dgl_job` gave this process."""
        return cls(os.environ[_ENV_IP_CONFIG], os.environ[_ENV_GRAPH],
                   Path(os.environ[_ENV_PART_CONFIG]))


def run_dgl_job(run_dir: Path, part_config: Path, cluster: ClusterConfig, trainer_module: str,
                trainer_args: Sequence[str] = (), timeout_s: float = 1800.0,
                stock: bool = False) -> dict[str, float]:
    """Run servers + trainers (``python -m trainer_module --run-dir RUN *trainer_args``) for
    ``part_config``; return each process's peak RSS in MiB. The job's memory (peak summed PSS,
    so the servers' shared-memory partitions count once) and each process's PSS at that peak
    are :func:`dsgraph.cluster.memwatch.last_job` once this returns (or raises).

    ``stock=True`` runs DGL's own single-host path with no patches (for comparison benchmarks;
    it is only correct with one partition). Its segments carry no job token: the supervisor
    removes the ones this job's processes mapped, never another job's, and one stock job runs
    per host at a time (:func:`dgl_compat.stock_host_lock`).
    """
    if stock:
        with dgl_compat.stock_host_lock():
            return _run(run_dir, part_config, cluster, trainer_module, trainer_args, timeout_s,
                        token=None)
    return _run(run_dir, part_config, cluster, trainer_module, trainer_args, timeout_s,
                token=shm.new_token())


def _run(run_dir: Path, part_config: Path, cluster: ClusterConfig, trainer_module: str,
         trainer_args: Sequence[str], timeout_s: float, token: str | None) -> dict[str, float]:
    """:func:`run_dgl_job` with its job token (``None``: stock, unpatched)."""
    run_dir = Path(run_dir).resolve()
    meta = json.loads(Path(part_config).read_text())
    machines = plan_machines(cluster, meta["num_parts"])
    ip_config = write_ip_config(machines, run_dir / "ip_config.txt")
    S, T, K = cluster.servers_per_machine, cluster.trainers_per_machine, cluster.samplers_per_trainer
    num_clients = T * (1 + K) * len(machines)
    master_port = free_port_range(1)
    common = {"DGL_NUM_SERVER": str(S), "DGL_NUM_CLIENT": str(num_clients),
              "DGL_NUM_SAMPLER": str(K), _ENV_IP_CONFIG: str(ip_config),
              "DGL_GRAPH_FORMAT": "csc", "DGL_DIST_MAX_TRY_TIMES": "60"}
    with Launcher(run_dir, cluster, timeout_s, shm_token=token,
                  snapshot_shm=token is None) as launcher:
        for m in machines:
            cfg_m, graph_m = Path(part_config).resolve(), meta["graph_name"]
            env_m = dict(common)
            if token is not None:
                with storage_errors(run_dir / "parts", "the partition configs"):
                    cfg_m = dgl_compat.machine_config(part_config, token, m.index,
                                                      run_dir / "parts")
                graph_m = dgl_compat.machine_graph_name(meta["graph_name"], token, m.index)
                env_m.update({dgl_compat.ENV_MACHINE: str(m.index), dgl_compat.ENV_TOKEN: token,
                              dgl_compat.ENV_GRAPH: graph_m})
            env_m.update({_ENV_PART_CONFIG: str(cfg_m), _ENV_GRAPH: graph_m})
            for j in range(S):
                sid = m.index * S + j
                launcher.start(m, f"server{sid}",
                               ["-m", "dsgraph.cluster.dgl_server", "--server-id", str(sid),
                                "--ip-config", str(ip_config), "--part-config", str(cfg_m),
                                "--num-servers", str(S), "--num-clients", str(num_clients)],
                               {**env_m, "DGL_ROLE": "server", "DGL_SERVER_ID": str(sid)},
                               required=False)
            for t in range(T):
                rank = m.index * T + t
                launcher.start(m, f"trainer{rank}",
                               ["-m", trainer_module, "--run-dir", str(run_dir), *trainer_args],
                               {**env_m, "DGL_DIST_MODE": "distributed", "DGL_ROLE": "client",
                                "DGL_GROUP_ID": "0",
                                **gloo_env(rank, t, T * len(machines), machines[0], master_port)},
                               echo=rank == 0)
        launcher.wait()
        launcher.supervisor.drain(timeout_s=30)  # servers exit once every client has said goodbye
        return dict(launcher.supervisor.peak_rss_mb)
