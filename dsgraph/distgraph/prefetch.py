"""Mini-batches prepared ahead by a background thread.

While the trainer runs one batch's forward and backward (torch kernels, which release the GIL),
a thread samples the next batches and reads their features, so the RPC waits of remote sampling
and remote feature pulls overlap compute instead of adding to it.

One thread serves the whole run: DGL seeds each thread's sampling generator with the seed plus
the thread's number in the process, so only a thread that is the same in every run (the first
one started) makes a resumed run draw what an uninterrupted one draws.
"""
from __future__ import annotations

import queue
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Iterator, Optional, TypeVar

T = TypeVar("T")

_DONE = object()


class Prefetcher:
    """Runs producers ``depth`` items ahead on one long-lived thread (``depth`` 0: inline)."""

    def __init__(self, depth: int) -> None:
        self.depth = depth
        self._pool: Optional[ThreadPoolExecutor] = None
        if depth > 0:
            self._pool = ThreadPoolExecutor(1, thread_name_prefix="dsgraph-prefetch")

    def __call__(self, produce: Callable[[], Iterator[T]]) -> Iterator[T]:
        """The items of ``produce()``, made on the prefetch thread at most ``depth`` ahead.

        An exception raised while producing is raised here, at the item it replaced. Closing
        the iterator early (an exception in the consumer, say) stops the producer before
        returning.
        """
        if self._pool is None:
            yield from produce()
            return
        items: queue.Queue = queue.Queue(maxsize=self.depth)
        stop = threading.Event()

        def put(entry: tuple[bool, object]) -> bool:
            while not stop.is_set():
                try:
                    items.put(entry, timeout=0.05)
                    return True
                except queue.Full:
                    continue
            return False

        def work() -> None:
            try:
                for item in produce():
                    if not put((True, item)):
                        return
                put((True, _DONE))
            except BaseException as exc:  # handed to the consumer, which raises it
                put((False, exc))

        done = self._pool.submit(work)
        try:
            while True:
                ok, item = items.get()
                if not ok:
                    raise item  # type: ignore[misc]
                if item is _DONE:
                    return
                yield item  # type: ignore[misc]
        finally:
            stop.set()
            done.result()

    def close(self) -> None:
        """Stop the thread (after the producer running on it, if any, has stopped)."""
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
