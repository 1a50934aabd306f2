"""Targets of synthetic graphs beyond class ids (``dataset.target``): regression values and 0/1
labels that depend on a node's community and on its neighbours, so a GNN beats an MLP.

Each node carries a latent vector ``z`` (one entry per target), written faintly into its
features; a target reads the community (smoothly: a sine of the community index, phase-shifted
per target) plus the mean ``z`` of the node's in-neighbours. Features alone show the node's own
``z`` and a weak community signal; only message passing sees the neighbours' ``z`` and pools the
neighbours' community signal (the graph is homophilous).
"""
from __future__ import annotations

import numpy as np

NEIGHBOUR_SCALE = 1.5  # weight of the neighbours' mean latent in a target
LATENT_SCALE = 0.5  # size of the latent's imprint on each feature (noise: 1 per feature)
NOISE = 0.1  # a target's own noise, which no model can predict


def neighbour_mean(values: np.ndarray, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    """Each node's mean of ``values`` over its in-neighbours (zeros without any)."""
    n = values.shape[0]
    count = np.maximum(np.bincount(dst, minlength=n), 1).astype(np.float64)
    return np.stack([np.bincount(dst, weights=values[src, c], minlength=n) / count
                     for c in range(values.shape[1])], axis=1)


def add_targets(target: str, feat: np.ndarray, community: np.ndarray, num_communities: int,
                num_targets: int, src: np.ndarray, dst: np.ndarray,
                rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Features with the latent imprinted, and the ``regression`` targets or ``multilabel``
    labels (float32, nodes x ``num_targets``)."""
    n, width = feat.shape
    z = rng.standard_normal((n, num_targets))
    imprint = rng.standard_normal((num_targets, width)) * LATENT_SCALE
    feat = (feat + z @ imprint).astype(np.float32)
    phase = 2 * np.pi * (community[:, None] / num_communities
                         + np.arange(num_targets)[None, :] / num_targets)
    score = (np.sin(phase) + NEIGHBOUR_SCALE * neighbour_mean(z, src, dst)
             + NOISE * rng.standard_normal((n, num_targets)))
    if target == "regression":
        return feat, score.astype(np.float32)
    # Label l is on for a share of the nodes from 10% to 50%: rare labels too, as in real data.
    share = np.linspace(0.1, 0.5, num_targets) if num_targets > 1 else np.array([0.3])
    cut = np.array([np.quantile(score[:, i], 1 - share[i]) for i in range(num_targets)])
    return feat, (score > cut).astype(np.float32)
