"""Tasks: what a model learns, declared once for every mode.

A task's facts (what it trains on, where it runs, what data it needs: torch-free, read by the
config and the planner) are a line of :data:`dsgraph.config.tasks.TASK_FACTS`; its behaviour
(loss, metrics, outputs) a :class:`Task` subclass in a module of its own, listed in
:data:`dsgraph.tasks.registry.TASK_CLASSES` (docs/tasks.md). ``task.name`` picks one (``auto``:
the mode's first). Names are imported on first use.
"""
from __future__ import annotations

from dsgraph.lazy import lazy_exports

_EXPORTS = {"Task": "base", "task_class": "registry", "TASK_CLASSES": "registry"}
__all__ = list(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
