"""SAR full-batch training: per-worker activation memory, traffic, time and gradient exactness.

Two graphs: the community (DC-SBM) graph, where few edges cross parts, and a high-cut random
graph (homophily 0, average degree 20), where each part's halo approaches the whole graph.
For each: plain single-process DGL full-graph training (``mode: dgl``, 1 worker) and SAR with
N in {1, 2, 4} workers in modes sar / sa / one_shot, for 3-layer GraphSAGE and 4-head GAT.

SAR rows are real ``train.mode: sar`` jobs: ``train.__main__.launch`` starts N ``train.worker``
processes (the supervised launcher, the :class:`dsgraph.trainer.Trainer` loop with
:class:`train.sar.SarStrategy`), each with the :func:`measure` hook of this module; the figures
come from the run's metrics.json / metrics.jsonl. The ``dgl`` row is the peer being measured,
not a dsgraph trainer: :func:`dgl_baseline` is its own minimal loop (the same loss, Adam step and
per-epoch evaluation), run as a fresh ``python -m benchmarks.sar`` process.

Activation memory, as issue 5 defines it: peak RSS minus RSS after loading partition, graph and
model; a fresh process per configuration; median of 3. Each configuration runs 3 times, each
time in fresh processes (N workers, or one plain DGL process) that load the partition (or the
whole graph, with its sparse formats), build the model and optimizer, then train
``EPOCHS`` epochs (evaluating validation accuracy after each). When loading is done (the hook's
``on_ready``, which the trainer calls right before it reads its "RSS after loading") the
high-water mark is reset to the current RSS (``/proc/self/clear_refs`` 5), so a transient peak
while loading does not count; the peak is VmHWM at the end of training: the summary's
``train_mem_mb`` (worst worker). The median of the 3 runs is ``peak_act_mb``. Two measurement
choices apply to every process alike, plain DGL included:
- loading ends (``on_ready``) by paging in the code of the loaded libraries
  (``_page_in_libraries``): otherwise the first epoch faults in ~7-11 MB of torch/DGL code
  pages, which RSS counts but which are not activations (``rss_file_growth_mb`` records what
  file-backed RSS still grew in training);
- allocations >= 64 KiB are mmap-served from process start (``MMAP_ENV``), so freed tensors
  leave RSS.
Gradients of the first training step (summed over workers, as the trainer steps with them) are
compared with single-process DGL from the same initial weights, computed in the benchmark
process: float32 from the first of the 3 runs, float64 from one more 1-epoch run with
``train.dtype: float64``.
"""
from __future__ import annotations

import ctypes
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import dgl
import torch
import torch.nn.functional as F

from benchmarks.harness import Report, View, environ, line, median, render_saved, tag
from dsgraph import dist
from dsgraph.checkpoint import seed_everything
from dsgraph.config import DatasetConfig, load
from dsgraph.data.synthetic import generate
from dsgraph.fsutil import atomic_write_text
from dsgraph.metrics import read_records
from dsgraph.models.registry import build_model
from dsgraph.partition import partition_graph
from dsgraph.procstats import file_rss_mb, peak_rss_mb, reset_peak_rss, rss_mb
from dsgraph.runs import prepare_run_dir
from dsgraph.trainer import Hook, Trainer
from train.__main__ import launch

# No accuracy column: every run trains EPOCHS (3) epochs, which measure memory and time but say
# nothing about accuracy (final_val_acc stays in sar.json; see the report's note).
COLUMNS = ("graph", "mode", "model", "workers", "chunk_rows", "peak_act_mb", "act_ratio",
           "peak_rss_mb", "bytes_sent", "epoch_s", "max_grad_rel_err", "max_grad_rel_err_fp32")
KEY = ("graph", "mode", "model", "workers", "chunk_rows")
# sar.chunk_rows of the extra chunked SAR rows at N = 4 (every other row aggregates a whole
# remote part at once, chunk_rows 0)
SAR_CHUNK = 1024
TITLE = "SAR full-batch training: memory per worker, traffic, exactness"
CACHE = Path("data/bench_sar")
ROOT = Path(__file__).resolve().parents[1]
GRADS_FILE = "first_grads.pt"  # rank 0's parameter gradients after the first step
SEED, LR = 0, 0.01


