"""Sampled training with rematerialization: per-trainer peak activation memory, time per batch, accuracy.

Settings: fanouts [10, 25], [15, 10, 5] and [25, 25] (one layer per fanout), feature width 128
and 512, hidden 256 (GAT: 4 heads of 64), GraphSAGE (mean) and GAT; variants ``stock`` (plain
sampled training), ``remat`` (``sampled.rematerialize``: the first block's sources aggregated one
owning partition at a time, in chunks of ``sar.chunk_rows`` rows, rebuilt in backward; for GAT
every layer but the output layer, ``sampled.remat_layers``, see :func:`remat_layers`) and
``remat_int2`` (the same plus ``compression.enabled``: INT2 saves inside each group's backward).

Every setting runs real ``train.mode: sampled`` jobs (``train.__main__.launch``: 2 METIS
partitions on this host, 2 DistGraph servers, 2 trainers), fresh processes per job, two kinds
per repeat, each trainer with this module's :func:`measure` hook, which wraps the trainer's step
and the strategy's epoch and evaluation:
- a **memory job** (``mem_epochs`` epochs) with allocations >= 64 KiB mmap-served in every
  process (``MMAP_ENV``, as in the ``sar`` benchmark), so that RSS follows live tensors: glibc's
  default keeps freed memory for reuse, and a peak read off RSS would measure that retention
  (stock GAT [15, 10, 5] width 512: ~200 MB under the default against ~100 MB of live peak);
- a **timing job** (``epochs`` epochs, the accuracy too) under glibc's default allocator, what
  a user runs: every mmap-served allocation is a system call and fresh zeroed pages, which
  costs rematerialization (many mid-sized temporaries per chunk) far more than stock (probe
  jobs: stock GAT 0.26 -> 0.40 s per batch, remat + INT2 0.35 -> 0.81 s).
Both jobs' other figures stay in the json (``batch_mmap_s``, ``act_default_mb``).
- before the first batch (``on_ready``) libraries are paged in and RSS is read (``rss_before``);
- the first training batch is a warm-up; after it the RSS high-water mark is reset
  (:func:`dsgraph.procstats.reset_peak_rss`), and again at the start of every later epoch, so
  evaluation and checkpointing between epochs never count;
- an epoch's activation memory = the trainer's peak RSS during its training batches minus
  ``rss_before``, the worst of the 2 trainers; ``peak_act_mb`` is the median over the measured
  epochs of the setting's ``repeats`` memory jobs (each epoch a fresh measurement after a
  reset), ``act_spread_mb`` their max - min;
- ``batch_s`` = the slower trainer's median time from one step's end to the next's within an
  epoch (sampling, feature pulls, forward, backward, optimizer step), median over the timing
  jobs; ``batch_spread_s`` the interquartile range of those batch times.
``test_acc`` is the timing jobs' median final test accuracy (layer-wise exact inference); they
train ``epochs`` epochs, evaluating every ``eval_every`` epochs, and ``acc_settled`` says whether
the last two validation accuracies of every timing job are within 0.5 point. One thread per
process.
"""
from __future__ import annotations

import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any, Optional

from benchmarks.harness import Report, View, bars, environ, median, render_saved
from dsgraph import dist
from dsgraph.procstats import file_rss_mb, peak_rss_mb, reset_peak_rss, rss_mb
from dsgraph.trainer import Hook, Trainer

COLUMNS = ("model", "fanouts", "feat_dim", "variant", "peak_act_mb", "act_spread_mb",
           "act_ratio", "batch_s", "batch_spread_s", "time_ratio", "test_acc", "acc_settled",
           "remote_feature_mb")
