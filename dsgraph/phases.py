"""Where a training step's seconds go: CPU and wall seconds per phase, per process.

A phase (``sample``, ``block``, ``gather``, ``forward``, ``backward``, ``allreduce``,
``optimizer``) is timed where the work is done, by the thread doing it, with
``time.thread_time`` (this thread's CPU) and ``time.perf_counter`` (wall): a prefetch thread's
sampling is its own CPU, not the trainer thread's. Phases nest: an inner phase's seconds (block
building inside sampling) are taken out of the outer one, so the phases add up. What the
process spent outside every phase (DGL's RPC threads, gloo's all-reduce threads under DDP, the
loop itself) is ``other``: the process's CPU (``time.process_time``) less the phases'. Wall
seconds inside ``sample`` and ``gather`` that were not this thread's CPU are ``wait``: waiting
for servers' replies, or for a core.

The clock is off unless :func:`start` turned it on (``train.profile`` in dsgraph, ``--phases``
in the stock peers, which import this module and nothing else of dsgraph: it imports only the
standard library, and DGL's sampler module once a clock starts, so both sides are measured by
one instrument). Off, :func:`phase` is a no-op.
:func:`servers_cpu_s` reads the CPU seconds of the job's DistGraph servers on this host.
"""
from __future__ import annotations

import contextlib
import os
import threading
import time
from typing import Iterator, Optional

# The phases in report order; ``wait`` and ``other`` are derived (see the module docstring).
PHASES = ("sample", "block", "gather", "forward", "backward", "allreduce", "optimizer")
WAITING = ("sample", "gather")


class PhaseClock:
    """CPU and wall seconds per phase since :meth:`reset`, from every thread of the process."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._local = threading.local()
        self.reset()

    def reset(self) -> None:
        """Start every total at zero (at the start of an epoch)."""
        with self._lock:
            self.cpu = {name: 0.0 for name in PHASES}
            self.wall = {name: 0.0 for name in PHASES}
            self._process0 = time.process_time()

    @contextlib.contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        stack = getattr(self._local, "stack", None)
        if stack is None:
            stack = self._local.stack = []
        frame = [0.0, 0.0]  # CPU and wall of the phases nested in this one
        stack.append(frame)
        c0, w0 = time.thread_time(), time.perf_counter()
        try:
            yield
        finally:
            cpu, wall = time.thread_time() - c0, time.perf_counter() - w0
            stack.pop()
            if stack:  # the outer phase's own seconds exclude this one's
                stack[-1][0] += cpu
                stack[-1][1] += wall
            with self._lock:
                self.cpu[name] = self.cpu.get(name, 0.0) + cpu - frame[0]
                self.wall[name] = self.wall.get(name, 0.0) + wall - frame[1]

    def totals(self) -> dict[str, float]:
        """CPU seconds per phase, ``wait`` (wall seconds) and ``other`` since :meth:`reset`."""
        with self._lock:
            out = dict(self.cpu)
            out["wait"] = sum(max(self.wall[n] - self.cpu[n], 0.0) for n in WAITING)
            out["other"] = max(time.process_time() - self._process0 - sum(self.cpu.values()),
                               0.0)
        return out


_ACTIVE: Optional[PhaseClock] = None


def start() -> PhaseClock:
    """Turn the process's clock on (idempotent) and return it; from now on the blocks DGL's
    ``NeighborSampler`` builds are timed as ``block`` (:func:`_time_dgl_block_building`)."""
    global _ACTIVE
    if _ACTIVE is None:
        _ACTIVE = PhaseClock()
        _time_dgl_block_building()
    return _ACTIVE


def phase(name: str) -> contextlib.AbstractContextManager:
    """``with phase("sample"): ...`` times the block into ``name`` while the clock is on."""
    clock = _ACTIVE
    return contextlib.nullcontext() if clock is None else clock(name)


# The keys of an epoch's ``phases`` record, in report order.
RECORD_KEYS = (*PHASES, "wait", "other", "servers")


class EpochPhases:
    """One epoch of one trainer: made as its loop starts (the clock on and at zero),
    :meth:`values` as it ends; the values summed over trainers make :func:`epoch_record`."""

    def __init__(self, read_servers: bool) -> None:
        self.clock = start()
        self.clock.reset()
        # One trainer reads the servers, or each would count them again.
        self.servers0 = servers_cpu_s() if read_servers else None

    def values(self) -> list[float]:
        """This trainer's totals so far, to be summed over trainers: one per phase of
        :data:`RECORD_KEYS` (servers 0 unless this trainer read them), then 1 where it did."""
        totals = self.clock.totals()
        now = servers_cpu_s() if self.servers0 is not None else None
        servers = None if now is None or self.servers0 is None else now - self.servers0
        return [totals[k] for k in RECORD_KEYS[:-1]] + [servers or 0.0,
                                                         float(servers is not None)]


def epoch_record(summed: list[float], seeds: float) -> dict[str, dict[str, Optional[float]]]:
    """``phases``: :meth:`EpochPhases.values` summed over trainers as seconds per 1,000 of the
    epoch's ``seeds`` (CPU seconds, but ``wait``: wall; ``servers`` None where none was read)."""
    per = 1000.0 / max(seeds, 1.0)
    out: dict[str, Optional[float]] = {k: v * per for k, v in zip(RECORD_KEYS, summed)}
    if not summed[len(RECORD_KEYS)]:
        out["servers"] = None
    return {"phases": out}


def _time_dgl_block_building() -> None:
    """Wrap the ``to_block`` DGL's ``NeighborSampler.sample_blocks`` calls (a name in its
    module) in ``phase("block")``: its sampling and block building happen in one call, and
    both peers sample with it. Only a profiled process does this, when its clock starts; the
    blocks are the same."""
    import dgl.dataloading.neighbor_sampler as sampler_module  # a profiled process has DGL

    plain = sampler_module.to_block

    def to_block(*args, **kwargs):
        with phase("block"):
            return plain(*args, **kwargs)

    sampler_module.to_block = to_block


def servers_cpu_s() -> Optional[float]:
    """CPU seconds so far of this job's DistGraph servers on this host: the processes whose
    environment says ``DGL_ROLE=server`` with this process's ``DGL_IP_CONFIG`` (threads
    included; None outside a DGL job)."""
    ip_config = os.environ.get("DGL_IP_CONFIG")
    if not ip_config:
        return None
    want = (b"DGL_ROLE=server", f"DGL_IP_CONFIG={ip_config}".encode())
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as fh:
                env = fh.read().split(b"\0")
            if not all(w in env for w in want):
                continue
            with open(f"/proc/{name}/stat", "rb") as fh:
                fields = fh.read().rsplit(b")", 1)[1].split()
        except OSError:  # gone, or not ours
            continue
        total += (int(fields[11]) + int(fields[12])) / tick  # utime, stime
    return total
