"""The runtime notices DGL, gloo and their libraries print in a job's processes: kept in each
process's log, left off the console (:class:`ChatterFilter`, applied to what is echoed).

:data:`CHATTER` is the one declared list. Each entry is a regular expression for one whole
line, starting with literal text (its *head*, at least 4 characters: a line is held back from
the console only while it may still become such a line); a comment names where it comes from.
Errors and warnings that matter to a user are not chatter: tracebacks are handled by
:class:`~dsgraph.cluster.console.TracebackFilter`, everything not listed here passes.
"""
from __future__ import annotations

import re
from typing import MutableMapping

CHATTER: tuple[str, ...] = (
    # dgl/backend/__init__.py: `import dgl` with neither DGLBACKEND nor ~/.dgl/config.json
    r"DGL backend not selected or invalid\.\s+Assuming PyTorch for now\.",
    # dgl/backend/set_default_backend.py: the same import writing ~/.dgl/config.json
    r"Setting the default backend to \"\w+\"\..*",
    # dgl/distributed/dist_context.py: dgl.distributed.initialize() in a trainer, and its exit
    r"Initialize the distributed services with graphbolt: \w+",
    r"Client\[\d+\] in group\[\d+\] is exiting\.\.\.",
    # dgl/distributed/rpc_client.py: a trainer connecting to the DistGraph servers
    r"Client \[\d+\] waits on \S+",
    r"Machine \(\d+\) group \(\d+\) client \(\d+\) connect to server successfuly!",
    # dgl/distributed/rpc_client.py (logger.warning): an interface without an IPv4 address
    # (a network namespace's), listed while looking for this host's addresses
    r"Warning! Interface: \S*",
    r"IP address not available for interface\.",
    # dgl/distributed/rpc_server.py and rpc.py: a DistGraph server's start and end
    r"Server is waiting for connections on \[\S+\]\.\.\.",
    r"Server is exiting\.\.\.",
    r"Server \(\d+\) shutdown\.",
    # dgl/distributed/dist_graph.py: a DistGraph server loading its partition
    r"load \S+",
    r"Start to create specified graph formats which may take non-trivial time\.",
    r"Finished creating specified graph formats: .*",
    r"start graph service on server \d+ for part \d+",
    # libdgl.so, src/rpc/rpc.cc: DGL's SIGINT/SIGTERM handler in a process being stopped
    r"User pressed Ctrl\+C, Exiting",
    # libdgl.so, its bundled libxsmm: statistics printed at exit
    r"LIBXSMM_VERSION: .*",
    r"LIBXSMM_TARGET: .*",
    r"Registry and code: .*",
    r"Uptime: [\d.]+ s",
    # libtorch_cpu.so, c10d socket.cpp: the rendezvous store's connection retries (an address
    # family the host lacks, a peer not listening yet); a real failure raises an exception
    r"\[W socket\.cpp:\d+\] \[c10d\] The (server|client) socket .*",
    # libtorch_cpu.so, ProcessGroupGloo.cpp: gloo falling back to loopback
    r"\[W ProcessGroupGloo\.cpp:\d+\] Warning: Unable to resolve hostname to a \(local\) "
    r"address\..*",
    # torch >= 2.3, ProcessGroupGloo.cpp: gloo's connection summary
    r"\[Gloo\] Rank \d+ is connected to \d+ peer ranks\..*",
)

# The environment that keeps DGL from printing its backend notice at all (``import dgl`` in a
# fresh home); a value the user set is kept.
QUIET_ENV = {"DGLBACKEND": "pytorch"}


def quiet_env(env: MutableMapping[str, str]) -> MutableMapping[str, str]:
    """Add :data:`QUIET_ENV` to ``env`` (``os.environ`` in a CLI's main, before DGL is
    imported; a job process's environment) where it is not set; return ``env``."""
    for key, value in QUIET_ENV.items():
        env.setdefault(key, value)
    return env


_META = set(".^$*+?{}[]()|\\")


