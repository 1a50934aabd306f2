"""Every job process of the suite, and every command a test runs as a user would (through
:func:`dsgraph.cluster.preload.run_command` / ``start_command``), is forked from one process per
test process that imported torch and DGL already (:mod:`dsgraph.cluster.preload`): most of a
tiny job's CPU is those imports. ``DSGRAPH_TEST_PRELOAD=0`` starts each fresh, as benchmarks
and users' jobs do."""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

from dsgraph.cluster import preload


@pytest.fixture(scope="session", autouse=True)
def preload_server():
    """Start the preload server and name it to every job this test process launches."""
    if os.environ.get("DSGRAPH_TEST_PRELOAD", "1") == "0":
        yield None
        return
    with tempfile.TemporaryDirectory(prefix="dsgraph-preload-") as tmp:
        path = Path(tmp) / "fork.sock"
        proc = preload.start(path)
        os.environ[preload.ENV_SOCKET] = str(path)
        try:
            yield proc
        finally:
            os.environ.pop(preload.ENV_SOCKET, None)
            proc.stdin.close()
            proc.wait(30)