def _graphs(quick: bool) -> dict[str, dict]:
    if quick:
        return {"community": dict(num_nodes=3000, avg_degree=10, homophily=0.85),
                "random": dict(num_nodes=2000, avg_degree=20, homophily=0.0)}
    return {"community": dict(num_nodes=40000, avg_degree=10, homophily=0.85),
            "random": dict(num_nodes=16000, avg_degree=20, homophily=0.0)}


MODELS = {"sage": {"hidden": 128, "num_layers": 3, "aggregator": "mean"},
          "gat": {"hidden": 32, "heads": 4, "num_layers": 3}}


# --- measurement set-up, identical in SAR workers and the plain DGL process ----------------------

# Every allocation >= 64 KiB served by mmap, so freed tensors leave RSS at once: glibc otherwise
# raises its threshold after frees and keeps later large tensors on the heap, where freed memory
# stays resident (RSS then reflects allocator history, not the live peak). Set in the
# environment of every measured process, plain DGL and SAR workers alike, because glibc reads it
# at start: set later, the heap loading left behind absorbs part of training's allocations (1.7
# MB of 11 at --quick size).
MMAP_ENV = {"MALLOC_MMAP_THRESHOLD_": str(64 * 1024)}


_CUDA_ONLY = ("libtorch_cuda", "libc10_cuda", "libcaffe2_nvrtc", "libnccl", "libcu", "libnvJitLink",
              "libnvrtc", "libnvToolsExt")


def _page_in_libraries() -> None:
    """Fault in every readable file mapping (library code and data) except CUDA-only ones.

    RSS counts a library's code pages once they are first executed, which for torch and DGL
    happens during the first training step: several MB that are neither activations nor
    proportional to the graph. Paging them in as part of loading (MADV_POPULATE_READ, Linux
    >= 5.14) keeps them out of "peak RSS minus RSS after loading". CUDA libraries, which a
    CPU run never executes, are left alone (gigabytes).
    """
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
    except OSError:
        return
    libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    for mapping in Path("/proc/self/maps").read_text().splitlines():
        parts = mapping.split()
        if len(parts) < 6 or not parts[5].startswith("/") or parts[1][0] != "r":
            continue
        path = parts[5]
        if "/nvidia/" in path or os.path.basename(path).startswith(_CUDA_ONLY):
            continue
        a, b = (int(v, 16) for v in parts[0].split("-"))
        libc.madvise(a, b - a, 22)  # MADV_POPULATE_READ; fails harmlessly on old kernels


def _loaded() -> float:
    """End of loading: page in the libraries, reset the RSS high-water mark to the current RSS;
    return the file-backed RSS now (MiB)."""
    _page_in_libraries()
    file_mb = file_rss_mb()
    reset_peak_rss()
    return file_mb


class MeasureHook(Hook):
    """What the benchmark reads from a SAR worker beyond the trainer's own summary.

    ``on_ready``: :func:`_loaded`. ``on_epoch`` (with ``grads``): rank 0 saves the summed
    gradients of the first step to ``RUN/first_grads.pt``. ``on_end``: ``bench_workers`` in
    metrics.json, per rank: RSS after loading, activation MB and file-backed RSS growth.
    """

    def __init__(self, grads: bool = False) -> None:
        self.grads = grads
        self.file_mb = 0.0

    def on_ready(self, trainer: Trainer) -> None:
        self.file_mb = _loaded()

    def on_epoch(self, trainer: Trainer, record: dict[str, Any]) -> None:
        if self.grads and record["epoch"] == 1 and trainer.rank == 0:
            torch.save({n: p.grad.detach().clone() for n, p in trainer.model.named_parameters()},
                       trainer.run_dir / GRADS_FILE)

    def on_end(self, trainer: Trainer, summary: dict[str, Any]) -> None:
        summary["bench_workers"] = dist.gather_values(
            {"rss_loaded_mb": trainer.loaded_rss_mb,
             "act_mb": peak_rss_mb() - trainer.loaded_rss_mb,
             "rss_file_growth_mb": file_rss_mb() - self.file_mb})


