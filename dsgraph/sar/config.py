"""The ``sar`` config section."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


@dataclass
class SarConfig:
    """Full-batch sequential aggregation and rematerialization."""

    mode: Literal["sar", "sa", "one_shot"] = "sar"
