"""Free TCP ports on loopback."""
from __future__ import annotations

import random
import socket


def _is_free(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
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
        if all(_is_free(base + i, host) for i in range(count)):
            return base
    raise RuntimeError(f"no {count} consecutive free ports found on {host}")