KEY = ("model", "fanouts", "feat_dim", "variant")
TITLE = "Sampled training with rematerialization: peak activation memory per trainer, time, accuracy"
FANOUTS = ([10, 25], [15, 10, 5], [25, 25])
FEAT_DIMS = (128, 512)
VARIANTS = ("stock", "remat", "remat_int2")
HIDDEN = 256
MODELS = {"sage": {"hidden": HIDDEN, "aggregator": "mean"}, "gat": {"hidden": HIDDEN // 4, "heads": 4}}
# sar.chunk_rows of the remat variants. SAGE [15, 10, 5], width 512, INT2 (one probe job each,
# idle machine): 2048 rows 0.52x of stock's memory at 1.16x the batch time, 1024 rows 0.48x at
# 1.19x; the output runs' destination chunks set the peak, the pulls are mostly cached rows.
CHUNK_ROWS = 1024


def remat_layers(model: str, fanouts: list) -> int:
    """``sampled.remat_layers`` of the remat variants. GAT: every layer but the output layer
    (its sources are the batch's last hop, a few thousand rows), since with only the first
    rematerialized the second layer's backward set GAT's peak (probe jobs, [15, 10, 5], width
    512, INT2, 3 epochs: 38.2 MB with 1 layer, 34.5 MB with 2, before the aggregate's
    gradient stopped being copied). SAGE: the first only (35.7 MB with 1, 37.4 MB with 2, and
    slower)."""
    return max(1, len(fanouts) - 1) if model == "gat" else 1
SETTLED = 0.005  # "accuracy has settled": the last two validation accuracies within 0.5 point
CACHE = Path("data/bench_sampled_remat")
# The memory jobs' allocator (see the module docstring and benchmarks/sar.py): glibc reads it at
# start, so it is set for every process of the job.
MMAP_ENV = {"MALLOC_MMAP_THRESHOLD_": str(64 * 1024)}


def _scale(quick: bool) -> dict[str, Any]:
    """Graph size, batch, epochs and repeats (the full run takes ~50 min on 2 idle cores)."""
    if quick:
        return {"num_nodes": 3000, "batch_size": 128, "epochs": 2, "mem_epochs": 2,
                "eval_every": 1, "repeats": 1, "fanouts": FANOUTS[:1], "feat_dims": FEAT_DIMS[:1]}
    # 3-layer SAGE still climbs at epoch 12 (val 0.92 -> 0.94 from epoch 9, width 128), so 20
    # epochs, evaluated every 4th: ``acc_settled`` compares epochs 16 and 20. ~15 s of job
    # start-up + up to ~4 s per epoch (GAT [15, 10, 5], width 512, remat_int2). The memory jobs'
    # 3 epochs give 3 fresh peaks each. Two repeats: one job's batch time and final accuracy
    # vary by ~10% and ~0.4 point (2,000 test nodes) between runs. 72 + 72 jobs ~ 50 min.
    return {"num_nodes": 20_000, "batch_size": 256, "epochs": 20, "mem_epochs": 3,
            "eval_every": 4, "repeats": 2, "fanouts": FANOUTS, "feat_dims": FEAT_DIMS}


# --- the measuring hook (runs inside every trainer) ----------------------------------------------

class BatchMeter(Hook):
    """Peak RSS during training batches after a warm-up batch, and time per batch (see the
    module docstring); ``on_end`` adds ``bench_trainers`` (one dict per rank) to metrics.json."""

    def __init__(self, warmup: int = 1) -> None:
        self.warmup, self.steps = warmup, 0
        self.rss_before = self.rss_warm = self.file_mb = 0.0
        self.mark: Optional[float] = None
        self.batch_s: list[float] = []
        self.epoch_peaks: list[float] = []  # per epoch: peak RSS of its measured batches
        self.epoch_reset: list[float] = []  # per epoch: RSS when its peak was reset
        self.reset_at = 0.0
        self.measured = 0  # measured batches in the current epoch

    def on_ready(self, trainer: Trainer) -> None:
        from benchmarks.sar import _page_in_libraries
        _page_in_libraries()  # library code first run in a batch is not activation memory
        self.file_mb = file_rss_mb()
        self.rss_before = rss_mb()
        step, strategy = trainer.step, trainer.strategy
        train_epoch = strategy.train_epoch

        def measured_step(loss, timers=None):
            step(loss, timers)
            self._after_step()

        def measured_epoch(tr, epoch):
            if self.warmed:
                self.reset_at = rss_mb()
                reset_peak_rss()
            self.mark, self.measured = None, 0  # the loader's start is not a batch
            try:
                return train_epoch(tr, epoch)
            finally:
                if self.measured:
                    self.epoch_peaks.append(peak_rss_mb())
                    self.epoch_reset.append(self.reset_at)

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
            self.rss_warm = self.reset_at = rss_mb()
            reset_peak_rss()
        elif self.warmed:
            self.measured += 1
            if self.mark is not None:
                self.batch_s.append(now - self.mark)
        self.mark = now

    def on_end(self, trainer: Trainer, summary: dict[str, Any]) -> None:
        summary["bench_trainers"] = dist.gather_values({
            "rss_before_mb": self.rss_before, "rss_warm_mb": self.rss_warm,
            "epoch_act_mb": [p - self.rss_before for p in self.epoch_peaks],
            "epoch_growth_mb": [p - r for p, r in zip(self.epoch_peaks, self.epoch_reset)],
            "steps": self.steps, "batch_s": self.batch_s,
            "rss_file_growth_mb": file_rss_mb() - self.file_mb})


def measure() -> Hook:
    """``--hook benchmarks.sampled_remat:measure``: the per-batch memory and time measurement."""
    return BatchMeter()


# --- records -------------------------------------------------------------------------------------

def job_figures(summary: dict, records: list[dict]) -> dict[str, Any]:
    """One job's figures from its metrics.json and metrics.jsonl: per measured epoch the worst
    trainer's activation MB; the slower trainer's batch times; final accuracy and whether the
    last two validation accuracies are within ``SETTLED``."""
    trainers = summary["bench_trainers"]
    epochs = min(len(t["epoch_act_mb"]) for t in trainers)
    timed = [t["batch_s"] for t in trainers if t["batch_s"]]
    vals = [r["val_acc"] for r in records if r.get("val_acc") is not None]
    return {"epoch_act_mb": [max(t["epoch_act_mb"][e] for t in trainers) for e in range(epochs)],
            # peak minus RSS at the reset: excludes what the warm-up or evaluation left resident
            "epoch_growth_mb": [max(t.get("epoch_growth_mb", t["epoch_act_mb"])[e] for t in trainers)
                                for e in range(epochs)],
            "batch_times": max(timed, key=median) if timed else [],
            "warm_growth_mb": max(t["rss_warm_mb"] - t["rss_before_mb"] for t in trainers),
            "rss_before_mb": max(t["rss_before_mb"] for t in trainers),
            "test_acc": summary.get("last_test_acc", summary.get("test_acc")),
            "settled": len(vals) >= 2 and abs(vals[-1] - vals[-2]) <= SETTLED,
            "val_accs": vals,
            "remote_feature_mb": median(r.get("remote_feature_bytes", 0) for r in records) / 2**20,
            "wall_s": summary["wall_s"]}


def _epoch_acts(jobs: list[dict]) -> list[float]:
    return [a for j in jobs for a in j["epoch_act_mb"]]


def _job_times(jobs: list[dict]) -> list[float]:
    return [median(j["batch_times"]) for j in jobs if j["batch_times"]]


def combine(setting: dict, mem_jobs: list[dict], time_jobs: list[dict]) -> dict[str, Any]:
    """A setting's record. Memory, from the memory jobs: median and max - min over every
    measured epoch of every job (each epoch's peak is measured afresh after a reset). Time and
    accuracy, from the timing jobs: median of the jobs' median batch times, spread = the
    interquartile range of all their batch times. ``batch_mmap_s``: the memory jobs' batch
    time; ``act_default_mb``: the timing jobs' activation memory (default allocator)."""
    acts, default_acts = _epoch_acts(mem_jobs), _epoch_acts(time_jobs)
    times = sorted(t for j in time_jobs for t in j["batch_times"])
    job_times, mmap_times = _job_times(time_jobs), _job_times(mem_jobs)
    accs = [j["test_acc"] for j in time_jobs if j["test_acc"] is not None]

    def quartile(q: int) -> float:
        return float(statistics.quantiles(times, n=4)[q]) if len(times) >= 2 else times[0]

    return {**setting, "peak_act_mb": median(acts) if acts else None,
            "act_spread_mb": max(acts) - min(acts) if acts else None,
            "batch_s": median(job_times) if job_times else None,
            "batch_spread_s": quartile(2) - quartile(0) if times else None,
            "batch_mmap_s": median(mmap_times) if mmap_times else None,
            "act_default_mb": median(default_acts) if default_acts else None,
            "test_acc": median(accs) if accs else None,
            "acc_spread": max(accs) - min(accs) if accs else None,
            "acc_settled": all(j["settled"] for j in time_jobs),
            "warm_growth_mb": median(j["warm_growth_mb"] for j in mem_jobs),
            "rss_before_mb": median(j["rss_before_mb"] for j in mem_jobs),
            "remote_feature_mb": median(j["remote_feature_mb"] for j in time_jobs),
            "jobs": len(mem_jobs) + len(time_jobs), "measured_epochs": len(acts),
            "batches_timed": len(times),
            "epoch_act_mb": [j["epoch_act_mb"] for j in mem_jobs],
            "epoch_growth_mb": [j.get("epoch_growth_mb") for j in mem_jobs],
            "val_accs": [j["val_accs"] for j in time_jobs],
            "wall_s": sum(j["wall_s"] for j in mem_jobs + time_jobs)}


def add_ratios(records: list[dict]) -> None:
    """``act_ratio`` and ``time_ratio`` (json also ``time_ratio_mmap``, ``act_ratio_default``:
    the other allocator's): each record against ``stock`` of the same model, fanouts and
    feature width (None where that stock record is missing)."""
    stock = {(r["model"], str(r["fanouts"]), r["feat_dim"]): r for r in records
             if r["variant"] == "stock"}
    for r in records:
        s = stock.get((r["model"], str(r["fanouts"]), r["feat_dim"]))
        ok = s is not None and s["peak_act_mb"] and s["batch_s"] and r["batch_s"] is not None
        r["act_ratio"] = r["peak_act_mb"] / s["peak_act_mb"] if ok else None
        r["time_ratio"] = r["batch_s"] / s["batch_s"] if ok else None
        for col, ratio in (("batch_mmap_s", "time_ratio_mmap"),
                           ("act_default_mb", "act_ratio_default")):
            r[ratio] = (r[col] / s[col] if s is not None and r.get(col) is not None
                        and s.get(col) else None)
        r["acc_delta"] = (r["test_acc"] - s["test_acc"]
                          if s is not None and None not in (r["test_acc"], s["test_acc"]) else None)


# --- running the jobs ----------------------------------------------------------------------------

def _variant_sets(variant: str, model: str, fanouts: list) -> list[str]:
    remat = [f"sar.chunk_rows={CHUNK_ROWS}",
             f"sampled.remat_layers={remat_layers(model, fanouts)}"]
    return {"stock": ["sampled.rematerialize=false", "compression.enabled=false"],
            "remat": ["sampled.rematerialize=true", "compression.enabled=false", *remat],
            "remat_int2": ["sampled.rematerialize=true", "compression.enabled=true",
                           *remat]}[variant]


def _partitions(scale: dict, feat_dim: int) -> list[str]:
    """Dataset overrides of the graph with ``feat_dim`` features; its 2 partitions (cached)."""
    from dsgraph import config as config_mod
    from dsgraph.data import load_graph
    from dsgraph.partition import partition_graph
    root = (CACHE / f"n{scale['num_nodes']}-f{feat_dim}").resolve()
    base = [f"dataset.num_nodes={scale['num_nodes']}", f"dataset.feat_dim={feat_dim}",
            f"dataset.cache_dir={root / 'data'}", f"partition.out_dir={root / 'p2'}",
            "partition.num_parts=2"]
    if not (root / "p2" / "graph.json").exists():
        g = load_graph(config_mod.load("configs/default.yaml", base).dataset)
        partition_graph(g, 2, root / "p2", force=True)
    return base


def _job(base: list[str], setting: dict, scale: dict, run_dir: Path,
         memory: bool) -> dict[str, Any]:
    """One fresh job of ``setting``, a memory job (``MMAP_ENV``, ``mem_epochs``) or a timing
    job (default allocator, ``epochs``); its figures (:func:`job_figures`)."""
    from dsgraph import config as config_mod
    from dsgraph.metrics import read_records
    from dsgraph.runs import prepare_run_dir
    from train.__main__ import launch
    epochs = scale["mem_epochs"] if memory else scale["epochs"]
    args = dict(MODELS[setting["model"]], num_layers=len(setting["fanouts"]))
    cfg = config_mod.load("configs/default.yaml", base + [
        f"model.name={setting['model']}", f"model.args={json.dumps(args)}",
        f"sampled.fanouts={json.dumps(setting['fanouts'])}",
        f"sampled.batch_size={scale['batch_size']}", f"train.epochs={epochs}",
        f"train.eval_every={min(scale['eval_every'], epochs)}", "train.seed=0",
        "train.timeout_s=1800",
        "cluster.num_threads=1",
        *_variant_sets(setting["variant"], setting["model"], setting["fanouts"])])
    run_dir = prepare_run_dir(cfg, str(run_dir), resume=False, force=True)
    with environ(MMAP_ENV if memory else {}):
        summary = launch(cfg, run_dir, False, ["--hook", "benchmarks.sampled_remat:measure"])
    return job_figures(summary, read_records(run_dir))


def run(quick: bool) -> Path:
    """Every model x fanouts x feature width x variant, ``repeats`` fresh jobs each."""
    scale = _scale(quick)
    report = Report(VIEW, quick, repeats=scale["repeats"])
    report.extra["settings"] = {**{k: v for k, v in scale.items() if k not in ("fanouts", "feat_dims")},
                                "hidden": HIDDEN, "chunk_rows": CHUNK_ROWS,
                                "remat_layers": "SAGE 1, GAT all but the output layer",
                                "partitions": 2,
                                "trainers": 2, "settled_within": SETTLED,
                                "models": MODELS, "threads_per_process": 1}
    t_start = time.perf_counter()
    records: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="dsgraph-remat-") as tmpd:
        for feat_dim in scale["feat_dims"]:
            base = _partitions(scale, feat_dim)
            for fanouts in scale["fanouts"]:
                for model in MODELS:
                    for variant in VARIANTS:
                        setting = {"model": model, "fanouts": list(fanouts),
                                   "feat_dim": feat_dim, "variant": variant}
                        jobs = {memory: [_job(base, setting, scale,
                                              Path(tmpd) / f"run{len(records)}-{r}-{memory}", memory)
                                         for r in range(scale["repeats"])]
                                for memory in (True, False)}
                        records.append(report.add(combine(setting, jobs[True], jobs[False])))
                        # Saved as it goes: an interrupted full run keeps its finished part.
                        add_ratios(records)
                        report.extra["wall_s"] = time.perf_counter() - t_start
                        report.save(partial=True)
    add_ratios(records)
    report.extra["wall_s"] = time.perf_counter() - t_start
    return report.save()


def render(quick: bool = False) -> Path:
    """Redraw sampled_remat.md and sampled_remat.png from the saved sampled_remat.json."""
    return render_saved(VIEW, quick)


# --- the report ----------------------------------------------------------------------------------

def table_rows(records: list[dict]) -> list[dict]:
    """The table rows (and what the figure draws): fanouts written as text, e.g. ``10,25``."""
    return [{**r, "fanouts": ",".join(str(f) for f in r["fanouts"])} for r in records]


def _heaviest(records: list[dict], model: str) -> Optional[tuple[str, int]]:
    """(fanouts, feat_dim) of ``model``'s stock setting with the largest peak activation memory."""
    stock = [r for r in records if r["model"] == model and r["variant"] == "stock"]
    if not stock:
        return None
    top = max(stock, key=lambda r: r["peak_act_mb"] or 0.0)
    return str(top["fanouts"]), top["feat_dim"]


def _notes(payload: dict) -> list[str]:
    """Targets at each model's heaviest setting, and how the figures are measured."""
    recs = payload["records"]
    lines = ["**Targets** at each model's heaviest setting (largest stock peak): `remat_int2` "
             "peak activation <= 0.3x stock (GAT) / 0.5x (SAGE), batch time <= 1.3x, accuracy "
             "within 0.5 point:", ""]
    for model, limit in (("gat", 0.3), ("sage", 0.5)):
        heavy = _heaviest(recs, model)
        r = next((x for x in recs if heavy and x["model"] == model and x["variant"] == "remat_int2"
                  and (str(x["fanouts"]), x["feat_dim"]) == heavy), None)
        if r is None or r["act_ratio"] is None:
            continue
        acc = (f"accuracy {100 * r['acc_delta']:+.2f} pt "
               f"({'ok' if abs(r['acc_delta']) <= 0.005 else 'MISSED'})"
               if r.get("acc_delta") is not None else "accuracy n/a")
        lines.append(f"- {model} fanouts {r['fanouts']} feat {r['feat_dim']}: memory "
                     f"{r['act_ratio']:.2f}x ({'ok' if r['act_ratio'] <= limit else 'MISSED'} "
                     f"<= {limit}x), time {r['time_ratio']:.2f}x "
                     f"({'ok' if r['time_ratio'] <= 1.3 else 'MISSED'} <= 1.3x"
                     + (f"; {r['time_ratio_mmap']:.2f}x in the memory jobs"
                        if r.get("time_ratio_mmap") is not None else "") + f"), {acc}")
    s = payload.get("settings", {})
    lines += ["", f"Graph: {s.get('num_nodes')} nodes (synthetic DC-SBM, 2 METIS partitions, 2 "
              f"trainers), batch {s.get('batch_size')}, {s.get('epochs')} epochs, "
              f"{s.get('repeats')} memory job(s) ({s.get('mem_epochs')} epochs) and timing job(s) "
              f"per setting, `sar.chunk_rows` {s.get('chunk_rows')}"
              + (f", `sampled.remat_layers` {s['remat_layers']}" if s.get("remat_layers") else "")
              + "."]
    return ["\n".join(lines),
            "`peak_act_mb`: the worst trainer's peak RSS during training batches (after a warm-up "
            "batch, peak reset then and at each epoch's start) minus its RSS before the first "
            "batch, in the memory jobs (allocations >= 64 KiB mmap-served, so RSS follows live "
            "tensors); median over their measured epochs, `act_spread_mb` their max - min. "
            "`batch_s`: the slower trainer's median step-to-step time in the timing jobs "
            "(glibc's default allocator, what a user runs), `batch_spread_s` the interquartile "
            "range of its batch times. `test_acc`: the timing jobs' final test accuracy. "
            "`act_ratio` / `time_ratio`: against `stock` of "
            "the same model, fanouts and width. `acc_settled`: the last two validation "
            "accuracies of every timing job within 0.5 point. `remote_feature_mb`: feature bytes "
            "pulled over RPC per epoch (json: `warm_growth_mb`, what the warm-up batch left "
            "resident, e.g. optimizer state; `batch_mmap_s` / `time_ratio_mmap`, the memory "
            "jobs' batch time, where every mmap-served allocation is a system call and fresh "
            "pages; `act_default_mb` / `act_ratio_default`, the timing jobs' activation memory, "
            "which includes what the default allocator keeps of freed memory)."]


def _plot(rows: list[dict], fig) -> None:
    """Peak activation memory and time per batch, one bar per row, colour = variant."""
    colours = {"stock": "tab:gray", "remat": "tab:blue", "remat_int2": "tab:green"}
    settings = list(dict.fromkeys((r["model"], r["fanouts"], r["feat_dim"]) for r in rows))
    width = 0.8 / len(VARIANTS)
    ax1, ax2 = fig.subplots(2, 1, sharex=True)
    for i, variant in enumerate(VARIANTS):
        rs = [r for r in rows if r["variant"] == variant]
        xs = [settings.index((r["model"], r["fanouts"], r["feat_dim"])) + (i - 1) * width
              for r in rs]
        for ax, column in ((ax1, "peak_act_mb"), (ax2, "batch_s")):
            bars(ax, xs, rs, column, KEY, width=width, color=colours[variant], label=variant)
    ax1.set_ylabel("peak activation MB / trainer")
    ax2.set_ylabel("s / batch")
    ax2.set_xticks(range(len(settings)), [f"{m} [{f}] f{d}" for m, f, d in settings],
                   rotation=30, ha="right")
    ax1.legend(fontsize=7)
    for ax in (ax1, ax2):
        ax.grid(axis="y", lw=0.3)


VIEW = View("sampled_remat", TITLE, COLUMNS, KEY, rows=table_rows, plot=_plot, notes=_notes,
            figsize=(12.0, 8.0))