def measure() -> Hook:
    """``--hook benchmarks.sar:measure``: the memory measurement."""
    return MeasureHook()


def measure_grads() -> Hook:
    """``--hook benchmarks.sar:measure_grads``: the memory measurement and first-step gradients."""
    return MeasureHook(grads=True)


# --- one run of a configuration -------------------------------------------------------------------

def _loss(model, graph, x, label, train, n_train):
    """The SAR strategy's loss: cross-entropy summed over labelled nodes / their global count."""
    out = model(graph, x)
    return F.cross_entropy(out[train], label[train], reduction="sum") / n_train, out


def _build(model: str, in_feats: int, num_classes: int, dtype: str):
    """The model as the trainer builds it (after seeding, which the caller does): built, then
    cast to ``dtype``."""
    return build_model(model, in_feats, num_classes, MODELS[model]).to(getattr(torch, dtype))


def dgl_baseline(spec_file: str) -> None:
    """The plain single-process DGL run (``mode: dgl``): load the whole graph, train, write
    ``result.json`` (and ``first_grads.pt`` with ``spec['grads']``) into ``spec['out']``."""


    spec = json.loads(Path(spec_file).read_text())
    out = Path(spec["out"])
    torch.set_num_threads(1)
    seed_everything(SEED)  # as the trainer: seed, load, build
    graph = dgl.load_graphs(spec["graph_file"])[0][0]
    graph.create_formats_()
    dtype = getattr(torch, spec["dtype"])
    x, label = graph.ndata["feat"].to(dtype), graph.ndata["label"].long()
    train, val = graph.ndata["train_mask"].bool(), graph.ndata["val_mask"].bool()
    n_train, n_val = float(train.sum()), float(val.sum())
    model = _build(spec["model"], x.shape[1], int(label.max()) + 1, spec["dtype"])
    opt = torch.optim.Adam(model.parameters(), lr=LR)
    file0 = _loaded()
    loaded = rss_mb()
    times, accs = [], []
    for epoch in range(1, spec["epochs"] + 1):
        model.train()
        t0 = time.perf_counter()
        loss, logits = _loss(model, graph, x, label, train, n_train)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        loss.item()
        del logits, loss
        times.append(time.perf_counter() - t0)
        if epoch == 1 and spec.get("grads"):
            torch.save({n: p.grad.detach().clone() for n, p in model.named_parameters()},
                       out / GRADS_FILE)
        model.eval()
        with torch.no_grad():
            pred = model(graph, x).argmax(1)
        accs.append(float((pred[val] == label[val]).sum()) / max(n_val, 1.0))
        del pred
    peak = peak_rss_mb()
    atomic_write_text(out / "result.json", json.dumps({
        "act_mb": peak - loaded, "peak_mb": peak, "rss_loaded_mb": loaded,
        "rss_file_growth_mb": file_rss_mb() - file0, "act_per_worker": [peak - loaded],
        "epoch_s": times, "bytes_sent": [0] * len(times), "val_acc": accs}))


def _run_dgl(spec: dict, dtype: str, epochs: int, grads: bool, out: Path) -> dict:
    """One fresh plain DGL process (one thread, like every SAR worker)."""
    out.mkdir(parents=True, exist_ok=True)
    for f in (out / "result.json", out / GRADS_FILE):
        f.unlink(missing_ok=True)
    spec_file = out / "spec.json"
    spec_file.write_text(json.dumps({"graph_file": spec["graph_file"], "model": spec["model"],
                                     "dtype": dtype, "epochs": epochs, "grads": grads,
                                     "out": str(out)}))
    env = {**os.environ, **MMAP_ENV, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
           "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "benchmarks.sar", str(spec_file)], env=env, cwd=ROOT,
                   check=True, timeout=900)
    res = json.loads((out / "result.json").read_text())
    res["wall_s"] = time.perf_counter() - t0
    res["grads"] = torch.load(out / GRADS_FILE) if grads else None
    return res


