"""End to end: ``python -m train`` in dsmpnn mode with 2 real gloo workers, resume, bad input."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.dist import jobs
from tests.dist.jobs import ROOT


@pytest.mark.fast
@pytest.mark.timeout(240)
def test_darcy_two_workers_train_resume(darcy_two_epochs, darcy_three_epochs, tmp_path):
    summary = jobs.summary(darcy_two_epochs.path)
    assert summary["num_workers"] == 2 and summary["epochs"] == 2
    assert 0 < summary["test_rel_l2"] < 1.0  # better than predicting zero
    assert summary["test_rmse"] > 0 and len(summary["peak_rss_mb_per_worker"]) == 2

    run = shutil.copytree(darcy_two_epochs.path, tmp_path / "run")  # the shared run stays as is
    jobs.train(jobs.DARCY, run, *darcy_two_epochs.sets, "train.epochs=3", resume=True)
    straight = darcy_three_epochs.path
    timed = jobs.summary(straight)
    assert len(timed["infer_s_all"]) == 3 and timed["infer_s"] == sorted(timed["infer_s_all"])[1]
    # Repeated timing passes predict the same fields as one pass of the retraced run.
    after = jobs.summary(run)
    assert timed["test_rmse"] == pytest.approx(after["test_rmse"], rel=1e-5)
    lines, ref = jobs.epochs(run), jobs.epochs(straight)
    assert [r["epoch"] for r in lines] == [1, 2, 3]
    # Shared per-epoch seeds: a resumed run retraces the uninterrupted one.
    assert [r["loss"] for r in lines] == pytest.approx([r["loss"] for r in ref], rel=1e-6)
    assert ref[2]["loss"] < ref[0]["loss"]


@pytest.mark.timeout(60)
def test_dsmpnn_rejects_graph_dataset(tmp_path):
    code, err = jobs.run_main("train", "--config", str(jobs.DARCY), "--out", str(tmp_path / "r"),
                              "--set", "dataset.name=synthetic")
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "dataset.name" in lines[0] and "darcy" in lines[0]


def _field_file(path: Path, n: int, s: int) -> Path:
    """Grid fields on an s x s grid: x = a smooth random field, y = its local average squared."""
    import numpy as np

    rng = np.random.default_rng(s)
    t = np.linspace(0, 1, s)
    modes = rng.standard_normal((n, 3, 1, 1))
    x = (modes[:, 0] * np.sin(np.pi * t)[:, None] + modes[:, 1] * np.cos(np.pi * t)[None, :]
         + modes[:, 2]).astype(np.float32)
    np.savez(path, x=x, y=(x ** 2).astype(np.float32))
    return path


@pytest.mark.timeout(180)
def test_fields_file_trains_end_to_end_with_transfer(tmp_path, capsys):
    """`python -m train` on a user's field file: one worker, batched steps, a transfer file at
    another resolution; a broken file is one line before the run folder is touched."""
    train = _field_file(tmp_path / "train.npz", 10, 16)
    fine = _field_file(tmp_path / "fine.npz", 2, 24)
    run = tmp_path / "run"
    sets = ["dataset.path=" + str(train), "dataset.split=[0.8, 0, 0.2]",
            "dataset.transfer_path=" + str(fine), "physics.workers=1", "physics.batch_fields=3",
            "physics.sampled_nodes=120", "physics.radius=0.25", "physics.max_edges=8",
            "physics.infer_repeats=1", "model.args={width: 8, layers: 2, kernel_hidden: 8}",
            "train.epochs=2", "train.timeout_s=120"]
    jobs.train(ROOT / "configs/fields.yaml", run, *sets)
    summary = jobs.summary(run)
    assert summary["dataset"] == "fields" and summary["num_workers"] == 1
    assert summary["steps"] == 2 * 3  # 8 training fields in batches of 3: 3 steps per epoch
    for key in ("test_rmse", "test_rel_l2", "transfer_rmse", "transfer_rel_l2", "train_rmse"):
        assert 0 < summary[key] < 10, key

    import numpy as np

    from dsgraph.cli.train import main

    bad = tmp_path / "bad.npz"
    np.savez(bad, x=np.zeros((4, 5, 5), np.float32), y=np.zeros((4, 5, 4), np.float32))
    out = tmp_path / "never"
    capsys.readouterr()
    with pytest.raises(SystemExit) as exc:  # in this process: the check precedes any job
        main(["--config", str(ROOT / "configs/fields.yaml"), "--out", str(out), "--set",
              f"dataset.path={bad}"])
    lines = capsys.readouterr().err.strip().splitlines()
    assert exc.value.code == 2 and not out.exists()
    assert lines == [f"error: {bad}: y: expected shape (4, 5, 5[, C]) like x (4, 5, 5) "
                     f"(without 'pos', a 3-D x is a grid), got (4, 5, 4)"], lines
