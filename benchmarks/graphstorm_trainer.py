"""GraphStorm 0.4.0 node-classification trainer: the GraphStorm peer of the scale benchmark.

It trains GraphStorm's built-in node-classification model (``model_encoder_type: sage``: an
input projection to ``--hidden``, ``--num-layers`` GraphStorm SAGE layers with GraphStorm's fixed
``pool`` aggregator, a linear decoder; Adam) with GraphStorm's own data, loaders, trainer
(``GSgnnNodePredictionTrainer.fit``, all epochs in one call) and evaluator: the steps of
``graphstorm.run.gsgnn_np`` without its ssh launcher. It reads the partitions of stock
``dgl.distributed.partition_graph`` of a homogeneous graph (node type ``_N``; ndata ``feat``,
``label``, ``train_mask``, ``val_mask``, ``test_mask``). GraphStorm needs packages dsgraph's venv
lacks (transformers 4.36.0, ogb, h5py), so its processes run on the interpreter of a venv
holding graphstorm==0.4.0 on the same torch 2.2.1 / dgl 2.1.0 (``make graphstorm-venv``):
``dsgraph.cluster.dgl_job.run_dgl_job(run_dir, part_config, cluster,
"benchmarks.graphstorm_trainer", args, stock=True)`` with ``cluster.python`` naming it starts
the DGL servers and these trainers (``python -m benchmarks.graphstorm_trainer --run-dir RUN
...``) with DGL's environment and torch.distributed's env:// variables.

``--eval sampled`` (the default) is GraphStorm's mini-batch inference of the validation and test
nodes with ``--fanouts``; ``--eval layerwise`` is its full-graph inference, which sends
GraphStorm's own RPC request (``graphstorm.distributed.FLUSH_DATA``) to the servers: they must
have imported ``graphstorm.distributed`` (GraphStorm's launcher runs its servers from the
training script), or a server fails with ``KeyError: 1000001``.

As ``stock_dgl_trainer`` does, rank 0 writes ``stock_metrics.jsonl`` (one line per epoch: seeds
per second over the slowest trainer's loop, loop time, loss, training accuracy, batches, summed
over trainers; read by a forward hook on the model's loss function and a timed training loader)
and ``stock_summary.json``. GraphStorm trims every trainer's training set to the same size
(``trim_data``), so an epoch trains on up to ``trainers - 1`` fewer seeds than the stock one.
"""
from __future__ import annotations

import os

os.environ.setdefault("OUTDATED_IGNORE", "1")  # ogb (imported by dgl here) checks PyPI at exit

import argparse  # noqa: E402
import json  # noqa: E402
import logging  # noqa: E402
import statistics  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import dgl  # noqa: E402
import graphstorm as gs  # noqa: E402
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import yaml  # noqa: E402
from graphstorm.config import GSConfig, get_argument_parser  # noqa: E402
from graphstorm.dataloading import GSgnnData, GSgnnNodeDataLoader  # noqa: E402
from graphstorm.eval import GSgnnClassificationEvaluator  # noqa: E402
from graphstorm.trainer import GSgnnNodePredictionTrainer  # noqa: E402
from graphstorm.utils import get_device  # noqa: E402

from benchmarks.stock_dgl_common import (EpochTally, add_training_args,  # noqa: E402
                                         append_metrics, count_classes, disconnect,
                                         write_json_atomic)

NTYPE = dgl.distributed.constants.DEFAULT_NTYPE  # "_N": the node type of a homogeneous graph


def parse_args() -> argparse.Namespace:
    """Command line of the trainer (the stock trainer's options)."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_training_args(p)
    p.add_argument("--batch-size", type=int, default=1024)
    p.add_argument("--eval", choices=("sampled", "layerwise"), default="sampled",
                   help="sampled: mini-batch inference with --fanouts; layerwise: full-graph "
                        "inference (needs servers that imported graphstorm.distributed)")
    p.add_argument("--num-classes", type=int, default=0, help="0: max label + 1")
    return p.parse_args()


def gs_config(args: argparse.Namespace, run_dir: Path, num_classes: int) -> GSConfig:
    """GraphStorm's config of this run, through its YAML format and argument parser."""
    full = ",".join(["-1"] * args.num_layers)
    gsf = {
        "basic": {"model_encoder_type": "sage", "backend": "gloo", "verbose": False},
        "gnn": {"fanout": args.fanouts, "num_layers": args.num_layers,
                "hidden_size": args.hidden, "use_mini_batch_infer": args.eval == "sampled",
                "eval_fanout": args.fanouts if args.eval == "sampled" else full},
        "input": {"node_feat_name": ["feat"]},
        "hyperparam": {"dropout": args.dropout, "lr": args.lr, "num_epochs": args.epochs,
                       "batch_size": args.batch_size, "eval_batch_size": args.eval_batch_size,
                       "wd_l2norm": 0.0},
        "node_classification": {"target_ntype": NTYPE, "label_field": "label",
                                "multilabel": False, "num_classes": num_classes,
                                "eval_metric": ["accuracy"]},
    }
    path = run_dir / f"graphstorm_rank{dist.get_rank()}.yaml"
    path.write_text(yaml.safe_dump({"version": 1.0, "gsf": gsf}))
    cli = get_argument_parser().parse_args(
        ["--cf", str(path), "--ip-config", os.environ["DGL_IP_CONFIG"],
         "--part-config", os.environ["DGL_CONF_PATH"], "--logging-level", "warning"])
    config = GSConfig(cli)
    config.verify_arguments(True)
    return config


