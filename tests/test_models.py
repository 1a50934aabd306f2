"""Built-in models: the GCN's lean GraphConv forward equals dgl.nn.GraphConv's."""
from __future__ import annotations

import dgl
import dgl.nn as dglnn
import pytest
import torch

from dsgraph.models.gnn import GCN, LeanGraphConv
from dsgraph.models.registry import build_model


def _graph() -> dgl.DGLGraph:
    """A random graph with isolated nodes (zero in- and out-degrees) and repeated edges."""
    g = torch.Generator().manual_seed(0)
    src = torch.randint(0, 250, (1500,), generator=g)
    dst = torch.randint(0, 250, (1500,), generator=g)
    return dgl.graph((torch.cat([src, src[:100]]), torch.cat([dst, dst[:100]])), num_nodes=300)


def _pair(norm: str, i: int, o: int, bias: bool = True) -> tuple[dglnn.GraphConv, LeanGraphConv]:
    ref = dglnn.GraphConv(i, o, norm=norm, bias=bias, allow_zero_in_degree=True).double()
    torch.nn.init.normal_(ref.bias) if bias else None  # DGL starts the bias at 0
    lean = LeanGraphConv(i, o, norm=norm, bias=bias, allow_zero_in_degree=True).double()
    lean.load_state_dict(ref.state_dict())
    return ref, lean


def _outputs_and_grads(conv, graph, x: torch.Tensor) -> list[torch.Tensor]:
    x = x.clone().requires_grad_(True)
    out = conv(graph, x)
    (out * torch.linspace(-1, 1, out.numel(), dtype=out.dtype).view_as(out)).sum().backward()
    grads = [x.grad] + [p.grad for p in conv.parameters()]
    conv.zero_grad()
    return [out.detach()] + grads


@pytest.mark.parametrize("norm", ["both", "left", "right", "none"])
@pytest.mark.parametrize("dims", [(16, 8), (8, 16)])  # matmul before / after aggregating
@pytest.mark.parametrize("on_block", [False, True])
def test_lean_graphconv_equals_graphconv(norm, dims, on_block):
    graph = _graph()
    if on_block:  # a sampled block: source out-degrees are counted within the block
        seeds = torch.arange(0, 300, 3)
        graph = dgl.to_block(dgl.in_subgraph(graph, seeds), seeds)
    x = torch.randn(graph.num_src_nodes(), dims[0], dtype=torch.float64)
    ref, lean = _pair(norm, *dims)
    for a, b in zip(_outputs_and_grads(ref, graph, x), _outputs_and_grads(lean, graph, x)):
        torch.testing.assert_close(b, a, rtol=1e-12, atol=1e-12)


def test_lean_graphconv_without_bias_and_in_float32():
    graph = _graph()
    ref, lean = _pair("both", 8, 8, bias=False)
    ref, lean = ref.float(), lean.float()
    x = torch.randn(300, 8)
    torch.testing.assert_close(lean(graph, x), ref(graph, x), rtol=1e-5, atol=1e-6)


def test_other_graph_views_and_arguments_run_graphconv_itself(monkeypatch):
    """SAR graphs, rematerialized blocks, edge weights: GraphConv's forward."""
    calls = []
    real = dglnn.GraphConv.forward
    monkeypatch.setattr(dglnn.GraphConv, "forward",
                        lambda self, *a, **k: calls.append(1) or real(self, *a, **k))
    graph = _graph()
    ref, lean = _pair("both", 4, 4)
    x = torch.randn(300, 4, dtype=torch.float64)
    lean(graph, x)
    assert calls == []
    w = torch.rand(graph.num_edges(), dtype=torch.float64) + 0.5
    torch.testing.assert_close(lean(graph, x, edge_weight=w), real(ref, graph, x, edge_weight=w))
    assert len(calls) == 1
    # a (src, dst) pair, as HeteroGraphConv passes it, takes the lean path: GraphConv reads
    # only the sources
    torch.testing.assert_close(lean(graph, (x, x[:10])), real(ref, graph, (x, x[:10])),
                               rtol=1e-12, atol=1e-12)
    assert len(calls) == 1  # (the reference called GraphConv.forward directly)


