"""What the tests' own DistGraph trainer processes share (``run_dgl_job`` starts each as
``python -m tests.dist.MODULE --run-dir RUN``, DGL patched by the module itself first): joining
the job and the command line."""
from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any, Callable


def connect(timeout_s: float = 120) -> tuple[int, Any]:
    """Join the job: DGL's RPC, the gloo process group and the DistGraph; ``(rank, graph)``."""
    import dgl

    from dsgraph.cluster.worker import init_process_group
    dgl.distributed.initialize(os.environ["DGL_IP_CONFIG"])
    rank, _ = init_process_group(timeout_s)
    return rank, dgl.distributed.DistGraph(os.environ["DSGRAPH_DGL_GRAPH"])


def run(main: Callable[[Path], None]) -> None:
    """The process's entry: ``main(run_dir)`` with ``--run-dir`` from the command line, run as
    a job process (one exit path, see dsgraph.cluster.worker)."""
    from dsgraph.cluster.worker import run_process_main
    parser = argparse.ArgumentParser()
    parser.add_argument("--run-dir", type=Path, required=True)
    run_process_main(main, parser.parse_args().run_dir)