def _run_sar(spec: dict, n: int, dtype: str, epochs: int, grads: bool, out: Path) -> dict:
    """One real SAR job (``train.__main__.launch``: N fresh ``train.worker`` processes)."""
    cfg = load(None, ["train.mode=sar", f"partition.out_dir={spec['parts'][n].parent}",
                      f"partition.graph_name={spec['parts'][n].stem}", f"partition.num_parts={n}",
                      f"model.name={spec['model']}",
                      f"model.args={json.dumps(MODELS[spec['model']])}",
                      f"train.epochs={epochs}", f"train.lr={LR}", f"train.seed={SEED}",
                      "train.lr_schedule=constant", "train.eval_every=1", f"train.dtype={dtype}",
                      "train.timeout_s=900", f"sar.mode={spec['mode']}",
                      f"sar.chunk_rows={spec.get('chunk_rows', 0)}",
                      "sar.prefetch=false", "sar.rebuild_inputs=true",  # the defaults, stated
                      "cluster.num_threads=1", "compression.enabled=false"])
    run_dir = prepare_run_dir(cfg, str(out), resume=False, force=True)
    hook = "measure_grads" if grads else "measure"
    with environ(MMAP_ENV):
        summary = launch(cfg, run_dir, False, ["--hook", f"benchmarks.sar:{hook}"])
    records = read_records(run_dir)
    workers = summary["bench_workers"]
    return {"act_mb": summary["train_mem_mb"], "peak_mb": max(summary["peak_rss_mb_per_worker"]),
            "rss_loaded_mb": max(w["rss_loaded_mb"] for w in workers),
            "rss_file_growth_mb": max(w["rss_file_growth_mb"] for w in workers),
            "act_per_worker": [w["act_mb"] for w in workers],
            "epoch_s": [r["epoch_s"] for r in records],
            "bytes_sent": [r["bytes_sent"] for r in records],
            "val_acc": [r["val_acc"] for r in records], "wall_s": summary["wall_s"],
            "grads": torch.load(run_dir / GRADS_FILE) if grads else None}


def _run(spec: dict, n: int, dtype: str, epochs: int, grads: bool, out: Path) -> dict:
    if spec["mode"] == "dgl":
        return _run_dgl(spec, dtype, epochs, grads, out)
    return _run_sar(spec, n, dtype, epochs, grads, out)


def _prepare(name: str, params: dict) -> tuple[Path, dict[int, Path]]:
    """Generate (cached) the graph file and its partitions for 1, 2 and 4 parts."""


    cfg = DatasetConfig(num_classes=20, feat_dim=64, seed=0, **params)
    tag = f"{name}-{cfg.num_nodes}-{cfg.avg_degree:g}-{cfg.homophily:g}"
    root = CACHE / tag
    gfile = root / "graph.dgl"
    g = None
    if not gfile.exists():
        root.mkdir(parents=True, exist_ok=True)
        g = generate(cfg)
        dgl.save_graphs(str(gfile), [g])
    parts = {}
    for n in (1, 2, 4):
        pj = root / f"p{n}" / "graph.json"
        if not pj.exists():
            g = g if g is not None else dgl.load_graphs(str(gfile))[0][0]
            partition_graph(g, n, root / f"p{n}", method="metis" if n > 1 else "random",
                            force=True)
        parts[n] = pj.resolve()
    return gfile.resolve(), parts


def _reference_grads(gfile: Path, model: str) -> dict[str, dict]:
    """First-step gradients of single-process DGL on the whole graph, in this process."""
    g = dgl.load_graphs(str(gfile))[0][0]
    tr, label = g.ndata["train_mask"].bool(), g.ndata["label"].long()
    out = {}
    for dt in ("float64", "float32"):
        seed_everything(SEED)
        m = _build(model, g.ndata["feat"].shape[1], int(label.max()) + 1, dt)
        loss, _ = _loss(m, g, g.ndata["feat"].to(getattr(torch, dt)), label, tr, float(tr.sum()))
        loss.backward()
        out[dt] = {n: p.grad for n, p in m.named_parameters()}
    return out


def _grad_err(got: dict, ref: dict) -> float:
    """max over parameters of max|got - ref| / max|ref|."""
    assert set(got) == set(ref), (sorted(got), sorted(ref))
    errs = [0.0]
    for k, r in ref.items():
        scale, diff = r.abs().max().item(), (got[k] - r).abs().max().item()
        errs.append(diff / scale if scale > 0 else diff)
    return max(errs)


