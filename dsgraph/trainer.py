"""The one training loop every mode runs: set-up, epochs, evaluation, checkpoints, metrics, console.

A mode is a :class:`Strategy` (how to join its runtime, load this rank's data and build the
model, train one epoch, evaluate, what its summary adds); the :class:`Trainer` does the rest the
same way for all: process group, seeding, optimizer, learning-rate schedule, gradient sync and
clipping, resume (model, optimizer, epoch, every rank's RNG), ``metrics.jsonl`` /
``metrics.json``, a progress bar and one line per epoch on rank 0. :class:`Hook` objects observe
the run (benchmarks measure through them).
"""
from __future__ import annotations

import abc
import math
import time
from pathlib import Path
from typing import Any, Iterable, Optional, Sequence

import torch
from torch import nn
from tqdm import tqdm

from dsgraph import checkpoint, dist
from dsgraph.cluster.launch import run_workers
from dsgraph.cluster.worker import init_process_group
from dsgraph.config import Config
from dsgraph.errors import UserError
from dsgraph.memplan import MemoryPlan
from dsgraph.metrics import MetricsLog, format_metric
from dsgraph.models.registry import build_model
from dsgraph.native import kernels_available
from dsgraph.phases import phase
from dsgraph.procstats import peak_rss_mb, rss_mb
from dsgraph.runs import RunFolder
from dsgraph.tasks import Task, task_class

# Record keys of every task's per-epoch console line, around the task's own (its facts').
_LINE_HEAD, _LINE_TAIL = ("loss",), ("samples_per_s", "epoch_s")


class Strategy(abc.ABC):
    """What a training mode supplies; the Trainer calls these hooks in this order.

    The launcher side (:meth:`prepare`, :meth:`launch`) is static: ``python -m train`` and
    ``python -m predict`` ask the mode's strategy class, never test the mode's name. The task
    (loss, metrics, outputs) is ``self.task``, chosen by ``task.name``.
    """

    steps_per_epoch = 1  # progress-bar units per epoch (set in :meth:`setup` if data-dependent)
    sync_grads = True  # False when the model wrapper (DDP) sums gradients itself

    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg
        self.task: Task = task_class(cfg.task_name)(cfg.task)

    @staticmethod
    def prepare(cfg: Config) -> Any:
        """Launcher side, before any process starts: check what only this mode needs (files,
        model layers) or build it once (a dataset cache); :meth:`launch` gets the result."""
        return None

    @staticmethod
    def plan_memory(cfg: Config) -> MemoryPlan:
        """Launcher side: each process's planned peak memory (this mode's memory model)."""
        return MemoryPlan([], [f"train.mode {cfg.train.mode!r}: not planned"])

    @staticmethod
    def launch(cfg: Config, job_dir: Path, prepared: Any, worker: str, args: Sequence[str],
               name: str = "worker") -> dict[str, float]:
        """Launcher side: run every process of the job (``python -m worker --run-dir JOB
        *args``), supervised; return each process's peak RSS in MiB. Default: a gloo group of
        ``cfg.num_workers`` ranks."""
        return run_workers(job_dir, cfg.cluster, worker, cfg.num_workers, args,
                           cfg.train.timeout_s, name=name)

    def connect(self, trainer: "Trainer") -> None:
        """Join the mode's own runtime before the process group exists (default: nothing)."""

    @abc.abstractmethod
    def setup(self, trainer: "Trainer") -> nn.Module:
        """Load this rank's data and return the model (built with :meth:`Trainer.build_model`)."""

    def forward_module(self, model: nn.Module) -> nn.Module:
        """The module training calls (a DDP wrapper, say); the Trainer checkpoints ``model``."""
        return model

    @abc.abstractmethod
    def train_epoch(self, trainer: "Trainer", epoch: int) -> dict[str, Any]:
        """Train one epoch through :meth:`Trainer.step`; return its metrics, summed over ranks."""

    def evaluate(self, trainer: "Trainer", epoch: int) -> dict[str, Any]:
        """Evaluation metrics over all ranks (every rank takes part)."""
        return {}

    def summary(self, trainer: "Trainer", records: list[dict[str, Any]]) -> dict[str, Any]:
        """Mode-specific keys of metrics.json (default: none)."""
        return {}

    def predict(self, trainer: "Trainer", embeddings: bool) -> Optional[dict[str, Any]]:
        """Outputs of the loaded model over the whole data, for ``python -m predict``.

        Every rank takes part; rank 0 returns arrays of equal length (graph modes: ``node_id``
        (original id), the task's columns (:meth:`Task.outputs`) and, with ``embeddings``,
        ``embedding``), other ranks None.
        """
        raise UserError(f"train.mode: {self.cfg.train.mode!r} runs cannot export predictions")

    def close(self, trainer: "Trainer") -> None:
        """Leave the mode's runtime once training is done (default: nothing)."""


