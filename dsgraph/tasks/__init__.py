"""Tasks: what a model learns, declared once for every mode (:class:`Task`).

``task.name`` picks one (``auto``: the mode's first, :attr:`ModeSection.TASKS
<dsgraph.config.modes.ModeSection.TASKS>`); a new task is a :class:`Task` subclass in a module
of its own and one line of :data:`TASKS` (docs/tasks.md).
"""
from __future__ import annotations

import importlib

from dsgraph.tasks.base import Task

# task.name -> "module:Class", imported when used (a task may pull in heavy dependencies).
TASKS = {"node_classification": "dsgraph.tasks.classification:NodeClassification",
         "node_regression": "dsgraph.tasks.node_regression:NodeRegression",
         "multilabel": "dsgraph.tasks.multilabel:Multilabel",
         "link_prediction": "dsgraph.tasks.link_prediction:LinkPrediction",
         "field_regression": "dsgraph.tasks.regression:FieldRegression",
         "edge_classification": "dsgraph.tasks.edge:EdgeClassification",
         "edge_regression": "dsgraph.tasks.edge:EdgeRegression"}

__all__ = ["TASKS", "Task", "task_class"]


def task_class(name: str) -> type[Task]:
    """The Task class registered as ``name`` (a resolved ``Config.task_name``)."""
    module, attr = TASKS[name].split(":")
    return getattr(importlib.import_module(module), attr)
