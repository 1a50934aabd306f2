"""Generated datasets cached on disk, keyed by a hash of their parameters, written atomically."""
from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path
from typing import Any, Callable, TypeVar

import numpy as np

from dsgraph.fsutil import atomic_write_with

T = TypeVar("T")


def param_hash(params: Any) -> str:
    """A short stable hash of a dataclass or JSON-able mapping of parameters."""
    if dataclasses.is_dataclass(params):
        params = dataclasses.asdict(params)
    blob = json.dumps(params, sort_keys=True, default=str).encode()
    return hashlib.sha1(blob).hexdigest()[:16]


def cached(path: Path, build: Callable[[], T], save: Callable[[T, str], None],
           load: Callable[[str], T]) -> T:
    """Load ``path`` if present, else ``build()`` and ``save`` it via a temp file + rename."""
    if path.exists():
        return load(str(path))
    obj = build()
    atomic_write_with(path, lambda tmp: save(obj, tmp))
    return obj


def cached_npz(path: Path, build: Callable[[], dict]) -> dict:
    """:func:`cached` for a dict of numpy arrays stored as an ``.npz``."""

    def save(arrays: dict, p: str) -> None:
        with open(p, "wb") as fh:  # a file object: np.savez would otherwise append ".npz"
            np.savez(fh, **arrays)

    def load(p: str) -> dict:
        with np.load(p) as z:
            return {k: z[k] for k in z.files}

    return cached(path, build, save, load)
