"""Emulated hosts on one machine: network namespaces joined by a veth pair, optionally throttled.

Each namespace is one "host" with its own address, so a job launched with ``cluster.netns``
talks over a real network device instead of loopback. ``rate`` puts a ``tc`` token bucket on
both ends of the link (this kernel has no ``netem``), standing for a cluster network. Each host
also gets a folder ``/dev/shm/<namespace>`` that ``cluster.netns_shm`` bind-mounts over
``/dev/shm`` in that host's processes, as separate machines have separate shared memory.
Needs root and iproute2; :class:`HostsUnavailable` says why not.
"""
from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import uuid
from pathlib import Path
from typing import Iterator, Optional

SHM_ROOT = Path("/dev/shm")
LINK = "dsg0"  # the link's interface name inside every host (names are per namespace)


class HostsUnavailable(RuntimeError):
    """Namespaces cannot be created here (not root, no iproute2, or the kernel refused)."""


def _run(*argv: str) -> None:
    res = subprocess.run(argv, capture_output=True, text=True, timeout=20)
    if res.returncode != 0:
        raise HostsUnavailable(f"{' '.join(argv)} failed: {res.stderr.strip()}")


def host_shm(name: str) -> Path:
    """The folder that stands for namespace ``name``'s /dev/shm."""
    return SHM_ROOT / name


@contextlib.contextmanager
def emulated_hosts(rate: Optional[str] = None, tag: Optional[str] = None
                   ) -> Iterator[tuple[list[str], list[str]]]:
    """Two hosts (namespace names, their IPv4 addresses) on a veth pair whose ends are called
    :data:`LINK` in both; ``rate`` (a ``tc`` rate such as ``1gbit``) throttles both directions.
    Everything is removed on exit."""
    if os.geteuid() != 0 or shutil.which("ip") is None:
        raise HostsUnavailable("network namespaces need root and iproute2")
    if rate and shutil.which("tc") is None:
        raise HostsUnavailable("a throttled link needs tc (iproute2)")
    tag = tag or uuid.uuid4().hex[:6]
    names, veth = [f"dsg{tag}a", f"dsg{tag}b"], [f"v{tag}a", f"v{tag}b"]
    subnet = f"10.{int(tag[:2], 16) % 200 + 20}.{int(tag[2:4], 16)}"
    ips = [f"{subnet}.1", f"{subnet}.2"]
    made: list[str] = []
    try:
        for ns in names:
            _run("ip", "netns", "add", ns)
            made.append(ns)
        _run("ip", "link", "add", veth[0], "type", "veth", "peer", "name", veth[1])
        for ns, dev, ip in zip(names, veth, ips):
            _run("ip", "link", "set", dev, "netns", ns)
            # One name on every host, so a per-host setting such as GLOO_SOCKET_IFNAME is the
            # same everywhere, as on a uniform cluster.
            _run("ip", "-n", ns, "link", "set", dev, "name", LINK)
            dev = LINK
            _run("ip", "-n", ns, "addr", "add", f"{ip}/24", "dev", dev)
            _run("ip", "-n", ns, "link", "set", dev, "up")
            _run("ip", "-n", ns, "link", "set", "lo", "up")
            # DGL picks a client's address from the route to a non-local address.
            _run("ip", "-n", ns, "route", "add", "default", "dev", dev)
            if rate:
                # burst: enough for one full-size TSO segment at this rate; latency bounds
                # the queue (a deep one would only add delay, not bandwidth).
                _run("ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", dev, "root", "tbf",
                     "rate", rate, "burst", "256kb", "latency", "50ms")
            host_shm(ns).mkdir(mode=0o1777, exist_ok=True)
        yield names, ips
    finally:
        for ns in made:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=20)
            shutil.rmtree(host_shm(ns), ignore_errors=True)
