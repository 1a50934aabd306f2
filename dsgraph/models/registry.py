"""Model registry: built-in names or a user's ``package.module:ClassName``."""
from __future__ import annotations

import importlib
from typing import Any

from torch import nn

from dsgraph.config.limits import clip, short_repr
from dsgraph.errors import ConfigError

# Lazy "module:attr" targets so importing the registry imports no model code.
BUILTIN = {
    "sage": "dsgraph.models.gnn:GraphSAGE",
    "gcn": "dsgraph.models.gnn:GCN",
    "gat": "dsgraph.models.gnn:GAT",
    "mlp": "dsgraph.models.gnn:MLP",
    "mpnn": "dsgraph.models.mpnn:KernelMPNN",
    "rgcn": "dsgraph.models.hetero:RGCN",  # heterogeneous graphs (dsgraph.models.hetero)
    "rgat": "dsgraph.models.hetero:RGAT",
}
# The launcher's probe reads a model's structure (layer count, layer types), never its widths:
# a built-in model is probed with its width-like args capped at these, so the probe stays a few
# KiB whatever model.args say (a plug-in's constructor may tie its args together: built as given).
PROBE_WIDTHS = {"hidden": 4, "width": 4, "kernel_hidden": 4, "heads": 2}


def resolve(name: str) -> type:
    """The model class for a registered name or a ``package.module:ClassName`` path."""
    target = BUILTIN.get(name, name)
    if ":" not in target:
        raise ConfigError(f"model.name: expected one of {', '.join(BUILTIN)} or "
                          f"'package.module:ClassName', got {short_repr(name)}")
    mod_name, attr = target.split(":", 1)
    try:
        module = importlib.import_module(mod_name)
    except Exception as exc:  # noqa: BLE001 - a user's module may raise anything on import
        raise ConfigError(f"model.name: importing module {short_repr(mod_name)} failed: "
                          f"{_one_line(exc)}") from None
    cls = getattr(module, attr, None)
    if not (isinstance(cls, type) and issubclass(cls, nn.Module)):
        raise ConfigError(f"model.name: {short_repr(target)} is not a torch.nn.Module class")
    return cls


def build_model(name: str, in_feats: int, num_classes: int, args: dict[str, Any]) -> nn.Module:
    """Instantiate ``name`` as ``cls(in_feats=..., num_classes=..., **args)``."""
    cls = resolve(name)
    try:
        return cls(in_feats=in_feats, num_classes=num_classes, **args)
    except Exception as exc:  # noqa: BLE001 - a user's constructor may raise anything
        raise ConfigError(f"model.args: {cls.__name__}(in_feats={in_feats}, "
                          f"num_classes={num_classes}, **{short_repr(args)}) raised "
                          f"{_one_line(exc)}") from None


def probe_model(name: str, args: dict[str, Any]) -> nn.Module:
    """The model built at toy widths, for launcher-side checks of its structure (layer count,
    output layer, supported layers) before any process starts; the widths do not matter."""
    if name in BUILTIN or name in BUILTIN.values():
        args = {**args, **{key: min(args[key], cap) for key, cap in PROBE_WIDTHS.items()
                           if _is_int(args.get(key))}}
    return build_model(name, 4, 2, args)


def _is_int(value: Any) -> bool:
    """An int that is not a bool (a width)."""
    return isinstance(value, int) and not isinstance(value, bool)


def _one_line(exc: BaseException) -> str:
    """``Type: first line of the message`` of a user's exception."""
    lines = str(exc).strip().splitlines()
    # its first line only, and not all of it: a message may echo a user's value whole
    return f"{type(exc).__name__}: {clip(lines[0], 200)}" if lines else type(exc).__name__
