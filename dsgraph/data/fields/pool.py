"""Generated physics samples drawn on a process pool: one place for the darcy and airfoil
generators' fan-out, order and progress bar."""
from __future__ import annotations

from concurrent.futures import ProcessPoolExecutor
from typing import Callable, TypeVar

from tqdm import tqdm

T = TypeVar("T")


def draw_samples(sample: Callable[[int, int, int], T], size: int, num_samples: int, seed: int,
                 workers: int = 1, progress: bool = True, start: int = 0,
                 desc: str = "") -> list[T]:
    """``sample(size, seed, i)`` for i = ``start`` .. ``start + num_samples - 1``, in order, on
    ``workers`` processes (``sample`` a module-level function). A sample depends only on
    (seed, i), so any number of workers gives the same list."""
    args = ([size] * num_samples, [seed] * num_samples, range(start, start + num_samples))
    if workers <= 1:
        return list(tqdm(map(sample, *args), total=num_samples, desc=desc,
                         disable=not progress))
    with ProcessPoolExecutor(max_workers=workers) as pool:
        chunk = max(1, num_samples // (8 * workers))
        return list(tqdm(pool.map(sample, *args, chunksize=chunk), total=num_samples, desc=desc,
                         disable=not progress))
