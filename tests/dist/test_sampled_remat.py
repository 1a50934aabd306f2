"""Sampled rematerialization (``sampled.rematerialize``) gives stock sampled training's loss and
gradients on the same blocks.

Unit level (no servers): blocks sampled from a local graph whose nodes are split over four
"partitions" of very different sizes, one owning no sampled source (an empty group); SAGE (mean,
gcn, pool), GCN and GAT, float64 and float32, whole groups and chunks of 3 rows, stored features
and learnable input embeddings. With 2 partitions on one host: a real DistGraph job
(``python -m tests.dist.test_sampled_remat --run-dir RUN`` is its trainer) compares both on
blocks sampled from the servers, features pulled through the halo cache and RPC.
"""
from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from tests.dist.trainer_process import connect, run

MODELS = [("sage", {"hidden": 8}), ("sage", {"hidden": 24}),
          ("sage", {"hidden": 8, "aggregator": "gcn"}), ("sage", {"hidden": 8, "aggregator": "pool"}),
          ("gcn", {"hidden": 8}), ("gcn", {"hidden": 24}), ("gat", {"hidden": 4, "heads": 2})]
TOL = {"float64": 1e-9, "float32": 2e-4}


def grad_errors(a: dict, b: dict) -> dict:
    """Per tensor: max|a - b| / max|b| in float64 (a tensor whose reference is numerically zero,
    below 1e-9 of the largest gradient by cancellation, as the last GAT layer's attn_r, is
    measured against the largest gradient instead); in float32 / the largest gradient."""
    top = max(t.abs().max().item() for t in b.values())
    out = {}
    for k, ref in b.items():
        scale = ref.abs().max().item()
        if ref.dtype != torch.float64 or scale <= 1e-9 * top:
            scale = top
        out[k] = (a[k] - ref).abs().max().item() / scale
    return out


def compare(model, blocks, source_rows, owner, y, dtype, chunk_rows=0, embedding=None,
            compression=None, grads_out=None, layers=1):
    """(loss error, per-tensor gradient errors, (partition, rows) per group, pulls of source
    rows that are not destination rows in backward) of the rematerialized model (its first
    ``layers`` layers) against the stock one on the same blocks;
    ``grads_out`` (a dict), if given, receives the rematerialized model's gradients."""
    import dgl

    from dsgraph.remat import EmbeddingRows, FeatureRows, RematBlock, install
    m2, e2 = copy.deepcopy(model), copy.deepcopy(embedding)
    ids = blocks[0].srcdata[dgl.NID]
    x = embedding(ids) if embedding is not None else source_rows(ids)
    loss = F.cross_entropy(model(blocks, x), y)
    loss.backward()
    install(m2)
    pulls = []

    dst_ids = set(blocks[0].dstdata[dgl.NID].tolist())

    class Counting(FeatureRows):
        def rows(self, i):
            # the output runs pull destination rows; a group of source rows has others too
            pulls.append(not set(i.tolist()) <= dst_ids)
            return super().rows(i)
    src = EmbeddingRows(e2) if e2 is not None else Counting(_Reader(source_rows))
    rb = RematBlock(blocks[0], src, owner, own_part=0, chunk_rows=chunk_rows,
                    compression=compression)
    later = [RematBlock(b, None, chunk_rows=chunk_rows, compression=compression)
             for b in blocks[1:layers]]
    loss2 = F.cross_entropy(m2([rb] + later + list(blocks[layers:]),
                               rb.placeholder(x.shape[1], dtype)), y)
    n_fwd = len(pulls)
    loss2.backward()
    back = sum(pulls[n_fwd:])
    ref = {k: p.grad for k, p in model.named_parameters()}
    got = {k: p.grad for k, p in m2.named_parameters()}
    if embedding is not None:
        ref["embedding"], got["embedding"] = embedding.weight.grad, e2.weight.grad
    if grads_out is not None:
        grads_out.update(got)
    return (abs(loss.item() - loss2.item()) / abs(loss.item()), grad_errors(got, ref),
            [(g.part, g.ids.numel()) for g in rb.groups], back)


class _Reader:
    def __init__(self, fn):
        self.fn = fn

    def __getitem__(self, ids):
        return self.fn(ids)


