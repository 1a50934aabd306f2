"""SAR pieces that need no process group: layer checks, config, graph surface, errors."""
from __future__ import annotations

import subprocess
import sys

import pytest
import torch

import dgl.nn as dglnn
from dsgraph.config import load
from dsgraph.errors import ConfigError, UserError
from dsgraph.models.registry import build_model
from dsgraph.sar.model import check_model


@pytest.mark.parametrize("name,args", [("gcn", {}), ("sage", {"aggregator": "mean"}),
                                       ("sage", {"aggregator": "pool"}), ("gat", {"heads": 2})])
def test_supported_models_pass_the_layer_check(name, args):
    check_model(build_model(name, 5, 3, args))


def test_unsupported_layer_error_names_the_layer():
    model = torch.nn.ModuleList([dglnn.GraphConv(4, 4), dglnn.ChebConv(4, 4, 2)])
    with pytest.raises(UserError, match=r"'1' is dgl\.nn\.pytorch\.conv\.chebconv\.ChebConv"):
        check_model(model)
    with pytest.raises(UserError, match="aggregator 'lstm'"):
        check_model(build_model("sage", 5, 3, {"aggregator": "lstm"}))


def test_sar_config_section_validates(tmp_path):
    cfg = load(None, ["sar.mode=one_shot", "train.mode=sar"])
    assert cfg.sar.mode == "one_shot" and not cfg.sar.prefetch
    with pytest.raises(ConfigError, match=r"sar\.mode: expected one of 'sar', 'sa', 'one_shot'"):
        load(None, ["sar.mode=ring"])
    cfg = load("configs/sar.yaml")
    assert cfg.train.mode == "sar"
    assert cfg.partition.out_dir != load("configs/default.yaml").partition.out_dir


def test_sum_to_reduces_broadcast_dims():
    from dsgraph.seqagg.kernels import sum_to as _sum_to
    t = torch.ones(5, 4, 3)
    assert _sum_to(t, (7, 4, 1)).shape == (5, 4, 1)
    assert torch.equal(_sum_to(t, (7, 4, 1)), torch.full((5, 4, 1), 3.0))
    assert _sum_to(t, (5, 4, 3)) is t


def test_missing_partition_is_a_one_line_error(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"train: {{mode: sar, out_dir: {tmp_path / 'run'}}}\n"
                   f"partition: {{out_dir: {tmp_path / 'nowhere'}}}\n")
    r = subprocess.run([sys.executable, "-m", "train", "--config", str(cfg)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip().startswith("error: ") and "partition files not found" in r.stderr
    assert "Traceback" not in r.stderr


@pytest.mark.parametrize("piece_rows", [1, 3, 64])
def test_ring_pieces_pair_up_and_cover_every_row(piece_rows):
    """Each worker's round r receives, piece by piece, exactly the rows it needs from part
    rank - r while part rank - r sends the same ranges; every worker makes as many exchanges."""
    from dsgraph.sar.comm import ring_pieces

    gen = torch.Generator().manual_seed(piece_rows)
    for n in (1, 2, 3, 5):
        table = torch.randint(0, 10, (n, n), generator=gen)
        table[0, -1] = 0  # a part that needs nothing from another (an empty transfer)
        table.fill_diagonal_(0)
        table = table.tolist()
        sched = [ring_pieces(table, k, piece_rows) for k in range(n)]
        assert len({len(s) for s in sched}) == 1
        for k in range(n):
            for i, p in enumerate(sched[k]):
                peer = sched[p.src][i]  # the same exchange on the worker that sends to k
                assert peer.dst == k and peer.sent == p.rows
                assert 0 <= p.rows[1] - p.rows[0] <= piece_rows
            for j in range(n):
                if j == k:
                    continue
                got = [p.rows for p in sched[k] if p.src == j and p.rows[1] > p.rows[0]]
                assert [r for a, b in got for r in range(a, b)] == list(range(table[k][j]))
                assert all(a % piece_rows == 0 for a, _ in got)  # pieces start on chunk edges
