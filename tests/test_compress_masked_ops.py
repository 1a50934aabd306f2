"""Fused ReLU/dropout with 1-bit masks: same results as torch's ops, exact gradients, seeding."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from dsgraph.compress import native
from dsgraph.compress.masked_ops import MaskedActivations
from dsgraph.savepolicy import SaveKind, saving_policy

pytestmark = pytest.mark.skipif(not native.available(), reason="C kernels unavailable")


def _run(fn, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(output, input gradient for a random upstream gradient) of fn under MaskedActivations."""
    x = x.clone().requires_grad_(True)
    with MaskedActivations(min_numel=0):
        y = fn(x)
    g = torch.randn(y.shape, generator=torch.Generator().manual_seed(9))
    y.backward(g)
    return y.detach(), x.grad


def test_relu_matches_torch_bit_for_bit():
    x = torch.randn(1001, 33)
    x[::7] = 0.0
    y, gx = _run(torch.relu, x)
    x_ref = x.clone().requires_grad_(True)
    torch.relu(x_ref).backward(torch.randn(x.shape, generator=torch.Generator().manual_seed(9)))
    assert torch.equal(y, torch.relu(x)) and torch.equal(gx, x_ref.grad)
    y2, _ = _run(lambda t: F.relu(t), x)
    assert torch.equal(y2, y)


@pytest.mark.parametrize("p", [0.1, 0.5, 0.9])
def test_dropout_keep_rate_scale_and_gradient(p):
    n = 200_000
    x = torch.rand(n) + 0.5  # no zeros: a zero output means dropped
    torch.manual_seed(0)
    y, gx = _run(lambda t: F.dropout(t, p, training=True), x)
    keep = y != 0
    rate = keep.double().mean().item()
    assert abs(rate - (1 - p)) < 5 * ((p * (1 - p) / n) ** 0.5)
    scale = torch.tensor(1.0 / (1.0 - p))
    assert torch.equal(y[keep], x[keep] * scale)
    g = torch.randn(n, generator=torch.Generator().manual_seed(9))
    assert torch.equal(gx, torch.where(keep, g * scale, torch.zeros(())))


def test_dropout_mask_follows_torch_rng():
    x = torch.rand(50_000) + 0.5
    drop = lambda t: F.dropout(t, 0.5, training=True)  # noqa: E731
    torch.manual_seed(1)
    a, _ = _run(drop, x)
    torch.manual_seed(1)
    b, _ = _run(drop, x)
    state = torch.get_rng_state()
    c, _ = _run(drop, x)
    torch.set_rng_state(state)  # what a rematerializing backward does
    d, _ = _run(drop, x)
    assert torch.equal(a, b) and torch.equal(c, d) and not torch.equal(a, c)


def test_other_calls_go_to_torch():
    x = torch.randn(100, 10, requires_grad=True)
    with MaskedActivations(min_numel=0):
        assert F.dropout(x, 0.5, training=False) is x  # eval: identity, as torch
        with torch.no_grad():
            assert torch.equal(torch.relu(x), x.clamp_min(0))
        assert type(torch.relu(x.double()).grad_fn).__name__ == "ReluBackward0"
        assert type(torch.relu(x).grad_fn).__name__ != "ReluBackward0"  # fused
    with MaskedActivations(min_numel=10_000):
        assert type(torch.relu(x).grad_fn).__name__ == "ReluBackward0"  # below min_numel


def test_saved_bits_are_declared_bit_masks():
    """Both ops save one uint8 tensor of packed bits, attributed to them as BIT_MASK (what the
    compression hooks keep as it is) by their declared policy."""
    seen = []

    def pack(t):
        policy = saving_policy(t)
        seen.append((t.dtype, None if policy is None else policy.kind(t)))
        return t

    x = torch.randn(1000, 40, requires_grad=True)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), MaskedActivations(0):
        y = F.dropout(torch.relu(x * 1.0), 0.5, training=True)
        z = y * y  # saves y twice: an undeclared op
    assert seen == [(torch.uint8, SaveKind.BIT_MASK)] * 2 + [(torch.float32, None)] * 2
    z.sum().backward()
    assert x.grad is not None
