"""``task.name`` -> its Task class: every task, imported here so that a reader (or an IDE) goes
from the name to the class."""
from __future__ import annotations

from dsgraph.tasks.base import Task
from dsgraph.tasks.classification import NodeClassification
from dsgraph.tasks.edge import EdgeClassification, EdgeRegression
from dsgraph.tasks.link_prediction import LinkPrediction
from dsgraph.tasks.multilabel import Multilabel
from dsgraph.tasks.node_regression import NodeRegression
from dsgraph.tasks.regression import FieldRegression

TASK_CLASSES: dict[str, type[Task]] = {cls.name: cls for cls in (
    NodeClassification, NodeRegression, Multilabel, LinkPrediction, EdgeClassification,
    EdgeRegression, FieldRegression)}


def task_class(name: str) -> type[Task]:
    """The Task class of ``name`` (a resolved ``Config.task_name``)."""
    return TASK_CLASSES[name]
