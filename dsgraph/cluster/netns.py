"""Emulated hosts on one machine: network namespaces joined by a veth pair (two hosts) or by
veth pairs to a bridge in a namespace of its own (more hosts), optionally throttled.

Each namespace is one "host" with its own address, so a job launched with ``cluster.netns``
talks over a real network device instead of loopback. ``rate`` puts a ``tc`` token bucket on
every host's end of the link (this kernel has no ``netem``), standing for a cluster network:
each host sends at most ``rate``. Each host
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


def _host_names(tag: str, count: int) -> list[str]:
    """The namespace names of ``count`` hosts: ``dsg<tag>a``, ``dsg<tag>b``, ..."""
    if not 2 <= count <= 26:
        raise ValueError(f"emulated_hosts: count: expected 2..26 hosts, got {count}")
    return [f"dsg{tag}{chr(ord('a') + i)}" for i in range(count)]


def _setup_host(ns: str, dev: str, ip: str, rate: Optional[str]) -> None:
    """Host ``ns``'s end ``dev`` of its link, already moved into ``ns``: renamed :data:`LINK`,
    addressed, up, the default route, the throttle, and the host's /dev/shm folder."""
    # One name on every host, so a per-host setting such as GLOO_SOCKET_IFNAME is the same
    # everywhere, as on a uniform cluster.
    _run("ip", "-n", ns, "link", "set", dev, "name", LINK)
    dev = LINK
    _run("ip", "-n", ns, "addr", "add", f"{ip}/24", "dev", dev)
    _run("ip", "-n", ns, "link", "set", dev, "up")
    _run("ip", "-n", ns, "link", "set", "lo", "up")
    # DGL picks a client's address from the route to a non-local address.
    _run("ip", "-n", ns, "route", "add", "default", "dev", dev)
    if rate:
        # burst: enough for one full-size TSO segment at this rate; latency bounds the queue
        # (a deep one would only add delay, not bandwidth).
        _run("ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", dev, "root", "tbf",
             "rate", rate, "burst", "256kb", "latency", "50ms")
    host_shm(ns).mkdir(mode=0o1777, exist_ok=True)


@contextlib.contextmanager
def emulated_hosts(rate: Optional[str] = None, tag: Optional[str] = None, count: int = 2
                   ) -> Iterator[tuple[list[str], list[str]]]:
    """``count`` hosts (namespace names, their IPv4 addresses ``<subnet>.1``, ``.2``, ...), each
    with its end of the link called :data:`LINK`. Two hosts share a veth pair; more hosts each
    have a veth pair to a bridge in one more namespace (``dsg<tag>br``, no address, nothing in
    the root namespace). ``rate`` (a ``tc`` rate such as ``1gbit``) throttles what every host
    sends. Everything is removed on exit, also when making it fails part way."""
    if os.geteuid() != 0 or shutil.which("ip") is None:
        raise HostsUnavailable("network namespaces need root and iproute2")
    if rate and shutil.which("tc") is None:
        raise HostsUnavailable("a throttled link needs tc (iproute2)")
    tag = tag or uuid.uuid4().hex[:6]
    names = _host_names(tag, count)
    subnet = f"10.{int(tag[:2], 16) % 200 + 20}.{int(tag[2:4], 16)}"
    ips = [f"{subnet}.{i + 1}" for i in range(count)]
    made: list[str] = []  # namespaces (deleting one deletes the links inside it)
    loose: list[str] = []  # links still in the root namespace
    try:
        for ns in names:
            _run("ip", "netns", "add", ns)
            made.append(ns)
        if count == 2:
            veth = [f"v{tag}a", f"v{tag}b"]
            _run("ip", "link", "add", veth[0], "type", "veth", "peer", "name", veth[1])
            loose += veth
            for ns, dev, ip in zip(names, veth, ips):
                _run("ip", "link", "set", dev, "netns", ns)
                loose.remove(dev)
                _setup_host(ns, dev, ip, rate)
        else:
            bridge_ns = f"dsg{tag}br"
            _run("ip", "netns", "add", bridge_ns)
            made.append(bridge_ns)
            _run("ip", "-n", bridge_ns, "link", "add", "br0", "type", "bridge")
            _run("ip", "-n", bridge_ns, "link", "set", "br0", "up")
            for i, (ns, ip) in enumerate(zip(names, ips)):
                host_end, bridge_end = f"v{tag}{i}", f"v{tag}{i}p"
                _run("ip", "link", "add", host_end, "type", "veth", "peer", "name", bridge_end)
                loose += [host_end, bridge_end]
                _run("ip", "link", "set", bridge_end, "netns", bridge_ns)
                loose.remove(bridge_end)
                _run("ip", "-n", bridge_ns, "link", "set", bridge_end, "master", "br0")
                _run("ip", "-n", bridge_ns, "link", "set", bridge_end, "up")
                _run("ip", "link", "set", host_end, "netns", ns)
                loose.remove(host_end)
                _setup_host(ns, host_end, ip, rate)
        yield names, ips
    finally:
        for dev in loose:  # deleting one end of a veth pair deletes both
            subprocess.run(["ip", "link", "del", dev], capture_output=True, timeout=20)
        for ns in made:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=20)
            shutil.rmtree(host_shm(ns), ignore_errors=True)
