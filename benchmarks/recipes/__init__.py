"""Benchmark ``recipes``: what ``configs/ogb_example.yaml`` (the README's recipe for an OGB
folder) reaches on an arxiv-layout folder, against the recipe the README gave before it and
against the same model trained sampled.

The folder is generated (:mod:`benchmarks.recipes.fixture`: 40k nodes, directed citations from
newer to older papers, 128 features, 40 classes, arxiv's time split proportions); every row runs
the commands a user runs (``python -m partition``, ``python -m train`` with ``--set
dataset.path=...``) on 2 partitions, one after another, nothing else on the machine. Rows:

- ``recipe``: ``configs/ogb_example.yaml`` as shipped (reverse edges added, 3-layer SAGE 256,
  dropout 0.5, 500 full-batch SAR epochs);
- ``recipe_sampled``: the same model and data trained in ``sampled`` mode, fanouts [5, 10, 15],
  for 60 epochs (about the recipe's training time at 200 epochs);
- ``old_readme``: the README's earlier arxiv commands (``configs/sar.yaml`` with ``dataset.name:
  ogb``: arxiv kept directed, 2-layer SAGE 128, 30 epochs);
- ``old_readme_reverse``: the same with reverse edges added.

``test_acc`` is the test accuracy of the best validation epoch (OGB's convention). One run per
row (the full-batch runs are deterministic); ``--quick``: 3k nodes and a few epochs.
"""
from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from benchmarks.harness import ROOT, Report, View, bars, render_saved, run_cli

COLUMNS = ("recipe", "config", "mode", "reverse_edges", "model", "epochs", "best_epoch",
           "test_acc", "val_acc", "train_s", "epoch_s", "partition_s", "load1")
KEY = ("recipe",)
TITLE = "Recipes on an arxiv-layout folder: the OGB recipe vs the README's earlier one"
# name -> (config, --set options on top of it)
RECIPES = {
    "recipe": ("configs/ogb_example.yaml", ()),
    "recipe_sampled": ("configs/ogb_example.yaml", ("train.mode=sampled",
                                                    "sampled.fanouts=[5, 10, 15]",
                                                    "train.epochs=60")),
    "old_readme": ("configs/sar.yaml", ("dataset.name=ogb",)),
    "old_readme_reverse": ("configs/sar.yaml", ("dataset.name=ogb",
                                                "dataset.add_reverse_edges=true")),
}
NODES, QUICK_NODES = 40_000, 3_000


def _notes(payload: dict) -> list[str]:
    rows = {r["recipe"]: r for r in payload["records"]}
    notes = []
    new, old = rows.get("recipe"), rows.get("old_readme")
    if new and old and new.get("test_acc") is not None and old.get("test_acc") is not None:
        notes.append(f"**The OGB recipe vs the earlier README recipe**: test accuracy "
                     f"{new['test_acc']:.4f} vs {old['test_acc']:.4f}.")
    notes.append(f"Folder: {payload.get('nodes')} nodes (benchmarks/recipes/fixture.py), "
                 f"2 partitions, one run per row.")
    return notes


def _plot(rows: list[dict], fig: Any) -> None:
    ax1, ax2 = fig.subplots(1, 2, sharey=True)
    ys = [-i for i in range(len(rows))]
    bars(ax1, ys, rows, "test_acc", KEY, horizontal=True)
    ax1.set_xlabel("test accuracy (best validation epoch)")
    ax1.set_yticks(ys, [r["recipe"] for r in rows])
    bars(ax2, ys, rows, "train_s", KEY, horizontal=True)
    ax2.set_xlabel("training time, s")


VIEW = View("recipes", TITLE, COLUMNS, KEY, plot=_plot, notes=_notes)


def _timed_cli(module: str, args: list[str]) -> float:
    t0 = time.perf_counter()
    done = run_cli(module, args, {**os.environ, "OMP_NUM_THREADS": "1"}, timeout=7200)
    if done.returncode != 0:
        raise RuntimeError(f"python -m {module} failed: {done.stderr[-2000:]}")
    return time.perf_counter() - t0


def _row(name: str, folder: Path, work: Path, quick: bool) -> dict:
    """Partition and train one recipe on ``folder``; its figures."""
    config, sets = RECIPES[name]
    sets = (*sets, f"dataset.path={folder}", f"partition.out_dir={work / 'parts' / name}",
            *(("train.epochs=5", "train.eval_every=1") if quick else ()))
    flags = [x for s in sets for x in ("--set", s)]
    load1 = os.getloadavg()[0]
    part_s = _timed_cli("partition", ["--config", config, "--force", *flags])
    run = work / "runs" / name
    _timed_cli("train", ["--config", config, "--out", str(run), "--force", *flags])
    summary = json.loads((run / "metrics.json").read_text())
    mode = next((s.split("=", 1)[1] for s in sets if s.startswith("train.mode=")), "sar")
    return {"recipe": name, "config": config, "mode": mode,
            "reverse_edges": any("add_reverse_edges=true" in s for s in sets)
            or config.endswith("ogb_example.yaml"),
            "model": "sage 3x256" if "ogb_example" in config else "sage 2x128",
            "epochs": summary["epochs"], "best_epoch": summary.get("best_epoch"),
            "test_acc": summary.get("test_acc"), "val_acc": summary.get("val_acc"),
            "train_s": summary["train_s"], "epoch_s": summary["train_s"] / summary["epochs"],
            "partition_s": part_s, "load1": load1}


def run(quick: bool) -> Path:
    """Write the folder, run every recipe, write the report."""
    from benchmarks.recipes.fixture import write_arxiv_like
    nodes = QUICK_NODES if quick else NODES
    work = ROOT / "runs" / "bench-recipes" / str(nodes)  # git-ignored
    folder = work / "arxiv"  # named arxiv: `auto` keeps it directed, as OGB's arxiv
    if not (folder / "RELEASE_v1.txt").is_file():
        write_arxiv_like(folder, nodes)
    report = Report(VIEW, quick)
    report.extra["nodes"] = nodes
    for name in RECIPES:
        report.add(_row(name, folder, work, quick))
        report.save(partial=True)
    return report.save()


def render(quick: bool = False) -> Path:
    """Redraw recipes.md and recipes.png from the saved recipes.json."""
    return render_saved(VIEW, quick)
