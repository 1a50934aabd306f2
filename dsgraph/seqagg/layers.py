"""The ``dgl.nn`` layers sequential aggregation runs, and the one way a mode puts its forwards
on them.

Both clients (full-batch SAR, ``sar``; sampled rematerialization, ``remat``) run the same layers
and refuse the same others with :func:`check`. Each declares its own table of (layer class,
replacement forward) and installs it with :func:`patch`; this module names neither.
"""
from __future__ import annotations

import types
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from dgl.nn import GATConv, GraphConv, SAGEConv
from torch import nn

from dsgraph.errors import UserError

SUPPORTED = "GraphConv, SAGEConv (aggregator mean, gcn or pool), GATConv"
SAGE_AGGREGATORS = ("mean", "gcn", "pool")
# A mode's forwards: (layer class, replacement), the first match wins. A replacement is called
# as ``forward(layer, prev, *args, **kwargs)``, ``prev`` being the layer's forward before
# patching (what it runs on anything that is not its mode's graph).
Forwards = Sequence[tuple[type, Callable[..., Any]]]


def is_graph_layer(mod: nn.Module) -> bool:
    """Whether ``mod`` is (or derives from) a ``dgl.nn`` layer that takes a graph."""
    return any(c.__module__.startswith("dgl.nn") and not c.__module__.startswith(
        "dgl.nn.pytorch.utils") for c in type(mod).__mro__)


def supported(mod: nn.Module) -> bool:
    """Whether both modes can run graph layer ``mod`` (by class, SAGEConv by aggregator)."""
    return isinstance(mod, (GraphConv, GATConv)) or (
        isinstance(mod, SAGEConv) and mod._aggre_type in SAGE_AGGREGATORS)


def check(mod: nn.Module, where: str, refusal: str) -> None:
    """Raise a one-line UserError ``"<where> is <class>, which <refusal>..."`` if graph layer
    ``mod`` is not :func:`supported`."""
    if supported(mod):
        return
    cls = type(mod)
    extra = f" (aggregator {mod._aggre_type!r})" if isinstance(mod, SAGEConv) else ""
    raise UserError(f"{where} is {cls.__module__}.{cls.__name__}, which {refusal}{extra}; "
                    f"supported: {SUPPORTED}")


@dataclass
class _Patch:
    """What :func:`patch` left on a layer: its mode, the replacement and the forward before."""

    mode: str
    forward: Callable[..., Any]
    prev: Callable[..., Any]


def _patched_forward(self: nn.Module, *args: Any, **kwargs: Any) -> Any:
    patch = self._seqagg_patch
    return patch.forward(self, patch.prev, *args, **kwargs)


def patch(model: nn.Module, mode: str, forwards: Forwards) -> nn.Module:
    """Give every layer of ``model`` that ``forwards`` (mode ``mode``'s table) names its
    replacement forward (once: a layer already patched for ``mode`` is left alone; one patched
    for another mode is refused). Returns ``model``, changed in place."""
    for mod in model.modules():
        forward = next((f for cls, f in forwards if isinstance(mod, cls)), None)
        if forward is None:
            continue
        done = getattr(mod, "_seqagg_patch", None)
        if done is not None:
            if done.mode != mode:
                raise ValueError(f"{type(mod).__name__} is already patched for {done.mode!r}")
            continue
        # kept on the layer (not in a closure) so that a deep copy of the model calls its own
        # copy's previous forward
        mod._seqagg_patch = _Patch(mode, forward, mod.forward)
        mod.forward = types.MethodType(_patched_forward, mod)
    return model
