"""The measuring hook of the ``sampled_remat`` benchmark, run inside every trainer."""
from __future__ import annotations

import time
from typing import Any, Optional

from benchmarks import memory
from dsgraph import dist
from dsgraph.trainer import Hook, Trainer


class BatchMeter(Hook):
    """Peak RSS during training batches after a warm-up batch, and time per batch (see the
    package docstring); ``on_end`` adds ``bench_trainers`` (one dict per rank) to metrics.json."""

    def __init__(self, warmup: int = 1) -> None:
        self.warmup, self.steps = warmup, 0
        self.ready = self.span = memory.Mark(0.0, 0.0)  # before the first batch; this epoch's
        self.rss_warm = 0.0
        self.mark: Optional[float] = None
        self.batch_s: list[float] = []
        self.epoch_act: list[float] = []  # per epoch: peak of its measured batches - rss_before
        self.epoch_growth: list[float] = []  # per epoch: that peak - RSS at its reset
        self.measured = 0  # measured batches in the current epoch

    def on_ready(self, trainer: Trainer) -> None:
        # library code first run in a batch is not activation memory
        self.ready = self.span = memory.mark(page_in=True, reset=False)
        step, strategy = trainer.step, trainer.strategy
        train_epoch = strategy.train_epoch

        def measured_step(loss, timers=None):
            step(loss, timers)
            self._after_step()

        def measured_epoch(tr, epoch):
            if self.warmed:
                self.span = memory.mark()
            self.mark, self.measured = None, 0  # the loader's start is not a batch
            try:
                return train_epoch(tr, epoch)
            finally:
                if self.measured:
                    self.epoch_act.append(self.ready.peak_growth_mb())
                    self.epoch_growth.append(self.span.peak_growth_mb())

        trainer.step = measured_step  # type: ignore[method-assign]
        # evaluation and checkpointing run after the epoch's peak is read: they never count
        strategy.train_epoch = measured_epoch  # type: ignore[method-assign]

    @property
    def warmed(self) -> bool:
        """Whether the warm-up batches are done (the peak is being measured)."""
        return self.steps >= self.warmup

    def _after_step(self) -> None:
        now = time.perf_counter()
        self.steps += 1
        if self.steps == self.warmup:
            self.span = memory.mark()
            self.rss_warm = self.span.rss_mb
        elif self.warmed:
            self.measured += 1
            if self.mark is not None:
                self.batch_s.append(now - self.mark)
        self.mark = now

    def on_end(self, trainer: Trainer, summary: dict[str, Any]) -> None:
        summary["bench_trainers"] = dist.gather_values({
            "rss_before_mb": self.ready.rss_mb, "rss_warm_mb": self.rss_warm,
            "epoch_act_mb": self.epoch_act, "epoch_growth_mb": self.epoch_growth,
            "steps": self.steps, "batch_s": self.batch_s,
            "rss_file_growth_mb": self.ready.file_growth_mb()})


def measure() -> Hook:
    """``--hook benchmarks.sampled_remat.meter:measure``: the per-batch memory and time
    measurement."""
    return BatchMeter()