REPEATS = 3  # fresh runs per configuration (the "median of 3")
EPOCHS = 3  # training epochs per run; epoch 1 also pays lazy set-up, so epoch_s uses the rest


def _measure(spec: dict, n: int, tmp: Path, repeats: int) -> tuple[list[dict], dict]:
    """Run a configuration ``repeats`` times in fresh processes (first-step float32 gradients in
    the first run), then once for 1 epoch in float64 for its first-step gradients."""
    runs = [_run(spec, n, "float32", EPOCHS, r == 0, tmp / f"run{r}") for r in range(repeats)]
    fp64 = _run(spec, n, "float64", 1, True, tmp / "fp64")
    return runs, fp64


def run(quick: bool) -> Path:
    """Run every configuration (see module docstring) and write the report."""
    report = Report(VIEW, quick, repeats=REPEATS)
    configs = [("dgl", 1, 0)] + ([("sar", 2, 0), ("one_shot", 2, 0)] if quick else
                                 [(m, n, 0) for n in (1, 2, 4) for m in ("sar", "sa", "one_shot")]
                                 + [("sar", 4, SAR_CHUNK)])
    curves: dict[str, list] = {}
    tmp = Path(tempfile.mkdtemp(prefix="bench-sar-"))
    graphs = _graphs(quick)
    if quick:
        graphs = {"community": graphs["community"]}
    t_start = time.perf_counter()
    try:
        _run_all(report, graphs, configs, tmp, curves)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    report.extra["val_acc_curves"] = curves
    report.extra["wall_s"] = time.perf_counter() - t_start
    return report.save()


def render(quick: bool = False) -> Path:
    """Redraw sar.md and sar.png from the saved sar.json."""
    return render_saved(VIEW, quick)


def _run_all(report: Report, graphs: dict, configs: list, tmp: Path, curves: dict) -> None:
    """Measure every (graph, model, configuration); add one record each to ``report``."""
    for gname, params in graphs.items():
        gfile, parts = _prepare(gname, params)
        for model in MODELS:
            ref = _reference_grads(gfile, model)
            base_act = None
            for mode, n, chunk in configs:
                spec = {"mode": mode, "model": model, "graph_file": str(gfile), "parts": parts,
                        "chunk_rows": chunk}
                runs, fp64 = _measure(spec, n, tmp / f"{gname}-{model}-{mode}-{n}-{chunk}",
                                      REPEATS)
                first = runs[0]
                per_run_act = [res["act_mb"] for res in runs]
                rec = {"graph": gname, "mode": mode, "model": model, "workers": n,
                       "chunk_rows": chunk,
                       "peak_act_mb": median(per_run_act),
                       "peak_act_mb_runs": per_run_act,
                       "peak_rss_mb": median(res["peak_mb"] for res in runs),
                       "rss_loaded_mb": median(res["rss_loaded_mb"] for res in runs),
                       "rss_file_growth_mb": max(res["rss_file_growth_mb"] for res in runs),
                       "bytes_sent": median(res["bytes_sent"][e] for res in runs
                                            for e in range(1, EPOCHS)),
                       "epoch_s": median(res["epoch_s"][e] for res in runs
                                         for e in range(1, EPOCHS)),
                       "max_grad_rel_err": _grad_err(fp64["grads"], ref["float64"]),
                       "max_grad_rel_err_fp32": _grad_err(first["grads"], ref["float32"]),
                       "final_val_acc": first["val_acc"][-1],
                       "act_per_worker_mb": [median(res["act_per_worker"][r] for res in runs)
                                             for r in range(n)],
                       "job_wall_s": median(res["wall_s"] for res in runs)}
                act = rec["peak_act_mb"]
                if mode == "dgl":
                    base_act = act
                rec["act_ratio"] = act / base_act if base_act else None
                report.add(rec)
                curves[f"{gname}/{model}/{mode}/{n}" + (f"/{chunk}" if chunk else "")] = \
                    first["val_acc"]


def _find(records, **kw):
    kw.setdefault("chunk_rows", 0)
    for r in records:
        if all(r.get(k, 0 if k == "chunk_rows" else None) == v for k, v in kw.items()):
            return r
    return None


