"""Run folders, checkpoints and model selection: no data loss, no code from files, best model kept."""
from __future__ import annotations

import hashlib
import json
import os
import pickle
import re
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from dsgraph import checkpoint, config as cfgmod, runs
from dsgraph.errors import ConfigError, UserError
from dsgraph.metrics import read_records, read_summary
from dsgraph.models.registry import build_model, resolve
from dsgraph.runs import RunFolder
from dsgraph.trainer import Strategy, Trainer


def _cfg(tmp_path: Path, **train: Any) -> cfgmod.Config:
    sets = [f"train.out_dir={tmp_path / 'run'}", *(f"train.{k}={v}" for k, v in train.items())]
    return cfgmod.load(None, sets)


# --- run folders ----------------------------------------------------------------------------

def _create(cfg: cfgmod.Config, out: Any = None, resume: bool = False,
            force: bool = False) -> Path:
    return RunFolder.create(cfg, out, resume, force).path


def test_new_run_writes_config_and_marker(tmp_path):
    run = _create(_cfg(tmp_path))
    assert (run / "config.yaml").is_file() and (run / "logs").is_dir()
    assert RunFolder(run).marker()["fingerprint"]["model.name"] == repr("sage")


def test_force_never_replaces_a_users_folder(tmp_path):
    user = tmp_path / "run"
    user.mkdir()
    (user / "thesis.tex").write_text("years of work")
    for force in (False, True):
        with pytest.raises(UserError, match=r"holds 'thesis.tex', which dsgraph did not write"):
            _create(_cfg(tmp_path), force=force)
    assert (user / "thesis.tex").read_text() == "years of work"
    assert sorted(p.name for p in user.iterdir()) == ["thesis.tex"]


def test_force_keeps_a_run_folder_with_a_users_file_in_it(tmp_path):
    run = _create(_cfg(tmp_path))
    (run / "notes.txt").write_text("mine")
    with pytest.raises(UserError, match="notes.txt"):
        _create(_cfg(tmp_path), force=True)
    assert (run / "notes.txt").exists()


def test_force_replaces_a_run_folder_and_plain_reuse_is_refused(tmp_path):
    run = _create(_cfg(tmp_path))
    (run / "metrics.jsonl").write_text('{"epoch": 1}\n')
    with pytest.raises(UserError, match="--resume to continue it or --force"):
        _create(_cfg(tmp_path))
    _create(_cfg(tmp_path), force=True)
    assert not (run / "metrics.jsonl").exists() and (run / runs.MARKER).exists()


def test_out_naming_a_file_is_refused(tmp_path):
    (tmp_path / "afile").write_text("x")
    with pytest.raises(UserError, match="is not a folder"):
        _create(_cfg(tmp_path), tmp_path / "afile", force=True)
    assert (tmp_path / "afile").read_text() == "x"


# --- checkpoints ----------------------------------------------------------------------------

def _save(run: Path, model: nn.Module, epoch: int = 1, meta: dict | None = None,
          best: bool = False) -> None:
    opt = torch.optim.Adam(model.parameters())
    RunFolder(run).save(epoch, model, opt, [checkpoint.rng_state()], meta or {}, best=best)


def test_resume_refuses_other_settings_before_touching_anything(tmp_path):
    cfg = _cfg(tmp_path)
    run = _create(cfg)
    _save(run, nn.Linear(2, 2), meta=runs.run_fingerprint(cfg))
    before = {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()}
    other = cfgmod.load(None, [f"train.out_dir={run}", "model.args.hidden=7"])
    with pytest.raises(UserError, match=r"--resume: the checkpoint was trained with "
                                        r"model.args.hidden=\(default\), now 7"):
        _create(other, resume=True)
    assert {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()} == before
    # what may change on resume (more epochs, a new learning rate) is accepted
    longer = cfgmod.load(None, [f"train.out_dir={run}", "train.epochs=9", "train.lr=0.5"])
    _create(longer, resume=True)


