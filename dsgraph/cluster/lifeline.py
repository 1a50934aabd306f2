"""Processes that die with their launcher: the Linux parent-death signal, set in each child.

``prctl(PR_SET_PDEATHSIG)`` makes the kernel signal a process when the *thread* that forked it
exits, however it exits (kill -9 included), and it survives ``exec``; so the supervisor sets it
between fork and exec, from the thread that stays alive for the whole job (the main thread),
and processes a job process starts itself (DGL's sampler processes) set it again at start-up
(:func:`inherit`). Elsewhere than Linux this is a no-op; the reaper (:mod:`.reaper`) still ends
the job.
"""
from __future__ import annotations

import ctypes
import os
import signal
import sys

ENV_LIFELINE = "DSGRAPH_DIE_WITH_PARENT"
_PR_SET_PDEATHSIG = 1


def die_with_parent(sig: int = signal.SIGKILL, parent: int | None = None) -> bool:
    """Ask the kernel to send ``sig`` to this process when its parent dies; return whether set.

    ``parent``: the pid the caller expects as parent; if it is gone already (it died between
    fork and this call, so no signal will ever come) the process ends at once.
    """
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0) != 0:
            return False
    except (OSError, AttributeError):
        return False
    if parent is not None and os.getppid() != parent:
        os._exit(1)
    return True


def child_setup(parent: int) -> None:
    """``preexec_fn`` of every supervised process (runs in the child between fork and exec)."""
    die_with_parent(signal.SIGKILL, parent)


def inherit() -> bool:
    """In a process the launcher started (or one of its own children): die with the parent too.

    Called at the top of job entry modules, which spawned sampler processes re-import.
    """
    if os.environ.get(ENV_LIFELINE) != "1":
        return False
    return die_with_parent(signal.SIGKILL)