def literal_head(pattern: str) -> str:
    """The literal text ``pattern`` starts with (``Client [`` of ``Client \\[\\d+\\] ...``)."""
    head: list[str] = []
    i = 0
    while i < len(pattern):
        c = pattern[i]
        if c == "\\" and i + 1 < len(pattern) and not pattern[i + 1].isalnum():
            head.append(pattern[i + 1])
            i += 2
            continue
        if c in _META:
            if c in "*+?{" and head:  # the last character is repeated or optional
                head.pop()
            break
        head.append(c)
        i += 1
    return "".join(head)


def _compile() -> tuple[re.Pattern[bytes], tuple[bytes, ...]]:
    """One regex: some chatter line, from where it is matched to the end of the line; the
    heads."""
    body = b"|".join(b"(?:" + p.encode() + b")" for p in CHATTER)
    return (re.compile(rb"(?:" + body + rb")[ \t]*\Z"),
            tuple(literal_head(p).encode() for p in CHATTER))


_LINE, _HEADS = _compile()
_MAX_HEAD = max(len(h) for h in _HEADS)
_LINE_END = re.compile(rb"\r\n|[\r\n]")  # CRLF: a process on a terminal (ssh -tt)
# Where a chatter line may start: at a line's start, or right after a progress bar (which ends
# with "]" and no line end): never inside a line of other text ("failed to load x").
_STARTS_AFTER = (b"\n", b"\r", b"]")
_BAR_END = re.compile(rb"\]")
MAX_HELD = 4096  # a line longer than this is shown whatever it turns out to be


def is_chatter(line: str | bytes) -> bool:
    """Whether ``line`` (without its line end) is one of :data:`CHATTER`'s lines."""
    return _LINE.match(line.encode() if isinstance(line, str) else line) is not None


class ChatterFilter:
    """Drops :data:`CHATTER` lines from a byte stream; passes everything else through at once
    (a progress bar's unfinished line too), holding back only a line that may still become
    chatter. A chatter line that follows a progress bar on its line is cut from it; the line
    end is kept then, so what follows starts on a line of its own."""

    def __init__(self) -> None:
        self.held = b""  # from a possible chatter start to the (not yet seen) line end
        self.before = b"\n"  # the last byte shown (or the one before ``held``)
        self.skip_lf = False  # a dropped line ended the last chunk with CR: its LF may follow

    def feed(self, data: bytes) -> bytes:
        """The part of ``data`` to show."""
        data, self.held = self.held + data, b""
        if self.skip_lf and data:
            self.skip_lf = False
            data = data[1:] if data.startswith(b"\n") else data
        out = []
        while data:
            end = _LINE_END.search(data)
            if end is None:
                cut = self._possible_start(data)
                if len(data) - cut > MAX_HELD:
                    cut = len(data)
                if cut:
                    out.append(data[:cut])
                    self.before = data[cut - 1:cut]
                self.held = data[cut:]
                break
            line, term, data = data[:end.start()], data[end.start():end.end()], data[end.end():]
            at = self._chatter_at(line)
            if at is None:
                out.append(line + term)
            elif at > 0 or self.before == b"]":  # the rest of a progress bar's line
                out.append(line[:at] + term)
            else:
                self.skip_lf = term == b"\r" and not data
            self.before = term[-1:]
        return b"".join(out)

    def flush(self) -> bytes:
        """What is left to show once the stream has ended."""
        held, self.held = self.held, b""
        return b"" if held and self._chatter_at(held) == 0 else held

    def _starts(self, data: bytes) -> list[int]:
        """Positions of ``data`` (text after :attr:`before`) where a chatter line may start."""
        first = [0] if self.before in _STARTS_AFTER else []
        return first + [m.end() for m in _BAR_END.finditer(data)]

    def _chatter_at(self, line: bytes) -> int | None:
        """Where the rest of ``line`` (a whole line, without its end) is chatter, if it is."""
        for i in self._starts(line):
            if _LINE.match(line, i):
                return i
        return None

    def _possible_start(self, data: bytes) -> int:
        """The first position of ``data`` (a line not ended yet) from which it may still turn
        out to be chatter: a head, or the beginning of one at its end; else ``len(data)``."""
        for i in self._starts(data):
            tail = data[i:i + _MAX_HEAD]
            if any(tail.startswith(h) or (i + len(tail) == len(data) and h.startswith(tail))
                   for h in _HEADS):
                return i
        return len(data)
