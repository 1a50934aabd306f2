"""``python -m predict --pairs FILE`` (link prediction): the node pairs a user asks to score,
read from a csv with ``src`` and ``dst`` columns of the input graph's node ids (a CSV folder's
``node_id`` values, else positions)."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from dsgraph.errors import UserError


def read_pairs(path: Path, num_nodes: int, ids: np.ndarray | None = None) -> np.ndarray:
    """(pairs, 2) int64 original node ids of the csv ``path``, whose ids are the user's
    (``ids``: the user's id of each original node, :func:`dsgraph.predict.output.user_ids`) or,
    without ``ids``, original ids; one-line UserError for a missing file, missing columns,
    non-integer ids or ids naming no node."""
    import pandas as pd  # only --pairs needs it

    try:
        frame = pd.read_csv(path)
    except FileNotFoundError:
        raise UserError(f"--pairs {path}: file not found") from None
    except (OSError, ValueError, pd.errors.ParserError) as exc:
        raise UserError(f"--pairs {path}: unreadable csv ({str(exc).splitlines()[0][:100]})") \
            from None
    missing = [c for c in ("src", "dst") if c not in frame.columns]
    if missing:
        raise UserError(f"--pairs {path}: expected columns src and dst, missing "
                        f"{', '.join(missing)}")
    values = frame[["src", "dst"]].to_numpy()
    if not len(values):
        raise UserError(f"--pairs {path}: expected at least one pair, got none")
    if not np.issubdtype(values.dtype, np.integer):
        raise UserError(f"--pairs {path}: expected integer node ids in src and dst, got "
                        f"{values.dtype} values")
    values = values.astype(np.int64)
    if ids is not None:  # the user's ids -> original ids (positions in ids)
        order = np.argsort(ids, kind="stable")
        at = np.minimum(np.searchsorted(ids, values, sorter=order), len(ids) - 1)
        bad = ids[order[at]] != values
        if bad.any():
            row, col = map(int, np.argwhere(bad)[0])
            raise UserError(f"--pairs {path}: row {row + 2}: {('src', 'dst')[col]} "
                            f"{int(values[row, col])} is not a node id of the dataset (its "
                            f"node_id values)")
        return order[at]
    bad = (values < 0) | (values >= num_nodes)
    if bad.any():
        row, col = map(int, np.argwhere(bad)[0])
        raise UserError(f"--pairs {path}: row {row + 2}: {('src', 'dst')[col]} "
                        f"{int(values[row, col])} is not a node id (expected 0..{num_nodes - 1})")
    return values.astype(np.int64)