@pytest.fixture(scope="module")
def batch():
    """Blocks of a 2-layer sample and an owner map with groups of 8-ish, ~120 and ~140 rows
    plus a partition (3) that owns nothing."""
    import dgl
    gen = torch.Generator().manual_seed(0)
    n = 400
    src, dst = torch.randint(0, n, (4000,), generator=gen), torch.randint(0, n, (4000,),
                                                                           generator=gen)
    g = dgl.graph((src, dst), num_nodes=n)
    feat = torch.randn(n, 16, generator=gen, dtype=torch.float64)
    owner = torch.zeros(n, dtype=torch.int64)
    owner[:12], owner[12:200] = 1, 2  # part 0 (the trainer's own) owns the rest
    dgl.seed(0)
    _, seeds, blocks = dgl.dataloading.NeighborSampler([6, 4]).sample_blocks(
        g, torch.arange(200, 240))
    y = torch.randint(0, 3, (seeds.numel(),), generator=gen)
    return blocks, feat, owner, y


@pytest.mark.fast
@pytest.mark.parametrize("name,args", MODELS)
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_loss_and_gradients_equal_stock(batch, name, args, dtype):
    from dsgraph.models.registry import build_model
    blocks, feat, owner, y = batch
    dt = getattr(torch, dtype)
    for chunk in (0, 3):
        torch.manual_seed(1)
        model = build_model(name, 16, 3, args).to(dt)
        lerr, gerr, sizes, back = compare(model, blocks, lambda i: feat[i].to(dt),
                                          lambda i: owner[i], y, dt, chunk)
        assert lerr <= TOL[dtype], (name, args, chunk, lerr)
        assert max(gerr.values()) <= TOL[dtype], (name, args, chunk, gerr)
        per_part: dict[int, int] = {}
        for part, rows in sizes:
            per_part[part] = per_part.get(part, 0) + rows
        assert len(per_part) == 3 and min(per_part.values()) < 20 < 100 < max(per_part.values())
        # chunked, no group holds more than chunk rows: the largest partition's share is cut up
        assert (len(sizes) == 3) if chunk == 0 else max(r for _, r in sizes) <= chunk, sizes
        # linear aggregation of stored features (aggregated before the layer's linear map,
        # whichever order DGL would pick for the widths): backward pulls nothing again
        linear = (name == "sage" and args.get("aggregator", "mean") in ("mean", "gcn")) \
            or name == "gcn"
        assert (back == 0) == linear, (name, args, back)


@pytest.mark.fast
@pytest.mark.parametrize("name,args", [MODELS[0], MODELS[3], MODELS[4], MODELS[6]])
def test_learnable_input_embeddings(batch, name, args):
    from dsgraph.models.registry import build_model
    blocks, feat, owner, y = batch
    torch.manual_seed(2)
    model = build_model(name, 16, 3, args).double()
    emb = torch.nn.Embedding(feat.shape[0], 16).double()
    lerr, gerr, _, _ = compare(model, blocks, None, lambda i: owner[i], y, torch.float64, 3, emb)
    assert lerr <= 1e-9 and max(gerr.values()) <= 1e-9, gerr
    assert gerr["embedding"] <= 1e-9


@pytest.mark.fast
@pytest.mark.parametrize("name,args", MODELS)
@pytest.mark.parametrize("chunk_rows", [0, 3])
def test_later_layer_rematerialized(batch, name, args, chunk_rows):
    """Both layers rematerialized (the second over the first's output, by position): loss and
    every gradient equal stock's in float64, stored features and learnable embeddings."""
    from dsgraph.models.registry import build_model
    blocks, feat, owner, y = batch
    torch.manual_seed(4)
    model = build_model(name, 16, 3, args).double()
    lerr, gerr, _, _ = compare(copy.deepcopy(model), blocks, lambda i: feat[i],
                               lambda i: owner[i], y, torch.float64, chunk_rows, layers=2)
    assert lerr <= 1e-9 and max(gerr.values()) <= 1e-9, gerr
    emb = torch.nn.Embedding(feat.shape[0], 16).double()
    lerr, gerr, _, _ = compare(model, blocks, None, lambda i: owner[i], y, torch.float64,
                               chunk_rows, emb, layers=2)
    assert lerr <= 1e-9 and max(gerr.values()) <= 1e-9, gerr


class _UserGat(torch.nn.Module):
    """A user's 2-layer GAT whose layers have a residual map and an activation: the output map
    after the aggregation is more than a bias, so the aggregate's gradient is not the
    output's."""

    def __init__(self) -> None:
        super().__init__()
        from dgl.nn import GATConv
        self.layers = torch.nn.ModuleList([
            GATConv(16, 4, 2, residual=True, activation=F.elu, allow_zero_in_degree=True),
            GATConv(8, 3, 1, residual=True, allow_zero_in_degree=True)])

    def forward(self, blocks, x):
        h = self.layers[0](blocks[0], x).flatten(1)
        return self.layers[1](blocks[1], h).mean(1)


