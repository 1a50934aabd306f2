"""Relational models (dsgraph.models.hetero): RGCN against a dense reference, blocks against the
full graph, INT2 compression of their saved tensors, and the registry's contract."""
from __future__ import annotations

import dgl
import pytest
import torch

from dsgraph.compress import compression_context
from dsgraph.config import CompressionConfig
from dsgraph.models.hetero import RGAT, RGCN
from dsgraph.models.registry import build_model

ETYPES = [("paper", "cites", "paper"), ("author", "writes", "paper"),
          ("paper", "written_by", "author"), ("field", "topic_of", "paper")]
SIZES = {"paper": 40, "author": 30, "field": 6}


def toy_graph(seed: int = 0) -> dgl.DGLGraph:
    """A small random heterograph over ETYPES (every paper has a field)."""
    gen = torch.Generator().manual_seed(seed)
    data = {}
    for s, r, d in ETYPES:
        m = 120 if r != "topic_of" else SIZES["paper"]
        src = torch.randint(0, SIZES[s], (m,), generator=gen)
        dst = torch.randint(0, SIZES[d], (m,), generator=gen) if r != "topic_of" \
            else torch.arange(SIZES["paper"])
        data[(s, r, d)] = (src, dst)
    return dgl.heterograph(data, num_nodes_dict=SIZES)


def inputs(widths: dict[str, int], seed: int = 1, dtype=torch.float64) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return {t: torch.randn(SIZES[t], w, generator=gen, dtype=dtype) for t, w in widths.items()}


def test_rgcn_matches_dense_reference():
    """One RGCN layer = sum over relations of (row-normalised adjacency @ h_src) W_r + self-loop."""
    g = toy_graph()
    widths = {"paper": 5, "author": 3, "field": 4}
    model = RGCN(widths, 7, ETYPES, num_layers=1, dropout=0.0).double()
    x = inputs(widths)
    out = model([g], x)
    for dst in ("paper", "author"):
        ref = model.self_loops[0][dst](x[dst])
        for s, r, d in ETYPES:
            if d != dst:
                continue
            src, dsts = g.edges(etype=r)
            adj = torch.zeros(SIZES[d], SIZES[s], dtype=torch.float64)
            adj.index_put_((dsts, src), torch.ones(len(src), dtype=torch.float64), accumulate=True)
            deg = adj.sum(1, keepdim=True).clamp(min=1)
            conv = model.layers[0].mods[r]
            ref = ref + (adj / deg) @ x[s] @ conv.weight
        assert torch.allclose(out[dst], ref, atol=1e-12), dst


@pytest.mark.parametrize("cls", [RGCN, RGAT])
def test_blocks_equal_full_graph(cls):
    """Two layers over sampled-with-all-neighbours blocks give the full graph's seed rows."""
    g = toy_graph()
    widths = {"paper": 5, "author": 3, "field": 4}
    model = cls(widths, 4, ETYPES, hidden=8, num_layers=2, dropout=0.0).double().eval()
    x = inputs(widths)
    full = model([g, g], x)["paper"]
    seeds = {"paper": torch.tensor([0, 3, 7, 11])}
    sampler = dgl.dataloading.MultiLayerFullNeighborSampler(2)
    input_nodes, _, blocks = sampler.sample_blocks(g, seeds)
    out = model(blocks, {t: x[t][ids] for t, ids in input_nodes.items()})["paper"]
    assert torch.allclose(out, full[seeds["paper"]], atol=1e-12)


@pytest.mark.parametrize("cls", [RGCN, RGAT])
def test_int2_compression_keeps_gradients_close(cls):
    """Compression off is bit-identical to no context; INT2 saved tensors give unbiased
    weight gradients (their mean over rounding seeds nears the exact gradient)."""
    g = toy_graph()
    widths = {"paper": 16, "author": 16, "field": 16}
    model = cls(widths, 4, ETYPES, hidden=32, num_layers=2, dropout=0.0)
    x = inputs(widths, dtype=torch.float32)
    label = torch.randint(0, 4, (SIZES["paper"],), generator=torch.Generator().manual_seed(3))

    def grads(cfg):
        model.zero_grad()
        with compression_context(cfg):
            out = model([g, g], x)["paper"]
        torch.nn.functional.cross_entropy(out, label).backward()
        return torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])

    plain = grads(CompressionConfig(enabled=False))
    model.zero_grad()
    out = model([g, g], x)["paper"]
    torch.nn.functional.cross_entropy(out, label).backward()
    bare = torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])
    assert torch.equal(plain, bare)
    # Stochastic rounding is unbiased: one INT2 gradient is noisy, their mean over rounding
    # seeds approaches the exact one.
    int2 = [grads(CompressionConfig(enabled=True, bits=2, min_numel=0, block_size=32, seed=k))
            for k in range(16)]
    one = float((int2[0] - plain).norm() / plain.norm())
    mean = float((torch.stack(int2).mean(0) - plain).norm() / plain.norm())
    assert one > 0 and mean < one / 2.5, (one, mean)


def test_registry_builds_relational_models_with_etypes():
    """``rgcn``/``rgat`` build through the registry with per-type widths and etypes."""
    widths = {"paper": 5, "author": 3, "field": 4}
    for name in ("rgcn", "rgat"):
        model = build_model(name, widths, 3, {"hidden": 8, "etypes": ETYPES})
        assert model.num_layers == 2
    with pytest.raises(Exception, match="hidden"):
        build_model("rgat", widths, 3, {"hidden": 6, "heads": 4, "etypes": ETYPES})


def test_relation_fanouts_override_named_relations_and_are_checked():
    """``sampled.relation_fanouts`` replaces ``fanouts`` for the relations it names; a name the
    graph lacks, a wrong length or a negative fanout is one line."""
    from dsgraph import config as cfgmod
    from dsgraph.errors import ConfigError
    from dsgraph.modes.sampled.typed import layer_fanouts
    cfg = cfgmod.load(None, ["sampled.fanouts=[10, 5]",
                             "sampled.relation_fanouts={cites: [0, 3]}"])
    per_layer = layer_fanouts(cfg, ETYPES)
    assert per_layer[0][ETYPES[0]] == 0 and per_layer[1][ETYPES[0]] == 3
    assert per_layer[0][ETYPES[1]] == 10 and per_layer[1][ETYPES[3]] == 5
    bad = cfgmod.load(None, ["sampled.relation_fanouts={cited: [1, 1]}"])
    with pytest.raises(ConfigError, match="'cited' is not a relation of the graph"):
        layer_fanouts(bad, ETYPES)
    for value in ("[1]", "[1, -1]", "[1, x]"):
        with pytest.raises(ConfigError, match="sampled.relation_fanouts"):
            cfgmod.load(None, [f"sampled.relation_fanouts={{cites: {value}}}"])
