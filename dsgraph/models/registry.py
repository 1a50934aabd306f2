"""Model registry: built-in names or a user's ``package.module:ClassName``."""
from __future__ import annotations

import importlib
import inspect
from typing import Any

from torch import nn

from dsgraph.config.limits import clip, quote_key, short_repr
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
    check_args(name, cls, args)
    return _construct(cls, in_feats, num_classes, args,
                      f"in_feats={in_feats}, num_classes={num_classes}, **{short_repr(args)}")


def probe_model(name: str, args: dict[str, Any]) -> nn.Module:
    """The model built at toy widths, for launcher-side checks of its structure (layer count,
    output layer, supported layers) before any process starts; the widths do not matter."""
    cls = resolve(name)
    check_args(name, cls, args)
    built = args
    if name in BUILTIN or name in BUILTIN.values():
        built = {**args, **{key: min(args[key], cap) for key, cap in PROBE_WIDTHS.items()
                            if _is_int(args.get(key))}}
    # the error quotes the user's args only: the probe's sizes are none the user set
    return _construct(cls, 4, 2, built, f"**{short_repr(args)}")


def check_args(name: str, cls: type, args: dict[str, Any]) -> None:
    """Each key of ``model.args`` one the constructor takes: a key another model takes (left
    from switching ``model.name``) is named, with the keys this one takes."""
    try:
        params = inspect.signature(cls).parameters
    except (TypeError, ValueError):  # no signature to read: the constructor says what is wrong
        return
    takes_any = any(p.kind is p.VAR_KEYWORD for p in params.values())
    named = [k for k, p in params.items() if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    for key in args:
        if key in ("in_feats", "num_classes"):
            raise ConfigError(f"model.args.{key}: set from the data (the features' width, the "
                              f"task's outputs); expected it absent from model.args")
        if not takes_any and key not in named:
            takes = ", ".join(k for k in named if k not in ("in_feats", "num_classes"))
            raise ConfigError(f"model.args.{quote_key(key)}: model.name {short_repr(name)} "
                              f"({cls.__name__}) takes no argument {short_repr(key)}; expected "
                              f"some of: {takes or 'none'} (remove the keys another model took)")


def _construct(cls: type, in_feats: int, num_classes: int, args: dict[str, Any],
               shown: str) -> nn.Module:
    """``cls(in_feats, num_classes, **args)``; a failure is one line quoting ``shown``."""
    try:
        return cls(in_feats=in_feats, num_classes=num_classes, **args)
    except Exception as exc:  # noqa: BLE001 - a user's constructor may raise anything
        raise ConfigError(f"model.args: {cls.__name__}({shown}) raised "
                          f"{_one_line(exc)}") from None


def _is_int(value: Any) -> bool:
    """An int that is not a bool (a width)."""
    return isinstance(value, int) and not isinstance(value, bool)


def _one_line(exc: BaseException) -> str:
    """``Type: first line of the message`` of a user's exception."""
    lines = str(exc).strip().splitlines()
    # its first line only, and not all of it: a message may echo a user's value whole
    return f"{type(exc).__name__}: {clip(lines[0], 200)}" if lines else type(exc).__name__