class Hook:
    """Observes a run on every rank; the default methods do nothing."""

    def on_ready(self, trainer: "Trainer") -> None:
        """Data, model and optimizer are loaded; no epoch has run yet."""

    def on_epoch(self, trainer: "Trainer", record: dict[str, Any]) -> None:
        """An epoch ended; ``record`` may be extended before it is written."""

    def on_end(self, trainer: "Trainer", summary: dict[str, Any]) -> None:
        """Training ended; ``summary`` may be extended before rank 0 writes it."""


def epoch_lr(base: float, epoch: int, epochs: int, schedule: str) -> float:
    """Learning rate of 1-based ``epoch``: constant, or cosine decay from ``base`` towards 0.

    A function of the epoch alone, so a resumed run uses the same rates.
    """
    if schedule == "constant":
        return base
    return base * 0.5 * (1.0 + math.cos(math.pi * (epoch - 1) / epochs))


class Trainer:
    """Runs one rank of a training job (see the module docstring)."""

    def __init__(self, cfg: Config, run_dir: str | Path, strategy: Strategy, resume: bool = False,
                 hooks: Iterable[Hook] = ()) -> None:
        self.cfg, self.strategy = cfg, strategy
        self.run_folder = RunFolder(run_dir)
        self.resume, self.hooks = resume, list(hooks)
        self.dtype = getattr(torch, cfg.train.dtype)
        self.rank, self.world = 0, 1
        self.model: Optional[nn.Module] = None
        self.optimizer: Optional[torch.optim.Optimizer] = None
        self.loaded_rss_mb = 0.0
        self._bar: Any = None

    @property
    def run_dir(self) -> Path:
        """The run folder's path."""
        return self.run_folder.path

    # --- what strategies call -------------------------------------------------------------

    def build_model(self, in_feats: int, out_feats: int, **extra: Any) -> nn.Module:
        """The configured model, in the run's dtype; ``extra`` adds constructor arguments the
        mode derives from its data (a physics model's edge feature width, say)."""
        args = {**self.cfg.model.args, **extra}
        return build_model(self.cfg.model.name, in_feats, out_feats, args).to(self.dtype)

    def step(self, loss: torch.Tensor, timers: Optional[dict[str, float]] = None) -> None:
        """Backward, sum gradients over ranks, clip (``train.grad_clip``), optimizer step.

        ``timers`` (if given) accumulates ``backward_s``, ``allreduce_s`` (with the clipping)
        and ``step_s``.
        """
        assert self.model is not None and self.optimizer is not None
        t0 = time.perf_counter()
        with phase("backward"):
            self.optimizer.zero_grad(set_to_none=True)
            loss.backward()
        t1 = time.perf_counter()
        with phase("allreduce"):
            params = self.model.parameters()
            if self.strategy.sync_grads:
                dist.allreduce_grads(params)
            if self.cfg.train.grad_clip > 0:  # after the sum: every rank clips the same gradient
                torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.cfg.train.grad_clip)
        t2 = time.perf_counter()
        with phase("optimizer"):
            self.optimizer.step()
        if timers is not None:
            for key, dt in (("backward_s", t1 - t0), ("allreduce_s", t2 - t1),
                            ("step_s", time.perf_counter() - t2)):
                timers[key] = timers.get(key, 0.0) + dt

    def advance(self, steps: int = 1, **status: Any) -> None:
        """Move rank 0's progress bar by ``steps`` and show ``status`` beside it."""
        if self._bar is not None:
            self._bar.update(steps)
            if status:
                self._bar.set_postfix({k: format_metric(k, v) for k, v in status.items()},
                                      refresh=False)

    # --- the loop ---------------------------------------------------------------------------

    def run(self) -> dict[str, Any]:
        """Train ``train.epochs`` epochs (from the checkpoint when resuming); return the summary."""
        t_start = time.perf_counter()
        cfg, strategy = self.cfg, self.strategy
        self.open()
        assert self.model is not None
        forward = strategy.forward_module(self.model)
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=cfg.train.lr,
                                          weight_decay=cfg.train.weight_decay)
        # Training streams differ per rank; a resumed run then restores them.
        checkpoint.seed_everything(checkpoint.epoch_seed(cfg.train.seed, 0, self.rank))
        start, resumed = (self.run_folder.restore(self.model, self.optimizer, self.rank)
                          if self.resume else (1, None))
        log = None
        if self.rank == 0:
            self.run_folder.check_space(self.model)  # refuse now, not at the first checkpoint
            log = MetricsLog(self.run_dir, resume_epoch=start - 1, resume_record=resumed)
        for hook in self.hooks:  # before the RSS reading: a hook may page in or reset memory
            hook.on_ready(self)
        self.loaded_rss_mb = rss_mb()
        self._open_bar(start)
        last_eval: dict[str, Any] = {}
        for epoch in range(start, cfg.train.epochs + 1):
            lr = epoch_lr(cfg.train.lr, epoch, cfg.train.epochs, cfg.train.lr_schedule)
            for group in self.optimizer.param_groups:
                group["lr"] = lr
            forward.train()
            t0 = time.perf_counter()
            record = {"epoch": epoch, **strategy.train_epoch(self, epoch), "lr": lr}
            record["epoch_s"] = dist.all_max([time.perf_counter() - t0])[0]
            if self._eval_due(epoch):
                t1 = time.perf_counter()
                last_eval = self._evaluate(forward, epoch)
                record.update(last_eval, eval_s=dist.all_max([time.perf_counter() - t1])[0])
            rss = dist.gather_values(peak_rss_mb())
            record.update(peak_rss_mb=max(rss), peak_rss_mb_per_worker=rss)
            for hook in self.hooks:
                hook.on_epoch(self, record)
            rng = dist.gather_values(checkpoint.rng_state())
            if log is not None:
                best = self._is_best(log.records(), record)
                log.epoch(record)
                self.run_folder.save(epoch, self.model, self.optimizer, rng,
                                     self.run_folder.fingerprint(cfg), best=best, record=record)
                keys = (*_LINE_HEAD, *strategy.task.facts.line_keys, *_LINE_TAIL)
                self._print(f"epoch {epoch}: " + ", ".join(
                    f"{k} {format_metric(k, record[k])}" for k in keys if k in record))
        if self._bar is not None:
            self._bar.close()
        if start > cfg.train.epochs:  # resumed a finished run: report its metrics again
            last_eval = self._evaluate(forward, cfg.train.epochs)
        summary = self._summary(log, last_eval, t_start)
        for hook in self.hooks:
            hook.on_end(self, summary)
        if log is not None:
            log.summary(summary)
        self.finish()
        return summary

    def open(self) -> nn.Module:
        """Join the job's runtime and process group, seed, load this rank's data and build the
        model, identical on every rank (the start of :meth:`run`; ``python -m predict`` calls
        it, loads weights and asks the strategy for predictions)."""
        self.strategy.connect(self)
        self.rank, self.world = init_process_group(self.cfg.train.collective_timeout_s)
        checkpoint.seed_everything(self.cfg.train.seed)  # the same initial model everywhere
        self.model = self.strategy.setup(self)
        dist.broadcast_module(self.model)
        return self.model

    def finish(self) -> None:
        """Wait for every rank, then leave the mode's runtime."""
        dist.barrier()
        self.strategy.close(self)

    def _is_best(self, earlier: list[dict[str, Any]], record: dict[str, Any]) -> bool:
        """Whether ``record`` beats every earlier epoch on the selection metric (higher or
        lower, as the task says)."""
        task = self.strategy.task
        key = task.selection_metric
        if key is None or record.get(key) is None:
            return False
        return all(r.get(key) is None or task.better(record[key], r[key]) for r in earlier)

    def _evaluate(self, forward: nn.Module, epoch: int) -> dict[str, Any]:
        """The strategy's evaluation, in eval mode and without autograd."""
        forward.eval()
        with torch.no_grad():
            return self.strategy.evaluate(self, epoch)

    def _eval_due(self, epoch: int) -> bool:
        every = self.cfg.train.eval_every
        return epoch == self.cfg.train.epochs or (every > 0 and epoch % every == 0)

    def _summary(self, log: Optional[MetricsLog], last_eval: dict[str, Any],
                 t_start: float) -> dict[str, Any]:
        """metrics.json: the same keys in every mode where meanings coincide, then the mode's."""
        # per rank: memory, and whether its C kernels were built (not the slower torch path)
        ranks = dist.gather_values((peak_rss_mb(), self.loaded_rss_mb, kernels_available()))
        peaks = [peak for peak, _, _ in ranks]
        grown = [peak - loaded for peak, loaded, _ in ranks]
        records = log.records() if log is not None else []
        summary = {"mode": self.cfg.train.mode, "epochs": self.cfg.train.epochs,
                   **last_eval, **self._best_eval(records, last_eval),
                   "final_loss": records[-1].get("loss") if records else None,
                   "train_s": sum(r.get("epoch_s", 0.0) for r in records),
                   "wall_s": time.perf_counter() - t_start,
                   "peak_rss_mb": max(peaks), "peak_rss_mb_per_worker": peaks,
                   "train_mem_mb": max(grown), "num_workers": self.world,
                   "native_kernels": all(native for _, _, native in ranks)}
        summary.update(self.strategy.summary(self, records))
        return summary

    def _best_eval(self, records: list[dict[str, Any]],
                   last_eval: dict[str, Any]) -> dict[str, Any]:
        """The evaluation figures of the best epoch (the model ``best.pt`` keeps), its number,
        and the last epoch's figures as ``last_*``; empty without a selection metric."""
        task = self.strategy.task
        key = task.selection_metric
        scored = [r for r in records if key is not None and r.get(key) is not None]
        if not scored:
            return {}
        best = scored[0]
        for r in scored[1:]:  # strictly better only: the first of equal scores stays
            if task.better(r[key], best[key]):
                best = r
        return {**{k: best[k] for k in last_eval if k in best}, "best_epoch": best["epoch"],
                **{f"last_{k}": v for k, v in last_eval.items()}}

    def _open_bar(self, start: int) -> None:
        if self.rank != 0:
            return
        epochs = max(0, self.cfg.train.epochs - start + 1)
        self._bar = tqdm(total=epochs * self.strategy.steps_per_epoch, desc="train",
                         unit="step", mininterval=2, ncols=100, dynamic_ncols=False)

    def _print(self, line: str) -> None:
        if self._bar is not None:
            self._bar.write(line)
        else:
            print(line, flush=True)
