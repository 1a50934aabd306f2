"""Inside a job's process: thread count, joining the gloo process group, the one exit path."""
from __future__ import annotations

import datetime
import errno
import os
import socket
import sys
import traceback
from typing import Any, Callable

import psutil
import torch
import torch.distributed as dist

from dsgraph.cluster import heartbeat, stacks
from dsgraph.errors import ConfigError, UserError


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


def _store(rank: int, world: int, timeout: datetime.timedelta) -> dist.TCPStore:
    """torch.distributed's rendezvous store; rank 0's listens on MASTER_ADDR only.

    (torch 2.2's own TCPStore server listens on every interface: it is handed a socket bound
    here instead.)
    """
    host, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
    if rank != 0:
        return dist.TCPStore(host, port, world, False, timeout)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise ConfigError(port_in_use_message(host, port)) from None
        raise
    sock.listen(1024)
    store = dist.TCPStore(host, port, world, True, timeout, master_listen_fd=sock.fileno())
    sock.detach()  # the store owns the descriptor now
    return store


def port_in_use_message(host: str, port: int) -> str:
    """One line naming a port that is taken and the setting that chose it."""
    if os.environ.get("DSGRAPH_IP_CONFIG"):
        where = (f"change the port on the line for {host} in cluster.ip_config "
                 f"({os.environ['DSGRAPH_IP_CONFIG']})")
    else:
        where = "another program took it after dsgraph chose it; run again"
    return f"port {port} on {host} is already in use: {where}"


def init_process_group(timeout_s: float = 600.0) -> tuple[int, int]:
    """Set threads and join the gloo process group the launcher described in the environment
    (RANK, WORLD_SIZE, MASTER_ADDR/PORT; DSGRAPH_HOST_IP on another host); return (rank, world).

    Every socket listens on this host's job address only: the store on MASTER_ADDR, gloo on
    the interface GLOO_SOCKET_IFNAME names (loopback on one host). Without RANK (a plain single
    process) there is no group and the result is (0, 1).
    """
    set_threads()
    if "RANK" not in os.environ:
        return 0, 1
    host_ip = os.environ.get("DSGRAPH_HOST_IP")
    if host_ip and "GLOO_SOCKET_IFNAME" not in os.environ:
        # gloo must bind the interface holding this host's address, not loopback
        os.environ["GLOO_SOCKET_IFNAME"] = interface_of(host_ip)
    if not dist.is_initialized():
        rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
        timeout = datetime.timedelta(seconds=timeout_s)
        dist.init_process_group("gloo", store=_store(rank, world, timeout), rank=rank,
                                world_size=world, timeout=timeout)
    return dist.get_rank(), dist.get_world_size()


def exit_now(code: int = 0) -> None:
    """Flush and leave without running destructors or atexit handlers.

    Results are already written atomically. Two things would otherwise hang a finished or failed
    worker: DGL's atexit handler waits at a barrier for every other client, and with torch 2.2
    destroying a gloo process group can deadlock (its destructor joins gloo's threads holding
    the GIL while a thread still needs it to free the last tensor of an async operation).
    """
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a log on a full or read-only disk: exit all the same
            pass
    os._exit(code)


def run_process_main(fn: Callable[..., Any], *args: Any) -> None:
    """Run a worker's main and exit through :func:`exit_now`: 0 on success; a user error
    prints its one ``error: ...`` line and exits 2; any other error prints the traceback and
    exits 1 (130 on Ctrl-C) at once, so the supervisor sees the fault and its cause.

    Meanwhile the process beats into the heartbeat file the supervisor named (if it did): how it
    tells a hung process from a busy one (:mod:`dsgraph.cluster.heartbeat`)."""
    code = 1
    try:
        heartbeat.start_from_env()
        stacks.enable_dump()  # a timed-out job names where each process waited
        fn(*args)
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except UserError as exc:
        code = exc.exit_code
        _say(lambda: print(f"error: {exc}", file=sys.stderr))
    except BaseException as exc:  # noqa: BLE001 - every failure must end the process
        code = 130 if isinstance(exc, KeyboardInterrupt) else 1
        _say(traceback.print_exc)
    finally:
        exit_now(code)  # (also when saying why failed: a log on a full disk)


def _say(write: Callable[[], None]) -> None:
    """Write the cause to the log; a log that cannot take it (full, read-only) loses it (the
    supervisor then names the folder)."""
    try:
        write()
    except (OSError, ValueError):
        pass
