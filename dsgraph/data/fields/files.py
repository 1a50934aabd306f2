"""Users' field files (``dataset.name: fields``): input fields ``x`` and solutions ``y`` per sample.

A file is an ``.npz`` (read with ``allow_pickle=False``) or a ``torch.save``d dict of tensors
(read with ``torch.load(weights_only=True)``: a user file is never unpickled). Two layouts:

- grid, without coordinates: ``x`` is ``(N, s1, s2)`` or ``(N, s1, s2, C)`` and ``y`` the same
  grid with its own channel count; node (i, j) lies at (i / (s1 - 1), j / (s2 - 1)) on the unit
  square, or where a grid-shaped ``pos`` ``(s1, s2, d)`` / ``(N, s1, s2, d)`` puts it (with a
  4-D ``x`` only: a 3-D ``x`` beside ``pos`` is points);
- points, with coordinates: ``x`` is ``(N, P)`` or ``(N, P, C)``, ``y`` ``(N, P)`` or
  ``(N, P, Cy)`` and ``pos`` ``(N, P, d)`` per sample or ``(P, d)`` shared.

Either way the result is flat: positions ``(N, P, d)`` (a broadcast view when shared), inputs
``(N, P, C)`` and targets ``(N, P, Cy)`` as float32. Every problem (missing key, mismatched
shapes, NaN/inf, too few samples) raises :class:`DataError` with one line naming file and key.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import numpy as np
import torch

from dsgraph.data.arrays import read_npz, short_error, user_path
from dsgraph.errors import DataError

NPZ_SUFFIXES = (".npz",)
TORCH_SUFFIXES = (".pt", ".pth")


@dataclass
class FieldArrays:
    """One file's samples, flattened to points."""

    path: str
    pos: np.ndarray  # (N, P, d) float32 (may be a read-only broadcast view)
    x: np.ndarray  # (N, P, C) float32
    y: np.ndarray  # (N, P, Cy) float32
    grid: Optional[tuple[int, int]] = None  # (s1, s2) of a grid file

    def __len__(self) -> int:
        return self.x.shape[0]


def read_field_file(path: str | os.PathLike, x_key: str = "x", y_key: str = "y",
                    pos_key: str = "pos") -> FieldArrays:
    """Read and check one field file (see the module docstring); the keys name its arrays."""
    p = user_path(path, "field file", "an .npz or a torch.save'd dict of arrays", folder=False)
    suffix = p.suffix.lower()
    if suffix in NPZ_SUFFIXES:
        arrays = _read_npz(p, (x_key, y_key, pos_key))
    elif suffix in TORCH_SUFFIXES:
        arrays = _read_torch(p, (x_key, y_key, pos_key))
    else:
        raise DataError(f"{p}: unknown extension {p.suffix or '(none)'!r}; expected .npz or "
                        f"{'/'.join(TORCH_SUFFIXES)} (a torch.save'd dict of tensors)")
    for role, key in (("input", x_key), ("solution", y_key)):
        if arrays.get(key) is None:
            held = ", ".join(repr(k) for k in sorted(arrays)) or "nothing"
            raise DataError(f"{p}: missing key {key!r} (the {role} fields; set "
                            f"dataset.{'x' if role == 'input' else 'y'}_key); the file holds "
                            f"{held}")
    return _layout(str(p), arrays[x_key], arrays[y_key], arrays.get(pos_key),
                   (x_key, y_key, pos_key))


def _read_npz(p: Path, keys: tuple[str, ...]) -> dict[str, Optional[np.ndarray]]:
    """The arrays of ``keys`` an .npz holds (other keys map to None: named in errors, never
    read); pickled (object) arrays are refused."""
    names, arrays = read_npz(p, lambda held: [k for k in held if k in keys])
    return {k: arrays.get(k) for k in names}


def _read_torch(p: Path, keys: tuple[str, ...]) -> dict[str, Optional[np.ndarray]]:
    """The tensors of ``keys`` in a ``torch.save``d dict as numpy arrays (other keys map to
    None)."""
    try:
        obj = torch.load(p, map_location="cpu", weights_only=True)
    except Exception as exc:  # unpickling errors come in many types; none may escape as a trace
        raise DataError(f"{p}: not a readable torch.save'd dict of tensors "
                        f"({short_error(exc)})") from None
    if not isinstance(obj, dict):
        raise DataError(f"{p}: expected a dict of tensors, got {type(obj).__name__}")
    out: dict[str, Optional[np.ndarray]] = {}
    for k, v in obj.items():
        if k not in keys:
            out[str(k)] = None
            continue
        if not isinstance(v, torch.Tensor):
            raise DataError(f"{p}: {k}: expected a tensor, got {type(v).__name__}")
        if v.is_complex():
            raise DataError(f"{p}: {k}: expected real values, got dtype {v.dtype}")
        out[k] = v.detach().float().numpy() if v.dtype == torch.bfloat16 else v.detach().numpy()
    return out


