"""Aggregate-before-map layers (dsgraph.models.order): the same function as DGL's layers (SAGE,
and RGCN's per-relation GraphConv), outputs and every gradient, in the order that takes less
arithmetic for the graph at hand."""
from __future__ import annotations

import copy

import dgl
import dgl.nn as dglnn
import pytest
import torch

from dsgraph.models.gnn import GraphSAGE, LeanGraphConv, LeanSAGEConv
from dsgraph.models.hetero import RGCN
from dsgraph.models.order import aggregate_first_is_cheaper


def _graph(n: int = 3000, e: int = 30000) -> dgl.DGLGraph:
    """A random graph with isolated nodes and repeated edges."""
    g = torch.Generator().manual_seed(0)
    src = torch.randint(0, n, (e,), generator=g)
    dst = torch.randint(0, n - 50, (e,), generator=g)
    return dgl.graph((torch.cat([src, src[:100]]), torch.cat([dst, dst[:100]])), num_nodes=n)


def _sampled_block(graph: dgl.DGLGraph) -> dgl.DGLGraph:
    """The first layer's block of a two-layer neighbour sample (fanouts [5, 10], 40 seeds)."""
    sampler = dgl.dataloading.NeighborSampler([5, 10])
    torch.manual_seed(1)
    _, _, blocks = sampler.sample_blocks(graph, torch.arange(0, 2000, 50))
    return blocks[0]


def _pair(aggregator: str, i: int, o: int) -> tuple[dglnn.SAGEConv, LeanSAGEConv]:
    torch.manual_seed(2)
    ref = dglnn.SAGEConv(i, o, aggregator).double()
    for p in ref.parameters():  # DGL starts the bias at 0: give every parameter a value
        torch.nn.init.normal_(p)
    lean = LeanSAGEConv(i, o, aggregator).double()
    lean.load_state_dict(ref.state_dict())
    return ref, lean


def _outputs_and_grads(conv, graph, feat, edge_weight=None) -> list[torch.Tensor]:
    feats = feat if isinstance(feat, tuple) else (feat,)
    feats = tuple(f.clone().requires_grad_(True) for f in feats)
    out = conv(graph, feats if isinstance(feat, tuple) else feats[0], edge_weight=edge_weight)
    (out * torch.linspace(-1, 1, out.numel(), dtype=out.dtype).view_as(out)).sum().backward()
    grads = [f.grad for f in feats] + [p.grad for p in conv.parameters()]
    conv.zero_grad()
    return [out.detach()] + grads


def _rows_mapped(conv: LeanSAGEConv, *call) -> int:
    """How many rows ``fc_neigh`` maps in one call (sources: map first; destinations: aggregate
    first)."""
    seen = []
    hook = conv.fc_neigh.register_forward_hook(lambda m, args, out: seen.append(args[0].shape[0]))
    try:
        conv(*call)
    finally:
        hook.remove()
    return sum(seen)


def test_the_rule_aggregates_first_on_a_sampled_block_and_maps_first_on_the_whole_graph():
    graph = _graph()
    block = _sampled_block(graph)
    assert block.num_src_nodes() > 3 * block.num_dst_nodes()
    assert aggregate_first_is_cheaper(block.num_src_nodes(), block.num_dst_nodes(),
                                      block.num_edges(), 64, 16)
    assert not aggregate_first_is_cheaper(graph.num_nodes(), graph.num_nodes(),
                                          graph.num_edges(), 64, 16)
    assert aggregate_first_is_cheaper(graph.num_nodes(), graph.num_nodes(),
                                      graph.num_edges(), 16, 64)  # DGL's own choice there
    assert aggregate_first_is_cheaper(100, 100, 1000, 32, 32)  # a tie: aggregate, as DGL


@pytest.mark.parametrize("aggregator", ["mean", "gcn"])
@pytest.mark.parametrize("dims", [(32, 8), (8, 32)])
@pytest.mark.parametrize("where", ["block", "graph", "pair", "weighted"])
def test_lean_sageconv_equals_sageconv_in_float64(aggregator, dims, where):
    graph = _graph()
    block = _sampled_block(graph)
    on = graph if where == "graph" else block
    x = torch.randn(on.num_src_nodes(), dims[0], dtype=torch.float64)
    feat = (x, x[: on.num_dst_nodes()]) if where == "pair" else x
    w = torch.rand(on.num_edges(), 1, dtype=torch.float64) if where == "weighted" else None
    ref, lean = _pair(aggregator, *dims)
    for a, b in zip(_outputs_and_grads(ref, on, feat, w), _outputs_and_grads(lean, on, feat, w)):
        torch.testing.assert_close(b, a, rtol=1e-9, atol=1e-9)
    # the check above compares two orders, not one order with itself
    wide_to_narrow_on_block = dims[0] > dims[1] and where != "graph"
    rows = _rows_mapped(lean, on, feat, w)
    if wide_to_narrow_on_block:
        assert rows == on.num_dst_nodes()
        assert _rows_mapped(ref, on, feat, w) > rows
    else:
        assert rows == _rows_mapped(ref, on, feat, w)


