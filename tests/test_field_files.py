"""Users' field files (``dataset.name: fields``): every layout, every bad input's one line, and
the DS-MPNN FieldData they become (splits, transfer set, config rules)."""
from __future__ import annotations

import pickle

import numpy as np
import pytest
import torch

from dsgraph import config as cfgmod
from dsgraph.data.fields.files import read_field_file
from dsgraph.errors import ConfigError, DataError
from dsgraph.physics.fields import load_fields

RNG = np.random.default_rng(0)


def _npz(path, **arrays):
    np.savez(path, **arrays)
    return path


def _grid(n=5, s=6, c=None, cy=None):
    """x on an s x s grid (channels c, or none), y = a smooth function of x."""
    x = RNG.random((n, s, s) + ((c,) if c else ())).astype(np.float32)
    base = x if c is None else x.sum(-1)
    y = np.stack([base ** 2 + k for k in range(cy)], -1) if cy else base ** 2
    return x, y.astype(np.float32)


# --- layouts -----------------------------------------------------------------------------------

def test_grid_npz_without_coordinates_lies_on_the_unit_square(tmp_path):
    x, y = _grid(n=4, s=5)
    f = read_field_file(_npz(tmp_path / "g.npz", x=x, y=y))
    assert f.x.shape == (4, 25, 1) and f.y.shape == (4, 25, 1) and f.pos.shape == (4, 25, 2)
    assert f.grid == (5, 5)
    # Node (i, j) sits at (i / 4, j / 4), row-major like the arrays.
    assert np.allclose(f.pos[0, 7], [1 / 4, 2 / 4]) and np.allclose(f.pos[3, 24], [1.0, 1.0])
    assert np.array_equal(f.x[2, 7, 0], x[2, 1, 2]) and np.array_equal(f.y[1, 24, 0], y[1, 4, 4])


def test_grid_with_channels_and_given_coordinates(tmp_path):
    x, y = _grid(n=3, s=4, c=2, cy=3)
    f = read_field_file(_npz(tmp_path / "g.npz", a=x, u=y), x_key="a", y_key="u")
    assert f.x.shape == (3, 16, 2) and f.y.shape == (3, 16, 3)
    assert np.array_equal(f.x[1, 5], x[1, 1, 1]) and np.array_equal(f.y[2, 15], y[2, 3, 3])
    # A 4-D grid may carry its own coordinates, shared (s, s, d) or per sample (N, s, s, d).
    pos = RNG.random((4, 4, 2)).astype(np.float32) * 10
    g = read_field_file(_npz(tmp_path / "p.npz", x=x, y=y, pos=pos))
    assert g.pos.shape == (3, 16, 2) and np.array_equal(g.pos[2, 6], pos[1, 2])
    per = RNG.random((3, 4, 4, 2)).astype(np.float32)
    h = read_field_file(_npz(tmp_path / "q.npz", x=x, y=y, pos=per))
    assert np.array_equal(h.pos[1, 6], per[1, 1, 2])


def test_points_with_per_sample_and_shared_coordinates(tmp_path):
    x = RNG.random((4, 30, 2)).astype(np.float32)
    y = RNG.random((4, 30)).astype(np.float32)
    per = RNG.random((4, 30, 3)).astype(np.float32)
    f = read_field_file(_npz(tmp_path / "p.npz", x=x, y=y, pos=per))
    assert f.grid is None and f.x.shape == (4, 30, 2) and f.y.shape == (4, 30, 1)
    assert np.array_equal(f.pos, per)
    shared = RNG.random((30, 2)).astype(np.float32)
    g = read_field_file(_npz(tmp_path / "s.npz", x=x[..., 0], y=y, coords=shared),
                        pos_key="coords")
    assert g.x.shape == (4, 30, 1) and g.pos.shape == (4, 30, 2)
    assert np.array_equal(g.pos[3], shared)


