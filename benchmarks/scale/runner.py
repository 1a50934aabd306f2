"""Running the ``scale`` benchmark: per size its partitions (both systems'), per deployment its
emulated hosts, one fresh job per row and repeat, the equal-memory budget from this run's
medians, one record per row, and the records of sizes not rerun carried from the saved report."""
from __future__ import annotations

import contextlib
import tempfile
import time
from pathlib import Path
from typing import Optional

import dgl

from benchmarks import jobs
from benchmarks.harness import Report, carry, chosen, median
from benchmarks.scale import settings as st
from benchmarks.scale.report import VIEW, compare
from dsgraph import config as config_mod
from dsgraph.cluster.netns import LINK, HostsUnavailable, emulated_hosts
from dsgraph.data import load_graph
from dsgraph.errors import JobFailed, UserError
from dsgraph.partition import partition_graph

Hosts = tuple[list[str], list[str]]


def _partitions(size: st.Size, base: list[str], tmp: Path) -> None:
    """dsgraph's (``p<N>``) and DGL's own (``stock<N>``, METIS) partitionings of ``size``, and
    the whole graph in one file for the limit row."""
    g = load_graph(config_mod.load(st.CONFIG, base).dataset)
    dgl.save_graphs(str(tmp / st.WHOLE_GRAPH), [g])  # the limit row's input
    for parts in (2, 4) if size.four_hosts else (2,):
        partition_graph(g, parts, tmp / f"p{parts}", force=True)
        dgl.distributed.partition_graph(g, "graph", parts, str(tmp / f"stock{parts}"),
                                        num_trainers_per_machine=1, part_method="metis")


def _stock_args(cfg) -> list[str]:
    """The stock trainer's command line for ``cfg``: same model and training, test nodes
    evaluated with the training fanouts."""
    m, s, t = cfg.model.args, cfg.sampled, cfg.train
    return ["--fanouts", ",".join(str(f) for f in s.fanouts), "--batch-size", str(s.batch_size),
            "--epochs", str(t.epochs), "--hidden", str(m.get("hidden", 128)),
            "--num-layers", str(m.get("num_layers", 2)), "--lr", str(t.lr), "--seed", str(t.seed),
            "--eval-batch-size", str(s.eval_batch_size), "--eval", "sampled",
            *(["--phases"] if t.profile else [])]


def _job(variant: str, sets: list[str], tmp: Path, parts: int, run_name: str) -> dict:
    """One fresh job of a peer (stock, GraphStorm: on DGL's own partitions) or a dsgraph
    variant on ``parts`` emulated hosts."""
    peer = st.PEERS.get(variant)
    part_dir = tmp / f"{'stock' if peer else 'p'}{parts}"
    if variant == "graphstorm":
        sets = [*sets, "train.profile=false", f"cluster.python={st.GRAPHSTORM_PYTHON}"]
    cfg = config_mod.load(st.CONFIG, [*sets, f"partition.num_parts={parts}",
                                      f"partition.out_dir={part_dir}"])
    peer_args = _stock_args(cfg) + ["--gloo-ifname", LINK] if peer else []
    m = jobs.measured_job(cfg, tmp / run_name, peer, peer_args, part_dir / "graph.json")
    return _figures(m)


def graphstorm_missing() -> Optional[str]:
    """Why the GraphStorm row cannot run here (None: it can)."""
    if not Path(st.GRAPHSTORM_PYTHON).is_file():
        return (f"no GraphStorm interpreter at {st.GRAPHSTORM_PYTHON} (`make graphstorm-venv` "
                f"builds one; DSGRAPH_GRAPHSTORM_PYTHON names another)")
    return None


def _limit_job(sets: list[str], tmp: Path, run_name: str) -> dict:
    """One fresh job of plain DGL on the whole graph in memory, one process per core."""
    cfg = config_mod.load(st.CONFIG, sets)
    m = jobs.measured_limit_job(cfg, tmp / run_name, tmp / st.WHOLE_GRAPH, _stock_args(cfg),
                                st.LIMIT_PROCESSES)
    return _figures(m)


def _figures(m: jobs.Measured) -> dict:
    """A job's steady-state figures (epochs 2.. ) and memory."""
    return {"samples_per_s": m.steady("samples_per_s"), "test_acc": m.summary.get("test_acc"),
            "job_memory_mb": m.job_memory_mb, "peak_rss_mb": m.summary.get("peak_rss_mb"),
            "planned_peak_mb": m.summary.get("planned_peak_mb"),
            "cache_hit_rate": m.steady("cache_hit_rate"),
            "remote_feature_bytes": m.steady("remote_feature_bytes"),
            "load1": m.load1, "wall_s": m.wall_s, "phases": _phases(m.epochs)}


