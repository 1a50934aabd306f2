"""Reading a job process's log: its last lines, and the line that states why it failed."""
from __future__ import annotations

import re
import signal
from pathlib import Path

# A process that failed because a peer did: its collective or RPC connection broke, or it timed
# out waiting (gloo: "Application timeout caused pair closure"). Such an error is never the
# cause when another process failed on its own.
_PEER_ERROR = re.compile(
    r"Connection (closed|reset) by peer|Broken pipe|Connection refused|ECONNRESET|EPIPE|"
    r"gloo/transport|ProcessGroupGloo|DistBackendError|DistNetworkError|Socket Timeout|"
    r"Timed out|timeout|pair closure|DistConnectError|Fail to connect|socket_communicator|"
    r"job interrupted|KeyboardInterrupt|Terminated", re.IGNORECASE)
# The line of a log that states the cause: an "error: ..." line or an exception's last line.
_CAUSE = re.compile(r"^(error: .*|([A-Za-z_][\w.]*)?(Error|Exception|Exit|Interrupt|Failure)"
                    r"\b(: .*)?|dgl\._ffi\.base\.DGLError: .*|.*Check failed.*)$")


def log_tail(path: Path, lines: int = 3, width: int = 400) -> str:
    """The last non-empty lines of a log, joined into one line."""
    try:
        text = path.read_text(errors="replace").splitlines()
    except OSError:
        return "(no log)"
    tail = [ln.strip() for ln in text if ln.strip()][-lines:]
    return " | ".join(tail)[-width:] or "(empty log)"


def log_cause(path: Path, width: int = 400) -> str:
    """The line of a process's log that states why it failed (else its last lines)."""
    try:
        text = path.read_text(errors="replace").splitlines()
    except OSError:
        return "(no log)"
    for line in reversed(text):
        # a progress bar redraws with carriage returns and leaves no newline before what
        # follows it: the cause is the line's last segment, from its "error: " on
        line = line.rsplit("\r", 1)[-1].strip()
        if not _CAUSE.match(line) and "error: " in line:
            line = line[line.index("error: "):]
        if _CAUSE.match(line):
            return line[:width]
    return log_tail(path, width=width)


def is_peer_error(cause: str) -> bool:
    """Whether ``cause`` (a :func:`log_cause` line) says the process only lost a peer."""
    return _PEER_ERROR.search(cause) is not None


def signal_name(num: int) -> str:
    """``SIGKILL`` for 9, say (the name of the signal that ended a process)."""
    try:
        return signal.Signals(num).name
    except ValueError:
        return f"signal {num}"
