"""``python -m train --config C [--out RUN] [--set ...] [--resume] [--force] [--plan]
[--print-config]``: train one run (``--plan``: only print its memory plan; ``--print-config``:
only print the resolved config, each value with its source).

Resolves the config, runs the mode's launcher-side checks, prepares the run folder (nothing is
touched before every check passed), starts every process of the job (``dsgraph.modes.worker`` on
each rank; DistGraph servers too in ``sampled`` mode) under one supervised launcher, draws the
run's ``curves.png`` and prints its table. ``python -m train --plot RUN`` redraws the curves of a
run.
"""
from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from dsgraph import config as config_mod
from dsgraph.cli import command_parser
from dsgraph.cluster.memwatch import forget_last_job, last_job
from dsgraph.config import Config
from dsgraph.curves import plot_curves
from dsgraph.errors import cli_main
from dsgraph.memplan import MemoryPlan, check_plan, format_plan
from dsgraph.metrics import print_summary, read_summary, update_summary

if TYPE_CHECKING:
    from dsgraph.runs import RunFolder

WORKER = "dsgraph.modes.worker"


def launch(cfg: Config, run: RunFolder, resume: bool, worker_args: Sequence[str] = (),
           prepared: Any = None, plan: MemoryPlan | None = None) -> dict:
    """Run the job of ``cfg`` in ``run``; return its metrics.json (with launcher figures).

    ``worker_args`` go to every ``dsgraph.modes.worker`` (``--hook``s, say); ``prepared`` is what
    the mode's launcher-side :meth:`~dsgraph.trainer.Strategy.prepare` returned (run here if None);
    ``plan`` the job's memory plan (made and checked here if None), recorded beside the
    measured peaks.
    """
    from dsgraph.modes import plan_job, strategy_class

    t0 = time.perf_counter()
    strategy = strategy_class(cfg)
    if prepared is None:
        prepared = strategy.prepare(cfg)
    if plan is None:
        plan = plan_job(cfg)
        check_plan(cfg, plan)
    args = [*(["--resume"] if resume else []), *worker_args]
    forget_last_job()  # the job's supervisor publishes its memory figures when it ends
    try:
        peaks = strategy.launch(cfg, run.path, prepared, WORKER, args)
    finally:
        # a worker stopped mid-write (SIGTERM, a fault) leaves its temporary file behind; every
        # job process has ended here, so none of them is a live write
        run.remove_temp_files()
    # The supervisor samples every process; the workers' own high-water marks catch short peaks.
    own = read_summary(run.path).get("peak_rss_mb", 0.0)
    # job_memory_mb: the peak of the summed PSS of the job's processes (shared memory once)
    job = last_job() or {}
    return update_summary(run.path, wall_s=time.perf_counter() - t0,
                          peak_rss_mb=max([own, *peaks.values()]), peak_rss_mb_per_process=peaks,
                          job_memory_mb=job.get("job_memory_mb"),
                          pss_mb_per_process_at_job_peak=job.get("pss_mb_per_process_at_job_peak"),
                          planned_peak_mb=plan.peak_mb() if plan.processes else None,
                          memory_plan=plan.to_dict())


@cli_main
def main(argv: list[str] | None = None) -> None:
    """Resolve the config, prepare the run folder, run the job and print its summary."""
    parser = command_parser("python -m train", __doc__)
    parser.add_argument("--out", help="run folder (default: train.out_dir)")
    parser.add_argument("--resume", action="store_true", help="continue from the last checkpoint")
    parser.add_argument("--force", action="store_true",
                        help="replace an existing run folder (only one dsgraph created)")
    parser.add_argument("--plan", action="store_true",
                        help="only print the job's memory plan (per process, MiB) and whether "
                             "it fits cluster.memory_limit_mb")
    parser.add_argument("--plot", metavar="RUN", type=Path,
                        help="only redraw RUN/curves.png from its metrics.jsonl")
    parser.add_argument("--print-config", action="store_true",
                        help="only print the resolved config: every key after the defaults, "
                             "--config and --set, each with where its value comes from")
    args = parser.parse_args(argv)
    if args.plot is not None:
        print(f"curves written to {plot_curves(args.plot)}")
        return
    if args.print_config:
        print(config_mod.format_sources(args.config, args.overrides))
        return
    cfg = config_mod.load(args.config, args.overrides)
    # torch and DGL are imported only now (~2 s): a config refused above is refused at once
    from dsgraph.models.registry import resolve as resolve_model
    from dsgraph.modes import plan_job, strategy_class
    from dsgraph.runs import RunFolder, run_fingerprint

    resolve_model(cfg.model.name)  # an unimportable model fails here, not in every worker
    prepared = strategy_class(cfg).prepare(cfg)
    plan = plan_job(cfg)
    if args.plan:
        print(format_plan(plan))
    check_plan(cfg, plan)  # before the run folder is touched
    if args.plan:
        print("the plan fits the memory limit")
        return
    run = RunFolder.create(cfg, args.out, args.resume, args.force, run_fingerprint(cfg, prepared))
    try:
        launch(cfg, run, args.resume, prepared=prepared, plan=plan)
        plot_curves(run.path)
    finally:
        run.unlock()
    print_summary(run.path)


if __name__ == "__main__":
    main(sys.argv[1:])