def _notes(payload: dict) -> list[str]:
    """How memory is measured, why there is no accuracy column, and the issue's targets."""
    recs, notes = payload["records"], []
    growth = max((r.get("rss_file_growth_mb", 0.0) for r in recs), default=0.0)
    notes.append(
        f"Activation memory (peak_act_mb), as issue 5 defines it: peak RSS minus RSS after "
        f"loading partition, graph and model, in fresh processes per run, the worst worker per "
        f"run, median of {REPEATS} runs ({EPOCHS} training epochs each; every run's value is in "
        f"sar.json as peak_act_mb_runs). Loading includes paging in the libraries' code "
        f"(MADV_POPULATE_READ), in plain DGL and SAR processes alike, so that code first executed "
        f"during training is not counted as activations; file-backed RSS grew at most "
        f"{growth:.2f} MB during training. SAR rows are real `train.mode: sar` jobs (the "
        f"supervised launcher, `train.worker` processes running the Trainer, measured through "
        f"the `benchmarks.sar:measure` hook), with the defaults sar.prefetch off and "
        f"sar.rebuild_inputs on (in `sar` mode SAGE's first aggregate of the features is "
        f"computed again in backward, not kept); plain DGL is "
        f"its own single-process loop. Gradient errors compare the first step's summed "
        f"gradients with single-process DGL (float64: a 1-epoch `train.dtype: float64` run). "
        f"job_wall_s in sar.json: seconds per job, process start-up included.")
    accs = [r["final_val_acc"] for r in recs if r.get("final_val_acc") is not None]
    if accs:
        groups = {(r["graph"], r["model"]) for r in recs}
        same = all(len({r.get("final_val_acc") for r in recs
                        if (r["graph"], r["model"]) == gm}) == 1 for gm in groups)
        notes.append(
            f"No accuracy column: this benchmark measures memory, traffic, time and gradient "
            f"exactness, and each run trains only {EPOCHS} epochs, far from convergence: its "
            f"validation accuracy ({min(accs):.3f} to {max(accs):.3f}) says how fast a model "
            f"starts on a graph, not how well SAR trains (sar.json keeps it as final_val_acc; it "
            f"is {'identical' if same else 'NOT identical'} across every mode and worker count "
            f"of a graph and model). Accuracy is tested elsewhere: SAR's summed gradients equal "
            f"single-process DGL's (the max_grad_rel_err columns; tests/dist/test_sar_grad.py), "
            f"so it trains as plain DGL does, and tests/dist/test_sar_train.py trains "
            f"`train.mode: sar` end to end.")
    lines = ["Targets (issue 5):"]
    errs = [r["max_grad_rel_err"] for r in recs if r["mode"] != "dgl"]
    errs32 = [r["max_grad_rel_err_fp32"] for r in recs if r["mode"] != "dgl"]
    if errs:
        lines.append(f"- max_grad_rel_err over SAR configurations: {max(errs):.2e} (target "
                     f"<= 1e-9: {'met' if max(errs) <= 1e-9 else 'MISSED'}); fp32 "
                     f"{max(errs32):.2e} (target <= 2e-4: "
                     f"{'met' if max(errs32) <= 2e-4 else 'MISSED'})")
    for g in ("community", "random"):
        for m in MODELS:
            r4, r1 = _find(recs, graph=g, model=m, mode="sar", workers=4), \
                _find(recs, graph=g, model=m, mode="sar", workers=1)
            o4 = _find(recs, graph=g, model=m, mode="one_shot", workers=4)
            if r4 and r4.get("act_ratio") is not None and g == "community":
                lines.append(f"- {g}/{m}: SAR N=4 activation {r4['act_ratio']:.2f}x plain DGL "
                             f"(target <= 0.30: {'met' if r4['act_ratio'] <= 0.30 else 'MISSED'})")
            elif r4 and r4.get("act_ratio") is not None:
                side = "at or below" if r4["act_ratio"] <= 0.30 else "above"
                lines.append(f"- {g}/{m}: SAR N=4 activation {r4['act_ratio']:.2f}x plain DGL "
                             f"(the 0.30 target is set for the community graph, the issue's "
                             f"reference setting; here {side} 0.30)")
            c4 = _find(recs, graph=g, model=m, mode="sar", workers=4, chunk_rows=SAR_CHUNK)
            if c4 and c4.get("act_ratio") is not None and r4:
                lines.append(f"- {g}/{m}: SAR N=4 with sar.chunk_rows {SAR_CHUNK}: activation "
                             f"{c4['act_ratio']:.2f}x plain DGL (target <= 0.30: "
                             f"{'met' if c4['act_ratio'] <= 0.30 else 'MISSED'}), epoch "
                             f"{c4['epoch_s']:.3g} s vs {r4['epoch_s']:.3g} s unchunked")
            if r1 and r1.get("act_ratio") is not None:
                lines.append(f"- {g}/{m}: SAR N=1 activation {r1['act_ratio']:.2f}x plain DGL "
                             f"(target <= 1.1: {'met' if r1['act_ratio'] <= 1.1 else 'MISSED'})")
            if r4 and o4 and o4["peak_act_mb"] > 0:
                ratio = r4["peak_act_mb"] / o4["peak_act_mb"]
                target = " (target <= 0.6: " + ("met)" if ratio <= 0.6 else "MISSED)") \
                    if (g, m) == ("random", "gat") else ""
                lines.append(f"- {g}/{m}: SAR N=4 activation {ratio:.2f}x one_shot N=4{target}")
    notes.append("\n".join(lines))
    return notes


