"""``train.mode: dsmpnn``: DS-MPNN on physical fields (Darcy, airfoil, users' field files), one
subdomain per worker.

Every worker draws the same sampled graph per training field (shared seed), trains on its own
subdomain with a halo exchange after every kernel layer (the model contract:
:mod:`dsgraph.models.base`), and gradients are summed over workers, so P workers compute what
one would; ``physics.batch_fields`` fields make one optimizer step. Evaluation predicts every
test point (``physics.infer_repeats`` random covers), and so does ``python -m predict``; a
transfer split (``physics.test_resolution`` / ``test_points``, ``dataset.transfer_path``) is
evaluated beside it. There is no validation split: every run keeps only its last model.
"""
from __future__ import annotations

import math
import time
from typing import Any, Optional

import numpy as np
from torch import nn

from dsgraph import dist
from dsgraph.config import Config
from dsgraph.errors import ConfigError
from dsgraph.models.base import follows_field_contract
from dsgraph.physics import engine
from dsgraph.physics.fields import FieldSet, load_fields
from dsgraph.physics.sampling import edge_feat_dim
from dsgraph.tasks.regression import FieldTarget
from dsgraph.trainer import Strategy, Trainer


class DsmpnnStrategy(Strategy):
    """Domain-decomposed message passing over sampled radius graphs of physical fields."""

    @staticmethod
    def prepare(cfg: Config) -> None:
        """Launcher side: generate (or find) the dataset cache once, not in every worker."""
        load_fields(cfg, progress=True)

    def setup(self, trainer: Trainer) -> nn.Module:
        """Load the fields and build the model, sized for them."""
        self.data = load_fields(self.cfg, progress=False)
        self.steps_per_epoch = math.ceil(len(self.data.train) / self.cfg.physics.batch_fields)
        model = trainer.build_model(self.data.in_feats, self.task.head_width(self.data.out_feats),
                                    edge_feats=edge_feat_dim(self.data.coef_dim, self.data.pos_dim))
        if not follows_field_contract(model):
            raise ConfigError(f"{self.cfg.source}: model.name: {type(model).__name__}.forward "
                              f"takes no `exchange` argument; a dsmpnn model must follow "
                              f"dsgraph.models.base.FieldModel")
        return model

    def train_epoch(self, trainer: Trainer, epoch: int) -> dict[str, Any]:
        """One pass over the training fields; rank 0's phase timers."""
        timers: dict[str, float] = {}
        loss = engine.train_epoch(trainer.model, trainer.step, self.data, self.cfg.physics,
                                  self.cfg.train.seed, epoch, trainer.rank, trainer.world,
                                  trainer.dtype, timers,
                                  advance=lambda value: trainer.advance(loss=value),
                                  task=self.task)
        return {"loss": loss, **timers}

    def evaluate(self, trainer: Trainer, epoch: int) -> dict[str, Any]:
        """``test_rmse`` and ``test_rel_l2`` of full-field predictions of the test fields (and
        ``transfer_*`` of the transfer fields); ``infer_s``: the test prediction's seconds, the
        median of ``physics.infer_passes`` identical passes (``infer_s_all``: each pass)."""
        ph = self.cfg.physics
        passes = []
        for _ in range(ph.infer_passes):  # seeded covers: every pass predicts the same values
            t0 = time.perf_counter()
            pred = engine.predict(trainer.model, self.data, self.data.test, ph,
                                  self.cfg.train.seed, ph.infer_repeats, trainer.rank,
                                  trainer.world, trainer.dtype)
            passes.append(dist.all_max([time.perf_counter() - t0])[0])
        out = {**self._metrics(pred, self.data.test, "test"),
               "infer_s": float(np.median(passes)), "infer_s_all": passes}
        if self.data.transfer is not None:
            pred = engine.predict(trainer.model, self.data, self.data.transfer, ph,
                                  self.cfg.train.seed, ph.infer_repeats, trainer.rank,
                                  trainer.world, trainer.dtype)
            out.update(self._metrics(pred, self.data.transfer, "transfer"))
        return out

    def _metrics(self, pred: np.ndarray, fs: FieldSet, split: str) -> dict[str, Any]:
        """The task's figures of ``pred`` (every worker holds all of it: no sum over ranks)."""
        return self.task.metrics(self.task.metric_sums(pred, self._target(fs)), split)

    def _target(self, fs: FieldSet) -> FieldTarget:
        """``fs``'s solution fields as the task scores them."""
        return FieldTarget(fs.y, fs.y_raw, self.data.y_norm.decode)

    def predict(self, trainer: Trainer, embeddings: bool) -> Optional[dict[str, Any]]:
        """The test fields as evaluation predicts them, one row per point: ``sample``, ``node``,
        ``pos`` and ``pred`` / ``target`` in physical units (rank 0; other ranks None)."""
        self.task.check_outputs(embeddings, None)
        ph, fs = self.cfg.physics, self.data.test
        pred = engine.predict(trainer.model, self.data, fs, ph, self.cfg.train.seed,
                              ph.infer_repeats, trainer.rank, trainer.world, trainer.dtype)
        if trainer.rank != 0:
            return None
        n, m = pred.shape[:2]
        index = {"sample": np.repeat(np.arange(n), m), "node": np.tile(np.arange(m), n),
                 "pos": fs.pos.reshape(n * m, -1)}
        return self.task.outputs(pred, index, self._target(fs))

    def summary(self, trainer: Trainer, records: list[dict[str, Any]]) -> dict[str, Any]:
        """The dataset, sampling and batching settings, optimizer steps, the final training
        error (root of the last epoch's mean loss: standardized units, sampled graphs) and the
        inference time of the final evaluation."""
        ph = self.cfg.physics
        loss = records[-1].get("loss") if records else None
        return {"dataset": self.cfg.dataset.name, "sampled_nodes": ph.sampled_nodes,
                "max_edges": ph.max_edges, "batch_fields": ph.batch_fields,
                "steps": self.cfg.train.epochs * self.steps_per_epoch,
                "train_rmse": math.sqrt(loss) if loss is not None else None,
                "infer_s": records[-1].get("infer_s", records[-1].get("eval_s"))
                if records else None}