def test_torch_save_dict_reads_like_npz_and_converts_bool(tmp_path):
    x = torch.rand(3, 6, 6) > 0.5  # neuraloperator's darcy files store x as bool
    y = torch.rand(3, 6, 6, dtype=torch.float64)
    torch.save({"x": x, "y": y, "meta": torch.tensor([1])}, tmp_path / "d.pt")
    f = read_field_file(tmp_path / "d.pt")
    assert f.x.dtype == np.float32 and f.x.shape == (3, 36, 1)
    assert np.array_equal(f.x[..., 0], x.reshape(3, 36).float().numpy())
    assert np.allclose(f.y[..., 0], y.reshape(3, 36).numpy())


# --- bad inputs: one line naming the file and the key ------------------------------------------

class _Evil:
    def __reduce__(self):  # would run a command if the file were unpickled
        return (print, ("unpickled!",))


def _bad_cases(tmp):
    x, y = _grid(n=3, s=4)
    nan = y.copy()
    nan[1, 2, 2] = np.nan
    px = RNG.random((3, 10, 2)).astype(np.float32)
    py = RNG.random((3, 10)).astype(np.float32)
    torch.save([torch.zeros(2)], tmp / "list.pt")
    with open(tmp / "evil.pt", "wb") as fh:
        pickle.dump({"x": _Evil()}, fh)
    torch.save({"x": torch.zeros(3, 4, 4), "y": [1, 2]}, tmp / "nontensor.pt")
    np.save(tmp / "obj.npy", np.array([{"a": 1}], dtype=object))
    (tmp / "obj.npz").write_bytes(b"")
    np.savez(tmp / "obj.npz", x=np.array([{"a": 1}], dtype=object), y=y)
    (tmp / "junk.npz").write_bytes(b"not a zip")
    (tmp / "fields.h5").write_bytes(b"")
    return [
        (_npz(tmp / "nox.npz", a=x, y=y), "missing key 'x' (the input fields; set dataset.x_key); "
                                          "the file holds 'a', 'y'"),
        (_npz(tmp / "noy.npz", x=x), "missing key 'y' (the solution fields; set dataset.y_key); "
                                     "the file holds 'x'"),
        (_npz(tmp / "shape.npz", x=x[..., None], y=y[:, :3]),
         "y: expected shape (3, 4, 4[, C]) like x (3, 4, 4, 1), got (3, 3, 4)"),
        (_npz(tmp / "count.npz", x=x, y=y[:2]), "y: expected shape (3, 4, 4[, C]) like x "
                                                "(3, 4, 4) (without 'pos', a 3-D x is a grid), "
                                                "got (2, 4, 4)"),
        (_npz(tmp / "nan.npz", x=x, y=nan), "y: 1 NaN/inf values in 1 samples (first in sample 1)"),
        (_npz(tmp / "nopos.npz", x=px[..., 0], y=py), "missing key 'pos' (coordinates; set "
                                                      "dataset.pos_key): x of shape (3, 10) is "
                                                      "points, which need them"),
        (_npz(tmp / "grid3d.npz", x=px, y=py), "y: expected shape (3, 10, 2[, C]) like x "
                                               "(3, 10, 2) (without 'pos', a 3-D x is a grid), "
                                               "got (3, 10)"),
        (_npz(tmp / "badpos.npz", x=px, y=py, pos=np.zeros((3, 9, 2))),
         "pos: expected shape (10, d) or (3, 10, d) for x (3, 10, 2), got (3, 9, 2)"),
        (_npz(tmp / "dims.npz", x=px, y=py, pos=np.zeros((10, 4))),
         "pos: expected 1 to 3 coordinates per point, got 4"),
        (_npz(tmp / "tiny.npz", x=x[:, :1], y=y[:, :1]),
         "x: expected a grid of at least 2 x 2 nodes, got 1 x 4"),
        (_npz(tmp / "flat.npz", x=np.zeros(5), y=np.zeros(5)),
         "x: expected (N, s, s[, C]) grids or (N, P[, C]) points, got shape (5,)"),
        (_npz(tmp / "deep.npz", x=np.zeros((2, 3, 3, 1, 1)), y=np.zeros((2, 3, 3))),
         "x: expected (N, s, s[, C]) grids or (N, P[, C]) points, got shape (2, 3, 3, 1, 1)"),
        (_npz(tmp / "str.npz", x=np.array([["a", "b"], ["c", "d"]]), y=np.zeros((2, 2)),
              pos=np.zeros((2, 1))), "x: expected a numeric array, got dtype <U1"),
        (tmp / "obj.npz", "x: expected a numeric array, got a pickled object array"),
        (tmp / "junk.npz", "not a readable .npz file"),
        (tmp / "list.pt", "expected a dict of tensors, got list"),
        (tmp / "evil.pt", "not a readable torch.save'd dict of tensors"),
        (tmp / "nontensor.pt", "y: expected a tensor, got list"),
        (tmp / "fields.h5", "unknown extension '.h5'; expected .npz or .pt/.pth"),
        (tmp / "absent.npz", "field file not found"),
        (tmp, "expected the field file (an .npz or a torch.save'd dict of arrays), got a folder"),
    ]


