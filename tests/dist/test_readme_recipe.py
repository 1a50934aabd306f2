"""The README's "Your data to predictions" blocks, run verbatim by bash as a user runs them: a
small OGB-layout folder in ``$HOME/arxiv`` and a DGL CSV folder in ``$HOME/my_graph``, in a copy
of the checkout (so the runs and partitions the blocks write land there, not in this one) that
shares this checkout's ``.venv``. The predictions must hold one row per node keyed by the
user's node ids. The copy's recipes train fewer epochs than they ship with."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tests.test_datasets_formats import N, toy, write_dgl_csv, write_ogb

ROOT = Path(__file__).resolve().parents[2]


def readme_blocks() -> list[str]:
    """The bash blocks of the README's "Your data to predictions" section, in order."""
    text = (ROOT / "README.md").read_text()
    section = text.split("## Your data to predictions", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```bash\n(.*?)```", section, re.S)


@pytest.fixture(scope="module")
def checkout(tmp_path_factory) -> Path:
    """The tracked files of this checkout copied, with this checkout's .venv linked in."""
    copy = tmp_path_factory.mktemp("checkout")
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True,
                           check=True).stdout.decode().split("\0")
    for name in filter(None, files):
        src = ROOT / name
        if src.is_file():
            (copy / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, copy / name)
    (copy / ".venv").symlink_to(ROOT / ".venv")
    # The recipes' epochs are for real data (tests/test_recipes.py checks what they ship); the
    # copy trains a few, so the test checks the commands, not a long run.
    for name, epochs in (("ogb_example", 20), ("csv_example", 3)):
        cfg = copy / "configs" / f"{name}.yaml"
        text = re.sub(r"(?m)^  epochs: \d+$", f"  epochs: {epochs}", cfg.read_text())
        assert f"  epochs: {epochs}" in text, name
        cfg.write_text(text)
    return copy


def run_block(block: str, cwd: Path, home: Path) -> None:
    """``block`` as a bash script (stop at the first failing command) with ``HOME=home``."""
    env = {**os.environ, "HOME": str(home)}
    done = subprocess.run(["bash", "-e", "-c", block], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=400)
    assert done.returncode == 0, (done.stdout[-2000:], done.stderr[-3000:])


@pytest.mark.timeout(900)
def test_readme_blocks_run_verbatim(checkout, tmp_path):
    ogb_block, csv_block = readme_blocks()
    assert "$HOME/arxiv" in ogb_block and "$HOME/my_graph" in csv_block
    data = toy()
    write_ogb(tmp_path / "arxiv", data)
    write_dgl_csv(tmp_path / "my_graph", data)
    run_block(ogb_block, checkout, tmp_path)
    out = pd.read_csv(checkout / "arxiv_predictions.csv")
    assert out["node_id"].tolist() == list(range(N))  # OGB: row indices
    assert {"pred", "prob_0"} <= set(out.columns)
    run_block(csv_block, checkout, tmp_path)
    out = pd.read_csv(checkout / "my_predictions.csv")
    assert sorted(out["node_id"].tolist()) == (100 + 7 * np.arange(N)).tolist()  # the CSV's ids
    assert np.allclose(out.filter(like="prob_").sum(axis=1), 1.0, atol=1e-4)
