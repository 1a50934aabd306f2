"""Physics checks of the generated Darcy and airfoil fields."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse.linalg as spla

from dsgraph.data.fields import airfoil, darcy


# --- Darcy ------------------------------------------------------------------------------------

def test_darcy_operator_symmetric_positive_definite():
    a = darcy.grf_coefficient(20, np.random.default_rng(1))
    mat, _ = darcy.assemble(a)
    assert abs(mat - mat.T).max() == 0.0
    lam_min = spla.eigsh(mat.tocsc(), k=1, sigma=0, which="LM", return_eigenvectors=False)[0]
    assert lam_min > 0
    # Gershgorin/diagonal dominance holds with equality only next to no boundary: strictly PD.
    assert np.all(mat.diagonal() > 0)


def test_darcy_discrete_residual_and_boundary():
    a, u = darcy.sample(48, seed=3, index=2)
    assert set(np.unique(a)) == {3.0, 12.0}
    mat, rhs = darcy.assemble(a.astype(np.float64))
    exact = darcy.solve(a.astype(np.float64))[1:-1, 1:-1].ravel()
    assert np.linalg.norm(mat @ exact - rhs) / np.linalg.norm(rhs) < 1e-10
    stored = u[1:-1, 1:-1].astype(np.float64).ravel()  # float32 rounding, condition number ~1e3
    assert np.linalg.norm(mat @ stored - rhs) / np.linalg.norm(rhs) < 1e-4
    assert np.all(u[0] == 0) and np.all(u[-1] == 0) and np.all(u[:, 0] == 0) and np.all(u[:, -1] == 0)
    assert u.min() >= 0 and 0.003 < u.max() < 0.03  # maximum principle, FNO-scale values


def test_darcy_constant_coefficient_matches_poisson():
    # -c Lap u = 1 on the unit square: max u = 0.0736713.../c (series solution).
    n = 65
    u = darcy.solve(np.full((n, n), 3.0))
    assert abs(u.max() - 0.0736713532 / 3.0) / (0.0736713532 / 3.0) < 2e-3
    assert np.allclose(u, u.T, atol=1e-12) and np.allclose(u, u[::-1], atol=1e-12)


def test_darcy_deterministic_and_worker_independent(tmp_path):
    one = darcy.generate(16, 4, seed=7, workers=1, progress=False)
    two = darcy.generate(16, 4, seed=7, workers=2, progress=False)
    assert np.array_equal(one["a"], two["a"]) and np.array_equal(one["u"], two["u"])
    other = darcy.generate(16, 4, seed=8, workers=1, progress=False)
    assert not np.array_equal(one["a"], other["a"])
    cached = darcy.load(tmp_path, 16, 4, seed=7, workers=1, progress=False)
    again = darcy.load(tmp_path, 16, 4, seed=7, workers=1, progress=False)
    assert len(list(tmp_path.glob("darcy-*.npz"))) == 1
    assert np.array_equal(cached["u"], one["u"]) and np.array_equal(again["u"], one["u"])


# --- airfoil ----------------------------------------------------------------------------------

FOILS = [airfoil.Airfoil(0.1, 0.08, np.deg2rad(6.0), 1.3), airfoil.Airfoil(0.05, 0.0, np.deg2rad(-4.0), 0.7),
         airfoil.Airfoil(0.15, 0.15, np.deg2rad(14.0), 1.0)]


@pytest.mark.parametrize("foil", FOILS)
def test_airfoil_zero_normal_velocity_on_surface(foil):
    theta = np.linspace(0.0, 2 * np.pi, 720, endpoint=False) + 0.0123
    zeta = foil.zeta_on_circle(theta)
    tangent = (1.0 - 1.0 / zeta ** 2) * 1j * foil.radius * np.exp(1j * theta)  # dz/dtheta
    normal = 1j * tangent / np.abs(tangent)
    vel = foil.velocity(zeta)
    vn = vel.real * normal.real + vel.imag * normal.imag
    assert np.max(np.abs(vn)) < 1e-9 * foil.speed
    assert np.max(np.abs(vel)) > 0.5 * foil.speed  # the flow is not trivially zero


@pytest.mark.parametrize("foil", FOILS)
def test_airfoil_kutta_condition_finite_trailing_edge(foil):
    beta = np.arctan2(foil.t, 1.0 + foil.s)
    speeds = [abs(foil.velocity(foil.zeta_on_circle(-beta + d))) for d in (1e-2, 1e-4, 1e-6)]
    assert max(speeds) < 3.0 * foil.speed and abs(speeds[1] - speeds[2]) < 1e-3 * foil.speed
    no_kutta = airfoil.Airfoil(foil.s, foil.t, foil.alpha, foil.speed, kutta=False)
    if abs(np.sin(foil.alpha + beta)) > 1e-3:  # without circulation the edge speed blows up
        assert abs(no_kutta.velocity(foil.zeta_on_circle(-beta + 1e-6))) > 1e3 * foil.speed


@pytest.mark.parametrize("foil", FOILS)
def test_airfoil_freestream_far_away_and_lift_sign(foil):
    far = foil.velocity(np.array([1e6 * np.exp(1j * 0.7)]))[0]
    assert abs(far - foil.speed * np.exp(1j * foil.alpha)) < 1e-5 * foil.speed
    beta = np.arctan2(foil.t, 1.0 + foil.s)
    # Positive lift (clockwise circulation in this convention) iff alpha + beta > 0.
    assert np.sign(foil.circulation) == np.sign(np.sin(foil.alpha + beta))


def test_airfoil_samples_layout_and_density():
    s = airfoil.sample(4000, seed=1, index=0)
    assert s["pos"].shape == (4000, 2) and s["x"].shape == (4000, 5) and s["y"].shape == (4000, 3)
    assert np.all(np.isfinite(s["y"])) and np.all(s["x"][:, 2] >= 0)
    assert np.array_equal(s["x"][:, :2], s["pos"])
    n_surf = int(4000 * airfoil.SURFACE_FRACTION)
    assert np.all(s["x"][:n_surf, 2] == 0) and np.all(s["x"][n_surf:, 2] > 0)
    speed, alpha = s["params"][3], s["params"][2]
    assert np.allclose(s["x"][:, 3:], [speed * np.cos(alpha), speed * np.sin(alpha)], atol=1e-6)
    cp = 1 - (s["y"][:, 0] ** 2 + s["y"][:, 1] ** 2)  # velocities are in units of U
    assert np.allclose(s["y"][:, 2], cp, atol=1e-5) and s["y"][:, 2].max() <= 1.0 + 1e-6
    # Denser near the surface: typical point spacing there is far smaller than far away.
    from scipy.spatial import cKDTree
    spacing = cKDTree(s["pos"]).query(s["pos"], k=2)[0][:, 1]
    near, far = s["x"][:, 2] < 0.05, s["x"][:, 2] > 1.0
    assert near.sum() > 200 and far.sum() > 200
    assert np.median(spacing[near]) < 0.2 * np.median(spacing[far])
    again = airfoil.sample(4000, seed=1, index=0)
    assert all(np.array_equal(s[k], again[k]) for k in s)
    assert not np.array_equal(airfoil.sample(4000, seed=1, index=1)["y"], s["y"])


def test_samples_from_a_start_index_continue_the_stream(tmp_path):
    """Transfer test sets are samples after the train/test ones: the same stream, cached apart."""
    whole = darcy.generate(12, 4, seed=7, progress=False)
    tail = darcy.load(tmp_path, 12, 2, seed=7, progress=False, start=2)
    assert np.array_equal(tail["a"], whole["a"][2:]) and np.array_equal(tail["u"], whole["u"][2:])
    darcy.load(tmp_path, 12, 2, seed=7, progress=False)
    assert len(list(tmp_path.glob("darcy-*.npz"))) == 2
    foils = airfoil.generate(150, 3, seed=1, progress=False)
    later = airfoil.generate(150, 1, seed=1, progress=False, start=2)
    assert np.array_equal(later["y"][0], foils["y"][2])
