"""Listening ports a job chooses lie outside the kernel's ephemeral range, so no outgoing
connection takes one before its owner binds it and no retried connect meets itself: the job's
servers, its gloo store and (through dgl_compat) every DGL client's receiver."""
from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

from dsgraph.cluster import ports
from dsgraph.cluster.dgl_compat import client_address

ROOT = Path(__file__).resolve().parents[1]


def _outside(first: int, count: int = 1) -> bool:
    lo, hi = ports.ephemeral_range()
    return all(not lo <= p <= hi for p in range(first, first + count)) and first + count <= 65536


def test_chosen_port_runs_are_free_and_outside_the_ephemeral_range():
    lo, hi = ports.ephemeral_range()
    assert 0 < lo <= hi <= 65535
    for count in (1, 2, 8):
        for _ in range(100):
            base = ports.free_port_range(count)
            assert _outside(base, count), (base, count, (lo, hi))
            assert all(ports.port_is_free(base + i) for i in range(count))


def test_a_port_taken_by_a_listener_is_not_free():
    with socket.socket() as s:
        # a port the OS picks: one free_port_range found free could be taken by a job of
        # another test worker before this bind (it was, once, in CI)
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        assert not ports.port_is_free(s.getsockname()[1])


def test_the_bases_leave_room_for_the_run_on_either_side(monkeypatch):
    monkeypatch.setattr(ports, "ephemeral_range", lambda: (1024, 65535))
    assert ports.listening_bases(4) == []  # no room: free_port_range says so
    monkeypatch.setattr(ports, "ephemeral_range", lambda: (20000, 60000))
    spans = ports.listening_bases(4)
    assert spans == [(10000, 19996), (60001, 65532)]


def test_dgl_clients_listen_outside_the_ephemeral_range():
    ip, port = client_address("127.0.0.1").split(":")
    assert ip == "127.0.0.1" and _outside(int(port)) and ports.port_is_free(int(port))
    # what DGL's client calls once dgl_compat is applied (in a process of its own: it patches DGL)
    code = ("from dsgraph.cluster import dgl_compat; dgl_compat.apply(0, 'tok')\n"
            "from dgl.distributed import rpc_client\n"
            "print(rpc_client.get_local_usable_addr('127.0.0.1'))\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    addr = out.stdout.strip().splitlines()[-1]
    assert addr.startswith("127.0.0.1:") and _outside(int(addr.split(":")[1])), addr
