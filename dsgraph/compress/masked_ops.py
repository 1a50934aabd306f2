"""ReLU and dropout that save a 1-bit mask for backward, swapped in while activations are compressed.

Plain CPU autograd saves a float32 tensor for each: ReLU its output, dropout a float mask of
{0, 1/(1-p)}. The saved-tensor hooks can pack those to 1 bit afterwards, but only by reading the
float tensor once more in forward and writing it out again in backward; on sampled mini-batches
that memory traffic was most of the compression overhead. :class:`MaskedActivations` (a
``TorchFunctionMode``) instead routes ``torch.relu`` / ``F.relu`` / ``F.dropout`` on float32 CPU
tensors that need grad to fused C kernels that write the output and the packed mask in one pass,
and whose backward applies the mask to the gradient in one pass. Unmodified models (``dgl.nn``
layers, ``nn.Dropout``) are covered because they call these functions.

Contract:
* ReLU: same output and gradient as ``torch.relu`` (except NaN inputs, which give 0).
* Dropout: inverted dropout with keep probability 1 - p (to within 2^-32); its mask comes from a
  counter-based hash keyed by one 62-bit draw from torch's default CPU generator per call, so it
  is reproducible under ``torch.manual_seed`` and re-created exactly when a caller restores the
  RNG state to recompute a forward (SAR rematerialization). The mask differs from the one
  ``torch.dropout`` would draw for the same seed.
* Anything else (CUDA, other dtypes, in-place variants, no grad, tensors below ``min_numel``,
  kernels unavailable) goes to the original function.
* Both ops declare their saves (``save_policy``, :mod:`dsgraph.savepolicy`) as ``BIT_MASK``: the
  uint8 tensor they save already packs one bit per float32 value and is kept as it is.
"""
from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

from dsgraph.compress import native
from dsgraph.savepolicy import SaveKind, SavePolicy, SavePolicyFunction

_RELU_FUNCS = (torch.relu, F.relu)
# Every function MaskedActivations may replace (others go straight to torch).
ROUTED_FUNCS = _RELU_FUNCS + (F.dropout,)


class _BitReLU(SavePolicyFunction):
    """max(x, 0), saving only the bits of x > 0."""

    save_policy = SavePolicy(saves=SaveKind.BIT_MASK)

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        out, bits = native.relu_bits(x.contiguous())
        ctx.save_for_backward(bits)
        return out

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        (bits,) = ctx.saved_tensors
        return native.mask_mul(grad, bits, 1.0)


class _BitDropout(SavePolicyFunction):
    """Inverted dropout, saving only the keep bits."""

    save_policy = SavePolicy(saves=SaveKind.BIT_MASK)

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, p: float, seed: int) -> torch.Tensor:
        out, bits = native.dropout_bits(x.contiguous(), p, seed)
        ctx.save_for_backward(bits)
        ctx.scale = 1.0 / (1.0 - p)
        return out

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        (bits,) = ctx.saved_tensors
        return native.mask_mul(grad, bits, ctx.scale), None, None


def _dropout_args(args: tuple, kwargs: dict) -> tuple[torch.Tensor, float, bool, bool]:
    """(input, p, training, inplace) of an ``F.dropout`` call, positional or keyword."""
    names = ("input", "p", "training", "inplace")
    values = dict(zip(names, (None, 0.5, True, False)))
    values.update(zip(names, args))
    values.update(kwargs)
    return values["input"], float(values["p"]), bool(values["training"]), bool(values["inplace"])


class MaskedActivations(TorchFunctionMode):
    """Routes eligible ReLU and dropout calls to the 1-bit-mask kernels (see the module doc)."""

    def __init__(self, min_numel: int) -> None:
        super().__init__()
        self.min_numel = min_numel

    def _eligible(self, x: Any) -> bool:
        return (isinstance(x, torch.Tensor) and x.device.type == "cpu" and x.dtype == torch.float32
                and x.requires_grad and torch.is_grad_enabled() and x.numel() >= self.min_numel
                and native.available())

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in _RELU_FUNCS and args:
            inplace = kwargs.get("inplace", len(args) > 1 and bool(args[1]))
            if not inplace and self._eligible(args[0]):
                return _BitReLU.apply(args[0])
        if func is F.dropout:
            x, p, training, inplace = _dropout_args(args, kwargs)
            if training and not inplace and 0.0 < p < 1.0 and self._eligible(x):
                seed = int(torch.randint(0, 2 ** 62, (1,)).item())
                return _BitDropout.apply(x, p, seed)
        return func(*args, **kwargs)