def test_every_bad_file_is_one_line_naming_file_and_key(tmp_path, capsys):
    for path, message in _bad_cases(tmp_path):
        with pytest.raises(DataError) as err:
            read_field_file(path)
        text = str(err.value)
        assert "\n" not in text and text.startswith(f"{path}: "), text
        assert message in text, (path, text)
    assert "unpickled!" not in capsys.readouterr().out  # the evil file was never unpickled


# --- FieldData: splits, transfer, config rules -------------------------------------------------

def _cfg(tmp, *sets):
    return cfgmod.load(None, ["train.mode=dsmpnn", "dataset.name=fields",
                              f"dataset.cache_dir={tmp}", *sets])


def test_split_test_file_and_transfer_file_become_one_field_data(tmp_path):
    x, y = _grid(n=10, s=6, c=2, cy=1)
    _npz(tmp_path / "train.npz", x=x, y=y)
    data = load_fields(_cfg(tmp_path, f"dataset.path={tmp_path / 'train.npz'}",
                            "dataset.split=[0.7, 0, 0.3]"))
    assert (len(data.train), len(data.test), data.transfer) == (7, 3, None)
    assert data.in_feats == 4 and data.coef_cols == slice(2, None) and data.coef_dim == 2
    assert data.pos_dim == 2 and data.out_feats == 1
    # Normalised with training statistics; raw targets kept for physical errors.
    assert abs(float(data.train.y.mean())) < 1e-5 and abs(float(data.train.y.std()) - 1) < 1e-4
    raw = np.concatenate([data.train.y_raw, data.test.y_raw]).reshape(10, 36)
    assert sorted(raw.sum(1)) == pytest.approx(sorted(y.reshape(10, 36).sum(1)))

    xt, yt = _grid(n=2, s=9, c=2, cy=1)  # another resolution: the transfer set
    _npz(tmp_path / "fine.npz", x=xt, y=yt)
    _npz(tmp_path / "test.npz", x=x[:3], y=y[:3])
    data = load_fields(_cfg(tmp_path, f"dataset.path={tmp_path / 'train.npz'}",
                            f"dataset.test_path={tmp_path / 'test.npz'}",
                            f"dataset.transfer_path={tmp_path / 'fine.npz'}"))
    assert (len(data.train), len(data.test)) == (10, 3)
    assert data.transfer.x.shape == (2, 81, 4) and data.transfer.pos.shape == (2, 81, 2)
    _npz(tmp_path / "wide.npz", x=xt[..., :1], y=yt)
    with pytest.raises(DataError) as err:
        load_fields(_cfg(tmp_path, f"dataset.path={tmp_path / 'train.npz'}",
                         f"dataset.test_path={tmp_path / 'wide.npz'}"))
    assert str(err.value) == (f"{tmp_path / 'wide.npz'}: x: expected 2 channels per point like "
                              f"the training file {tmp_path / 'train.npz'}, got 1")


