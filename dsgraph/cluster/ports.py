"""Free TCP ports on loopback (or a host's address) for the sockets a job listens on.

Every port chosen here lies outside the kernel's ephemeral range
(``/proc/sys/net/ipv4/ip_local_port_range``), from which every outgoing connection takes its
source port. A listening port chosen inside it is free when chosen but may be taken, before its
owner binds it, by any process's outgoing connection, and a connect retried while nothing
listens yet can connect a socket to itself (TCP simultaneous open, when the source port drawn
equals the destination): a job start can then wait forever. Outside the range neither can happen.
"""
from __future__ import annotations

import random
import socket
from pathlib import Path

# Where listening ports are drawn from when the ephemeral range leaves room below it.
LOWEST_PORT = 10000
_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
_DEFAULT_EPHEMERAL = (32768, 60999)  # Linux's default


def ephemeral_range() -> tuple[int, int]:
    """The kernel's ephemeral port range (inclusive), Linux's default where unreadable."""
    try:
        lo, hi = (int(v) for v in _RANGE_FILE.read_text().split())
        return (lo, hi) if 0 < lo <= hi <= 65535 else _DEFAULT_EPHEMERAL
    except (OSError, ValueError):
        return _DEFAULT_EPHEMERAL


def port_is_free(port: int, host: str = "127.0.0.1") -> bool:
    """Whether a TCP socket can listen on ``host:port`` now (TIME_WAIT does not count)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def listening_bases(count: int) -> list[tuple[int, int]]:
    """The ranges [first, last] a run of ``count`` consecutive listening ports may start in:
    below the ephemeral range (from :data:`LOWEST_PORT`) and above it."""
    lo, hi = ephemeral_range()
    spans = [(min(LOWEST_PORT, max(1024, lo - 1000)), lo - count), (hi + 1, 65535 - count + 1)]
    return [(a, b) for a, b in spans if a <= b]


def free_port_range(count: int = 1, host: str = "127.0.0.1", tries: int = 200) -> int:
    """First port of ``count`` consecutive ports outside the ephemeral range that are free now
    (DGL servers use port + j)."""
    spans = listening_bases(count)
    if not spans:
        raise RuntimeError(f"no room for {count} listening ports outside the ephemeral range "
                           f"{ephemeral_range()}")
    rng = random.Random()
    weights = [b - a + 1 for a, b in spans]
    for _ in range(tries):
        a, b = rng.choices(spans, weights)[0]
        base = rng.randint(a, b)
        if all(port_is_free(base + i, host) for i in range(count)):
            return base
    raise RuntimeError(f"no {count} consecutive free ports found on {host}")
