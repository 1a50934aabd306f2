"""Memory of a process as the kernel reports it: resident set size now and at its peak."""
from __future__ import annotations


def _status_mb(key: str, pid: int | str = "self") -> float | None:
    """A ``/proc/<pid>/status`` size field (``VmRSS``, ``VmHWM``, ``RssFile``) in MiB, or None."""
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        return None
    return None


def rss_mb(pid: int | str = "self") -> float:
    """Current resident set size in MiB (VmRSS; 0 when unreadable)."""
    return _status_mb("VmRSS", pid) or 0.0


def peak_rss_mb(pid: int | str = "self") -> float:
    """Peak resident set size in MiB (VmHWM; 0 when unreadable, e.g. the process has exited)."""
    return _status_mb("VmHWM", pid) or 0.0


def file_rss_mb(pid: int | str = "self") -> float:
    """File-backed resident memory in MiB (RssFile: mapped library code and data)."""
    return _status_mb("RssFile", pid) or 0.0


def reset_peak_rss() -> None:
    """Make this process's VmHWM its current RSS (Linux ``clear_refs`` 5), so a later peak
    excludes what came before; a no-op where the kernel does not allow it."""
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
    except OSError:
        pass
