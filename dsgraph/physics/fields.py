"""Physical field datasets (Darcy, airfoil, users' field files) as normalized point arrays.

Every dataset becomes the same :class:`FieldData`: per split, raw coordinates and normalized
node inputs (the coordinates first, then the coefficient channels the edges carry) and targets,
with standardisation fitted on the training split. An optional ``transfer`` split (another grid
resolution or point density) is evaluated beside the test split.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np

from dsgraph.data.fields import airfoil, darcy
from dsgraph.data.fields.files import FieldArrays, check_like, read_field_file
from dsgraph.data.split import random_split
from dsgraph.errors import DataError


@dataclass
class Normalizer:
    """Per-channel standardisation fitted on training data."""

    mean: np.ndarray
    std: np.ndarray

    @classmethod
    def fit(cls, arr: np.ndarray) -> "Normalizer":
        """Fit on (..., C) data; constant channels keep std 1."""
        flat = arr.reshape(-1, arr.shape[-1]).astype(np.float64)
        std = flat.std(0)
        return cls(flat.mean(0), np.where(std > 1e-12, std, 1.0))

    def encode(self, arr: np.ndarray) -> np.ndarray:
        """Standardise."""
        return ((arr - self.mean) / self.std).astype(np.float32)

    def decode(self, arr: np.ndarray) -> np.ndarray:
        """Undo :meth:`encode`."""
        return arr * self.std + self.mean


@dataclass
class FieldSet:
    """Samples of one split: raw positions, normalized inputs/targets, raw targets."""

    pos: np.ndarray  # (N, M, d) raw coordinates (radius graphs use these)
    x: np.ndarray  # (N, M, F) normalized inputs
    y: np.ndarray  # (N, M, C) normalized targets
    y_raw: np.ndarray  # (N, M, C) physical targets

    def __len__(self) -> int:
        return self.x.shape[0]

    @property
    def num_points(self) -> int:
        """Points per sample M."""
        return self.x.shape[1]


@dataclass
class FieldData:
    """Train and test splits plus what the model needs to know about them."""

    name: str
    train: FieldSet
    test: FieldSet
    y_norm: Normalizer
    coef_cols: slice  # input columns used as edge coefficients (everything but the coordinates)
    transfer: Optional[FieldSet] = None  # test fields at another resolution / point density
    pos_dim: int = 2  # coordinates per point d (the first d input columns)

    @property
    def in_feats(self) -> int:
        """Node input width F."""
        return self.train.x.shape[-1]

    @property
    def out_feats(self) -> int:
        """Target channels C."""
        return self.train.y.shape[-1]

    @property
    def coef_dim(self) -> int:
        """Width of the coefficient block carried on edges."""
        return len(range(*self.coef_cols.indices(self.in_feats)))


Raw = tuple[np.ndarray, np.ndarray, np.ndarray]  # pos (N, M, d), x (N, M, F), y (N, M, C)


def _darcy(cfg, n: int, count: int, start: int, progress: bool) -> Raw:
    """Darcy samples ``start..`` on an n x n grid: inputs (x, y, a), target u."""
    d = darcy.load(cfg.dataset.cache_dir, n, count, cfg.dataset.seed, cfg.physics.gen_workers,
                   progress, start=start)
    grid = darcy.grid_positions(n).astype(np.float32)
    pos = np.broadcast_to(grid, (count, n * n, 2))
    x = np.concatenate([pos, d["a"].reshape(count, n * n, 1)], axis=2)
    return pos, x, d["u"].reshape(count, n * n, 1)


def _airfoil(cfg, points: int, count: int, start: int, progress: bool) -> Raw:
    """Airfoil samples ``start..`` of ``points`` points each."""
    d = airfoil.load(cfg.dataset.cache_dir, points, count, cfg.dataset.seed,
                     cfg.physics.gen_workers, progress, start=start)
    return d["pos"], d["x"], d["y"]


def _with_pos(f: FieldArrays) -> Raw:
    """A user's file as node inputs: its coordinates, then its input channels."""
    return f.pos, np.concatenate([f.pos, f.x], axis=2), f.y


def _take(raw: Raw, idx: np.ndarray) -> Raw:
    return tuple(a[idx] for a in raw)  # type: ignore[return-value]


def _user_files(cfg) -> tuple[Raw, Raw, Optional[Raw], int]:
    """``fields``: (train, test, transfer, coordinate width) from the user's files."""
    ds = cfg.dataset
    keys = (ds.x_key, ds.y_key, ds.pos_key)
    main = read_field_file(ds.path, *keys)
    if ds.test_path is not None:
        test_file = read_field_file(ds.test_path, *keys)
        check_like(main, test_file, keys)
        train, test = _with_pos(main), _with_pos(test_file)
    else:
        masks = random_split(len(main), ds.split, ds.seed)
        tr, te = np.flatnonzero(masks["train_mask"]), np.flatnonzero(masks["test_mask"])
        if len(tr) == 0 or len(te) == 0:
            raise DataError(f"{main.path}: {ds.x_key}: dataset.split {ds.split} of {len(main)} "
                            f"samples leaves {len(tr)} training and {len(te)} test samples; "
                            f"expected at least one of each")
        whole = _with_pos(main)
        train, test = _take(whole, tr), _take(whole, te)
    transfer = None
    if ds.transfer_path is not None:
        other = read_field_file(ds.transfer_path, *keys)
        check_like(main, other, keys)
        transfer = _with_pos(other)
    return train, test, transfer, main.pos.shape[-1]


def load_fields(cfg, progress: bool = True) -> FieldData:
    """The physics dataset named by ``cfg.dataset.name``: generated (or read from the cache)
    for ``darcy`` / ``airfoil``, read from the user's files for ``fields``."""
    ds, ph = cfg.dataset, cfg.physics
    total = ph.train_samples + ph.test_samples
    transfer: Optional[Raw] = None
    pos_dim = 2
    if ds.name in ("darcy", "airfoil"):
        make = _darcy if ds.name == "darcy" else _airfoil
        size = ph.resolution if ds.name == "darcy" else ph.points
        other = ph.test_resolution if ds.name == "darcy" else ph.test_points
        whole = make(cfg, size, total, 0, progress)
        train = _take(whole, np.arange(ph.train_samples))
        test = _take(whole, np.arange(ph.train_samples, total))
        if other is not None:  # samples after the test ones: no field is seen twice
            transfer = make(cfg, other, ph.test_samples, total, progress)
    elif ds.name == "fields":
        train, test, transfer, pos_dim = _user_files(cfg)
    else:  # the config's cross-checks admit only the three above in dsmpnn mode
        raise ValueError(f"not a physics dataset: {ds.name!r}")
    x_norm, y_norm = Normalizer.fit(train[1]), Normalizer.fit(train[2])

    def _set(raw: Raw) -> FieldSet:
        pos, x, y = raw
        return FieldSet(pos=pos, x=x_norm.encode(x), y=y_norm.encode(y), y_raw=y)

    return FieldData(name=ds.name, train=_set(train), test=_set(test), y_norm=y_norm,
                     coef_cols=slice(pos_dim, None),
                     transfer=_set(transfer) if transfer is not None else None, pos_dim=pos_dim)