MODES = ("sar", "sa", "one_shot")
MODE_NAMES = {"sar": "SAR", "sa": "SA", "one_shot": "one-shot"}
MODEL_COLOURS = {"sage": "tab:blue", "gat": "tab:orange"}


def _plot(rows: list[dict], fig) -> None:
    """Peak activation MB per worker against workers: one row of panels per graph, one panel
    per mode, one colour per model; plain DGL as a dashed line in its model's colour."""
    graphs = list(dict.fromkeys(r["graph"] for r in rows))
    modes = [m for m in MODES if any(r["mode"] == m for r in rows)]
    axes = fig.subplots(len(graphs), len(modes), sharey="row", squeeze=False)
    workers = sorted({r["workers"] for r in rows})
    models = list(dict.fromkeys(r["model"] for r in rows))
    for gi, g in enumerate(graphs):
        for mi, mode in enumerate(modes):
            ax = axes[gi][mi]
            for model in models:
                colour = MODEL_COLOURS.get(model)
                base = _find(rows, graph=g, model=model, mode="dgl")
                if base:
                    tag(ax.axhline(base["peak_act_mb"], color=colour, ls="--", lw=1,
                                   label=f"{model}: plain DGL (1 process)"),
                        "peak_act_mb", [base], KEY)
                pts = sorted((r for r in rows
                              if (r["graph"], r["model"], r["mode"]) == (g, model, mode)
                              and not r.get("chunk_rows")),
                             key=lambda r: r["workers"])
                line(ax, pts, "workers", "peak_act_mb", KEY, "-o", color=colour,
                     label=f"{model}: dsgraph, N workers")
                chunked = [r for r in rows if r.get("chunk_rows")
                           and (r["graph"], r["model"], r["mode"]) == (g, model, mode)]
                line(ax, chunked, "workers", "peak_act_mb", KEY, "*", color=colour, ms=10,
                     label=f"{model}: chunk_rows {SAR_CHUNK}" if chunked else None)
            ax.set_title(f"{g} graph, {MODE_NAMES[mode]}")
            ax.set_xticks(workers)
            # Head-room above the highest point so the legend covers no line.
            ax.set_ylim(0, 1.6 * max(r["peak_act_mb"] for r in rows if r["graph"] == g))
            ax.grid(lw=0.3)
            if gi == len(graphs) - 1:
                ax.set_xlabel("workers N")
            if mi == 0:
                ax.set_ylabel("peak activation MB\n(largest worker)")
    axes[0][-1].legend(fontsize=7, loc="upper right")


VIEW = View("sar", TITLE, COLUMNS, KEY, plot=_plot, notes=_notes, figsize=(12.0, 7.0))


if __name__ == "__main__":  # the plain DGL process of a ``dgl`` row (see :func:`_run_dgl`)
    dgl_baseline(sys.argv[1])
