"""Start the processes of a job with the right environment, under a :class:`Supervisor`."""
from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Sequence

from dsgraph.cluster.ports import free_port_range
from dsgraph.cluster.supervise import Supervisor
from dsgraph.config import ClusterConfig


def base_env(cluster: ClusterConfig) -> dict[str, str]:
    """Environment every job process gets: thread limits, unbuffered output, gloo on loopback."""
    env = dict(os.environ)
    threads = str(cluster.num_threads)
    env.update(OMP_NUM_THREADS=threads, MKL_NUM_THREADS=threads, PYTHONUNBUFFERED="1",
               GLOO_SOCKET_IFNAME=env.get("GLOO_SOCKET_IFNAME", "lo"))
    root = str(Path(__file__).resolve().parents[2])  # so `python -m train...` resolves anywhere
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def run_workers(run_dir: Path, module: str, num_workers: int, cluster: ClusterConfig,
                args: Sequence[str] = (), name: str = "worker") -> None:
    """Run ``python -m module --run-dir RUN *args`` as ``num_workers`` gloo ranks; raise on failure."""
    run_dir = Path(run_dir)
    port = free_port_range(1)
    with Supervisor(run_dir / "logs", cluster.timeout_s) as sup:
        for rank in range(num_workers):
            env = base_env(cluster)
            env.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(num_workers),
                       MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
            sup.spawn(f"{name}{rank}", [sys.executable, "-m", module, "--run-dir", str(run_dir),
                                        *args], env)
        sup.wait()
