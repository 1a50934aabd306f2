"""What ``python -m predict`` writes: a row per node (or per field point), as ``.npz`` or ``.csv``.

Graph runs: ``node_id`` (the node's id in the user's input graph), the task's columns
(``node_classification``: ``pred``, the predicted class, and ``prob``, class probabilities, one
column per class; ``node_regression``: ``pred``, one column per target; ``multilabel``: ``prob``
and ``pred`` (0/1), one column per label; ``link_prediction``: ``embedding``, the model's
output that the decoder scores; docs/tasks.md) and, with ``--embeddings``,
``embedding`` (the input of the model's output layer), sorted by ``node_id``.
DS-MPNN runs: the test samples' points, ``sample``, ``node`` (point index within the sample),
``pos`` (coordinates), ``pred`` and ``target`` (physical units, one column per channel).

``.npz`` (``numpy.load``): one array per name, 2-D for the per-column arrays. ``.csv``
(``pandas.read_csv``): one column per 1-D array and ``NAME_k`` per column ``k`` of a 2-D one
(``prob_0``, ``prob_1``, ..., ``embedding_0``, ...).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from dsgraph.errors import UserError
from dsgraph.fsutil import atomic_write_with

FORMATS = (".npz", ".csv")


def check_out_path(out: Path) -> Path:
    """``out`` as an absolute path, if it names a supported format in an existing folder."""
    if out.suffix not in FORMATS:
        raise UserError(f"--out {out}: expected a file name ending in {' or '.join(FORMATS)}")
    if not out.parent.is_dir():
        raise UserError(f"--out {out}: folder {out.parent} does not exist")
    if out.is_dir():
        raise UserError(f"--out {out}: is a folder; expected a file name")
    return out.resolve()


def columns(arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The csv columns of ``arrays``: 1-D arrays as they are, 2-D ones split into ``NAME_k``."""
    cols: dict[str, np.ndarray] = {}
    for name, a in arrays.items():
        if a.ndim == 1:
            cols[name] = a
        else:
            cols.update({f"{name}_{k}": a[:, k] for k in range(a.shape[1])})
    return cols


def write(path: Path, arrays: dict[str, np.ndarray]) -> None:
    """Write ``arrays`` (equal lengths) to ``path`` atomically, as its suffix says."""
    lengths = {len(a) for a in arrays.values()}
    assert len(lengths) == 1, {k: a.shape for k, a in arrays.items()}
    if path.suffix == ".csv":
        import pandas as pd  # only the csv path needs it

        frame = pd.DataFrame(columns(arrays))
        atomic_write_with(path, lambda tmp: frame.to_csv(tmp, index=False))
    else:
        def savez(tmp: str) -> None:
            with open(tmp, "wb") as fh:  # a file object: np.savez would append .npz to a name
                np.savez(fh, **arrays)

        atomic_write_with(path, savez)
