"""Saved-tensor hooks: what is compressed, byte counts, exact masks, unbiased gradients, training."""
from __future__ import annotations

import contextlib
import subprocess
import sys
from pathlib import Path

import dgl
import pytest
import torch
import torch.nn.functional as F

from dsgraph.compress import (
    CompressionConfig,
    Compressor,
    compressed,
    compression_context,
    native,
    packed_nbytes,
)
from dsgraph.compress.codec import PackedMask, QTensor
from dsgraph.compress.pool import BufferPool
from dsgraph.config import DatasetConfig
from dsgraph.data.synthetic import generate
from dsgraph.errors import ConfigError
from dsgraph.models.registry import build_model
from dsgraph.savepolicy import SaveKind, SavePolicy, SavePolicyFunction, policy_of

CFG = CompressionConfig(enabled=True, min_numel=0)


def test_context_is_noop_when_disabled():
    assert isinstance(compression_context(CompressionConfig()), contextlib.nullcontext)
    assert isinstance(compression_context(CompressionConfig(enabled=True)), Compressor)


def test_optimal_levels_need_int2():
    with pytest.raises(ConfigError, match="compression.levels"):
        compressed(CompressionConfig(enabled=True, bits=4, levels="optimal"))


def test_shared_input_packed_once_and_parameters_pass_through():
    torch.manual_seed(0)
    lin1, lin2 = torch.nn.Linear(64, 32), torch.nn.Linear(64, 32)
    h = torch.randn(500, 64, requires_grad=True) * 1.0  # activation feeding two linear maps
    idx = torch.arange(500)
    with compressed(CFG, seed=0) as c:
        out = lin1(h) + lin2(h)
        out = out.index_select(0, idx)  # saves an int64 index: passes through
    st = c.stats
    assert st.quantized == 1 and st.cache_hits == 1  # h packed once for both linears
    assert st.parameters >= 2  # weight.t() views of parameters are recognised
    assert st.saved_bytes == packed_nbytes(500 * 64, 2, 256) + idx.numel() * 8
    assert st.fp32_bytes == 500 * 64 * 4 + idx.numel() * 8
    out.sum().backward()
    assert lin1.weight.grad is not None


def test_small_tensors_and_measure_only():
    x = torch.randn(10, 8, requires_grad=True) * 1.0
    with compressed(CompressionConfig(enabled=True, min_numel=4096), seed=0) as c:
        (x.exp()).sum().backward()
    assert c.stats.quantized == 0 and c.stats.exact == 1 and c.stats.saved_bytes == 320
    h = torch.randn(300, 64) * 1.0
    lin = torch.nn.Linear(64, 64)
    with compressed(CFG, measure_only=True) as m:
        torch.relu(lin(h)).sum()
    assert m.stats.saved_bytes == m.stats.fp32_bytes == 2 * 300 * 64 * 4 and m.stats.ratio == 1.0


@pytest.mark.parametrize("fused", [True, False])
def test_relu_dropout_leaky_relu_gradients_are_exact(fused):
    """Sign/mask-only saves are lossless: gradients are exact.

    Without the fused kernels the hooks pack torch's own masks, so the same seed gives fp32's
    gradient bit for bit; the fused dropout draws another mask, so its gradient is checked
    against the mask read off its output."""
    base = torch.randn(400, 50, requires_grad=True)
    grads, outs = [], []
    for ctx in (contextlib.nullcontext(), compressed(CFG, seed=1)):
        base.grad = None
        torch.manual_seed(3)  # same dropout mask in both runs (torch's dropout)
        with ctx, (contextlib.nullcontext() if fused else native.disabled()):
            h = base * 1.5
            dropped = F.dropout(torch.relu(h), 0.5, training=True)
            y = dropped + F.leaky_relu(h, 0.2)
        y.sum().backward()
        grads.append(base.grad.clone())
        outs.append((h.detach(), dropped.detach()))
        if isinstance(ctx, Compressor):
            assert ctx.stats.masks == 3 and ctx.stats.quantized == 0
    if fused and native.available():
        h, dropped = outs[1]
        slope = torch.where(h > 0, 1.0, 0.2)
        assert torch.equal(grads[1], 1.5 * (2.0 * (dropped != 0) + slope))
    else:
        assert torch.equal(grads[0], grads[1])


