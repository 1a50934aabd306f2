"""Variance-optimal non-uniform INT2 levels (i-EXACT's clipped-normal model).

After a block is normalised to [0, 3], i-EXACT models its values as N(1.5, s_d^2) where the block
minimum and maximum sit at the 1/d and 1-1/d quantiles of a d-value block. Stochastic rounding
between neighbouring levels l < u has variance (x - l)(u - x); placing the inner levels at
{lo, 3 - lo} with lo > 1 moves them towards the dense centre and lowers the expected variance.
``optimal_lo`` is i-EXACT's fitted rule for the minimiser as a function of the block length d.
"""
from __future__ import annotations

import math

import torch


def optimal_lo(d: int) -> float:
    """Inner INT2 level lo(d) in normalised [0, 3] units for a block of ``d`` values."""
    d = max(int(d), 2)
    return (0.83162565 + 0.02993653 * math.log(116.05528511 * d) + 1.225e-5 * d
            - 0.00171617 * math.sqrt(d))


def int2_levels(d: int) -> tuple[float, float, float, float]:
    """The four normalised levels {0, lo, 3 - lo, 3} for a block of ``d`` values."""
    lo = optimal_lo(d)
    return (0.0, lo, 3.0 - lo, 3.0)


def stochastic_round_levels(s: torch.Tensor, levels: tuple[float, ...], u: torch.Tensor) -> torch.Tensor:
    """Unbiased rounding of ``s`` (in [levels[0], levels[-1]]) to level indices; ``u`` ~ U[0, 1).

    Each value is mapped linearly inside its bin [l_k, l_{k+1}] and rounded up with probability
    (s - l_k) / (l_{k+1} - l_k), so E[levels[code]] = s.
    """
    # Masked sums instead of gathers: no int64 index tensor the size of the activation.
    low = torch.full_like(s, levels[0])
    width = torch.full_like(s, levels[1] - levels[0])
    idx = torch.zeros(s.shape, dtype=torch.uint8, device=s.device)
    for k in range(1, len(levels) - 1):
        above = s >= levels[k]
        idx += above
        low.add_(above, alpha=levels[k] - levels[k - 1])
        width.add_(above, alpha=(levels[k + 1] - levels[k]) - (levels[k] - levels[k - 1]))
    p = torch.sub(s, low).div_(width)
    return idx.add_(u < p)
