"""A job's shared-memory segments in /dev/shm: named by its job token, which records the
launcher's pid, so a later run can tell a dead job's segments from a live job's.

dsgraph's DistDGL jobs put the token into every segment name (:mod:`.dgl_compat`). Stock DGL
(the comparison path) names segments without one; there the supervisor records the segments
its own processes map (:func:`mapped_segments`) and removes only those.
"""
from __future__ import annotations

import os
import re
import secrets
from pathlib import Path
from typing import Iterable

import psutil

SHM_DIR = Path("/dev/shm")
# dsg<launcher pid>p<random hex>: no "_" (graph names are split on it), short enough for names.
_TOKEN = re.compile(r"dsg(\d+)p[0-9a-f]{6}")


def new_token(owner: int | None = None) -> str:
    """A fresh job token owned by process ``owner`` (default: this one)."""
    return f"dsg{os.getpid() if owner is None else owner}p{secrets.token_hex(3)}"


def token_owner(name: str) -> int | None:
    """The owner pid of the job token inside ``name``, or None if it holds no token."""
    m = _TOKEN.search(name)
    return int(m.group(1)) if m else None


def names() -> set[str]:
    """Names of the entries in /dev/shm now."""
    return {e.name for e in SHM_DIR.iterdir()} if SHM_DIR.is_dir() else set()


def _unlink(names_: Iterable[str]) -> list[str]:
    removed = []
    for name in names_:
        try:
            (SHM_DIR / name).unlink()
            removed.append(name)
        except OSError:
            pass
    return sorted(removed)


def remove_token(token: str | None) -> list[str]:
    """Remove the /dev/shm entries whose name contains ``token``; return their names."""
    if not token:
        return []
    return _unlink(n for n in names() if token in n)


def reclaim_orphans() -> dict[str, list[str]]:
    """Remove the segments of jobs whose launcher is gone; return them by token.

    A live owner's segments are never touched (a reused pid only delays the clean-up), nor is
    any segment a live process maps: on a host the launcher does not run on, the owner pid
    means nothing, but a live job's servers map their segments.
    """
    dead: dict[str, list[str]] = {}
    for name in names():
        m = _TOKEN.search(name)
        if m and not psutil.pid_exists(int(m.group(1))):
            dead.setdefault(m.group(0), []).append(name)
    if not dead:
        return {}
    in_use = mapped_by_others({n for found in dead.values() for n in found}, {os.getpid()})
    return {tok: _unlink(set(found) - in_use) for tok, found in dead.items()}


def mapped_segments(pid: int) -> set[str]:
    """The /dev/shm entries process ``pid`` has mapped now (empty once it is gone)."""
    try:
        with open(f"/proc/{pid}/maps") as fh:
            text = fh.read()
    except OSError:
        return set()
    prefix = str(SHM_DIR) + "/"
    out = set()
    for line in text.splitlines():
        i = line.find(prefix)
        if i >= 0:
            out.add(line[i + len(prefix):].removesuffix(" (deleted)"))
    return out


def mapped_by_others(candidates: set[str], exclude: set[int]) -> set[str]:
    """Which of ``candidates`` a live process outside ``exclude`` has mapped."""
    if not candidates:
        return set()
    found: set[str] = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) not in exclude:
            found |= mapped_segments(int(entry.name)) & candidates
    return found


def remove_unshared(candidates: set[str], exclude: set[int]) -> list[str]:
    """Remove ``candidates`` except those another live process (outside ``exclude``) maps."""
    return _unlink(candidates - mapped_by_others(candidates, exclude))
