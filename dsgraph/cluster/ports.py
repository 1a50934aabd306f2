"""Free TCP ports on loopback."""
from __future__ import annotations

import random
import socket


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


def free_port_range(count: int = 1, host: str = "127.0.0.1", tries: int = 200) -> int:
    """First port of ``count`` consecutive ports that are free now (DGL servers use port + j)."""
    rng = random.Random()
    for _ in range(tries):
        base = rng.randrange(20000, 60000 - count)
        if all(port_is_free(base + i, host) for i in range(count)):
            return base
    raise RuntimeError(f"no {count} consecutive free ports found on {host}")
