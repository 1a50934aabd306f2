"""Every DGL 2.1.0 workaround dsgraph needs, in one place, applied explicitly per process.

Stock DistDGL assumes one partition per host. With several partitions on one host it silently
serves wrong remote features (dmlc/dgl#3621) because:

1. KVStore shared-memory names (``node~_N~feat-kvdata-``) carry no partition id, so the second
   server maps and overwrites the first server's segment; and
2. ``rpc_client.get_local_machine_id`` returns the first ip_config line with a local address, so
   every process on the host believes it is machine 0 and the fast-pull path reads the wrong
   partition's local memory.

The fix (``apply``), run in every server, trainer and sampler process before DGL starts:
KV shared-memory names get a ``<job token>m<machine>_`` prefix; the local machine id is the
process's real partition index; and each machine serves the partition under its own graph name
(``<graph>_<token>_m<M>``, via a per-machine copy of the partition JSON, :func:`machine_config`)
so graph-structure and partition-book segments are per machine too. Backup servers
(servers_per_machine > 1) map their own machine's graph. Every segment name contains the job
token, which lets the supervisor remove exactly this job's segments.

One speed fix rides along: a DGL server sleeps 3 s once every client has registered, before it
connects back to them (``rpc_server.start_server``, "wait for clients' receivers ready"). A
client listens right after registering, and DGL's own connect step retries a refused connection,
so ``apply`` caps the sleeps of ``rpc_server`` at :data:`SERVER_CONNECT_WAIT_S`: every job start
was 3 s slower for nothing.

A client's receiver port is chosen outside the ephemeral range: DGL's client takes a port by
binding port 0 (an ephemeral one), frees it, tells the servers, and only then listens on it. In
between, any outgoing connection may be given that port, and a server connecting while nothing
listens yet may connect its socket to itself (its source port drawn equal to the destination):
the job start then waits forever. ``apply`` gives the client a free port below (or above) the
ephemeral range (:func:`client_address`, :mod:`dsgraph.cluster.ports`), which no outgoing
connection uses.

Sampling is made reproducible: a DGL server samples a trainer's remote seed nodes with its own
random generator, unseeded and shared by every trainer's requests in whatever order they
arrive (and sampler processes sample their own partition's with theirs), so the same
``train.seed`` sampled other neighbourhoods each run. ``apply`` seeds the generator before each
draw from what is asked (the seed nodes, fanouts and direction, :func:`request_seed`), in the
server and in the trainer or sampler process alike: a draw is a function of the request, and a
trainer's requests are a function of ``train.seed`` (its batches).

Stock jobs (``run_dgl_job(..., stock=True)``, DGL unpatched, for the comparison rows) keep DGL's
fixed segment names, so two of them on one host at once would map each other's graph and KV
segments (and one's cleanup would remove the other's): :func:`stock_host_lock` lets one stock
job at a time run per host, the next waits for it. Patched jobs need no lock.

It is never applied on ``import dsgraph``: entry points call :func:`apply_from_env` at their top
level, which also covers spawned sampler processes (they re-import the entry module).
"""
from __future__ import annotations

import fcntl
import json
import os
import tempfile
import time
import zlib
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

from dsgraph.cluster import lifeline

ENV_MACHINE = "DSGRAPH_MACHINE_ID"
ENV_TOKEN = "DSGRAPH_JOB_TOKEN"
ENV_GRAPH = "DSGRAPH_GRAPH_NAME"

_applied: dict | None = None


def stock_lock_path() -> Path:
    """The host-wide lock file of stock DGL jobs (one per user: names in /dev/shm are too)."""
    return Path(tempfile.gettempdir()) / f"dsgraph-stock-dgl-{os.getuid()}.lock"


@contextmanager
def stock_host_lock(path: Path | None = None) -> Iterator[None]:
    """Hold this host's stock-DGL lock while the block runs; wait while another job holds it.

    ``flock`` is released by the kernel when its holder dies, so a killed job never leaves it
    taken; the file is opened without following a symlink planted at its name.
    """
    path = stock_lock_path() if path is None else path
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing the last descriptor releases the lock
SERVER_CONNECT_WAIT_S = 0.1  # see the module docstring


class _ShortSleeps:
    """The ``time`` module as DGL's rpc_server sees it: sleeps of at most
    :data:`SERVER_CONNECT_WAIT_S`."""

    def __getattr__(self, name: str):
        return getattr(time, name)

    @staticmethod
    def sleep(seconds: float) -> None:
        """Sleep ``seconds``, at most :data:`SERVER_CONNECT_WAIT_S`."""
        time.sleep(min(seconds, SERVER_CONNECT_WAIT_S))


