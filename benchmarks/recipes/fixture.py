"""The held-in arxiv-layout folder the ``recipes`` benchmark trains on (there is no network
here): :func:`write_arxiv_like`, a DC-SBM graph (:mod:`dsgraph.data.synthetic`) laid out as
ogbn-arxiv's raw CSV files, citations pointing from the newer paper to the older one, 128-d
features, 40 classes and a time split (oldest 54% train, next 18% valid, newest 28% test,
arxiv's proportions)."""
from __future__ import annotations

from pathlib import Path

import numpy as np

# arxiv's split proportions (train < 2018, valid 2018, test 2019): 90,941 / 29,799 / 48,603.
SPLIT = (0.54, 0.18, 0.28)


def write_arxiv_like(root: str | Path, num_nodes: int = 40_000, seed: int = 0,
                     avg_degree: float = 14.0, homophily: float = 0.65,
                     feat_signal: float = 0.15) -> Path:
    """Write an ogbn-arxiv-layout folder (``raw/*.csv.gz``, ``split/time/*.csv.gz``) at ``root``.

    Each undirected DC-SBM pair becomes one directed edge from the newer node to the older (a
    citation), so without reverse edges the newest (test) nodes receive few messages, as in
    arxiv. Name the folder ``arxiv`` or ``ogbn_arxiv`` for ``add_reverse_edges: auto`` to apply
    arxiv's convention (no reverse edges).
    """
    import pandas as pd

    from dsgraph.config import DatasetConfig
    from dsgraph.data.synthetic import generate

    cfg = DatasetConfig(num_nodes=num_nodes, avg_degree=avg_degree, num_classes=40,
                        feat_dim=128, homophily=homophily, feat_signal=feat_signal, seed=seed)
    g = generate(cfg)
    src, dst = (t.numpy() for t in g.edges())
    one_way = src < dst  # generate() stores each pair both ways
    a, b = src[one_way], dst[one_way]
    # publication order: a random permutation, so time is independent of the communities
    year = np.random.default_rng([seed, 2]).permutation(num_nodes)
    newer = year[a] > year[b]
    cite_src, cite_dst = np.where(newer, a, b), np.where(newer, b, a)
    root = Path(root)
    raw = root / "raw"
    raw.mkdir(parents=True, exist_ok=True)

    def csv_gz(name: str, values, fmt: str | None = None) -> None:
        pd.DataFrame(values).to_csv(name, header=False, index=False, float_format=fmt)

    csv_gz(raw / "edge.csv.gz", np.stack([cite_src, cite_dst], 1))
    csv_gz(raw / "num-node-list.csv.gz", [num_nodes])
    csv_gz(raw / "num-edge-list.csv.gz", [len(cite_src)])
    csv_gz(raw / "node-feat.csv.gz", g.ndata["feat"].numpy(), "%.5f")
    csv_gz(raw / "node-label.csv.gz", g.ndata["label"].numpy()[:, None])
    by_time = np.argsort(year, kind="stable")
    cuts = np.round(np.cumsum(SPLIT) * num_nodes).astype(int)
    for name, ids in zip(("train", "valid", "test"), np.split(by_time, cuts[:2])):
        (root / "split" / "time").mkdir(parents=True, exist_ok=True)
        csv_gz(root / "split" / "time" / f"{name}.csv.gz", np.sort(ids))
    (root / "RELEASE_v1.txt").write_text("held-in arxiv-layout fixture (benchmarks/recipes/fixture.py)\n")
    return root