def test_loss_inside_the_context_keeps_exact_gradients():
    """log-softmax outputs stay exact and sigmoid outputs go to INT8, so a loss may sit inside."""
    z = torch.randn(2000, 10, requires_grad=True)
    y = torch.randint(0, 10, (2000,), generator=torch.Generator().manual_seed(0))
    grads = []
    for ctx in (contextlib.nullcontext(), compressed(CFG, seed=0)):
        z.grad = None
        with ctx:
            F.cross_entropy(z * 2.0, y).backward()
        grads.append(z.grad.clone())
        if isinstance(ctx, Compressor):
            assert ctx.stats.quantized == 0 and ctx.stats.exact >= 1
    assert torch.equal(grads[0], grads[1])
    with compressed(CFG, seed=0) as c:
        torch.sigmoid(z * 2.0).sum()
    assert c.stats.quantized == 1
    assert c.stats.saved_bytes == packed_nbytes(20000, 8, 256)


def test_projection_only_on_inputs_of_linear_maps():
    lin = torch.nn.Linear(64, 32)
    h = torch.randn(500, 64, requires_grad=True) * 1.0
    cfg = CompressionConfig(enabled=True, min_numel=0, projection=0.25)
    with compressed(cfg, seed=0) as c:
        out = lin(h).sum() + h.sin().sum()  # sin's backward needs cos(h): no projection there
    assert c.stats.quantized == 2
    assert c.stats.saved_bytes == packed_nbytes(500 * 16, 2, 256) + packed_nbytes(500 * 64, 2, 256)
    out.backward()
    assert lin.weight.grad is not None and torch.isfinite(lin.weight.grad).all()


def test_unpack_buffer_pool_never_overwrites_a_live_tensor(monkeypatch):
    """Gradients with pooled unpack buffers equal those with a fresh tensor per unpack."""
    if not native.available():
        pytest.skip(f"the pool serves the C decoder, unavailable: {native.failure()}")
    g = _tiny_graph()
    x = g.ndata["feat"]
    torch.manual_seed(0)
    model = build_model("sage", x.shape[1], 4, {"hidden": 24, "num_layers": 3, "dropout": 0.3})
    a = torch.randn(300, 64, requires_grad=True)

    def grads() -> torch.Tensor:
        model.zero_grad()
        a.grad = None
        torch.manual_seed(5)  # same dropout masks
        with compressed(CFG, seed=2) as c:
            out = model(g, x)
            prod = (a * 1.5) * a.sin()  # one node unpacks two equal-size tensors at once
        ((out ** 2).sum() + prod.sum()).backward()
        assert c.stats.quantized >= 5
        return torch.cat([p.grad.reshape(-1) for p in [*model.parameters(), a]])

    pooled = grads()
    handed = []
    real_get = BufferPool.get

    def spy(self, n):
        buf = real_get(self, n)
        handed.append(buf.data_ptr())
        return buf

    monkeypatch.setattr(BufferPool, "get", spy)
    assert torch.equal(grads(), pooled)
    assert len(set(handed)) < len(handed)  # the pool did hand buffers out again
    monkeypatch.setattr(BufferPool, "get", lambda self, n: torch.empty(n))
    assert torch.equal(grads(), pooled)


def _tiny_graph() -> dgl.DGLGraph:
    return generate(DatasetConfig(num_nodes=400, num_classes=4, feat_dim=24, seed=1))


