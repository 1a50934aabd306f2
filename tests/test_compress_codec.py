"""Codec of activation compression: error bound, unbiasedness, variance, bytes, edge cases.

Every test runs twice: through the fused C kernels (``native``) and through the pure-torch path
(``torch``, the fallback for CUDA tensors and machines without a compiler).
"""
from __future__ import annotations

import contextlib
import math
import shutil

import pytest
import torch

from dsgraph.compress import native
from dsgraph.compress.codec import (QuantSpec, dequantize, pack_codes, pack_mask, pack_positive,
                                    pack_two_valued, packed_nbytes, quantize, unpack_mask,
                                    unpack_values)
from dsgraph.compress.levels import int2_levels, optimal_lo


@pytest.fixture(autouse=True, params=["native", "torch"])
def codec_path(request):
    """Run the test with the C kernels, then with them disabled."""
    if request.param == "native" and not native.available():
        pytest.skip(f"C kernels unavailable: {native.failure()}")
    with (contextlib.nullcontext() if request.param == "native" else native.disabled()):
        yield request.param


def test_native_kernels_build_where_a_compiler_exists(codec_path):
    if codec_path == "torch":
        assert not native.available()
        return
    assert shutil.which("gcc") is None or native.library() is not None, native.failure()
    assert any(native.cache_dir().glob("dsq-*.so"))


def test_native_build_writes_the_library_atomically(codec_path, tmp_path, monkeypatch):
    """The compiled library appears whole (0755, no temporary left); a failed compile leaves
    nothing behind."""
    if codec_path == "torch" or shutil.which("gcc") is None:
        pytest.skip("needs the C compiler")
    monkeypatch.setenv("DSGRAPH_KERNEL_CACHE", str(tmp_path / "kernels"))
    lib = native._build()
    assert lib.dsq_quantize is not None
    files = list((tmp_path / "kernels").iterdir())
    assert len(files) == 1 and files[0].name.startswith("dsq-") and files[0].suffix == ".so"
    assert files[0].stat().st_mode & 0o777 == 0o755
    monkeypatch.setenv("DSGRAPH_KERNEL_CACHE", str(tmp_path / "failed"))
    monkeypatch.setenv("CC", shutil.which("false") or "false")
    with pytest.raises(RuntimeError, match="failed"):
        native._build()
    assert not any((tmp_path / "failed").iterdir())


def _gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _data(n: int = 5000, seed: int = 1) -> torch.Tensor:
    """Normal values with block-to-block changes of scale and offset (activation-like)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, generator=g)
    ramp = torch.linspace(0.01, 20, n)
    return x * ramp + torch.sin(torch.arange(n) / 97.0) * 5


def _per_element_levels(q, spec: QuantSpec) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-element block minimum and step (range / (2^b - 1)) of a QTensor, flattened."""
    top = (1 << q.bits) - 1
    idx = torch.arange(q.numel) // q.group
    return q.mn.float()[idx], q.rng.float()[idx] / top


def _bracket(x: torch.Tensor, q) -> tuple[torch.Tensor, torch.Tensor]:
    """The two dequantization levels l <= x <= u stochastic rounding chooses between."""
    top = (1 << q.bits) - 1
    mn, step = _per_element_levels(q, None)
    norm = torch.tensor(q.levels if q.levels is not None else [float(i) for i in range(top + 1)],
                        dtype=torch.float64)
    s = ((x.double() - mn.double()) / (step.double() * top) * top).clamp(0, top)
    k = torch.bucketize(s, norm[1:-1], right=True)
    scale = step.double()
    return mn.double() + norm[k] * scale, mn.double() + norm[k + 1] * scale


