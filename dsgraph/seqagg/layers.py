"""The ``dgl.nn`` layers sequential aggregation runs, and the forwards each mode puts on them.

Both modes (full-batch SAR, ``sar``; sampled rematerialization, ``remat``) run the same layers
and refuse the same others with :func:`check`. :data:`FORWARDS` declares, per mode, which layer
class gets which replacement forward; :func:`patch` is the one place that installs them. A
replacement is named by ``"module:function"`` and imported when a model is patched, so this
module imports neither mode (both import it).
"""
from __future__ import annotations

import importlib
import types
from dataclasses import dataclass
from typing import Any, Callable

from dgl.nn import GATConv, GraphConv, SAGEConv
from torch import nn

from dsgraph.errors import UserError

SUPPORTED = "GraphConv, SAGEConv (aggregator mean, gcn or pool), GATConv"
SAGE_AGGREGATORS = ("mean", "gcn", "pool")

# mode -> (layer class, replacement forward as "module:function"), first match wins. A
# replacement is called as ``forward(layer, prev, *args, **kwargs)``, ``prev`` being the
# layer's forward before patching (what it runs on anything that is not its mode's graph).
FORWARDS: dict[str, tuple[tuple[type, str], ...]] = {
    "sar": ((GATConv, "dsgraph.sar.attention:gat_forward"),),
    "remat": ((SAGEConv, "dsgraph.remat.install:remat_forward"),
              (GraphConv, "dsgraph.remat.install:remat_forward"),
              (GATConv, "dsgraph.remat.install:remat_forward")),
}


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


def _resolve(ref: str) -> Callable[..., Any]:
    module, name = ref.split(":")
    return getattr(importlib.import_module(module), name)


def patch(model: nn.Module, mode: str) -> nn.Module:
    """Give every layer of ``model`` that :data:`FORWARDS` names for ``mode`` its replacement
    forward (once: a layer already patched for ``mode`` is left alone). Returns ``model``,
    changed in place."""
    table = [(cls, _resolve(ref)) for cls, ref in FORWARDS[mode]]
    for mod in model.modules():
        forward = next((f for cls, f in table if isinstance(mod, cls)), None)
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
