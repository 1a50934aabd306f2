"""Launch a DistDGL job: DistGraph servers and trainers per machine, supervised, with the
one-host fixes of :mod:`dsgraph.cluster.dgl_compat` applied in every process."""
from __future__ import annotations

import json
import os
import secrets
import shlex
import sys
from pathlib import Path
from typing import Sequence

from dsgraph.cluster import dgl_compat
from dsgraph.cluster.launch import base_env
from dsgraph.cluster.ports import free_port_range
from dsgraph.cluster.spec import Machine, plan_machines, write_ip_config
from dsgraph.cluster.supervise import Supervisor
from dsgraph.config import ClusterConfig

# Variables a remote (ssh) process needs; everything else stays local.
_FORWARD = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "PYTHONUNBUFFERED", "PYTHONPATH", "RANK",
            "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "GLOO_SOCKET_IFNAME")


def _remote_argv(machine: Machine, cluster: ClusterConfig, argv: Sequence[str],
                 env: dict[str, str]) -> list[str]:
    """Wrap ``argv`` for another host as DGL's launch.py does: cd, explicit environment, same
    python; over ssh, or with ``ip netns exec`` when the hosts are network namespaces."""
    keys = [k for k in env if k.startswith(("DGL_", "DSGRAPH_")) or k in _FORWARD]
    workdir = cluster.workdir or os.getcwd()
    remote = (f"cd {shlex.quote(workdir)} && exec env "
              + " ".join(f"{k}={shlex.quote(env[k])}" for k in keys) + " "
              + " ".join(shlex.quote(a) for a in argv))
    if cluster.netns:
        return ["ip", "netns", "exec", str(cluster.netns[machine.index]), "sh", "-c", remote]
    return ["ssh", "-o", "StrictHostKeyChecking=no", "-o", "BatchMode=yes", "-tt",
            "-p", str(cluster.ssh_port), machine.ip, remote]


def run_dgl_job(run_dir: Path, part_config: Path, cluster: ClusterConfig, trainer_module: str,
                trainer_args: Sequence[str] = (), stock: bool = False) -> dict[str, float]:
    """Run servers + trainers for ``part_config``; return each process's peak RSS in MiB.

    ``stock=True`` runs DGL's own single-host path with no patches (for comparison benchmarks;
    it is only correct with one partition).
    """
    run_dir = Path(run_dir).resolve()
    meta = json.loads(Path(part_config).read_text())
    num_parts = meta["num_parts"]
    machines = plan_machines(cluster, num_parts)
    ip_config = write_ip_config(machines, run_dir / "ip_config.txt")
    S, T, K = cluster.servers_per_machine, cluster.trainers_per_machine, cluster.samplers_per_trainer
    num_clients = T * (1 + K) * len(machines)
    token = None if stock else "dsg" + secrets.token_hex(4)
    python = cluster.python or sys.executable
    master_port = free_port_range(1)
    common = {"DGL_NUM_SERVER": str(S), "DGL_NUM_CLIENT": str(num_clients),
              "DGL_NUM_SAMPLER": str(K), "DGL_IP_CONFIG": str(ip_config),
              "DGL_GRAPH_FORMAT": "csc", "DGL_DIST_MAX_TRY_TIMES": "60"}
    with Supervisor(run_dir / "logs", cluster.timeout_s, shm_token=token,
                    snapshot_shm=stock) as sup:
        for m in machines:
            cfg_m, graph_m = Path(part_config).resolve(), meta["graph_name"]
            env_m = dict(common)
            if token is not None:
                cfg_m = dgl_compat.machine_config(part_config, token, m.index, run_dir / "parts")
                graph_m = dgl_compat.machine_graph_name(meta["graph_name"], token, m.index)
                env_m.update({dgl_compat.ENV_MACHINE: str(m.index), dgl_compat.ENV_TOKEN: token,
                              dgl_compat.ENV_GRAPH: graph_m})
            env_m.update(DGL_CONF_PATH=str(cfg_m), DSGRAPH_DGL_GRAPH=graph_m)

            def start(name: str, argv: list[str], extra: dict[str, str], required: bool,
                      echo: bool = False) -> None:
                env = {**base_env(cluster), **env_m, **extra}
                argv = [python, *argv]
                if not m.is_local:
                    # gloo must bind the interface that holds this host's address, not loopback
                    env.pop("GLOO_SOCKET_IFNAME", None)
                    env["DSGRAPH_HOST_IP"] = m.ip
                    argv = _remote_argv(m, cluster, argv, env)
                sup.spawn(name, argv, env, required=required, echo=echo)

            for j in range(S):
                sid = m.index * S + j
                start(f"server{sid}", ["-m", "dsgraph.cluster.dgl_server", "--server-id", str(sid),
                                       "--ip-config", str(ip_config), "--part-config", str(cfg_m),
                                       "--num-servers", str(S), "--num-clients", str(num_clients)],
                      {"DGL_ROLE": "server", "DGL_SERVER_ID": str(sid)}, required=False)
            for t in range(T):
                rank = m.index * T + t
                start(f"trainer{rank}", ["-m", trainer_module, "--run-dir", str(run_dir),
                                         *trainer_args],
                      {"DGL_DIST_MODE": "distributed", "DGL_ROLE": "client", "DGL_GROUP_ID": "0",
                       "RANK": str(rank), "LOCAL_RANK": str(t),
                       "WORLD_SIZE": str(T * len(machines)),
                       "MASTER_ADDR": machines[0].ip, "MASTER_PORT": str(master_port)},
                      required=True, echo=rank == 0)
        sup.wait()
        sup.drain(timeout_s=30)  # servers exit once every client has said goodbye
        return dict(sup.peak_rss_mb)