def _as_float(p: str, key: str, a: np.ndarray) -> np.ndarray:
    """float32 copy of a numeric array (bool and integer fields are converted)."""
    if not (np.issubdtype(a.dtype, np.floating) or np.issubdtype(a.dtype, np.integer)
            or a.dtype == np.bool_):
        raise DataError(f"{p}: {key}: expected a numeric array, got dtype {a.dtype}")
    out = a.astype(np.float32)
    bad = ~np.isfinite(out)
    if bad.any():
        samples = np.flatnonzero(bad.reshape(len(out), -1).any(axis=1)) if out.ndim else [0]
        raise DataError(f"{p}: {key}: {int(bad.sum())} NaN/inf values in {len(samples)} "
                        f"samples (first in sample {int(samples[0])})")
    return out


def grid_positions(s1: int, s2: int) -> np.ndarray:
    """(s1 * s2, 2) unit-square coordinates of a grid's nodes, in row-major order."""
    x, y = np.meshgrid(np.linspace(0.0, 1.0, s1), np.linspace(0.0, 1.0, s2), indexing="ij")
    return np.stack([x.ravel(), y.ravel()], axis=1).astype(np.float32)


def _layout(p: str, x: np.ndarray, y: np.ndarray, pos: Optional[np.ndarray],
            keys: tuple[str, str, str]) -> FieldArrays:
    """Check shapes against each other and flatten every sample to points."""
    xk, yk, pk = keys
    if not 2 <= x.ndim <= 4:
        raise DataError(f"{p}: {xk}: expected (N, s, s[, C]) grids or (N, P[, C]) points, "
                        f"got shape {x.shape}")
    n = x.shape[0]
    if n < 1:
        raise DataError(f"{p}: {xk}: expected at least one sample, got 0")
    grid = x.ndim == 4 or (x.ndim == 3 and pos is None)
    if grid:
        space = x.shape[1:3]
        if min(space) < 2:
            raise DataError(f"{p}: {xk}: expected a grid of at least 2 x 2 nodes, got "
                            f"{space[0]} x {space[1]}")
    else:
        if pos is None:
            raise DataError(f"{p}: missing key {pk!r} (coordinates; set dataset.pos_key): "
                            f"{xk} of shape {x.shape} is points, which need them")
        space = x.shape[1:2]
        if space[0] < 2:
            raise DataError(f"{p}: {xk}: expected at least 2 points per sample, got {space[0]}")
    points = int(np.prod(space))
    lead = (n, *space)
    if y.shape[:len(lead)] != lead or y.ndim not in (len(lead), len(lead) + 1):
        want = f"({', '.join(map(str, lead))}[, C])"
        hint = f" (without {pk!r}, a 3-D {xk} is a grid)" if grid and x.ndim == 3 else ""
        raise DataError(f"{p}: {yk}: expected shape {want} like {xk} {x.shape}{hint}, got "
                        f"{y.shape}")
    xf = _as_float(p, xk, x).reshape(n, points, -1)
    yf = _as_float(p, yk, y).reshape(n, points, -1)
    if pos is None:
        pf = np.broadcast_to(grid_positions(*space), (n, points, 2))
    else:
        if pos.ndim < 2 or pos.shape[:-1] not in (space, lead, (points,), (n, points)):
            shapes = " or ".join(f"({', '.join(map(str, s + ('d',)))})"
                                 for s in dict.fromkeys([space, lead, (points,), (n, points)]))
            raise DataError(f"{p}: {pk}: expected shape {shapes} for {xk} {x.shape}, got "
                            f"{pos.shape}")
        d = pos.shape[-1]
        if not 1 <= d <= 3:
            raise DataError(f"{p}: {pk}: expected 1 to 3 coordinates per point, got {d}")
        shared = pos.shape[:-1] in (space, (points,))
        pf = _as_float(p, pk, pos[None] if shared else pos)
        pf = np.broadcast_to(pf.reshape(pf.shape[0], points, d), (n, points, d))
    return FieldArrays(p, pf, xf, yf, tuple(space) if grid else None)


def check_like(ref: FieldArrays, other: FieldArrays, keys: tuple[str, str, str]) -> None:
    """A test or transfer file must carry the training file's channels and coordinate width."""
    for key, a, b in ((keys[0], ref.x, other.x), (keys[1], ref.y, other.y),
                      (keys[2], ref.pos, other.pos)):
        if a.shape[-1] != b.shape[-1]:
            what = "coordinates" if key == keys[2] else "channels"
            raise DataError(f"{other.path}: {key}: expected {a.shape[-1]} {what} per point like "
                            f"the training file {ref.path}, got {b.shape[-1]}")