class EpochLoader(GSgnnNodeDataLoader):
    """GraphStorm's training loader that also seeds each epoch as the stock trainer does, times
    it (start of iteration to every trainer's last batch) and has rank 0 write its record."""

    def __init__(self, *a: Any, args: argparse.Namespace, metrics: Path, **kw: Any) -> None:
        super().__init__(*a, **kw)
        self.args, self.metrics = args, metrics
        self.epoch, self.rates, self.tally = 0, [], EpochTally()

    def count(self, module: Any, inputs: tuple, loss: torch.Tensor) -> None:
        """Forward hook on the model's loss function: count one training batch from its
        (logits, labels) and loss."""
        self.tally.count(loss, inputs[0], inputs[1].long())

    def __iter__(self) -> "EpochLoader":
        """Start an epoch: seed shuffle and sampling, reset the tally, start the clock."""
        self.epoch += 1
        epoch_seed = self.args.seed * 1000 + dist.get_rank() + self.epoch
        torch.manual_seed(epoch_seed)  # the loader's shuffle
        dgl.seed(epoch_seed)  # neighbour sampling
        self.tally = EpochTally()  # its clock starts now
        return super().__iter__()

    def __next__(self) -> Any:
        """The next mini-batch; after the last, the epoch's record (collective)."""
        try:
            return super().__next__()
        except StopIteration:
            self.end_epoch()
            raise

    def end_epoch(self) -> None:
        """Combine the epoch's clock and tally over the trainers; rank 0 writes the record."""
        rec = {"epoch": self.epoch, **self.tally.record()}
        self.rates.append(rec["samples_per_s"])
        if dist.get_rank() == 0:
            append_metrics(self.metrics, rec)
            print(f"graphstorm epoch {self.epoch}: {rec['samples_per_s']:.0f} seeds/s, "
                  f"loss {rec['loss']:.4f}, train_acc {rec['train_acc']:.4f}", flush=True)


def main() -> None:
    """Connect, train ``--epochs`` epochs with GraphStorm, evaluate, write the metrics files."""
    args = parse_args()
    torch.set_num_threads(1)
    logging.getLogger("dgl-distributed-socket").setLevel(logging.ERROR)
    if args.gloo_ifname:
        os.environ["GLOO_SOCKET_IFNAME"] = args.gloo_ifname
    run_dir, part_config = Path(args.run_dir), os.environ["DGL_CONF_PATH"]
    gs.initialize(ip_config=os.environ["DGL_IP_CONFIG"], backend="gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    data = GSgnnData(part_config, node_feat_field="feat")
    g = data.g
    meta = json.loads(Path(part_config).read_text())
    num_classes = args.num_classes or int(meta.get("num_classes", 0) or 0) \
        or count_classes(g.ndata["label"], g.num_nodes(), rank, world)
    config = gs_config(args, run_dir, num_classes)

    torch.manual_seed(args.seed)
    model = gs.create_builtin_node_gnn_model(g, config, train_task=True)
    trainer = GSgnnNodePredictionTrainer(model, topk_model_to_save=config.topk_model_to_save)
    trainer.setup_device(device=get_device())

    metrics = run_dir / "stock_metrics.jsonl"
    if rank == 0:
        metrics.write_text("")
    loader = EpochLoader(data, data.get_node_train_set(NTYPE), fanout=config.fanout,
                         batch_size=config.batch_size, train_task=True,
                         node_feats=config.node_feat_name, label_field=config.label_field,
                         args=args, metrics=metrics)
    model.loss_func.register_forward_hook(loader.count)
    val_loader, test_loader = (
        GSgnnNodeDataLoader(data, idxs, fanout=config.eval_fanout if config.use_mini_batch_infer
                            else [], batch_size=config.eval_batch_size, train_task=False,
                            node_feats=config.node_feat_name, label_field=config.label_field)
        for idxs in (data.get_node_val_set(NTYPE), data.get_node_test_set(NTYPE)))
    model.prepare_input_encoder(data)
    trainer.fit(train_loader=loader, num_epochs=args.epochs, use_mini_batch_infer=True)
    rate = statistics.median(loader.rates[1:] or loader.rates) if loader.rates else 0.0

    evaluator = GSgnnClassificationEvaluator(config.eval_frequency, ["accuracy"], False)
    trainer.setup_evaluator(evaluator)
    trainer.eval(model, val_loader, test_loader, config.use_mini_batch_infer, 0,
                 return_proba=False)
    acc = {f"{k}_acc": float(s["accuracy"]) for k, s in
           (("val", evaluator.best_val_score), ("test", evaluator.best_test_score))}
    if rank == 0:
        summary = {**acc, "eval": args.eval, "samples_per_s": rate, "epochs": args.epochs,
                   "num_parts": int(g.get_partition_book().num_partitions()), "trainers": world}
        write_json_atomic(run_dir / "stock_summary.json", summary)
        print(f"graphstorm test_acc {acc['test_acc']:.4f} ({args.eval} evaluation)", flush=True)
    disconnect()


if __name__ == "__main__":
    main()
