"""Inside a job's process: thread count, joining the gloo process group, the one exit path."""
from __future__ import annotations

import datetime
import os
import sys
import traceback
from typing import Any, Callable

import psutil
import torch
import torch.distributed as dist


def set_threads() -> int:
    """Apply the job's per-process thread count (OMP_NUM_THREADS, default 1) to torch."""
    n = int(os.environ.get("OMP_NUM_THREADS", "1"))
    torch.set_num_threads(n)
    return n


def interface_of(ip: str) -> str:
    """The network interface holding address ``ip`` on this host."""
    for name, addrs in psutil.net_if_addrs().items():
        if any(a.address == ip for a in addrs):
            return name
    raise RuntimeError(f"no network interface holds {ip} on this host")


def init_process_group(timeout_s: float = 600.0) -> tuple[int, int]:
    """Set threads and join the gloo process group the launcher described in the environment
    (RANK, WORLD_SIZE, MASTER_ADDR/PORT; DSGRAPH_HOST_IP on another host); return (rank, world).

    Without RANK (a plain single process) there is no group and the result is (0, 1).
    """
    set_threads()
    if "RANK" not in os.environ:
        return 0, 1
    host_ip = os.environ.get("DSGRAPH_HOST_IP")
    if host_ip and "GLOO_SOCKET_IFNAME" not in os.environ:
        # gloo must bind the interface holding this host's address, not loopback
        os.environ["GLOO_SOCKET_IFNAME"] = interface_of(host_ip)
    if not dist.is_initialized():
        dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=timeout_s))
    return dist.get_rank(), dist.get_world_size()


def exit_now(code: int = 0) -> None:
    """Flush and leave without running destructors or atexit handlers.

    Results are already written atomically. Two things would otherwise hang a finished or failed
    worker: DGL's atexit handler waits at a barrier for every other client, and with torch 2.2
    destroying a gloo process group can deadlock (its destructor joins gloo's threads holding
    the GIL while a thread still needs it to free the last tensor of an async operation).
    """
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def run_process_main(fn: Callable[..., Any], *args: Any) -> None:
    """Run a worker's main and exit through :func:`exit_now`: 0 on success; on any error print
    the traceback and exit 1 (130 on Ctrl-C) at once, so the supervisor sees the fault."""
    try:
        fn(*args)
    except SystemExit as exc:
        exit_now(exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1))
    except BaseException as exc:  # noqa: BLE001 - every failure must end the process
        traceback.print_exc()
        exit_now(130 if isinstance(exc, KeyboardInterrupt) else 1)
    exit_now(0)
