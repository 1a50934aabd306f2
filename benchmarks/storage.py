"""Storage faults for the fault harnesses (:mod:`benchmarks.faults`, :mod:`benchmarks.misuse`): a
small tmpfs, filling it up, and a folder turned read-only while a job writes in it. Mounting
needs root: elsewhere :class:`Skip` says why."""
from __future__ import annotations

import contextlib
import os
import subprocess
from pathlib import Path
from typing import Iterator


class Skip(Exception):
    """The scenario cannot run here (a tmpfs mount needs root); the message says why."""


def _mount(*args: str) -> None:
    done = subprocess.run(["mount", *args], capture_output=True, text=True)
    if done.returncode != 0:
        raise Skip(f"cannot mount ({' '.join(args)}): {done.stderr.strip()}")


@contextlib.contextmanager
def tmpfs(path: Path, size: str, read_only: bool = False) -> Iterator[Path]:
    """A tmpfs of ``size`` mounted at ``path`` for the block (:class:`Skip` where mounting is
    not allowed)."""
    if os.geteuid() != 0:
        raise Skip("mounting a tmpfs needs root")
    path.mkdir(parents=True, exist_ok=True)
    _mount("-t", "tmpfs", "-o", f"size={size}" + (",ro" if read_only else ""), "tmpfs", str(path))
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


def make_read_only(path: Path) -> None:
    """Turn the folder ``path`` read-only now, while processes write in it: a read-only bind
    mount of it over itself. (Remounting its own file system read-only is refused while files
    are open for writing; a disk error's forced remount is not.) Undo with :func:`unmount`."""
    _mount("--bind", str(path), str(path))
    try:
        _mount("-o", "remount,bind,ro", str(path))
    except Skip:
        unmount(path)
        raise


def unmount(path: Path) -> None:
    """Undo one mount at ``path`` (lazily: a process may still hold a file there)."""
    subprocess.run(["umount", "-l", str(path)], capture_output=True)


def fill(folder: Path) -> Path:
    """Write a file into ``folder`` until its device is full; that file."""
    filler = folder / "filler"
    with contextlib.suppress(OSError), filler.open("wb") as fh:
        while True:
            fh.write(b"\0" * 65536)
            fh.flush()
    return filler