def _phases(epochs: list[dict]) -> Optional[dict]:
    """Seconds per 1,000 seeds of each phase (dsgraph.phases), median over epochs 2.., or None
    where the job did not time them."""
    steady = [e["phases"] for e in (epochs[1:] or epochs) if e.get("phases")]
    if not steady:
        return None
    return {k: median(p[k] for p in steady) if all(p[k] is not None for p in steady) else None
            for k in steady[0]}


def _breakdown(row: dict, runs: list[dict]) -> list[dict]:
    """``row``'s breakdown records: one per phase, its median over the runs (``phase``,
    ``cpu_s_per_1k_seeds``; ``wait`` is wall seconds), beside the row's identifying keys."""
    timed = [r["phases"] for r in runs if r.get("phases")]
    if not timed:
        return []
    ident = {k: row[k] for k in ("size", "system", "variant", "nodes", "hosts", "link")}
    out = []
    for phase in timed[0]:
        values = [t[phase] for t in timed if t.get(phase) is not None]
        out.append({**ident, "phase": phase,
                    "cpu_s_per_1k_seeds": median(values) if values else None,
                    "cpu_s_per_1k_seeds_min": min(values) if values else None,
                    "cpu_s_per_1k_seeds_max": max(values) if values else None})
    return out


def _row(size: st.Size, dep: st.Deployment, variant: str, runs: list[dict],
         budget_mb: Optional[float]) -> dict:
    """One table row: the medians over a row's runs, with the spread of the throughput."""
    return _median_row({"size": size.name, "system": variant if variant in st.PEERS
                        else "dsgraph", "variant": variant, "nodes": size.nodes,
                        "hosts": dep.hosts, "parts": dep.hosts, "link": dep.link,
                        "feature_memory_mb": budget_mb}, runs)


def _median_row(row: dict, runs: list[dict]) -> dict:
    """:func:`jobs.median_row` of the runs' figures (their phases go to :func:`_breakdown`)."""
    return jobs.median_row(row, [{k: v for k, v in r.items() if k != "phases"} for r in runs])


def _budget(variant: str, size: st.Size, dep: st.Deployment,
            budgets: dict[st.Deployment, float]) -> Optional[float]:
    """The feature budget per trainer a row runs with (the default's as dsgraph computes it)."""
    return {"stock": None, "graphstorm": None, "no_cache": 0.0, "equal_memory": budgets.get(dep),
            "defaults": st.default_budget_mb(size.nodes, dep.hosts)}[variant]