@pytest.mark.parametrize("bits", [1, 2, 4, 8])
@pytest.mark.parametrize("block", [32, 256, 1000, 0])
@pytest.mark.parametrize("stats", [torch.bfloat16, torch.float16])
def test_round_trip_within_one_step_and_stored_range(bits, block, stats):
    x = _data().view(50, 100)
    spec = QuantSpec(bits=bits, block_size=block, stats_dtype=stats)
    q = quantize(x, spec, _gen())
    d = dequantize(q)
    assert d.shape == x.shape and d.dtype == x.dtype
    mn, step = _per_element_levels(q, spec)
    flat = x.reshape(-1)
    # Stored statistics cover every value (min rounded down, range rounded up).
    assert bool((flat >= mn).all())
    assert bool((flat <= mn + step * ((1 << bits) - 1)).all())
    err = (d.reshape(-1) - flat).abs()
    assert bool((err <= step * (1 + 1e-5) + 1e-6).all()), float((err / step).max())
    assert q.group == (100 if block == 0 else block)


def test_optimal_levels_round_trip_within_one_bin():
    x = _data()
    q = quantize(x, QuantSpec(levels="optimal", block_size=128), _gen())
    lo_val, hi_val = _bracket(x, q)
    d = dequantize(q).double()
    tol = 1e-4 * (hi_val - lo_val + 1)
    # Every value comes back as one of the two levels of its own bin.
    assert bool((((d - lo_val).abs() < tol) | ((d - hi_val).abs() < tol)).all())


@pytest.mark.parametrize("spec", [QuantSpec(), QuantSpec(block_size=0), QuantSpec(levels="optimal"),
                                  QuantSpec(bits=4, block_size=64), QuantSpec(bits=1, block_size=32)],
                         ids=["int2-g256", "int2-row", "int2-optimal", "int4-g64", "int1-g32"])
def test_unbiased_and_variance_matches_formula(spec):
    x = _data(2048).view(32, 64)
    gen = _gen(3)
    k = 300
    draws = torch.stack([dequantize(quantize(x, spec, gen)).double() for _ in range(k)])
    q = quantize(x, spec, gen)  # stats are deterministic: same for every draw
    lo_val, hi_val = _bracket(x.reshape(-1), q)
    var = ((x.reshape(-1).double() - lo_val) * (hi_val - x.reshape(-1).double())).clamp_min(0)
    mean = draws.mean(0).reshape(-1)
    # Unbiased: z-scores of the sample mean against the exact per-element variance.
    z = (mean - x.reshape(-1).double()) / (var / k).sqrt().clamp_min(1e-9)
    informative = var > 1e-12
    assert float(z[informative].pow(2).mean()) < 1.3  # chi-square / dof ~ 1 +- 0.04
    assert float(z[informative].abs().max()) < 6.0
    # Variance: per-element sum((x - l)(u - x)) within a few percent of the sample variance.
    emp = draws.var(0).reshape(-1)
    assert abs(float(emp.sum() / var.sum()) - 1) < 0.05
    assert bool((var <= (hi_val - lo_val) ** 2 / 4 + 1e-9).all())


def _expected_var(x: torch.Tensor, spec: QuantSpec) -> float:
    q = quantize(x, spec, _gen())
    lo_val, hi_val = _bracket(x, q)
    return float(((x.double() - lo_val) * (hi_val - x.double())).clamp_min(0).sum())


@pytest.mark.parametrize("block,reported", [(64, 7.9), (256, 14.2), (1024, 21.1)])
def test_optimal_levels_reduce_variance_on_normal_data(block, reported):
    x = torch.randn(1 << 18, generator=_gen(5))
    uniform = _expected_var(x, QuantSpec(block_size=block))
    optimal = _expected_var(x, QuantSpec(block_size=block, levels="optimal"))
    reduction = 100 * (1 - optimal / uniform)
    assert abs(reduction - reported) < 1.0, reduction


def test_optimal_lo_fit():
    assert abs(optimal_lo(64) - 1.09) < 0.01 and abs(optimal_lo(1024) - 1.14) < 0.01
    assert int2_levels(256)[1] + int2_levels(256)[2] == pytest.approx(3.0)


@pytest.mark.parametrize("n", [1, 7, 255, 256, 257, 4096, 10_001])
@pytest.mark.parametrize("bits,block", [(2, 256), (2, 64), (1, 32), (4, 128), (8, 4096)])
def test_packed_byte_counts(n, bits, block):
    x = torch.randn(n, generator=_gen())
    q = quantize(x, QuantSpec(bits=bits, block_size=block), _gen())
    expected = math.ceil(n * bits / 8) + 4 * math.ceil(n / min(block, n))
    assert q.codes.dtype == torch.uint8
    assert q.nbytes == packed_nbytes(n, bits, min(block, n)) == expected


