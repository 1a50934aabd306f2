"""What runs where in a DistDGL job: machines, their servers and trainers, ports, ip_config."""
from __future__ import annotations

import ipaddress
import socket
from dataclasses import dataclass
from pathlib import Path

import psutil

from dsgraph.cluster.ports import free_port_range, port_is_free
from dsgraph.config import ClusterConfig
from dsgraph.errors import ConfigError
from dsgraph.fsutil import atomic_write_text


@dataclass(frozen=True)
class Machine:
    """One host holding one partition, its servers and its trainers."""

    index: int
    ip: str
    port: int  # server j listens on port + j

    @property
    def is_local(self) -> bool:
        """Whether this machine's processes start here rather than over ssh."""
        return self.ip in local_addresses()


def local_addresses() -> set[str]:
    """IPv4 addresses of this host (loopback included)."""
    addrs = {"127.0.0.1", "localhost"}
    try:
        for info in socket.getaddrinfo(socket.gethostname(), None, socket.AF_INET):
            addrs.add(info[4][0])
    except OSError:
        pass
    try:
        for nics in psutil.net_if_addrs().values():
            addrs.update(a.address for a in nics if a.family == socket.AF_INET)
    except OSError:  # restricted: the hostname lookup is enough
        pass
    return addrs


def read_ip_config(path: str, num_parts: int, servers: int) -> list[Machine]:
    """Parse an ip_config file (``IP [PORT]`` per line, one line per partition)."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"cluster.ip_config: file not found: {path}")
    machines = []
    for lineno, line in enumerate(p.read_text().splitlines(), 1):
        parts = line.split("#")[0].split()
        if not parts:
            continue
        try:
            ip = str(ipaddress.ip_address(parts[0]))
            port = int(parts[1]) if len(parts) > 1 else 30050
        except ValueError:
            raise ConfigError(f"{path}:{lineno}: expected 'IP [PORT]', got {line.strip()!r}") from None
        if not 1024 <= port <= 65535 - servers:
            raise ConfigError(f"{path}:{lineno}: port: expected 1024..{65535 - servers}, got {port}")
        machine = Machine(len(machines), ip, port)
        if machine.is_local:  # a taken port would fail later, deep inside gloo or DGL
            for p_ in range(port, port + servers):
                if not port_is_free(p_, ip):
                    raise ConfigError(f"{path}:{lineno}: port {p_} on {ip} is already in use; "
                                      f"choose another port on this line of cluster.ip_config")
        machines.append(machine)
    if len(machines) != num_parts:
        raise ConfigError(f"{path}: expected {num_parts} machines (one per partition or "
                          f"DS-MPNN worker), "
                          f"got {len(machines)}")
    return machines


def plan_machines(cluster: ClusterConfig, num_parts: int) -> list[Machine]:
    """The machines of a job: from ``cluster.ip_config`` or ``num_parts`` loopback machines.

    (The config checks that ``cluster.netns`` names one namespace per machine.)
    """
    if cluster.ip_config:
        return read_ip_config(cluster.ip_config, num_parts, cluster.servers_per_machine)
    s = cluster.servers_per_machine
    base = free_port_range(num_parts * s)
    return [Machine(m, "127.0.0.1", base + m * s) for m in range(num_parts)]


def write_ip_config(machines: list[Machine], path: Path) -> Path:
    """The ip_config file DGL reads (one ``IP PORT`` line per machine)."""
    atomic_write_text(path, "".join(f"{m.ip} {m.port}\n" for m in machines))
    return path
