"""Physical field datasets (Darcy, airfoil) as normalized point arrays for DS-MPNN."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dsgraph.data import airfoil, darcy


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

    pos: np.ndarray  # (N, M, 2) raw coordinates (radius graphs use these)
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
    coef_cols: slice  # input columns used as edge coefficients (everything but x, y)

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


def _split(pos: np.ndarray, x: np.ndarray, y: np.ndarray, n_train: int) -> tuple:
    x_norm, y_norm = Normalizer.fit(x[:n_train]), Normalizer.fit(y[:n_train])

    def _part(sl: slice) -> FieldSet:
        return FieldSet(pos=pos[sl], x=x_norm.encode(x[sl]), y=y_norm.encode(y[sl]), y_raw=y[sl])

    return _part(slice(0, n_train)), _part(slice(n_train, None)), y_norm


def load_fields(cfg, progress: bool = True) -> FieldData:
    """Generate (or read from the cache) the physics dataset named by ``cfg.dataset.name``."""
    ds, ph = cfg.dataset, cfg.physics
    total = ph.train_samples + ph.test_samples
    if ds.name == "darcy":

        d = darcy.load(ds.cache_dir, ph.resolution, total, ds.seed, ph.gen_workers, progress)
        m = ph.resolution ** 2
        grid = darcy.grid_positions(ph.resolution).astype(np.float32)
        pos = np.broadcast_to(grid, (total, m, 2))
        x = np.concatenate([pos, d["a"].reshape(total, m, 1)], axis=2)
        y = d["u"].reshape(total, m, 1)
    elif ds.name == "airfoil":

        d = airfoil.load(ds.cache_dir, ph.points, total, ds.seed, ph.gen_workers, progress)
        pos, x, y = d["pos"], d["x"], d["y"]
    else:  # the config's cross-checks admit only the two above in dsmpnn mode
        raise ValueError(f"not a physics dataset: {ds.name!r}")
    train, test, y_norm = _split(pos, x, y, ph.train_samples)
    return FieldData(name=ds.name, train=train, test=test, y_norm=y_norm, coef_cols=slice(2, None))