def test_rowwise_bytes_and_mask_bytes():
    x = torch.randn(300, 40, generator=_gen())
    q = quantize(x, QuantSpec(block_size=0), _gen())
    assert q.nbytes == 300 * 40 // 4 + 4 * 300
    m = pack_mask(x > 0, 1.0, torch.float32)
    assert m.nbytes == math.ceil(12000 / 8)
    assert torch.equal(unpack_mask(m), (x > 0).float())
    assert torch.equal(unpack_mask(pack_mask(x > 0, 1.0, torch.bool)), x > 0)


@pytest.mark.parametrize("bits", [1, 2, 4, 8])
def test_bit_packing_round_trip(bits):
    codes = torch.randint(0, 1 << bits, (1001,), generator=_gen(), dtype=torch.uint8)
    packed = pack_codes(codes, bits)
    assert packed.numel() == math.ceil(1001 * bits / 8)
    back = unpack_values(packed, bits, tuple(float(i) for i in range(1 << bits)), 1001)
    assert torch.equal(back, codes.float())


@pytest.mark.parametrize("value", [0.0, 1.0, -2.5, 3.3, 1e30, -7e-30])
@pytest.mark.parametrize("stats", [torch.bfloat16, torch.float16])
def test_constant_blocks_are_finite(value, stats):
    if stats == torch.float16 and abs(value) > 6e4:
        pytest.skip("outside the fp16 range")
    x = torch.full((3, 700), value)
    x[2, 600:] = 0.0  # a block that is not constant next to constant ones
    for levels in ("uniform", "optimal"):
        d = dequantize(quantize(x, QuantSpec(levels=levels, stats_dtype=stats), _gen()))
        assert bool(torch.isfinite(d).all())
        # A constant block spans at most ~one stats ulp (absolute in the subnormal range).
        step = max(abs(value) * 2 ** -6, 4 * float(torch.finfo(stats).smallest_normal) * 2 ** -10)
        assert bool(((d[:2] - value).abs() <= step).all())
    if value in (0.0, 1.0, -2.5):  # representable constants come back exactly
        d = dequantize(quantize(x, QuantSpec(stats_dtype=stats), _gen()))
        assert bool((d[:2] == value).all())


def test_deterministic_under_seed():
    x = _data()
    for spec in (QuantSpec(), QuantSpec(levels="optimal"), QuantSpec(block_size=0, projection=0.5)):
        a = quantize(x.view(50, 100), spec, _gen(7))
        b = quantize(x.view(50, 100), spec, _gen(7))
        c = quantize(x.view(50, 100), spec, _gen(8))
        assert torch.equal(a.codes, b.codes) and torch.equal(a.mn, b.mn)
        assert torch.equal(dequantize(a), dequantize(b))
        assert not torch.equal(a.codes, c.codes)


def test_random_projection_unbiased_and_stores_seed():
    x = torch.randn(64, 128, generator=_gen(2))
    spec = QuantSpec(block_size=0, projection=0.25)
    q = quantize(x, spec, _gen())
    assert q.numel == 64 * 32 and q.proj is not None  # only the seed and sizes are kept
    gen = _gen(4)
    k = 400
    mean = sum(dequantize(quantize(x, spec, gen)) for _ in range(k)) / k
    # E[deq(q(X P)) P^T] = X P P^T -> X; the mean error shrinks like 1/sqrt(k).
    assert float((mean - x).pow(2).mean()) < 0.05 * float(x.pow(2).mean())


def test_spec_validation():
    with pytest.raises(ValueError):
        QuantSpec(bits=3)
    with pytest.raises(ValueError):
        QuantSpec(bits=4, levels="optimal")