def test_resume_removes_temp_files_of_interrupted_writes(tmp_path):
    cfg = _cfg(tmp_path)
    run = _create(cfg)
    _save(run, nn.Linear(2, 2), meta=runs.run_fingerprint(cfg))
    import subprocess
    import sys

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True).stdout.strip()
    stale = [run / f".checkpoint.pt.{dead}.a1b2.tmp", run / "logs" / f".rank0.log.{dead}.x.tmp"]
    for p in stale:
        p.write_bytes(b"half a checkpoint")
    _create(cfg, resume=True)
    assert not any(p.exists() for p in stale) and (run / runs.CHECKPOINT).exists()


class _Payload:
    """Unpickling this runs code: the attack ``weights_only`` must refuse."""

    def __init__(self, target: Path) -> None:
        self.target = target

    def __reduce__(self):
        return (Path.write_text, (self.target, "pwned"))


def test_crafted_checkpoint_runs_no_code(tmp_path):
    target = tmp_path / "pwned"
    (tmp_path / runs.CHECKPOINT).write_bytes(pickle.dumps(
        {"epoch": 1, "model": _Payload(target)}))
    with pytest.raises(UserError, match=r"checkpoint.pt: not a readable dsgraph checkpoint"):
        RunFolder(tmp_path).checkpoint()
    assert not target.exists()


def test_truncated_checkpoint_is_one_line(tmp_path):
    _save(tmp_path, nn.Linear(4, 3))
    path = tmp_path / runs.CHECKPOINT
    path.write_bytes(path.read_bytes()[:100])
    with pytest.raises(UserError) as exc:
        RunFolder(tmp_path).checkpoint()
    assert "\n" not in str(exc.value) and "checkpoint.pt" in str(exc.value)


def test_rng_state_round_trips_through_a_weights_only_checkpoint(tmp_path):
    import random

    import numpy as np

    _save(tmp_path, nn.Linear(2, 2))
    expected = (random.random(), float(np.random.rand()), float(torch.rand(1)))
    checkpoint.set_rng_state(RunFolder(tmp_path).checkpoint()["rng"][0])
    assert (random.random(), float(np.random.rand()), float(torch.rand(1))) == expected


def test_load_weights_prefers_best_and_rejects_a_foreign_model(tmp_path):
    model = nn.Linear(3, 2)
    _save(tmp_path, model, epoch=2, best=True)
    with torch.no_grad():
        model.weight.add_(1.0)
    _save(tmp_path, model, epoch=5)
    fresh = nn.Linear(3, 2)
    assert RunFolder(tmp_path).load_weights(fresh) == 2
    assert RunFolder(tmp_path).load_weights(fresh, which="last") == 5
    assert torch.equal(fresh.weight, model.weight)
    with pytest.raises(UserError, match="does not fit the configured model"):
        RunFolder(tmp_path).load_weights(nn.Linear(5, 2))


# --- best-validation model selection through the real Trainer --------------------------------

class _ScriptedStrategy(Strategy):
    """A one-process mode whose validation accuracy follows a script: selection is under test."""

    VAL = (0.50, 0.70, 0.60, 0.70)

    def setup(self, trainer: Trainer) -> nn.Module:
        self.x, self.y = torch.randn(16, 3), torch.randn(16, 1)
        return trainer.build_model(3, 1)

    def train_epoch(self, trainer: Trainer, epoch: int) -> dict[str, Any]:
        loss = nn.functional.mse_loss(trainer.model(None, self.x), self.y)
        trainer.step(loss)
        return {"loss": float(loss)}

    def evaluate(self, trainer: Trainer, epoch: int) -> dict[str, Any]:
        return {"val_acc": self.VAL[epoch - 1], "test_acc": epoch / 10}


def test_trainer_keeps_the_best_validation_model(tmp_path):
    cfg = cfgmod.load(None, [f"train.out_dir={tmp_path / 'run'}", "train.epochs=4",
                             "model.name=mlp", "model.args.hidden=4"])
    run = _create(cfg)
    Trainer(cfg, run, _ScriptedStrategy(cfg)).run()
    summary = read_summary(run)
    # the first epoch reaching the best score wins; test figures come from that epoch
    assert summary["best_epoch"] == 2 and summary["val_acc"] == 0.70
    assert summary["test_acc"] == pytest.approx(0.2)
    assert summary["last_test_acc"] == pytest.approx(0.4) and summary["last_val_acc"] == 0.70
    assert RunFolder(run).checkpoint("best")["epoch"] == 2
    assert RunFolder(run).checkpoint("last")["epoch"] == 4
    assert RunFolder(run).checkpoint("best")["meta"] == RunFolder(run).marker()["fingerprint"]
    assert [r["epoch"] for r in read_records(run)] == [1, 2, 3, 4]