def test_float32_within_float32_tolerance_and_other_aggregators_unchanged():
    block = _sampled_block(_graph())
    x = torch.randn(block.num_src_nodes(), 48)
    for aggregator in ("mean", "gcn", "pool", "lstm"):
        ref, lean = _pair(aggregator, 48, 12)
        ref, lean = ref.float(), lean.float()
        out_ref, out = ref(block, x), lean(block, x)
        if aggregator in ("pool", "lstm"):
            assert torch.equal(out, out_ref)
        else:
            torch.testing.assert_close(out, out_ref, rtol=1e-4, atol=1e-4)


def test_graphsage_uses_the_lean_layer_with_dgls_state_dict_keys():
    model = GraphSAGE(32, 4, hidden=16, num_layers=2)
    assert all(type(m) is LeanSAGEConv for m in model.layers)
    stock = torch.nn.ModuleList([dglnn.SAGEConv(32, 16, "mean"), dglnn.SAGEConv(16, 4, "mean")])
    assert list(model.layers.state_dict()) == list(stock.state_dict())
    model.layers.load_state_dict(stock.state_dict())  # a stock checkpoint loads as it is


def _hetero_blocks() -> tuple[list, dict[str, torch.Tensor], list[tuple[str, str, str]]]:
    """Two sampled blocks (fanouts [5, 10], 40 user seeds) of a random graph with three
    relations between users and items, and float64 input rows of each type."""
    g = torch.Generator().manual_seed(3)
    users, items = 2000, 1500

    def rel(n_src: int, n_dst: int, e: int) -> tuple[torch.Tensor, torch.Tensor]:
        return (torch.randint(0, n_src, (e,), generator=g),
                torch.randint(0, n_dst - 30, (e,), generator=g))  # some without in-edges

    etypes = [("user", "buys", "item"), ("item", "bought-by", "user"),
              ("user", "follows", "user")]
    graph = dgl.heterograph({etypes[0]: rel(users, items, 12000),
                             etypes[1]: rel(items, users, 12000),
                             etypes[2]: rel(users, users, 16000)},
                            num_nodes_dict={"user": users, "item": items})
    torch.manual_seed(4)
    inputs, _, blocks = dgl.dataloading.NeighborSampler([5, 10]).sample_blocks(
        graph, {"user": torch.arange(0, 2000, 50)})
    widths = {"user": 32, "item": 24}
    x = {t: torch.randn(ids.numel(), widths[t], generator=g, dtype=torch.float64)
         for t, ids in inputs.items()}
    return blocks, x, etypes


def _with_dgls_graphconv(model: RGCN) -> RGCN:
    """A copy of ``model`` whose relation layers are DGL's own GraphConv, same parameters."""
    ref = copy.deepcopy(model)
    for layer in ref.layers:
        for key, conv in list(layer.mods.items()):
            stock = dglnn.GraphConv(conv._in_feats, conv._out_feats, norm="right", bias=False,
                                    allow_zero_in_degree=True).to(torch.float64)
            stock.load_state_dict(conv.state_dict())
            layer.mods[key] = layer.mod_dict[key] = stock  # HeteroGraphConv calls mod_dict's
    return ref


def _rgcn_outputs_and_grads(model: RGCN, blocks, x) -> list[torch.Tensor]:
    x = {t: v.clone().requires_grad_(True) for t, v in x.items()}
    out = model(blocks, x)["user"]
    (out * torch.linspace(-1, 1, out.numel(), dtype=out.dtype).view_as(out)).sum().backward()
    return [out.detach()] + [x[t].grad for t in sorted(x)] + \
        [p.grad for _, p in sorted(model.named_parameters())]


