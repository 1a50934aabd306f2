"""Darcy flow fields: -div(a grad u) = 1 on the unit square, u = 0 on the boundary.

The coefficient ``a`` is 12 where a Gaussian random field g ~ N(0, (-Lap + 9 I)^-2) (Neumann
Laplacian, sampled in the cosine basis with ``scipy.fft.idctn``) is >= 0 and 3 elsewhere, as in the
FNO/GKN benchmark. The pressure ``u`` is solved with 5-point finite differences on an n x n node
grid (boundary nodes included) using harmonic-mean face coefficients, assembled and solved with
``scipy.sparse``. Samples are generated in parallel processes and cached per parameter hash.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import scipy.fft
import scipy.sparse as sp
import scipy.sparse.linalg as spla

from dsgraph.data.cache import cached_npz, param_hash
from dsgraph.data.fields.pool import draw_samples

A_LOW, A_HIGH = 3.0, 12.0
GRF_TAU, GRF_ALPHA = 3.0, 2.0  # covariance (-Lap + tau^2)^-alpha


def grf_coefficient(n: int, rng: np.random.Generator) -> np.ndarray:
    """A thresholded Gaussian random field on an n x n node grid: values in {3, 12}."""
    k = np.arange(n)
    k2 = k[:, None] ** 2 + k[None, :] ** 2
    # Eigenvalues of -Lap (Neumann) are pi^2 |k|^2; the std of each mode is (pi^2|k|^2 + tau^2)^(-alpha/2).
    std = (np.pi ** 2 * k2 + GRF_TAU ** 2) ** (-GRF_ALPHA / 2.0)
    std[0, 0] = 0.0  # zero-mean field so the threshold splits the domain roughly in half
    coef = rng.standard_normal((n, n)) * std
    g = scipy.fft.idctn(coef, type=2, norm="ortho")
    return np.where(g >= 0, A_HIGH, A_LOW)


def assemble(a: np.ndarray) -> tuple[sp.csr_matrix, np.ndarray]:
    """The FD operator on interior nodes and the right-hand side (all ones) for coefficient ``a``.

    Node (i, j) sits at (x, y) = (i h, j h), h = 1/(n-1); the flux between neighbouring nodes uses
    the harmonic mean of their coefficients, so the operator is symmetric positive definite.
    """
    n = a.shape[0]
    if a.shape != (n, n) or n < 3:
        raise ValueError(f"coefficient must be a square grid with n >= 3, got shape {a.shape}")
    h = 1.0 / (n - 1)
    m = n - 2
    idx = -np.ones((n, n), dtype=np.int64)
    idx[1:-1, 1:-1] = np.arange(m * m).reshape(m, m)
    diag = np.zeros(m * m)
    rows, cols, vals = [], [], []
    for di, dj in ((1, 0), (-1, 0), (0, 1), (0, -1)):
        ai = a[1:-1, 1:-1]
        aj = a[1 + di:n - 1 + di, 1 + dj:n - 1 + dj]
        face = 2.0 * ai * aj / (ai + aj) / h ** 2
        diag += face.ravel()
        nb = idx[1 + di:n - 1 + di, 1 + dj:n - 1 + dj].ravel()
        inner = nb >= 0  # boundary neighbours carry u = 0: they only add to the diagonal
        rows.append(np.arange(m * m)[inner])
        cols.append(nb[inner])
        vals.append(-face.ravel()[inner])
    rows.append(np.arange(m * m))
    cols.append(np.arange(m * m))
    vals.append(diag)
    mat = sp.csr_matrix((np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))),
                        shape=(m * m, m * m))
    return mat, np.ones(m * m)


def solve(a: np.ndarray) -> np.ndarray:
    """The pressure u on the full n x n grid (zero on the boundary) for coefficient ``a``."""
    n = a.shape[0]
    mat, rhs = assemble(a)
    u = np.zeros((n, n))
    u[1:-1, 1:-1] = spla.spsolve(mat.tocsc(), rhs).reshape(n - 2, n - 2)
    return u


def sample(n: int, seed: int, index: int) -> tuple[np.ndarray, np.ndarray]:
    """Sample ``index`` of the stream ``seed``: (a, u), each n x n float32."""
    rng = np.random.default_rng([seed, index])
    a = grf_coefficient(n, rng)
    return a.astype(np.float32), solve(a).astype(np.float32)


def generate(n: int, num_samples: int, seed: int, workers: int = 1,
             progress: bool = True, start: int = 0) -> dict[str, np.ndarray]:
    """``num_samples`` Darcy samples on an n x n grid: {"a": (N,n,n), "u": (N,n,n)}, float32.

    Sample i depends only on (seed, i), so the result is the same for any number of workers.
    """
    out = draw_samples(sample, n, num_samples, seed, workers, progress, start,
                       desc=f"darcy {n}x{n}")
    return {"a": np.stack([o[0] for o in out]), "u": np.stack([o[1] for o in out])}


def grid_positions(n: int) -> np.ndarray:
    """(n*n, 2) coordinates of the grid nodes in the row-major order of the fields."""
    t = np.linspace(0.0, 1.0, n)
    x, y = np.meshgrid(t, t, indexing="ij")
    return np.stack([x.ravel(), y.ravel()], axis=1)


def load(cache_dir: str | Path, n: int, num_samples: int, seed: int, workers: int = 1,
         progress: bool = True, start: int = 0) -> dict[str, np.ndarray]:
    """Cached :func:`generate` (an .npz under ``cache_dir`` keyed by the parameters): samples
    ``start`` .. ``start + num_samples - 1`` of the stream ``seed``."""
    params = {"kind": "darcy", "n": n, "num_samples": num_samples, "seed": seed,
              "tau": GRF_TAU, "alpha": GRF_ALPHA, "version": 1}
    if start:  # left out at 0: caches written before samples had a start keep their names
        params["start"] = start
    path = Path(cache_dir) / f"darcy-{param_hash(params)}.npz"

    return cached_npz(path, lambda: generate(n, num_samples, seed, workers, progress,
                                             start))