def test_gcn_model_uses_the_lean_layer_and_keeps_its_state_dict_keys():
    model = build_model("gcn", 5, 3, {"hidden": 8, "num_layers": 3})
    assert isinstance(model, GCN) and all(type(m) is LeanGraphConv for m in model.layers)
    stock = torch.nn.ModuleList(dglnn.GraphConv(i, o) for i, o in [(5, 8), (8, 8), (8, 3)])
    assert set(model.layers.state_dict()) == set(stock.state_dict())


# --- model.args a model does not take (issue 46, item 6.4) -----------------------------------

SAGE_ARGS = {"hidden": 64, "num_layers": 2, "aggregator": "mean"}


def test_args_left_from_another_model_name_the_key_not_probe_sizes():
    from dsgraph.errors import ConfigError
    from dsgraph.models.registry import probe_model
    for build in (lambda: probe_model("mlp", SAGE_ARGS), lambda: build_model("mlp", 100, 40,
                                                                            SAGE_ARGS)):
        with pytest.raises(ConfigError) as err:
            build()
        assert str(err.value) == (
            "model.args.aggregator: model.name 'mlp' (MLP) takes no argument 'aggregator'; "
            "expected some of: hidden, num_layers, dropout (remove the keys another model took)")
    assert isinstance(build_model("mlp", 100, 40, {"hidden": 64, "num_layers": 2}),
                      torch.nn.Module)


def test_the_launchers_probe_is_refused_before_any_process(tmp_path):
    """``python -m train``'s first check (the sampled strategy's prepare) names the key."""
    from dsgraph import config as cfgmod
    from dsgraph.errors import ConfigError
    from dsgraph.modes.sampled import SampledStrategy
    cfg = cfgmod.load(None, ["model.name=mlp", "model.args={hidden: 64, aggregator: pool}",
                             f"partition.out_dir={tmp_path / 'none'}"])
    with pytest.raises(ConfigError, match=r"^model\.args\.aggregator: model\.name 'mlp'"):
        SampledStrategy.prepare(cfg)


def test_constructor_errors_quote_the_users_args_and_the_real_sizes():
    from dsgraph.errors import ConfigError
    from dsgraph.models.registry import probe_model
    args = {"aggregator": "bogus", "hidden": 64}
    with pytest.raises(ConfigError) as err:  # the probe: the user's args, no toy sizes
        probe_model("sage", args)
    assert str(err.value).startswith("model.args: GraphSAGE(**{'aggregator': 'bogus', "
                                     "'hidden': 64}) raised DGLError: Invalid aggregator_type")
    with pytest.raises(ConfigError) as err:  # built for training: the data's sizes
        build_model("sage", 100, 40, args)
    assert str(err.value).startswith("model.args: GraphSAGE(in_feats=100, num_classes=40, "
                                     "**{'aggregator': 'bogus', 'hidden': 64}) raised")


def test_sizes_from_the_data_and_widths_below_one_are_refused_by_key():
    from dsgraph import config as cfgmod
    from dsgraph.errors import ConfigError
    from dsgraph.models.registry import probe_model
    with pytest.raises(ConfigError, match=r"^model\.args\.in_feats: set from the data"):
        probe_model("sage", {"in_feats": 8})
    with pytest.raises(ConfigError) as err:
        cfgmod.load(None, ["model.args.hidden=-3"])
    assert str(err.value) == ("--set model.args.hidden: expected an integer >= 1 (model.name "
                              "'sage'), got -3")
    # a plug-in's widths are its own: only the ceilings apply
    cfgmod.load(None, ["model.name=mymodels.net:Net", "model.args.hidden=-3"])


def test_a_plugin_taking_any_keyword_takes_any_key(tmp_path, monkeypatch):
    (tmp_path / "kw_mod.py").write_text(
        "from torch import nn\n"
        "class Net(nn.Module):\n"
        "    def __init__(self, in_feats, num_classes, **kwargs):\n"
        "        super().__init__()\n"
        "        self.kwargs = kwargs\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert build_model("kw_mod:Net", 3, 2, {"anything": 1}).kwargs == {"anything": 1}