@pytest.mark.fast
@pytest.mark.parametrize("fc_bias", [False, True], ids=["plain-projection", "projection-with-bias"])
@pytest.mark.parametrize("layers", [1, 2])
def test_gat_with_residual_and_activation(batch, layers, fc_bias):
    """Also with a projection that has a bias (not DGL's): backward then reruns the groups'
    source side under autograd instead of taking its gradients explicitly."""
    from dsgraph.seqagg.gat import projection_keepable
    blocks, feat, owner, y = batch
    torch.manual_seed(5)
    model = _UserGat()
    if fc_bias:
        for conv in model.layers:
            conv.fc = torch.nn.Linear(conv.fc.in_features, conv.fc.out_features, bias=True)
    assert projection_keepable(model.layers[0]) != fc_bias
    model = model.double()
    lerr, gerr, _, _ = compare(model, blocks, lambda i: feat[i], lambda i: owner[i], y,
                               torch.float64, 3, layers=layers)
    assert lerr <= 1e-9 and max(gerr.values()) <= 1e-9, gerr


@pytest.mark.fast
def test_composes_with_int2_compression(batch):
    """INT2 inside the groups' backward (GAT: each group's source projection, kept INT2 from
    forward instead of recomputed): the forward stays exact, only the first layer's
    gradients carry quantization noise, and that noise is unbiased (stochastic rounding): the
    mean over 8 rounding seeds is much closer to the exact gradient than a single run."""
    import dgl

    from dsgraph.config import CompressionConfig
    from dsgraph.models.registry import build_model
    blocks, feat, owner, y = batch
    torch.manual_seed(3)
    model = build_model("gat", 16, 3, {"hidden": 32, "heads": 4})
    runs, single = [], []
    for seed in range(8):
        cfg = CompressionConfig(enabled=True, min_numel=0, seed=seed)
        grads: dict = {}
        lerr, gerr, _, back = compare(copy.deepcopy(model), blocks, lambda i: feat[i].float(),
                                      lambda i: owner[i], y, torch.float32, 0, compression=cfg,
                                      grads_out=grads)
        assert lerr < 1e-5 and back > 0  # forward exact; backward reads compressed rows
        later = {k: v for k, v in gerr.items() if not k.startswith("layers.0.")}
        assert max(later.values()) <= TOL["float32"], later  # only the recompute is quantized
        single.append(max(gerr.values()))
        runs.append(grads)
    assert min(single) > TOL["float32"], single  # quantized saves: close, not equal
    ref = copy.deepcopy(model)
    x = feat[blocks[0].srcdata[dgl.NID]].float()
    F.cross_entropy(ref(blocks, x), y).backward()
    exact = {k: p.grad for k, p in ref.named_parameters()}
    mean = {k: torch.stack([r[k] for r in runs]).mean(0) for k in exact}
    averaged = max(grad_errors(mean, exact).values())
    assert averaged < 0.6 * sorted(single)[len(single) // 2], (averaged, single)


@pytest.mark.fast
def test_unsupported_first_layer_is_one_line(batch):
    import dgl.nn as dglnn

    from dsgraph.errors import UserError
    from dsgraph.remat import FeatureRows, RematBlock, install
    blocks, feat, owner, _ = batch
    conv = install(torch.nn.ModuleList([dglnn.SAGEConv(16, 4, "lstm")]))[0]
    rb = RematBlock(blocks[0], FeatureRows(feat), lambda i: owner[i])
    with pytest.raises(UserError, match="SAGEConv, which cannot be rematerialized"):
        conv(rb, rb.placeholder(16, torch.float64))


# --- 2 partitions, real DistGraph servers -----------------------------------------------------

def _trainer(run_dir: Path) -> None:
    """Trainer of the job: one batch per model from the servers, stock vs rematerialized."""
    import dgl
    import torch.distributed as dist

    from dsgraph.distgraph.features import CachedFeatures
    from dsgraph.models.registry import build_model

    rank, g = connect()
    pb = g.get_partition_book()
    feat = CachedFeatures(g, "feat")
    dgl.seed(rank)
    seeds = dgl.distributed.node_split(g.ndata["train_mask"], pb, force_even=True)[:64]
    sampler = dgl.dataloading.NeighborSampler([8, 5])
    loader = dgl.dataloading.DistNodeDataLoader(g, seeds, sampler, batch_size=64)
    _, out_nodes, blocks = next(iter(loader))
    y = g.ndata["label"][out_nodes]
    results = {}
    for dtype in ("float64", "float32"):
        dt = getattr(torch, dtype)
        for name, args in [MODELS[0], MODELS[3], MODELS[4], MODELS[6]]:
            torch.manual_seed(0)
            model = build_model(name, feat.tensor.shape[1], 4, args).to(dt)
            lerr, gerr, sizes, _ = compare(
                model, blocks, lambda i: feat[i].to(dt), pb.nid2partid, y, dt, 5)
            results[f"{name}{args.get('aggregator', '')}/{dtype}"] = {
                "loss": lerr, "grad": max(gerr.values()), "groups": sizes}
    torch.manual_seed(0)
    emb = torch.nn.Embedding(g.num_nodes(), 8).double()
    model = build_model("gat", 8, 4, {"hidden": 4, "heads": 2}).double()
    lerr, gerr, sizes, _ = compare(model, blocks, None, pb.nid2partid, y, torch.float64, 5, emb)
    results["gat/embedding"] = {"loss": lerr, "grad": max(gerr.values()), "groups": sizes}
    (run_dir / f"remat{rank}.json").write_text(json.dumps(results))
    dist.barrier()
    dgl.distributed.exit_client()


@pytest.mark.timeout(240)
def test_trainer_with_two_rematerialized_layers_trains_as_stock(tmp_path):
    """Real sampled jobs (2 partitions, DistGraph servers, 2 trainers, DDP) of a 2-layer GAT,
    stock and with ``sampled.rematerialize`` over both layers (``sampled.remat_layers: 2``,
    groups of 16 rows): same seed and every neighbourhood sampled locally (2-hop halos; the
    servers' sampling is not seeded), so the same batches; every epoch's loss and the weights
    after training agree to float32 rounding."""
    from dsgraph import config as config_mod
    from dsgraph.metrics import read_records
    from dsgraph.models.registry import build_model
    from dsgraph.runs import RunFolder
    from dsgraph.cli.partition import main as partition_main
    from dsgraph.cli.train import launch
    cfg_file = tmp_path / "gat.yaml"
    cfg_file.write_text(f"""
dataset: {{num_nodes: 600, avg_degree: 6, num_classes: 4, feat_dim: 8, cache_dir: {tmp_path}/data}}
partition: {{num_parts: 2, method: random, out_dir: {tmp_path}/parts, halo_hops: 2}}
model: {{name: gat, args: {{hidden: 4, heads: 2, num_layers: 2}}}}
train: {{mode: sampled, epochs: 2, lr: 0.02, timeout_s: 150, seed: 3}}
sampled: {{fanouts: [4, 4], batch_size: 64, eval_batch_size: 256, local_sampling: true}}
seqagg: {{chunk_rows: 16}}
""")
    partition_main(["--config", str(cfg_file)])
    losses, weights = {}, {}
    for name, sets in (("stock", []), ("remat", ["sampled.rematerialize=true",
                                                  "sampled.remat_layers=2"])):
        cfg = config_mod.load(cfg_file, sets)
        run = RunFolder.create(cfg, tmp_path / name, force=True)
        launch(cfg, run, False)
        losses[name] = [r["loss"] for r in read_records(run.path)]
        model = build_model("gat", 8, 4, {"hidden": 4, "heads": 2, "num_layers": 2})
        run.load_weights(model, "last")
        weights[name] = model.state_dict()
    assert len(losses["stock"]) == 2
    assert losses["remat"] == pytest.approx(losses["stock"], rel=1e-4)
    for k, w in weights["stock"].items():
        assert (weights["remat"][k] - w).abs().max() <= 1e-4 * max(w.abs().max(), 1e-3), k


def test_two_partitions_with_distgraph_servers(tmp_path):
    from dsgraph.cluster.dgl_job import run_dgl_job
    from dsgraph.config import ClusterConfig, DatasetConfig
    from dsgraph.data.synthetic import generate
    from dsgraph.partition import partition_graph
    g = generate(DatasetConfig(num_nodes=2000, feat_dim=8, num_classes=4))
    part = partition_graph(g, 2, tmp_path / "parts", method="random")
    run = tmp_path / "run"
    run.mkdir()
    run_dgl_job(run, part, ClusterConfig(), "tests.dist.test_sampled_remat", timeout_s=200)
    for r in range(2):
        res = json.loads((run / f"remat{r}.json").read_text())
        assert len(res) == 9
        for key, v in res.items():
            tol = TOL["float32"] if "float32" in key else TOL["float64"]
            assert v["loss"] <= tol and v["grad"] <= tol, (r, key, v)
            # own partition and the other one, in groups of at most 5 rows
            assert len({part for part, _ in v["groups"]}) == 2, (key, v)
            assert max(rows for _, rows in v["groups"]) <= 5, (key, v)


if __name__ == "__main__":
    from dsgraph.cluster import dgl_compat

    dgl_compat.apply_from_env()  # process entry point: patch before DGL starts
    run(_trainer)
