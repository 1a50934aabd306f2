"""Running a dispatch's steps: in this process or a pool of worker processes, with a marker per
finished task in the work folder, so a rerun reuses what is done.

A marker ``done/<task>.json`` holds the task's result and the size of each file it wrote; a task
counts as done only when its marker is there and every file still has that size. A worker's
failure cancels the rest, stops the workers and is raised here as one line.
"""
from __future__ import annotations

import json
import multiprocessing
import os
import pickle
import shutil
import threading
import time
from concurrent.futures import FIRST_EXCEPTION, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import Any, Callable

from dsgraph.errors import ConfigError, JobFailed, UserError
from dsgraph.fsutil import storage_error
from dsgraph.partition.streamed import dispatch_steps as steps

INPUTS = "inputs.json"
Task = tuple[str, Callable[..., dict], tuple]  # (marker name, step function, its arguments)


def prepare_work_dir(work: Path, inputs: dict) -> bool:
    """Make ``work`` hold the work of ``inputs``: kept when it was made for the same inputs
    (returns True), else cleared. A non-empty folder that is not a dispatch's is refused."""
    record = work / INPUTS
    if work.is_dir() and any(work.iterdir()):
        if not record.is_file():
            raise UserError(f"{work}: work folder holds files that are not a dispatch's; give "
                            f"an empty or new folder")
        try:
            same = json.loads(record.read_text()) == inputs
        except (OSError, ValueError):
            same = False
        if same:
            return True
        print(f"dispatch: {work} holds the work of other inputs; clearing it", flush=True)
        shutil.rmtree(work)
    work.mkdir(parents=True, exist_ok=True)
    (work / INPUTS).write_text(json.dumps(inputs))
    return False


class Runner:
    """Runs tasks, skipping finished ones; ``workers`` > 1: in spawned worker processes."""

    def __init__(self, graph: Any, work: Path, workers: int) -> None:
        self.work = work
        self.done = work / "done"
        self.done.mkdir(exist_ok=True)
        self.peak_mb = 0.0
        self.pool: ProcessPoolExecutor | None = None
        steps.set_graph(graph)
        if workers > 1:
            try:
                graph_bytes = pickle.dumps(graph)
            except Exception as exc:  # noqa: BLE001 - any pickling failure says the same
                raise ConfigError(f"dispatch: workers={workers} needs a graph that pickles "
                                  f"({type(graph).__name__}: {exc}); use workers=1") from None
            self.pool = ProcessPoolExecutor(
                workers, mp_context=multiprocessing.get_context("spawn"),
                initializer=steps.init_worker, initargs=(graph_bytes,))

    def __enter__(self) -> "Runner":
        return self

    def __exit__(self, exc_type: Any, *exc: Any) -> None:
        if exc_type is None and self.pool is not None:  # idle workers: let them exit
            self.pool.shutdown(wait=True)
            self.pool = None
        self.close()

    def close(self) -> None:
        """Stop the workers at once (after a failure, running tasks are of no use)."""
        if self.pool is None:
            return
        procs = list((getattr(self.pool, "_processes", None) or {}).values())
        self.pool.shutdown(wait=False, cancel_futures=True)
        for proc in procs:
            if proc.is_alive():
                proc.terminate()
        for proc in procs:
            proc.join(timeout=10)
        self.pool = None

    def reused(self, name: str, check_files: bool = True) -> dict | None:
        """The result of a finished task, or None (no marker, or a file of it changed; files
        a later step consumed and removed are not checked: ``check_files`` False)."""
        path = self.done / f"{name}.json"
        if not path.is_file():
            return None
        try:
            record = json.loads(path.read_text())
        except (OSError, ValueError):
            return None
        for rel, size in (record["files"] if check_files else {}).items():
            file = self.work / rel
            if not file.is_file() or file.stat().st_size != size:
                return None
        return record["result"]

    def forget(self, prefix: str) -> None:
        """Drop the markers of tasks whose name starts with ``prefix`` (their output is gone)."""
        for path in self.done.glob(f"{prefix}*.json"):
            path.unlink()

    def record(self, name: str, result: dict) -> dict:
        files = {rel: (self.work / rel).stat().st_size for rel in result.get("files", [])}
        tmp = self.done / f".{name}.tmp"
        tmp.write_text(json.dumps({"result": result, "files": files}))
        os.replace(tmp, self.done / f"{name}.json")
        self.peak_mb = max(self.peak_mb, float(result.get("peak_rss_mb", 0.0)))
        return result

    def run(self, title: str, tasks: list[Task], check_files: bool = True) -> dict[str, dict]:
        """Run ``tasks`` (reusing finished ones); their results by name; one progress line."""
        t0 = time.perf_counter()
        results, todo = {}, []
        for name, fn, args in tasks:
            old = self.reused(name, check_files)
            if old is None:
                todo.append((name, fn, args))
            else:
                results[name] = old
                self.peak_mb = max(self.peak_mb, float(old.get("peak_rss_mb", 0.0)))
        if len(todo) < len(tasks):
            print(f"dispatch: {title}: reusing {len(tasks) - len(todo)} of {len(tasks)} finished "
                  f"tasks in {self.work}", flush=True)
        if self.pool is None:
            for name, fn, args in todo:
                try:
                    results[name] = self.record(name, fn(*args))
                except OSError as exc:
                    raise storage_error(exc, self.work / name, f"the work files of {name}")
        else:
            futures = {self.pool.submit(fn, *args): name for name, fn, args in todo}
            pending = set(futures)
            while pending:
                finished, pending = wait(pending, return_when=FIRST_EXCEPTION)
                for fut in finished:
                    if fut.exception() is not None:
                        self.close()
                        raise _one_line(fut, futures[fut], title) from None
                    results[futures[fut]] = self.record(futures[fut], fut.result())
        print(f"dispatch: {title}: {len(tasks)} tasks done in {time.perf_counter() - t0:.1f} s",
              flush=True)
        return results

    def submit(self, name: str, fn: Callable[..., dict], args: tuple) -> Future | dict:
        """Start a task in a thread of this process, which waits on the workers most of the time
        (``collect`` it later); a finished one's result is returned at once. The thread is a
        daemon: a failed dispatch does not wait for it."""
        old = self.reused(name)
        if old is not None:
            print(f"dispatch: reusing {name} in {self.work}", flush=True)
            return old
        fut: Future = Future()

        def body() -> None:
            try:
                fut.set_result(fn(*args))
            except BaseException as exc:  # noqa: BLE001 - handed to collect as it is
                fut.set_exception(exc)

        threading.Thread(target=body, name=f"dispatch-{name}", daemon=True).start()
        return fut

    def collect(self, name: str, handle: Future | dict) -> dict:
        """The result of a task started by :meth:`submit`."""
        if isinstance(handle, dict):
            return handle
        if handle.exception() is not None:
            self.close()
            raise _one_line(handle, name, name) from None
        return self.record(name, handle.result())


def _one_line(fut: Future, name: str, step: str) -> Exception:
    """A worker's exception as one line: user errors as they are, the rest as a failed job."""
    exc = fut.exception()
    if isinstance(exc, UserError):
        return type(exc)(str(exc))
    if isinstance(exc, BrokenProcessPool):
        return JobFailed(f"dispatch: a worker process died (killed, or out of memory?) during "
                         f"the {step} step")
    if isinstance(exc, OSError):
        return storage_error(exc, Path(getattr(exc, "filename", None) or name))
    return JobFailed(f"dispatch: {name} failed in a worker: {type(exc).__name__}: {exc}")