# --- user models ----------------------------------------------------------------------------

def test_user_model_faults_are_one_line(tmp_path, monkeypatch):
    (tmp_path / "broken_mod.py").write_text("raise RuntimeError('missing CUDA toolkit')\n")
    (tmp_path / "picky_mod.py").write_text(
        "from torch import nn\n"
        "class Net(nn.Module):\n"
        "    def __init__(self, in_feats, num_classes, hidden=8):\n"
        "        super().__init__()\n"
        "        if hidden > 4:\n"
        "            raise ValueError(f'hidden must be <= 4\\nsecond line')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ConfigError, match=r"importing module 'broken_mod' failed: "
                                          r"RuntimeError: missing CUDA toolkit"):
        resolve("broken_mod:Net")
    with pytest.raises(ConfigError) as exc:
        build_model("picky_mod:Net", 3, 2, {"hidden": 8})
    assert str(exc.value) == ("model.args: Net(in_feats=3, num_classes=2, **{'hidden': 8}) "
                              "raised ValueError: hidden must be <= 4")


# --- run files ------------------------------------------------------------------------------

def test_metrics_log_survives_an_append_cut_short_and_names_a_corrupt_line(tmp_path):
    (tmp_path / "metrics.jsonl").write_text('{"epoch": 1, "loss": 2.0}\n{"epoch": 2, "lo')
    assert read_records(tmp_path) == [{"epoch": 1, "loss": 2.0}]
    (tmp_path / "metrics.jsonl").write_text('{"epoch": 1}\ngarbage\n{"epoch": 3}\n')
    with pytest.raises(UserError, match=r"metrics.jsonl: line 2 is not a JSON record"):
        read_records(tmp_path)
    (tmp_path / "metrics.json").write_text('{"test_acc": 0.')
    with pytest.raises(UserError, match=r"metrics.json: unreadable"):
        read_summary(tmp_path)


def test_a_setting_added_after_the_checkpoint_counts_as_its_default(tmp_path):
    cfg = _cfg(tmp_path)
    run = _create(cfg)
    old = runs.run_fingerprint(cfg)
    del old["partition.halo_hops"]  # as if the key did not exist when the run trained
    _save(run, nn.Linear(2, 2), meta=old)
    _create(cfg, resume=True)
    changed = cfgmod.load(None, [f"train.out_dir={run}", "partition.halo_hops=2"])
    with pytest.raises(UserError, match=r"partition.halo_hops=\(default\), now 2"):
        _create(changed, resume=True)


def test_orphaned_temp_files_of_a_killed_writer_are_removed_by_the_next_write(tmp_path):
    import subprocess
    import sys

    from dsgraph.fsutil import atomic_dir, atomic_write_text

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True).stdout.strip()
    orphan_file = tmp_path / f".metrics.json.{dead}.abc123.tmp"
    orphan_dir = tmp_path / f".parts.{dead}.def456.tmp"
    live = tmp_path / f".metrics.json.{os.getpid()}.zzz.tmp"  # a live writer's: kept
    orphan_file.write_text("half")
    orphan_dir.mkdir()
    live.write_text("in progress")
    atomic_write_text(tmp_path / "metrics.json", "{}")
    assert not orphan_file.exists() and live.exists()
    with atomic_dir(tmp_path / "parts") as tmp:
        (tmp / "x").write_text("1")
    assert not orphan_dir.exists() and (tmp_path / "parts" / "x").exists()