def test_rgcn_relation_layers_equal_dgls_graphconv_in_float64_and_aggregate_first(monkeypatch):
    blocks, x, etypes = _hetero_blocks()
    torch.manual_seed(5)
    model = RGCN({"user": 32, "item": 24}, 4, etypes, hidden=8, num_layers=2,
                 dropout=0.0).to(torch.float64)
    assert all(type(c) is LeanGraphConv for layer in model.layers for c in layer.mods.values())
    ref = _with_dgls_graphconv(model)
    assert list(ref.state_dict()) == list(model.state_dict())  # DGL's names: checkpoints load
    widths = []  # the width each relation aggregates at: the input's (first) or the output's
    real = dgl.ops.copy_u_sum
    monkeypatch.setattr(dgl.ops, "copy_u_sum", lambda g, h: widths.append(h.shape[1]) or real(g, h))
    got = _rgcn_outputs_and_grads(model, blocks, x)
    # first layer (32/24 -> 8): every relation of the sampled block aggregates its raw rows,
    # where DGL's GraphConv maps every source row first (in > out)
    assert widths[:3] and all(w in (32, 24) for w in widths[:3]), widths
    for a, b in zip(_rgcn_outputs_and_grads(ref, blocks, x), got, strict=True):
        torch.testing.assert_close(b, a, rtol=1e-9, atol=1e-12)


# --- aggregating input rows where they are stored (dsgraph.models.inputs) --------------------

def _input_rows(block: dgl.DGLGraph, width: int, in_store: float, dtype=torch.float64):
    """The block's source rows as InputRows (a ``in_store`` share in a larger store, in random
    positions; the rest in a compact extra table) and the same rows as one tensor."""
    from dsgraph.models.inputs import InputRows
    g = torch.Generator().manual_seed(3)
    n = block.num_src_nodes()
    x = torch.randn(n, width, generator=g, dtype=dtype)
    stored = torch.rand(n, generator=g) < in_store
    store = torch.randn(5 * n, width, generator=g, dtype=dtype)
    store_pos = torch.full((n,), -1, dtype=torch.int64)
    store_pos[stored] = torch.randperm(5 * n, generator=g)[:int(stored.sum())]
    store[store_pos[stored]] = x[stored]
    extra_pos = torch.full((n,), -1, dtype=torch.int64)
    extra_pos[~stored] = torch.randperm(int((~stored).sum()), generator=g)
    extra = torch.empty(int((~stored).sum()), width, dtype=dtype)
    extra[extra_pos[~stored]] = x[~stored]
    return InputRows(store, store_pos, extra, extra_pos), x


@pytest.mark.parametrize("aggregator", ["mean", "gcn"])
@pytest.mark.parametrize("in_store", [0.0, 0.7, 1.0])
def test_input_rows_aggregated_in_place_equal_the_gathered_rows_in_float64(aggregator, in_store):
    block = _sampled_block(_graph())
    rows, x = _input_rows(block, 64, in_store)
    assert torch.equal(rows.materialize(), x)
    ref, lean = _pair(aggregator, 64, 16)
    want = _outputs_and_grads(ref, block, x)  # DGL's SAGEConv on the gathered rows
    mapped = _rows_mapped(lean, block, rows)
    assert mapped == block.num_dst_nodes()  # aggregated first, from the rows in place
    out = lean(block, rows)
    (out * torch.linspace(-1, 1, out.numel(), dtype=out.dtype).view_as(out)).sum().backward()
    got = [out.detach()] + [p.grad for p in lean.parameters()]
    for a, b in zip(got, [want[0]] + want[2:]):  # every parameter's gradient (inputs have none)
        assert torch.allclose(a, b, rtol=1e-9, atol=1e-9)


def test_graphsage_on_input_rows_equals_it_on_tensors_and_other_readers_get_the_tensor():
    graph = _graph()
    sampler = dgl.dataloading.NeighborSampler([5, 10])
    torch.manual_seed(1)
    _, _, blocks = sampler.sample_blocks(graph, torch.arange(0, 2000, 50))
    rows, x = _input_rows(blocks[0], 32, 0.6, torch.float32)
    torch.manual_seed(4)
    model = GraphSAGE(32, 5, hidden=16)
    assert torch.allclose(model(blocks, rows), model(blocks, x), rtol=1e-5, atol=1e-5)
    for aggregator in ("pool", "lstm"):  # not a sum of rows: materialized, same result
        torch.manual_seed(4)
        other = GraphSAGE(32, 5, hidden=16, aggregator=aggregator)
        assert torch.equal(other(blocks, rows), other(blocks, x))
    edgeless = dgl.create_block(([], []), num_src_nodes=blocks[0].num_src_nodes(),
                                num_dst_nodes=blocks[0].num_dst_nodes())
    ref, lean = _pair("mean", 32, 8)
    ref, lean = ref.float(), lean.float()
    assert torch.allclose(lean(edgeless, rows), ref(edgeless, x), atol=1e-6)
