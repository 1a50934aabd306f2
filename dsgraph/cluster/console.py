"""What the console shows of an echoed job process: its output less its traceback blocks and
less the runtime chatter of DGL and gloo (:mod:`.chatter`); the process's log keeps everything."""
from __future__ import annotations

import re
import sys
import threading
from pathlib import Path

from dsgraph.cluster.chatter import ChatterFilter


class TracebackFilter:
    """Drops Python traceback blocks from a byte stream and passes everything else through at
    once (a progress bar's unfinished line too): what the console shows of a job process.

    A traceback may start anywhere, right after a progress bar on the same line, say; it ends
    at the first line after the exception's own that does not continue it (see ``_TB_MORE``).
    """

    def __init__(self) -> None:
        self.state: str | None = None  # None: passing; "body": frames; "tail": after them
        self.held = b""  # not yet shown: may begin a traceback, or a line not yet ended

    def feed(self, data: bytes) -> bytes:
        """The part of ``data`` to show."""
        data, self.held = self.held + data, b""
        out = []
        while data:
            if self.state is None:
                head = _TB_HEAD.search(data)
                if head is None:
                    cut = len(data) - _opening_len(data)
                    out.append(data[:cut])
                    self.held = data[cut:]
                    break
                out.append(data[:head.start()])
                data, self.state = data[head.end():], "body"
                continue
            end = _LINE_END.search(data)  # a carriage return ends a progress bar's line
            if end is None:
                self.held = data  # decided once the line ends
                break
            line, data = data[:end.end()], data[end.end():]
            if self._ends_block(line.rstrip(b"\r\n")):
                out.append(line)
        return b"".join(out)

    def flush(self) -> bytes:
        """What is left to show once the stream has ended."""
        held, self.held = self.held, b""
        return held if self.state is None else b""

    def _ends_block(self, text: bytes) -> bool:
        """Whether ``text``, a line inside a traceback block, is the first one after it."""
        if self.state == "body":
            if text.strip() and not text[:1].isspace():
                self.state = "tail"  # the exception's own line, also left out
            return False
        if _TB_MORE.match(text):
            if text.lstrip().startswith(_TB_START):
                self.state = "body"  # a chained exception's traceback
            return False
        self.state = None
        return True


# A traceback's first line, and the lines that may follow the exception's own line: blank or
# indented ones, a chained exception's, the C++ backtrace torch and DGL append to their messages.
_TB_START = b"Traceback (most recent call last):"
_TB_HEAD = re.compile(rb"(\+ Exception Group )?Traceback \(most recent call last\):")
_TB_MORE = re.compile(rb"\s|$|Traceback \(most recent call last\):|During handling of the above "
                      rb"exception|The above exception was the direct cause|Exception raised "
                      rb"from |frame #\d+: |Stack trace:")
_LINE_END = re.compile(rb"[\r\n]")


def _opening_len(data: bytes) -> int:
    """The length of the longest end of ``data`` that may be the start of a traceback."""
    for n in range(min(len(data), len(_TB_START) - 1), 0, -1):
        if _TB_START.startswith(data[-n:]):
            return n
    return 0


def tee(stream, log: Path, state: dict, hush: threading.Event) -> None:
    """Copy a child's output to its log, and to our stderr less its tracebacks and chatter
    (and nothing once ``hush`` is set), until it closes."""
    tracebacks, chatter = TracebackFilter(), ChatterFilter()
    try:
        fh = log.open("ab")
    except OSError:
        fh = None
    try:
        for chunk in iter(lambda: stream.read1(65536), b""):
            if fh is not None:
                try:
                    fh.write(chunk)
                    fh.flush()
                except OSError:
                    # A full or read-only run folder: the log stops, the pipe must still be
                    # drained (else the process blocks writing) and the supervisor says why.
                    fh = _closed(fh)
            if not hush.is_set():
                show(chatter.feed(tracebacks.feed(chunk)), state)
        if not hush.is_set():
            show(chatter.feed(tracebacks.flush()) + chatter.flush(), state)
    finally:
        _closed(fh)


def _closed(fh) -> None:
    """Close ``fh`` (if any), whatever its unwritten buffer; None."""
    if fh is not None:
        try:
            fh.close()
        except OSError:
            pass
    return None


def show(data: bytes, state: dict) -> None:
    """Write ``data`` to our stderr; ``state['mid_line']``: whether it ended mid-line."""
    if not data:
        return
    try:
        sys.stderr.buffer.write(data)
        sys.stderr.flush()
        state["mid_line"] = not data.endswith(b"\n")
    except (ValueError, OSError):
        pass
