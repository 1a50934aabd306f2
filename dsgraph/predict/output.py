"""What ``python -m predict`` writes: a row per node (or per field point), as ``.npz`` or ``.csv``.

Graph runs: ``node_id`` (the node's id in the user's input graph: a DGL CSV folder's
``node_id`` values, read from the partition folder's ``user_node_ids.npz``, else its position
in the files, 0..n-1: OGB row index, ``.npz`` / DGL binary row, chunked order per type,
generated graphs' ids; :func:`with_user_ids`), the task's columns
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

import sys
from pathlib import Path
from typing import Any

import numpy as np

from dsgraph.errors import UserError
from dsgraph.fsutil import atomic_write_with

FORMATS = (".npz", ".csv")
ID_COLUMNS = ("node_id", "src", "dst")  # columns of original node ids (positions)


def user_ids(cfg: Any) -> np.ndarray | None:
    """The user's id of each original node of the run's (target) node type, from its partition
    folder (:func:`dsgraph.partition.format.read_user_ids`); None where ids are positions."""
    from dsgraph.partition.format import read_user_ids  # torch and DGL: workers have them

    ids = read_user_ids(Path(cfg.partition.out_dir) / f"{cfg.partition.graph_name}.json")
    if ids is None and cfg.dataset.name == "csv":  # partitions written before the sidecar
        print(f"warning: {cfg.partition.out_dir} has no user_node_ids.npz (partitioned by an "
              f"older dsgraph): node_id is the position in sorted node_id order; re-partition "
              f"(python -m partition --force) for the CSV's node_id values", file=sys.stderr,
              flush=True)
    return ids


def with_user_ids(arrays: dict[str, np.ndarray], ids: np.ndarray | None
                  ) -> dict[str, np.ndarray]:
    """``arrays`` with the original ids of :data:`ID_COLUMNS` replaced by the user's (``ids``;
    none: unchanged), rows still sorted by ``node_id``."""
    if ids is None:
        return arrays
    out = {k: ids[v] if k in ID_COLUMNS else v for k, v in arrays.items()}
    if "node_id" in out and (np.diff(out["node_id"]) < 0).any():  # CSV ids map in order
        order = np.argsort(out["node_id"], kind="stable")
        out = {k: v[order] for k, v in out.items()}
    return out


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