def request_seed(seed_nodes: Any, fan_out: Any, *options: Any) -> int:
    """The seed of one neighbour-sampling draw (31 bits, as ``dgl.seed`` takes): a checksum of
    its seed nodes, fanouts (one, or one per edge type) and options; what is asked, not when."""
    import numpy as np
    nodes = np.ascontiguousarray(np.asarray(seed_nodes))
    fanout = np.asarray(fan_out).tolist()
    return zlib.crc32(repr((fanout, *options)).encode(), zlib.crc32(nodes.tobytes())) \
        & 0x7FFFFFFF


def _seeded(sample: Callable) -> Callable:
    """DGL's partition-local sampling function (``graph_services._sample_neighbors`` /
    ``_sample_etype_neighbors``: the servers' and the local partition's draws), its
    generator seeded first by :func:`request_seed`."""
    import dgl

    def seeded(use_graphbolt, local_g, partition_book, seed_nodes, fan_out, *args, **kwargs):
        dgl.seed(request_seed(seed_nodes, fan_out, kwargs.get("edge_dir"),
                              kwargs.get("replace")))
        return sample(use_graphbolt, local_g, partition_book, seed_nodes, fan_out, *args,
                      **kwargs)

    return seeded


def client_address(probe_addr: str) -> str:
    """``ip:port`` a DGL client listens on for its servers: the address on ``probe_addr``'s
    route (as DGL finds it) and a free port outside the ephemeral range."""
    import socket

    from dsgraph.cluster.ports import free_port_range
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        try:
            sock.connect((probe_addr, 1))  # no packet is sent: it only picks the route
            ip = sock.getsockname()[0]
        except (ValueError, OSError):
            ip = "127.0.0.1"
    return f"{ip}:{free_port_range(1, host=ip)}"


def machine_graph_name(graph_name: str, token: str, machine: int) -> str:
    """The graph name machine ``machine`` of job ``token`` serves its partition under."""
    return f"{graph_name}_{token}_m{machine}"


def machine_config(part_config: str | os.PathLike, token: str, machine: int,
                   out_dir: str | os.PathLike) -> Path:
    """Write a copy of the partition JSON that names the graph per machine (paths made absolute)."""
    part_config = Path(part_config).resolve()
    meta = json.loads(part_config.read_text())
    meta["graph_name"] = machine_graph_name(meta["graph_name"], token, machine)
    for k in range(meta["num_parts"]):
        entry = meta[f"part-{k}"]
        for key, rel in entry.items():
            entry[key] = str((part_config.parent / rel).resolve())
    if "link_split" in meta:  # link prediction's held-out edges, beside the original JSON
        meta["link_split"] = str((part_config.parent / meta["link_split"]).resolve())
    out = Path(out_dir) / f"{meta['graph_name']}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(meta, indent=1))
    return out


def apply(machine: int, token: str, graph_name: str | None = None) -> None:
    """Patch DGL in this process for machine ``machine`` of job ``token`` (idempotent)."""
    global _applied
    state = {"machine": machine, "token": token, "graph_name": graph_name}
    if _applied == state:
        return
    if _applied is not None:
        raise RuntimeError(f"dgl_compat already applied with {_applied}, not {state}")
    # DGL is imported here, not at module level: importing dsgraph.cluster must not load DGL.
    from dgl._ffi import ndarray as ffi_ndarray
    from dgl.distributed import dist_graph, graph_services, kvstore, rpc_client, rpc_server

    prefix = f"{token}m{machine}_"

    def empty_shared_mem(name, is_create, shape, dtype):
        return ffi_ndarray.empty_shared_mem(prefix + name, is_create, shape, dtype)

    kvstore.empty_shared_mem = empty_shared_mem
    rpc_client.get_local_machine_id = lambda server_namebook: machine
    rpc_client.get_local_usable_addr = client_address
    rpc_server.time = _ShortSleeps()
    for name in ("_sample_neighbors", "_sample_etype_neighbors"):
        setattr(graph_services, name, _seeded(getattr(graph_services, name)))

    if graph_name is not None:
        original = dist_graph.InitGraphRequest.process_request

        def process_request(self, server_state):
            # A backup server has no graph yet and maps it from shared memory under the name the
            # client sent, which is the *client's* machine's name: use this server's own name.
            if server_state.graph is None:
                self._graph_name = graph_name
            return original(self, server_state)

        dist_graph.InitGraphRequest.process_request = process_request
    _applied = state


def apply_from_env() -> bool:
    """Apply the patch if this process belongs to a dsgraph DistDGL job; return whether it did.

    Also makes this process die with its parent when it is part of a supervised job
    (:func:`dsgraph.cluster.lifeline.inherit`): DGL's spawned sampler processes run this too.
    """
    lifeline.inherit()
    if ENV_TOKEN not in os.environ:
        return False
    apply(int(os.environ[ENV_MACHINE]), os.environ[ENV_TOKEN], os.environ.get(ENV_GRAPH))
    return True
