"""How autograd Functions declare the storage their saved tensors allow (read by compression)."""
from __future__ import annotations

import contextvars
import enum
from dataclasses import dataclass
from typing import Any, ClassVar, Optional

import torch
from torch.autograd.function import BackwardCFunction


class SaveKind(enum.Enum):
    """What a Function's backward allows for one tensor it saved (what a compressor may do).

    * ``AUTO``: no constraint; the compressor decides (quantized unless it recognises the tensor).
    * ``EXACT``: kept as it is; backward needs the very values forward used.
    * ``NONLINEAR``: backward is non-linear in it, so rounding noise becomes gradient bias: only
      a fine grid is acceptable (``dsgraph.compress``: 8 bits).
    * ``BIT_MASK``: a uint8 tensor already packing one bit per value of a float32 tensor; kept
      as it is and counted as a mask (for a save of another dtype it means ``AUTO``).
    """

    AUTO = "auto"
    EXACT = "exact"
    NONLINEAR = "nonlinear"
    BIT_MASK = "bit_mask"


@dataclass(frozen=True)
class SavePolicy:
    """What one autograd Function allows for the tensors it saves.

    ``saves`` applies to every saved tensor, except those whose last dimension is 1 (a scalar
    per node and head: logits, softmax statistics) when ``per_node`` is set: they get
    ``per_node``.
    """

    saves: SaveKind = SaveKind.AUTO
    per_node: Optional[SaveKind] = None

    def kind(self, t: torch.Tensor) -> SaveKind:
        """The kind for saved tensor ``t``."""
        if self.per_node is not None and t.shape[-1:] == (1,):
            return self.per_node
        return self.saves


# The SavePolicyFunction whose apply is running (autograd packs its saves inside apply).
_running: contextvars.ContextVar[Optional[type]] = contextvars.ContextVar(
    "dsgraph_savepolicy_running", default=None)


class SavePolicyFunction(torch.autograd.Function):
    """An autograd Function declaring, in ``save_policy``, how its saved tensors may be stored.

    Subclass it instead of ``torch.autograd.Function`` and set the class attribute
    ``save_policy``. Autograd runs the saved-tensor pack hooks for ``ctx.save_for_backward``
    after ``forward`` returns but still inside ``apply``; ``apply`` records the running class
    for that call, so a hook finds the policy with :func:`saving_policy`. The policy covers
    every tensor saved while ``apply`` runs: if ``forward`` itself ran ops with grad enabled,
    their saves would be covered too.
    """

    save_policy: ClassVar[SavePolicy] = SavePolicy()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if not isinstance(cls.save_policy, SavePolicy):
            raise TypeError(f"{cls.__qualname__}.save_policy must be a SavePolicy, "
                            f"got {cls.save_policy!r}")

    @classmethod
    def apply(cls, *args: Any, **kwargs: Any) -> Any:
        token = _running.set(cls)
        try:
            return super().apply(*args, **kwargs)
        finally:
            _running.reset(token)


# autograd Functions of other libraries, which cannot subclass SavePolicyFunction, by
# "module:qualname" of the class (matched against the saving Function's class, so nothing is
# imported here). Only saves of their own output are attributed to them: a save while the
# tensor's grad_fn is their backward node and that node is still collecting its saves. Every
# Function listed here must therefore save what its policy is about as its own output.
THIRD_PARTY_POLICIES: dict[str, SavePolicy] = {
    # DGL's edge softmax (dgl.ops.edge_softmax, used by dgl.nn.GATConv) saves its output a; its
    # backward a * (g - sum_j a g) is non-linear in a, so rounding noise becomes bias (a -Var(a) g
    # term): INT2 there cost GAT 5.5 accuracy points on a 20k-node synthetic graph, INT8 matched
    # fp32. DGL's code cannot declare this itself, hence the entry here.
    "dgl.backend.pytorch.sparse:EdgeSoftmax": SavePolicy(saves=SaveKind.NONLINEAR),
}


def policy_of(fn_cls: type) -> Optional[SavePolicy]:
    """The declared policy of autograd Function class ``fn_cls`` (None if it declares none)."""
    if issubclass(fn_cls, SavePolicyFunction):
        return fn_cls.save_policy
    return THIRD_PARTY_POLICIES.get(f"{fn_cls.__module__}:{fn_cls.__qualname__}")


def saving_policy(t: torch.Tensor) -> Optional[SavePolicy]:
    """For a saved-tensor pack hook: the policy covering the save of ``t`` happening now.

    That of the Function saving its own output ``t`` right now (its backward node, ``t.grad_fn``,
    still holds the tensors to save), else that of the running :class:`SavePolicyFunction`;
    None when neither declares one (built-in ops, undeclared Functions).
    """
    node = t.grad_fn
    # A custom Function's backward node holds ``to_save`` only while autograd packs its saves.
    if isinstance(node, BackwardCFunction) and node.to_save is not None:
        policy = policy_of(node._forward_cls)
        if policy is not None:
            return policy
    running = _running.get()
    return None if running is None else running.save_policy
