"""Worker-side set-up of a gloo job started by :func:`dsgraph.cluster.launch.run_workers`."""
from __future__ import annotations

import datetime
import os

import torch
import torch.distributed as dist


def set_threads() -> int:
    """Apply the job's per-process thread count (OMP_NUM_THREADS, default 1) to torch."""
    n = int(os.environ.get("OMP_NUM_THREADS", "1"))
    torch.set_num_threads(n)
    return n


def init_gloo(timeout_s: float = 600.0) -> tuple[int, int]:
    """Set threads and join the gloo process group from env (RANK, WORLD_SIZE, MASTER_*)."""
    set_threads()
    if not dist.is_initialized():
        dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=timeout_s))
    return dist.get_rank(), dist.get_world_size()
