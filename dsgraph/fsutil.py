"""Atomic file and folder writes: readers never see a half-written file or folder; a write the
storage refuses (full disk, read-only, permissions, quota) is one :class:`StorageError` line
naming the folder and the cause, and leaves the previous file as it was."""
from __future__ import annotations

import contextlib
import errno
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Callable, Iterator

import psutil

from dsgraph.errors import StorageError

# errno -> the cause as said to the user
_CAUSES = {errno.ENOSPC: "no space left on the device (ENOSPC)",
           errno.EDQUOT: "the disk quota is exceeded (EDQUOT)",
           errno.EROFS: "the file system is read-only (EROFS)",
           errno.EACCES: "permission denied (EACCES)", errno.EPERM: "not permitted (EPERM)",
           errno.EIO: "an input/output error of the device (EIO)",
           errno.EFBIG: "the file is too large for the file system (EFBIG)"}


def storage_error(exc: OSError, path: str | os.PathLike, what: str | None = None) -> StorageError:
    """The one-line error for ``exc``, raised writing ``path`` (``what``: default its name)."""
    if isinstance(exc, StorageError):  # said already, by a write further down
        return exc
    path = Path(path)
    cause = _CAUSES.get(exc.errno) or exc.strerror or str(exc) or type(exc).__name__
    return StorageError(f"{path.parent}: cannot write {what or path.name}: {cause}")


@contextlib.contextmanager
def storage_errors(path: str | os.PathLike, what: str | None = None) -> Iterator[None]:
    """Turn an OSError of the block (writing ``path``) into a :class:`StorageError`."""
    try:
        yield
    except OSError as exc:  # a StorageError from a write further down passes as it is
        raise storage_error(exc, path, what) from None


# Less free space than this is a full device: no write of a job's file (a checkpoint, a log
# line's new page) can be relied on.
FULL_BYTES = 1 << 20


def storage_fault(folder: str | os.PathLike) -> str | None:
    """Why nothing can be written in ``folder`` (read-only, full, not writable), as
    :func:`storage_error` says it; None where writes may succeed (or ``folder`` is gone)."""
    try:
        st = os.statvfs(folder)
    except OSError:
        return None
    if st.f_flag & os.ST_RDONLY:
        return _CAUSES[errno.EROFS]
    if st.f_bavail * st.f_frsize < FULL_BYTES or (st.f_files and not st.f_favail):
        return _CAUSES[errno.ENOSPC]
    if not os.access(folder, os.W_OK):
        return _CAUSES[errno.EACCES]
    return None


def check_free_space(folder: str | os.PathLike, needed_bytes: float, what: str) -> None:
    """Refuse early, with one line, when ``folder`` (or its nearest existing ancestor) has less
    free space than ``needed_bytes`` (an estimate of ``what``)."""
    at = Path(folder)
    while not at.exists() and at != at.parent:
        at = at.parent
    free = shutil.disk_usage(at).free
    if free < needed_bytes:
        raise StorageError(f"{folder}: not enough free space for {what}: about "
                           f"{_mib(needed_bytes)} needed, {_mib(free)} left on the device")


def _mib(n: float) -> str:
    return f"{n / 2**20:,.1f} MiB"


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` to a temporary file beside ``path`` and rename it into place."""
    def write(tmp: str) -> None:
        with open(tmp, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())

    atomic_write_with(path, write)


def atomic_write_with(path: str | os.PathLike, write: Callable[[str], None],
                      mode: int | None = None) -> None:
    """Let ``write(tmp)`` fill a temporary file beside ``path``, then rename it into place.

    For writers that need a path (``np.savez``, ``dgl.save_graphs``, a compiler's ``-o``). The
    file gets ``mode`` (default: what a new file gets under the umask) before the rename; on
    any exception the temporary file is removed and ``path`` is left as it was; an OSError is
    a :class:`StorageError`.
    """
    path = Path(path)
    with storage_errors(path):
        path.parent.mkdir(parents=True, exist_ok=True)
        remove_orphaned_temps(path)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=_temp_prefix(path), suffix=".tmp")
        os.close(fd)
        try:
            write(tmp)
            os.chmod(tmp, default_file_mode() if mode is None else mode)  # mkstemp creates 0600
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise


def _temp_prefix(path: Path) -> str:
    """Temporary names carry the writer's pid, so a later write can tell orphans from live ones."""
    return f".{path.name}.{os.getpid()}."


def is_temp_name(name: str) -> bool:
    """Whether ``name`` is one this module gives its temporary files and folders."""
    return name.startswith(".") and name.endswith(".tmp")


def remove_orphaned_temps(path: str | os.PathLike) -> list[Path]:
    """Delete temporary files and folders of earlier writes of ``path`` whose writer process is
    gone (killed mid-write); a live writer's are left alone. Returns what was removed."""
    path = Path(path)
    return _remove_orphans(path.parent, rf"\.{re.escape(path.name)}\.(\d+)\..*\.tmp")


def remove_orphaned_temps_in(folder: str | os.PathLike) -> list[Path]:
    """Delete the temporary files and folders of every write in ``folder`` or below whose writer
    process is gone (a job's processes killed mid-write: the launcher calls this when a job
    ends)."""
    removed = []
    for parent, _dirs, _files in os.walk(folder):  # top-down: removed folders are not entered
        removed += _remove_orphans(Path(parent), r"\..+\.(\d+)\.[^.]*\.tmp")
    return removed


def _remove_orphans(folder: Path, pattern: str) -> list[Path]:
    """Remove entries of ``folder`` matching ``pattern`` (group 1: the writer's pid) whose
    writer is not alive."""
    regex = re.compile(pattern)
    removed = []
    # Best effort: cleaning up runs when a job ends, also when it ends because its folder turned
    # read-only; a failure to clean must not hide that.
    with contextlib.suppress(OSError):
        for entry in folder.iterdir():
            match = regex.fullmatch(entry.name)
            if match is None or _running(int(match.group(1))):
                continue
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry, ignore_errors=True)
            else:
                try:
                    entry.unlink()
                except FileNotFoundError:
                    pass
                except OSError:
                    continue
            removed.append(entry)
    return removed


def _running(pid: int) -> bool:
    """Whether process ``pid`` exists and is not a zombie (a killed job process whose dead
    launcher's orphans nobody has reaped yet)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
    except psutil.AccessDenied:  # someone else's live process
        return True


def default_file_mode() -> int:
    """Permissions a newly created file gets under the current umask (0666 & ~umask)."""
    mask = os.umask(0)  # reading the umask means setting it; restore at once
    os.umask(mask)
    return 0o666 & ~mask


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    """Text version of :func:`atomic_write_bytes`."""
    atomic_write_bytes(path, text.encode())


@contextlib.contextmanager
def atomic_dir(path: str | os.PathLike, force: bool = False) -> Iterator[Path]:
    """Yield a temporary folder that replaces ``path`` only if the block completes.

    An existing ``path`` is an error unless ``force``; on any exception (including Ctrl-C) the
    temporary folder is removed and ``path`` is left exactly as it was.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_orphaned_temps(path)
    tmp = Path(tempfile.mkdtemp(dir=path.parent, prefix=_temp_prefix(path), suffix=".tmp"))
    try:
        yield tmp
        if path.exists():
            if not force:
                raise FileExistsError(path)
            old = path.with_name(f".{path.name}.old")
            shutil.rmtree(old, ignore_errors=True)
            os.replace(path, old)
            os.replace(tmp, path)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, path)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