def test_points_in_three_dimensions_carry_three_coordinates(tmp_path):
    x = RNG.random((4, 40, 1)).astype(np.float32)
    pos = RNG.random((40, 3)).astype(np.float32)
    _npz(tmp_path / "p.npz", x=x, y=x[..., 0] * 2, pos=pos)
    data = load_fields(_cfg(tmp_path, f"dataset.path={tmp_path / 'p.npz'}",
                            "dataset.split=[0.5, 0, 0.5]"))
    assert data.pos_dim == 3 and data.coef_cols == slice(3, None) and data.in_feats == 4
    from dsgraph.physics.sampling import build, edge_feat_dim
    fs = data.train
    sg = build(fs.pos[0], fs.x[0], fs.x[0][:, 3:], np.arange(40), 0.5, 6,
               np.random.default_rng(0))
    assert sg.efeat.shape == (len(sg.src), edge_feat_dim(1, 3)) == (len(sg.src), 6)


def test_too_few_samples_for_the_split(tmp_path):
    x, y = _grid(n=2, s=4)
    _npz(tmp_path / "two.npz", x=x, y=y)
    with pytest.raises(DataError) as err:
        load_fields(_cfg(tmp_path, f"dataset.path={tmp_path / 'two.npz'}",
                         "dataset.split=[0.9, 0, 0.1]"))
    assert str(err.value) == (f"{tmp_path / 'two.npz'}: x: dataset.split [0.9, 0, 0.1] of 2 "
                              f"samples leaves 2 training and 0 test samples; expected at least "
                              f"one of each")


@pytest.mark.parametrize("sets, message", [
    (["dataset.name=fields"], "dataset.path: expected a field file (.npz, or .pt from "
                              "torch.save) when dataset.name is 'fields', got None"),
    (["dataset.name=fields", "dataset.path=f.npz"],
     "dataset.split: expected [train, 0, test] fractions of the samples or a dataset.test_path "
     "for dataset 'fields', got null"),
    (["dataset.name=fields", "dataset.path=f.npz", "dataset.split=[0.8, 0.1, 0.1]"],
     "dataset.split: expected [train, 0, test] for dataset 'fields' (DS-MPNN keeps no "
     "validation set; test > 0), got [0.8, 0.1, 0.1]"),
    (["dataset.name=fields", "dataset.path=f.npz", "dataset.split=[0.8, 0, 0.2]",
      "dataset.test_path=t.npz"],
     "dataset.split: dataset.test_path holds the test fields; expected null beside it, got "
     "[0.8, 0, 0.2]"),
    (["dataset.name=darcy", "dataset.x_key=a"],
     "dataset.x_key: dataset 'darcy' does not read it (only fields does); remove it or set "
     "dataset.name, got 'a'"),
    (["dataset.name=airfoil", "dataset.transfer_path=t.npz"],
     "dataset.transfer_path: dataset 'airfoil' does not read it (only fields does); remove it "
     "or set dataset.name, got 't.npz'"),
    (["dataset.name=airfoil", "physics.test_resolution=32"],
     "physics.test_resolution: dataset 'airfoil' does not read it (only darcy does); remove it "
     "or set dataset.name, got 32"),
    (["dataset.name=darcy", "physics.test_points=2000"],
     "physics.test_points: dataset 'darcy' does not read it (only airfoil does); remove it or "
     "set dataset.name, got 2000"),
    (["dataset.name=darcy", "physics.batch_fields=0"],
     "physics.batch_fields: expected an integer >= 1, got 0"),
])
def test_field_config_rules(sets, message):
    with pytest.raises(ConfigError) as err:
        cfgmod.load(None, ["train.mode=dsmpnn", *sets])
    # a key a --set gave is named by its --set; a rule about a default, by <defaults>
    given = {s.split("=", 1)[0] for s in sets}
    assert str(err.value) == (f"--set {message}" if message.split(": ", 1)[0] in given
                              else f"<defaults>: {message}")
