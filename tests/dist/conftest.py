"""Fixtures of the multi-process tests: two hosts with their own addresses on one machine."""
from __future__ import annotations

import os
import shutil
import subprocess
import uuid

import pytest


def _ip(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=20)


@pytest.fixture
def two_hosts():
    if os.geteuid() != 0 or shutil.which("ip") is None:
        pytest.skip("network namespaces need root and iproute2")
    tag = uuid.uuid4().hex[:6]
    names = [f"dsg{tag}a", f"dsg{tag}b"]
    subnet = f"10.{int(tag[:2], 16) % 200 + 20}.{int(tag[2:4], 16)}"
    ips = [f"{subnet}.1", f"{subnet}.2"]
    try:
        for ns in names:
            if _ip("netns", "add", ns).returncode != 0:
                pytest.skip("creating network namespaces is not permitted here")
        veth = [f"v{tag}a", f"v{tag}b"]
        steps = [("link", "add", veth[0], "type", "veth", "peer", "name", veth[1])]
        for ns, dev, ip in zip(names, veth, ips):
            steps += [("link", "set", dev, "netns", ns),
                      ("-n", ns, "addr", "add", f"{ip}/24", "dev", dev),
                      ("-n", ns, "link", "set", dev, "up"),
                      ("-n", ns, "link", "set", "lo", "up"),
                      # DGL picks a client's address from the route to a non-local address
                      ("-n", ns, "route", "add", "default", "dev", dev)]
        for step in steps:
            res = _ip(*step)
            if res.returncode != 0:
                pytest.skip(f"ip {' '.join(step)} failed: {res.stderr.strip()}")
        yield names, ips
    finally:
        for ns in names:
            _ip("netns", "del", ns)
