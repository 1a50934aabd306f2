"""One process a job's supervisor started: its handle, log, heartbeat and role in the job."""
from __future__ import annotations

import subprocess
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from dsgraph.cluster.preload import PreloadedProcess


@dataclass
class Proc:
    """One supervised process."""

    name: str
    popen: "subprocess.Popen | PreloadedProcess"  # forked by the preload server, or fresh
    log: Path
    required: bool  # the job is done when every required process has exited 0
    ended: float | None = field(default=None)  # wall-clock time its exit was first seen
    beat: Path | None = field(default=None)  # its heartbeat file (None: it does not beat here)
    hush: threading.Event | None = field(default=None)  # set: its echo stops (the log goes on)
    local: bool = field(default=True)  # its pid is the process itself (not an ssh client)