@pytest.mark.parametrize("name,args,projection", [("sage", {"hidden": 32}, 1.0),
                                                  ("gcn", {"hidden": 32}, 1.0),
                                                  ("sage", {"hidden": 32}, 0.25)])
def test_weight_gradients_are_unbiased(name, args, projection):
    """The mean of compressed weight gradients over many draws converges to the fp32 gradient.

    (GAT is not unbiased: its projected features are packed once but reach the attention
    gradient twice, so one rounding draw multiplies itself; see the component README.)
    """
    g = _tiny_graph()
    x = g.ndata["feat"]
    torch.manual_seed(0)
    model = build_model(name, x.shape[1], 4, dict(args, num_layers=2))
    target = torch.randn(g.num_nodes(), 4, generator=torch.Generator().manual_seed(1))

    def grads(ctx):
        model.zero_grad()
        with ctx:
            out = model(g, x)
            loss = ((out - target) ** 2).sum()  # backward is linear in every saved activation
        loss.backward()
        return torch.cat([p.grad.reshape(-1) for p in model.parameters()])

    exact = grads(contextlib.nullcontext())
    k = 100
    cfg = CompressionConfig(enabled=True, min_numel=0, projection=projection)
    draws = torch.stack([grads(compressed(cfg, seed=s)) for s in range(k)])
    mean, sd = draws.mean(0), draws.std(0)
    noisy = sd > 1e-6 * exact.abs().max()
    z = (mean - exact)[noisy] / (sd[noisy] / k ** 0.5)
    assert noisy.sum() > 0.5 * exact.numel()
    assert float(z.pow(2).mean()) < 1.5  # chi-square / dof: ~1 when unbiased
    exact_ok = ~noisy  # entries without noise must match exactly (up to float rounding)
    assert torch.allclose(mean[exact_ok], exact[exact_ok], rtol=1e-4, atol=1e-5)


def _train(g, name: str, ctx_factory, epochs: int = 40) -> tuple[float, float]:
    torch.manual_seed(0)
    x, y = g.ndata["feat"], g.ndata["label"]
    train, test = g.ndata["train_mask"], g.ndata["test_mask"]
    model = build_model(name, x.shape[1], int(y.max()) + 1,
                        {"hidden": 64, "num_layers": 2, "dropout": 0.5})
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    ratio = 1.0
    for _ in range(epochs):
        model.train()
        ctx = ctx_factory()
        with ctx:
            out = model(g, x)
        F.cross_entropy(out[train], y[train]).backward()
        opt.step()
        opt.zero_grad()
        if isinstance(ctx, Compressor):
            ratio = ctx.stats.ratio
    model.eval()
    with torch.no_grad():
        acc = float((model(g, x).argmax(1)[test] == y[test]).float().mean())
    return acc, ratio


@pytest.mark.timeout(120)
@pytest.mark.parametrize("name", ["sage", "gcn"])
def test_full_graph_training_matches_fp32(name):
    torch.set_num_threads(1)
    g = generate(DatasetConfig(num_nodes=8000, num_classes=10, train_frac=0.3, test_frac=0.4))
    fp32, _ = _train(g, name, contextlib.nullcontext)
    cfg = CompressionConfig(enabled=True)
    int2, ratio = _train(g, name, lambda: compressed(cfg))
    assert abs(int2 - fp32) <= 0.01, (fp32, int2)
    assert fp32 > 0.5  # the task is learnable, so the comparison means something
    assert ratio > 10


