"""Packages whose public names are imported on first use (PEP 562), so importing the package
loads no heavy dependency until a name that needs one is asked for."""
from __future__ import annotations

import importlib
from typing import Any, Callable


def lazy_exports(package: str, exports: dict[str, str]
                 ) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``__getattr__`` and ``__dir__`` for ``package``: each name in ``exports`` comes from the
    submodule it maps to, imported when the name is first read."""

    def getattr_(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(f"{package}.{module}"), name)

    def dir_() -> list[str]:
        names = vars(importlib.import_module(package))
        return sorted({*names, *exports})

    return getattr_, dir_
