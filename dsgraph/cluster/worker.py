"""Worker-side set-up of a gloo job started by :func:`dsgraph.cluster.launch.run_workers`."""
from __future__ import annotations

import datetime
import os
import sys
import traceback
from typing import Any, Callable

import torch
import torch.distributed as dist


def set_threads() -> int:
    """Apply the job's per-process thread count (OMP_NUM_THREADS, default 1) to torch."""
    n = int(os.environ.get("OMP_NUM_THREADS", "1"))
    torch.set_num_threads(n)
    return n


def interface_of(ip: str) -> str:
    """The network interface holding address ``ip`` on this host."""
    import psutil
    for name, addrs in psutil.net_if_addrs().items():
        if any(a.address == ip for a in addrs):
            return name
    raise RuntimeError(f"no network interface holds {ip} on this host")


def init_gloo(timeout_s: float = 600.0) -> tuple[int, int]:
    """Set threads and join the gloo process group from env (RANK, WORLD_SIZE, MASTER_*)."""
    set_threads()
    host_ip = os.environ.get("DSGRAPH_HOST_IP")
    if host_ip and "GLOO_SOCKET_IFNAME" not in os.environ:
        os.environ["GLOO_SOCKET_IFNAME"] = interface_of(host_ip)
    if not dist.is_initialized():
        dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=timeout_s))
    return dist.get_rank(), dist.get_world_size()


def run_process_main(fn: Callable[..., Any], *args: Any) -> None:
    """Run a worker's main; on any error print the traceback and exit(1) at once.

    DGL registers an atexit handler that waits at a barrier for every other client, so a worker
    that raised would otherwise never exit and the job would hang (observed with DGL 2.1.0).
    """
    try:
        fn(*args)
    except BaseException as exc:  # noqa: BLE001 - every failure must end the process
        if not (isinstance(exc, SystemExit) and exc.code in (0, None)):
            traceback.print_exc()
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(1 if not isinstance(exc, KeyboardInterrupt) else 130)
        raise