def _edge_data() -> torch.Tensor:
    """Activation-like values plus blocks that stress the statistics rounding."""
    x = _data(6000)
    x[:300] = 0.0  # constant blocks
    x[300:600] = -3.3
    x[600:900] = torch.linspace(1e4, 6e4, 300)  # near the top of the fp16 range
    x[900:1200] = torch.linspace(-1e-6, 1e-6, 300)  # fp16 subnormal statistics
    x[1200:1500] = torch.randn(300) * 1e-3 + 100.0  # narrow range far from 0
    return x


@pytest.mark.parametrize("bits,block,levels", [(2, 256, "uniform"), (2, 37, "uniform"), (1, 40, "uniform"),
                                               (4, 100, "uniform"), (8, 33, "uniform"), (2, 0, "uniform"),
                                               (2, 256, "optimal"), (2, 37, "optimal")])
@pytest.mark.parametrize("stats", [torch.bfloat16, torch.float16])
def test_native_and_torch_paths_agree_in_format(codec_path, bits, block, levels, stats):
    """Same statistics bit for bit and the same packing: each path decodes the other's output."""
    if codec_path == "torch":
        pytest.skip("compares the two paths once")
    x = _edge_data().view(60, 100)
    spec = QuantSpec(bits=bits, block_size=block, levels=levels, stats_dtype=stats)
    qn = quantize(x, spec, _gen())
    with native.disabled():
        qt = quantize(x, spec, _gen())
        dn_by_torch = dequantize(qn)
    assert torch.equal(qn.mn.view(torch.int16), qt.mn.view(torch.int16))
    assert torch.equal(qn.rng.view(torch.int16), qt.rng.view(torch.int16))
    assert qn.codes.shape == qt.codes.shape and qn.nbytes == qt.nbytes
    assert (qn.group, qn.numel, qn.bits) == (qt.group, qt.numel, qt.bits)
    dt_by_native = dequantize(qt)
    with native.disabled():
        dt_by_torch = dequantize(qt)
    mn, step = _per_element_levels(qn, spec)
    tol = step * 1e-5 + x.reshape(-1).abs() * 2 ** -21  # fp32 rounding of mn + code * step
    assert bool(((dequantize(qn) - dn_by_torch).abs().reshape(-1) <= tol).all())
    assert bool(((dt_by_native - dt_by_torch).abs().reshape(-1) <= tol).all())
    # Native codes are stochastic roundings of x: one of the two grid points around it.
    d = dequantize(qn).reshape(-1).double()
    lo_val, hi_val = _bracket(x.reshape(-1), qn)
    tol = tol.double()
    assert bool((((d - lo_val).abs() <= tol) | ((d - hi_val).abs() <= tol)).all())
    assert bool(((d >= mn.double() - tol) & (d <= mn.double() + step.double() * ((1 << bits) - 1) + tol)).all())


def test_native_result_does_not_depend_on_thread_split(codec_path):
    if codec_path == "torch":
        pytest.skip("the torch path draws one stream")
    x = torch.randn(1 << 19, generator=_gen(9)).view(-1, 128)
    old = torch.get_num_threads()
    try:
        out = []
        for threads in (1, 2, 3):
            torch.set_num_threads(threads)
            out.append(quantize(x, QuantSpec(), _gen(4)))
    finally:
        torch.set_num_threads(old)
    for q in out[1:]:
        assert torch.equal(q.codes, out[0].codes) and torch.equal(q.mn, out[0].mn)


@pytest.mark.parametrize("n", [1, 13, 4096, 300_001])
def test_sign_and_two_valued_masks_are_lossless(n):
    x = torch.randn(n, generator=_gen(6))
    p = pack_positive(x)
    assert p.nbytes == math.ceil(n / 8)
    assert torch.equal(unpack_mask(p), (x > 0).float())
    drop = (torch.rand(n, generator=_gen(7)) > 0.3).float() / 0.7
    m = pack_two_valued(drop)
    assert m is not None and m.value == pytest.approx(1 / 0.7) and m.nbytes == math.ceil(n / 8)
    assert torch.equal(unpack_mask(m), drop)
    assert pack_two_valued(x) is None  # an ordinary activation is not a mask
    tricky = drop.clone()
    tricky[-1] = 2.0  # {0, c} everywhere but at the very end
    if n > 1:
        assert pack_two_valued(tricky) is None
