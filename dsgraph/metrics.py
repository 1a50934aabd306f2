"""A run's metrics: ``metrics.jsonl`` (one line per epoch), ``metrics.json`` (the summary, with a
``sha256`` key: the digest of the rest, checked when read back), and the table printed from them
when a run ends."""
from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path
from typing import Any

from dsgraph.errors import IntegrityError, UserError
from dsgraph.fsutil import atomic_write_text, storage_errors

# Columns of the end-of-run table, when some epoch record has them.
_COLUMNS = ("epoch", "loss", "train_acc", "val_acc", "val_rmse", "val_rocauc", "val_mrr",
            "epoch_s", "samples_per_s", "remote_feature_bytes", "rpc_sample_requests", "bytes_sent",
            "test_rmse", "test_rel_l2")
_FINAL = ("test_acc", "val_acc", "test_macro_f1", "test_rmse", "test_mae", "test_r2", "val_rmse",
          "test_rocauc", "val_rocauc", "test_micro_f1", "test_mrr", "val_mrr", "test_rel_l2",
          "epochs", "wall_s", "peak_rss_mb", "job_memory_mb", "num_workers", "num_parts")
CHECKSUM = "sha256"  # metrics.json's key holding the digest of the rest


class MetricsLog:
    """Appends one JSON line per epoch to metrics.jsonl; writes the metrics.json summary."""

    def __init__(self, run_dir: str | Path, resume_epoch: int = 0,
                 resume_record: dict[str, Any] | None = None) -> None:
        self.path = Path(run_dir) / "metrics.jsonl"
        self.summary_path = Path(run_dir) / "metrics.json"
        # On resume, drop lines of epochs after the checkpoint so the log matches an
        # uninterrupted run line for line; the checkpoint's own record (``resume_record``)
        # replaces its line if that was cut short or lost.
        kept = [r for r in self.records() if r["epoch"] <= resume_epoch]
        if resume_record is not None and (not kept or kept[-1]["epoch"] < resume_epoch):
            kept.append(resume_record)
        atomic_write_text(self.path, "".join(json.dumps(r) + "\n" for r in kept))

    def epoch(self, record: dict[str, Any]) -> None:
        """Append one epoch's record."""
        with storage_errors(self.path), self.path.open("a") as fh:
            fh.write(json.dumps(record) + "\n")
            fh.flush()

    def summary(self, record: dict[str, Any]) -> None:
        """Write the run summary (atomically)."""
        write_summary(self.summary_path.parent, record)

    def records(self) -> list[dict[str, Any]]:
        """All epoch records written so far."""
        return read_records(self.path.parent)


def read_summary(run_dir: str | Path) -> dict[str, Any]:
    """A finished run's metrics.json."""
    path = Path(run_dir) / "metrics.json"
    try:
        summary = json.loads(path.read_text())
    except FileNotFoundError:
        raise UserError(f"{path}: missing (the run has not finished)") from None
    except (OSError, ValueError) as exc:
        raise UserError(f"{path}: unreadable ({exc})") from None
    if not isinstance(summary, dict):
        raise UserError(f"{path}: expected a JSON object")
    recorded = summary.pop(CHECKSUM, None)
    if recorded is not None and recorded != _digest(summary):
        raise IntegrityError(f"{path}: checksum mismatch: the file changed after dsgraph wrote "
                             f"it (an edit or corrupt storage)")
    return summary


def write_summary(run_dir: str | Path, summary: dict[str, Any]) -> None:
    """Write ``summary`` as the run's metrics.json (atomically, with its checksum)."""
    atomic_write_text(Path(run_dir) / "metrics.json",
                      json.dumps({**summary, CHECKSUM: _digest(summary)}, indent=1))


def update_summary(run_dir: str | Path, **values: Any) -> dict[str, Any]:
    """Add ``values`` to a finished run's metrics.json (atomically); return the summary."""
    summary = {**read_summary(run_dir), **values}
    write_summary(run_dir, summary)
    return summary


def _digest(summary: dict[str, Any]) -> str:
    """The checksum of a summary: of its canonical JSON (key order and layout do not count)."""
    return hashlib.sha256(json.dumps(summary, sort_keys=True).encode()).hexdigest()


def print_summary(run_dir: str | Path) -> None:
    """Print one row per epoch and the final metrics of a finished run."""
    run_dir = Path(run_dir)
    rows = read_records(run_dir)
    cols = [c for c in _COLUMNS if any(c in r for r in rows)]
    if rows:
        widths = [max(12, len(c)) for c in cols]
        print("  ".join(f"{c:>{w}}" for c, w in zip(cols, widths)))
        for r in rows:
            print("  ".join(f"{format_metric(c, r.get(c)):>{w}}" for c, w in zip(cols, widths)))
    summary = read_summary(run_dir)
    print("final: " + ", ".join(f"{k}={format_metric(k, summary[k])}" for k in _FINAL
                                if k in summary))
    print(f"run folder: {run_dir}")


def read_records(run_dir: str | Path) -> list[dict[str, Any]]:
    """The epoch records of a run folder's metrics.jsonl (empty if there is none)."""
    path = Path(run_dir) / "metrics.jsonl"
    if not path.exists():
        return []
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"{path}: unreadable ({exc})") from None
    lines = text.split("\n")
    records = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError:
            if number == len(lines):  # no newline after it: an append cut short by a kill
                break
            raise UserError(f"{path}: line {number} is not a JSON record") from None
        if not isinstance(record, dict) or not isinstance(record.get("epoch"), int):
            raise UserError(f"{path}: line {number}: expected a JSON object with an integer "
                            f"epoch")
        records.append(record)
    return records


# How the console shows a metric, by its name (metrics.json / .jsonl keep the raw numbers):
# rates (``*_per_s``, and the progress bar's ``seeds_s`` / ``edges_s``) and byte counts
# (``*_bytes``, ``bytes_*``) as integers with thousands separators; seconds (``*_s``) with 2
# decimals; memory in MiB (``*_mb``) with 1 (no separator: the final line separates its items
# with commas); other integers with thousands separators; other numbers (losses, accuracies,
# errors) with 4 decimals, a non-zero one that would show as 0.0000 as 1.23e-05 instead.
_RATES = ("seeds_s", "edges_s")


def format_metric(key: str, value: Any) -> str:
    """Metric ``key``'s ``value`` as the console shows it (tables, epoch lines, progress bar)."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return str(value).lower()
    if not isinstance(value, (int, float)):
        return str(value)
    if key.endswith("_per_s") or key in _RATES or key.endswith("_bytes") or \
            key.startswith("bytes_"):
        return f"{round(value):,}" if math.isfinite(value) else str(value)
    if key.endswith("_s"):
        return f"{value:.2f}"
    if key.endswith("_mb"):
        return f"{value:.1f}"
    if isinstance(value, int):
        return f"{value:,}"
    if value != 0 and abs(value) < 5e-5:
        return f"{value:.2e}"
    return f"{value:.4f}"
