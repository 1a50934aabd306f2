"""``train.mode: dsmpnn``: DS-MPNN on physical fields (Darcy, airfoil), one subdomain per worker.

Every worker draws the same sampled graph per training field (shared seed), trains on its own
subdomain with a halo exchange after every kernel layer (the model contract:
:mod:`dsgraph.models.base`), and gradients are summed over workers, so P workers compute what
one would. Evaluation predicts every test point (``physics.infer_repeats`` random covers).
"""
from __future__ import annotations

from typing import Any

from torch import nn

from dsgraph.config import Config
from dsgraph.errors import ConfigError
from dsgraph.models.base import follows_field_contract
from dsgraph.physics import engine
from dsgraph.physics.fields import load_fields
from dsgraph.physics.sampling import edge_feat_dim
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
        self.steps_per_epoch = len(self.data.train)
        model = trainer.build_model(self.data.in_feats, self.data.out_feats,
                                    edge_feats=edge_feat_dim(self.data.coef_dim))
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
                                  advance=lambda value: trainer.advance(loss=value))
        return {"loss": loss, **timers}

    def evaluate(self, trainer: Trainer, epoch: int) -> dict[str, Any]:
        """``test_rmse`` and ``test_rel_l2`` of full-field predictions of the test fields."""
        ph = self.cfg.physics
        pred = engine.predict(trainer.model, self.data, self.data.test, ph, self.cfg.train.seed,
                              ph.infer_repeats, trainer.rank, trainer.world, trainer.dtype)
        return engine.metrics(pred, self.data.test, self.data.y_norm)

    def summary(self, trainer: Trainer, records: list[dict[str, Any]]) -> dict[str, Any]:
        """The dataset, sampling settings and inference time of the final evaluation."""
        ph = self.cfg.physics
        return {"dataset": self.cfg.dataset.name, "sampled_nodes": ph.sampled_nodes,
                "max_edges": ph.max_edges,
                "infer_s": records[-1].get("eval_s") if records else None}