def run_size(size: st.Size, hosts: dict[st.Deployment, Hosts], repeats: int, epochs: int,
             quick: bool, skipped: dict[str, str]) -> list[dict]:
    """Every row of ``size`` over the deployments in ``hosts``.

    Stock, no_cache and defaults run first, repeats round-robin over them (every row's first
    run, then every row's second, ...) so a drift of the machine's speed reaches every row
    alike; then each deployment's equal_memory budget comes from the medians of its stock and
    no_cache job memory, and the equal_memory rows run, round-robin again with stock run once
    more beside them: at 250k the second phase ran ~15% faster than the first (equal_memory
    with the defaults' budget beat the defaults by that much), so stock's median spans both.
    GraphStorm runs in the first phase on 2 hosts over veth where its interpreter exists; a
    GraphStorm job that fails drops its row (the reason goes to ``skipped``), not the run.
    """
    gs_dep = st.Deployment("veth", 2)
    gs_why = graphstorm_missing()
    runs: dict[tuple[st.Deployment, str], list[dict]] = {}
    limit_runs: list[dict] = []
    budgets: dict[st.Deployment, float] = {}
    port = 30150
    with tempfile.TemporaryDirectory(prefix=f"dsgraph-scale-{size.name}-") as tmpd:
        tmp = Path(tmpd)
        base = st.base_sets(size, epochs, tmp / "data", quick)
        t0 = time.perf_counter()
        _partitions(size, base, tmp)
        print(f"  {size.name}: partitioned in {time.perf_counter() - t0:.0f} s", flush=True)
        for phase in (("stock", "no_cache", "defaults"), ("stock", "equal_memory")):
            if "equal_memory" in phase:
                for dep in hosts:
                    budgets[dep] = st.equal_memory_budget(
                        median(r["job_memory_mb"] or 0.0 for r in runs[dep, "stock"]),
                        median(r["job_memory_mb"] or 0.0 for r in runs[dep, "no_cache"]),
                        dep.hosts)
                    print(f"  {size.name} {dep.label}: equal_memory budget "
                          f"{budgets[dep]:.1f} MiB per trainer", flush=True)
            for r in range(repeats):
                if "no_cache" in phase:  # the limit: one host, so once per repeat
                    limit_runs.append(_limit_job(base, tmp, f"limit-{r}"))
                    print(f"  [{r + 1}/{repeats}] {size.name} limit: "
                          f"{limit_runs[-1]['samples_per_s']:,.0f} seeds/s, "
                          f"{limit_runs[-1]['job_memory_mb'] or 0:,.0f} MiB", flush=True)
                for dep, dep_hosts in hosts.items():
                    extra = ("graphstorm",) if "no_cache" in phase and dep == gs_dep \
                        and gs_why is None else ()
                    for variant in phase + extra:
                        port += 1  # a fresh server port per job: no TIME_WAIT clash
                        sets = [*base, *jobs.host_sets(tmp, dep_hosts, port)]
                        if variant != "stock":
                            sets += st.variant_sets(variant, budgets.get(dep))
                        # stock runs in both phases: each run its own folder
                        name = f"{variant}-{dep.hosts}-{dep.link}-{r}-{len(budgets)}"
                        try:
                            got = _job(variant, sets, tmp, dep.hosts, name)
                        except (JobFailed, UserError) as exc:
                            if variant != "graphstorm":
                                raise
                            gs_why = f"its job failed: {exc}"
                            runs.pop((dep, variant), None)
                            print(f"  graphstorm row dropped: {gs_why}", flush=True)
                            continue
                        runs.setdefault((dep, variant), []).append(got)
                        print(f"  [{r + 1}/{repeats}] {size.name} {dep.label} {variant}: "
                              f"{got['samples_per_s']:,.0f} seeds/s, "
                              f"{got['job_memory_mb'] or 0:,.0f} MiB", flush=True)
    if gs_why is not None:
        skipped[f"{size.name} graphstorm"] = gs_why
    rows = [_row(size, dep, v, runs[dep, v], _budget(v, size, dep, budgets))
            for dep in hosts for v in st.VARIANTS if (dep, v) in runs]
    rows.append(_median_row({"size": size.name, "system": "dgl", "variant": "limit",
                             "nodes": size.nodes, "hosts": 1, "parts": 1, "link": "local",
                             "feature_memory_mb": None}, limit_runs))
    compare(rows)
    timed = {(r["hosts"], r["link"], r["variant"]): r for r in rows}
    every = {**{(dep.hosts, dep.link, v): got for (dep, v), got in runs.items()},
             (1, "local", "limit"): limit_runs}
    return rows + [b for key, got in every.items() for b in _breakdown(timed[key], got)]


def _hosts(stack: contextlib.ExitStack, sizes: dict[str, st.Size]
           ) -> tuple[dict[st.Deployment, Hosts], dict[str, str]]:
    """The emulated hosts of every deployment the sizes use, and why any cannot be made."""
    links, skipped = jobs.emulated_links(stack, st.THROTTLE)
    hosts = {st.Deployment(link, 2): h for link, h in links.items()}
    skipped = {st.Deployment(link, 2).label: why for link, why in skipped.items()}
    if any(s.four_hosts for s in sizes.values()):
        try:
            hosts[st.Deployment("veth", 4)] = stack.enter_context(emulated_hosts(count=4))
        except HostsUnavailable as exc:
            skipped[st.Deployment("veth", 4).label] = str(exc)
    return hosts, skipped


def run(quick: bool, datasets: Optional[list[str]] = None) -> Path:
    """Run the chosen sizes (all by default) and write benchmarks/reports/scale.{json,md,png};
    the other sizes' records are carried from the saved report."""
    every = st.QUICK_SIZES if quick else st.SIZES
    sizes = chosen(every, datasets)
    repeats, epochs = (1, 2) if quick else (st.REPEATS, st.EPOCHS)
    report = Report(VIEW, quick, repeats=repeats)
    report.extra["settings"] = {"feat_dim": st.FEAT_DIM, "avg_degree": st.AVG_DEGREE,
                                "epochs": epochs, "throttle": st.THROTTLE,
                                "headroom": st.EQUAL_MEMORY_HEADROOM}
    carry(report, quick, "size", [s for s in every if s not in sizes])
    t_start = time.perf_counter()
    with contextlib.ExitStack() as stack:
        hosts, skipped = _hosts(stack, sizes)
        report.extra.setdefault("skipped", {}).update(skipped)
        for size in sizes.values():
            mine = {d: h for d, h in hosts.items() if d in st.deployments(size)}
            for row in run_size(size, mine, repeats, epochs, quick, report.extra["skipped"]):
                report.add(row)
    report.extra["wall_s"] = time.perf_counter() - t_start
    return report.save()
