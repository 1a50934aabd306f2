"""How a config field is declared: default, documentation and the bounds checked at load time.

Every size-like field has a ceiling as well as a floor: a config may come from anywhere, and a
value no run could use must be refused before anything is allocated for it. The shared ceilings
are named here (the model's widths in ``model.args`` use them too, see
:mod:`dsgraph.config.limits`); each is far beyond what a run of this tool uses.
"""
from __future__ import annotations

from dataclasses import field
from typing import Any, Callable, Optional

MAX_WIDTH = 2 ** 20  # feature and hidden widths: one weight row is then at most 4 MiB
MAX_HEADS = 1024  # attention heads
MAX_LAYERS = 1024  # message-passing layers (fanouts, num_layers)
MAX_NODES = 2 ** 31  # graph nodes, rows: node-pair keys (n * n) still fit an int64
MAX_FANOUT = 10 ** 6  # neighbours sampled per node and layer
MAX_BATCH = 10 ** 8  # nodes per mini-batch
MAX_EPOCHS = 10 ** 6  # epochs (and eval_every)
MAX_PROCESSES = 4096  # partitions, workers: processes of one job
MAX_PER_HOST = 1024  # processes or threads per host
MAX_SAMPLES = 10 ** 6  # generated physics fields
MAX_POINTS = 10 ** 7  # points per field, nodes sampled per field
MAX_REPEATS = 1000  # repetitions of one evaluation
MAX_SEED = 2 ** 32 - 1  # numpy's seeds are 32-bit; torch's and DGL's take these too
MAX_TIMEOUT_S = 10 ** 7  # ~116 days; far below threading.TIMEOUT_MAX, past which waits fail


def opt(default: Any = None, doc: str = "", *, factory: Optional[Callable[[], Any]] = None,
        ge: float | None = None, gt: float | None = None, le: float | None = None,
        lt: float | None = None, cap: float | None = None, item_ge: float | None = None,
        item_cap: float | None = None, max_len: int | None = None) -> Any:
    """A section field: its default (or ``factory`` for lists and mappings), a one-line ``doc``
    (docs/configuration.md's table is generated from it) and numeric bounds: the field's range
    (``ge`` ... ``lt``; ``item_ge`` for every element of a list) and a ceiling against sizes no
    run can use (``cap``, ``item_cap``, ``max_len`` for a list's length; a message names a
    ceiling only when it is passed)."""
    meta = {"doc": doc, "ge": ge, "gt": gt, "le": le, "lt": lt, "cap": cap, "item_ge": item_ge,
            "item_cap": item_cap, "max_len": max_len}
    if factory is not None:
        return field(default_factory=factory, metadata=meta)
    return field(default=default, metadata=meta)