@pytest.mark.timeout(60)
def test_sampled_training_on_blocks():
    """Compression wraps a forward over sampled blocks (MFGs) and backward still runs."""
    torch.set_num_threads(1)
    g = generate(DatasetConfig(num_nodes=3000, num_classes=5))
    x, y = g.ndata["feat"], g.ndata["label"]
    torch.manual_seed(0)
    model = build_model("sage", x.shape[1], 5, {"hidden": 64, "num_layers": 2})
    sampler = dgl.dataloading.NeighborSampler([5, 10])
    seeds = torch.nonzero(g.ndata["train_mask"]).squeeze(1)
    loader = dgl.dataloading.DataLoader(g, seeds, sampler, batch_size=100, shuffle=False)
    cfg = CompressionConfig(enabled=True, min_numel=1024)
    for i, (inp, out_nodes, blocks) in enumerate(loader):
        with compression_context(cfg) as c:
            logits = model(blocks, x[inp])
        F.cross_entropy(logits, y[out_nodes]).backward()
        assert c.stats.quantized >= 1 and c.stats.ratio > 4
        if i == 2:
            break
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in model.parameters())


# --- declared save policies (dsgraph.savepolicy) ----------------------------------------------


class _Recording(Compressor):
    """A Compressor remembering (saved tensor's grad_fn name, shape, what pack returned)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.packs: list[tuple[str, tuple, object]] = []

    def pack(self, t):
        out = super().pack(t)
        self.packs.append((type(t.grad_fn).__name__, tuple(t.shape), out))
        return out


def _stored(packed):
    """What a pack stored: "exact", "mask" or the bit width of its INT-b codes."""
    if isinstance(packed, torch.Tensor):
        return "exact"
    if isinstance(packed.packed, PackedMask):
        return "mask"
    assert isinstance(packed.packed, QTensor)
    return packed.packed.bits


class _ScaleAll(torch.autograd.Function):
    """y = x * s, saving both: undeclared, so both are quantized as usual."""

    @staticmethod
    def forward(ctx, x, s):
        ctx.save_for_backward(x, s)
        return x * s

    @staticmethod
    def backward(ctx, g):
        x, s = ctx.saved_tensors
        return g * s, (g * x).sum(-1, keepdim=True)


class _ScaleExact(SavePolicyFunction):
    """The same op declaring every save exact."""

    save_policy = SavePolicy(saves=SaveKind.EXACT)
    forward = staticmethod(_ScaleAll.forward)
    backward = staticmethod(_ScaleAll.backward)


class _ScalePerNode(SavePolicyFunction):
    """The same op declaring only its per-node saves (last dimension 1) exact."""

    save_policy = SavePolicy(per_node=SaveKind.EXACT)
    forward = staticmethod(_ScaleAll.forward)
    backward = staticmethod(_ScaleAll.backward)


@pytest.mark.parametrize("fn,stored", [(_ScaleAll, [2, 2]), (_ScaleExact, ["exact", "exact"]),
                                       (_ScalePerNode, [2, "exact"])])
def test_declared_saves_are_stored_as_declared(fn, stored):
    """A Function declaring EXACT keeps its saves exact (gradient bit for bit), per node too."""
    x0 = torch.randn(300, 4, 16, requires_grad=True)
    s0 = torch.randn(300, 4, 1, requires_grad=True)
    grads = []
    for ctx in (contextlib.nullcontext(), _Recording(CFG, seed=0)):
        x0.grad = s0.grad = None
        with ctx:
            y = fn.apply(x0 * 1.0, s0 * 1.0)  # (products by a scalar save nothing)
        y.backward(torch.ones_like(y))
        grads.append((x0.grad.clone(), s0.grad.clone()))
    assert [_stored(p) for _, _, p in ctx.packs] == stored
    if stored == ["exact", "exact"]:
        assert all(torch.equal(a, b) for a, b in zip(*grads))


def test_policy_covers_only_saves_inside_apply():
    """The running Function is recorded for its own apply only: ops after it decide as usual."""
    x = torch.randn(200, 8, requires_grad=True)
    with _Recording(CFG, seed=0) as c:
        y = _ScaleExact.apply(x * 1.0, torch.ones(200, 8) * 2.0)
        _ = y * y  # saves y twice (one pack, one cache hit), undeclared: quantized
    assert [_stored(p) for _, _, p in c.packs] == ["exact", "exact", 2, 2]


def test_gat_edge_softmax_output_int8_and_logits_sign_mask():
    """In DGL's GATConv the edge softmax output (declared for DGL in dsgraph.savepolicy) is
    stored at 8 bits and the leaky_relu input (logits) as a sign mask; features at INT2."""
    g = _tiny_graph()
    x = g.ndata["feat"]
    torch.manual_seed(0)
    conv = dgl.nn.GATConv(x.shape[1], 8, num_heads=2, allow_zero_in_degree=True)
    with _Recording(CFG, seed=0) as c:
        out = conv(g, x)
    out.sum().backward()
    by_fn = {}
    for name, shape, packed in c.packs:
        by_fn.setdefault(name, set()).add((shape, _stored(packed)))
    e = (g.num_edges(), 2, 1)
    assert by_fn["EdgeSoftmaxBackward"] == {(e, 8)}
    assert by_fn["GSDDMMBackward"] == {(e, "mask")}  # el_u + er_v, saved by leaky_relu
    assert ((g.num_nodes(), 2, 8), 2) in by_fn["ViewBackward0"]  # projected features
    assert all(p.grad is not None for p in conv.parameters())


class _OnePart:
    """A one-part ShardPlan and Runtime, as much of them as ``GatAttention`` uses."""

    rank, world, comm, prefetch, chunk_rows = 0, 1, None, False, 0

    def __init__(self, g) -> None:
        from dsgraph.seqagg.chunks import GroupGraph

        src, dst = g.edges()
        order = torch.argsort(src, stable=True)  # a group's edges are sorted by source row
        n = g.num_nodes()
        self.plan, self.num_local = self, n
        self._group = GroupGraph(src[order], dst[order], n, n)

    def fetch_rows(self, x):
        yield 0, 0, x

    def group(self, j):
        return self._group

    def shard_has_edges(self, j):
        return True


def test_sar_fused_attention_keeps_its_per_node_saves_exact():
    """dsgraph.sar's GatAttention declares its per-node saves (logits el/er, softmax max and
    denominator, shape (..., 1)) exact: only the features are quantized."""
    from dsgraph.sar.attention import GatAttention
    g = _tiny_graph()
    n, heads = g.num_nodes(), 2
    gen = torch.Generator().manual_seed(0)
    ft0, el0, er0 = (torch.randn(n, heads, f, generator=gen, requires_grad=True) for f in (8, 1, 1))
    rt = _OnePart(g)
    with _Recording(CFG, seed=0) as c:
        out = GatAttention.apply(rt, ft0 * 1.0, el0 * 1.0, er0 * 1.0, 0.2)
    out.sum().backward()
    assert sorted((shape, _stored(p)) for _, shape, p in c.packs) == sorted(
        [((n, heads, 8), 2)] + [((n, heads, 1), "exact")] * 4)
    assert all(torch.isfinite(t.grad).all() for t in (ft0, el0, er0))
    assert policy_of(GatAttention).kind(torch.empty(n, heads, 1)) is SaveKind.EXACT


def test_compress_names_no_op_of_other_packages():
    """compress decides from declared policies, not from names of sar/DGL ops or stack frames."""
    root = Path(__file__).resolve().parents[1] / "dsgraph" / "compress"
    for path in root.glob("*.py"):
        src = path.read_text()
        for word in ("GatAttention", "EdgeSoftmax", "_getframe", "f_locals", "dsgraph.sar",
                     "import dgl", "from dgl"):
            assert word not in src, (path.name, word)


def test_policies_import_nothing_and_patch_nothing():
    """Importing the policies and compress imports no DGL and leaves torch's Function as is."""
    code = ("import sys, torch; apply = torch.autograd.Function.apply\n"
            "import dsgraph.savepolicy, dsgraph.compress\n"
            "assert 'dgl' not in sys.modules and 'dsgraph.sar' not in sys.modules\n"
            "assert torch.autograd.Function.apply == apply")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
