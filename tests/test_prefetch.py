"""The prefetch thread of sampled training: order, errors, early stop, one thread per run."""
from __future__ import annotations

import threading
import time

import pytest

from dsgraph.distgraph.prefetch import Prefetcher


def _prefetch_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("dsgraph-prefetch")]


def _counting(n: int, made: list[int]):
    """A producer of 0..n-1 that records each item as it is made."""
    def produce():
        for i in range(n):
            made.append(i)
            yield i
    return produce


@pytest.mark.parametrize("depth", [0, 1, 3])
def test_items_arrive_in_order_from_one_thread_for_every_epoch(depth):
    made_in: set[str] = set()

    def produce():
        for i in range(20):
            made_in.add(threading.current_thread().name)
            yield i

    ahead = Prefetcher(depth)
    for _ in range(3):  # epochs
        assert list(ahead(produce)) == list(range(20))
    # inline at depth 0; otherwise the same single thread every epoch (DGL's per-thread seeds)
    assert len(made_in) == 1
    assert (threading.current_thread().name in made_in) == (depth == 0)
    ahead.close()
    assert _prefetch_threads() == []


def test_producer_runs_ahead_by_at_most_depth():
    made: list[int] = []
    ahead = Prefetcher(2)
    it = ahead(_counting(10, made))
    assert next(it) == 0
    time.sleep(0.3)  # let the thread fill the queue
    # item 0 taken, items 1 and 2 queued, item 3 made and waiting for a free slot
    assert len(made) <= 4
    assert list(it) == list(range(1, 10))
    ahead.close()


def test_producer_error_is_raised_in_the_consumer_after_earlier_items():
    def produce():
        yield 1
        raise ValueError("bad batch")

    ahead, got = Prefetcher(2), []
    with pytest.raises(ValueError, match="bad batch"):
        for item in ahead(produce):
            got.append(item)
    assert got == [1]
    ahead.close()


def test_consumer_leaving_early_stops_the_producer():
    made: list[int] = []
    ahead = Prefetcher(2)
    it = ahead(_counting(10_000, made))
    assert next(it) == 0
    it.close()  # what a `for` loop left by an exception does
    n = len(made)
    time.sleep(0.1)
    assert len(made) == n < 10  # the producer has stopped, not merely paused
    ahead.close()
    assert _prefetch_threads() == []