def test_a_job_end_removes_every_orphaned_temp_in_its_run_folder(tmp_path):
    """What the launcher calls when a job ends: dead writers' temps anywhere below the run
    folder go, a live writer's and ordinary files stay."""
    import subprocess
    import sys

    from dsgraph.fsutil import remove_orphaned_temps_in

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True).stdout.strip()
    (tmp_path / "logs").mkdir()
    orphans = [tmp_path / f".checkpoint.pt.{dead}.apjykv2o.tmp",
               tmp_path / "logs" / f".worker0.log.{dead}.x1.tmp"]
    for p in orphans:
        p.write_text("half")
    (tmp_path / f".embeddings.{dead}.q9.tmp").mkdir()
    (tmp_path / f".embeddings.{dead}.q9.tmp" / "part").write_text("half")
    keep = [tmp_path / f".metrics.json.{os.getpid()}.zzz.tmp", tmp_path / "checkpoint.pt"]
    for p in keep:
        p.write_text("x")
    removed = remove_orphaned_temps_in(tmp_path)
    assert sorted(removed) == sorted(orphans + [tmp_path / f".embeddings.{dead}.q9.tmp"])
    assert not any(p.exists() for p in removed) and all(p.exists() for p in keep)


# --- one job per folder, checksums, links, storage -----------------------------------------

_HOLDER = """
import sys, time
from dsgraph.runs import RunFolder
RunFolder(sys.argv[1]).lock("train")
print("locked", flush=True)
time.sleep(120)
"""


def test_a_folder_locked_by_a_live_process_is_refused_naming_it(tmp_path):
    import subprocess
    import sys

    run = _create(_cfg(tmp_path))
    RunFolder(run).unlock()  # as a new launcher: this process holds no lock
    holder = subprocess.Popen([sys.executable, "-c", _HOLDER, str(run)], stdout=subprocess.PIPE,
                              text=True, env={**os.environ, "PYTHONPATH": str(Path.cwd())})
    try:
        assert holder.stdout.readline().strip() == "locked"
        before = sorted(p.name for p in run.iterdir())
        for kwargs in ({"force": True}, {"resume": True}):
            with pytest.raises(UserError, match=rf"{run}: --\w+: the run folder is in use by a "
                                                rf"live job \(train, pid {holder.pid} on "):
                _create(_cfg(tmp_path), **kwargs)
        assert sorted(p.name for p in run.iterdir()) == before
    finally:
        holder.kill()
        holder.wait()
    _create(_cfg(tmp_path), force=True)  # its lock went with it


def test_a_dead_holders_lock_is_taken_over_with_a_notice(tmp_path, capsys):
    run = _create(_cfg(tmp_path))
    RunFolder(run).unlock()
    (run / runs.LOCK).write_text('{"pid": 4194000, "host": "h", "action": "train"}')
    _create(_cfg(tmp_path), force=True)
    assert "taking over the lock of a job that is gone (train, pid 4194000 on h" in \
        capsys.readouterr().err
    RunFolder(run).unlock()
    assert (run / runs.LOCK).read_text() == ""  # released: not stale for the next job


def test_no_changed_byte_of_a_checkpoint_changes_what_is_loaded(tmp_path):
    """Each byte flipped in turn: refused with one line naming the file, or (a byte of the zip
    container that no reader uses: a local header's time stamp, padding) read back unchanged;
    every flip inside the payload is a checksum mismatch."""
    from dsgraph.errors import IntegrityError

    path = tmp_path / "c.pt"
    checkpoint.write(path, 1, nn.Linear(3, 2), {"k": "v"}, record={"epoch": 1, "loss": 0.5})
    good = path.read_bytes()
    ref = checkpoint.read(path)
    payload = torch.load(path, weights_only=True)["data"].numpy().tobytes()  # checksummed
    start = good.find(payload)
    assert start > 0
    mismatches = 0
    for at in range(len(good)):
        bad = bytearray(good)
        bad[at] ^= 0x10
        path.write_bytes(bytes(bad))
        try:
            got = checkpoint.read(path)
        except IntegrityError:
            mismatches += 1
            continue
        except UserError as exc:
            assert str(exc).startswith(f"{path}: ") and "\n" not in str(exc)
            continue
        assert not start <= at < start + len(payload), at
        assert got["epoch"] == 1 and got["meta"] == ref["meta"] and got["record"] == ref["record"]
        assert all(torch.equal(got["model"][k], v) for k, v in ref["model"].items())
    assert mismatches >= len(payload)


