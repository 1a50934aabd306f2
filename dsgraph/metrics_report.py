"""End-of-run summary table printed from a run folder's metrics.jsonl / metrics.json."""
from __future__ import annotations

import json
from pathlib import Path

_COLUMNS = ("epoch", "loss", "train_acc", "val_acc", "epoch_s", "samples_per_s",
            "remote_feature_bytes", "bytes_sent", "test_rmse", "test_rel_l2")


def print_summary(run_dir: str | Path) -> None:
    """Print one row per epoch and the final metrics of a finished run."""
    run_dir = Path(run_dir)
    rows = [json.loads(ln) for ln in (run_dir / "metrics.jsonl").read_text().splitlines()
            if ln.strip()] if (run_dir / "metrics.jsonl").exists() else []
    cols = [c for c in _COLUMNS if any(c in r for r in rows)]
    if rows:
        print("  ".join(f"{c:>14}" for c in cols))
        for r in rows:
            print("  ".join(f"{_fmt(r.get(c)):>14}" for c in cols))
    summary = json.loads((run_dir / "metrics.json").read_text())
    keys = [k for k in ("test_acc", "val_acc", "test_rmse", "test_rel_l2", "epochs", "wall_s",
                        "peak_rss_mb", "num_trainers", "num_parts") if k in summary]
    print("final: " + ", ".join(f"{k}={_fmt(summary[k])}" for k in keys))
    print(f"run folder: {run_dir}")


def _fmt(v) -> str:
    if isinstance(v, float):
        return f"{v:.4f}" if abs(v) < 1e4 else f"{v:.3g}"
    return "-" if v is None else str(v)
