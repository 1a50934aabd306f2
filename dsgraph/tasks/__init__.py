"""Tasks: what a model learns, declared once for every mode (:class:`Task`).

``train.task`` picks one (``auto``: the mode's own, :attr:`ModeSection.TASKS
<dsgraph.config.modes.ModeSection.TASKS>`); a new task is a :class:`Task` subclass and one line
of :data:`TASKS`.
"""
from __future__ import annotations

import importlib

from dsgraph.tasks.base import Task

# train.task -> "module:Class", imported when used (a task may pull in heavy dependencies).
TASKS = {"node_classification": "dsgraph.tasks.classification:NodeClassification",
         "field_regression": "dsgraph.tasks.regression:FieldRegression"}

__all__ = ["TASKS", "Task", "task_class"]


def task_class(name: str) -> type[Task]:
    """The Task class registered as ``name`` (a resolved ``Config.task``)."""
    module, attr = TASKS[name].split(":")
    return getattr(importlib.import_module(module), attr)