def test_an_edited_summary_is_refused_and_a_rewritten_one_verifies(tmp_path):
    from dsgraph.errors import IntegrityError
    from dsgraph.metrics import update_summary, write_summary

    write_summary(tmp_path, {"test_acc": 0.5})
    update_summary(tmp_path, wall_s=3.0)
    assert read_summary(tmp_path) == {"test_acc": 0.5, "wall_s": 3.0}
    path = tmp_path / "metrics.json"
    path.write_text(path.read_text().replace("0.5", "0.9"))
    with pytest.raises(IntegrityError, match=rf"{path}: checksum mismatch"):
        read_summary(tmp_path)


def test_symlinked_run_folders_are_never_used_or_replaced(tmp_path):
    real = _create(_cfg(tmp_path))
    link = tmp_path / "link"
    link.symlink_to(real)
    for kwargs in ({"force": True}, {"resume": True}, {}):
        with pytest.raises(UserError, match=rf"{link}: (--)?\w+: is a symbolic link"):
            _create(_cfg(tmp_path), link, **kwargs)
    assert (real / "config.yaml").is_file() and link.is_symlink()
    # a linked job folder inside the run is unlinked, never followed into deletion
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep").write_text("x")
    (real / "predictions_job").symlink_to(outside)
    job = RunFolder(real).job_dir("predictions_job")
    assert job.is_dir() and not job.is_symlink() and (outside / "keep").is_file()


def test_a_resume_restores_the_checkpointed_epochs_record(tmp_path):
    from dsgraph.metrics import MetricsLog

    (tmp_path / "metrics.jsonl").write_text('{"epoch": 1, "loss": 2.0}\n{"epoch": 2, "lo')
    MetricsLog(tmp_path, resume_epoch=2, resume_record={"epoch": 2, "loss": 1.5})
    assert read_records(tmp_path) == [{"epoch": 1, "loss": 2.0}, {"epoch": 2, "loss": 1.5}]
    # an intact line is kept as it is
    MetricsLog(tmp_path, resume_epoch=2, resume_record={"epoch": 2, "loss": 9.0})
    assert read_records(tmp_path)[-1] == {"epoch": 2, "loss": 1.5}


def test_a_refused_write_is_one_line_and_keeps_the_old_file(tmp_path, monkeypatch):
    import errno

    from dsgraph.errors import StorageError
    from dsgraph.fsutil import atomic_write_text

    path = tmp_path / "f.txt"
    atomic_write_text(path, "old")

    for code, says in ((errno.ENOSPC, r"no space left on the device \(ENOSPC\)"),
                       (errno.EROFS, r"read-only \(EROFS\)"), (errno.EDQUOT, "quota"),
                       (errno.EACCES, "permission denied")):
        monkeypatch.setattr(os, "replace", lambda *a, c=code: (_ for _ in ()).throw(
            OSError(c, os.strerror(c))))
        with pytest.raises(StorageError, match=rf"^{tmp_path}: cannot write f.txt: .*{says}"):
            atomic_write_text(path, "new")
    monkeypatch.undo()
    assert path.read_text() == "old" and sorted(p.name for p in tmp_path.iterdir()) == ["f.txt"]


def test_a_run_folder_written_before_a_key_moved_stays_readable(tmp_path):
    run = RunFolder(_create(_cfg(tmp_path)))
    text = (run.path / "config.yaml").read_text()
    assert "\ntask:\n  name: auto" in text
    # as written before task.name existed: the task under train, no task section
    old = re.sub(r"\ntask:\n(  .*\n)+", "\n", text)  # the whole section, whatever its keys
    old = old.replace("train:\n", "train:\n  task: node_classification\n", 1)
    (run.path / "config.yaml").write_text(old)
    marker = run.marker()
    marker["config_sha256"] = hashlib.sha256(old.encode()).hexdigest()
    (run.path / runs.MARKER).write_text(json.dumps(marker))
    assert run.config().task.name == "node_classification"
    with pytest.raises(ConfigError, match="train.task: this key is now task.name"):
        cfgmod.load(run.path / "config.yaml")  # a user's own config is told where it went
