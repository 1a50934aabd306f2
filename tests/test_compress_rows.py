"""QuantizedRows: the block-wise 8/4-bit row table of a trainer's feature cache."""
import pytest
import torch

from dsgraph.compress import native
from dsgraph.compress.rows import QuantizedRows, row_nbytes

WIDTHS = [256, 100, 64, 7, 1, 33]


def _gen(seed: int = 0) -> torch.Generator:
    g = torch.Generator()
    g.manual_seed(seed)
    return g


def _rows(n: int, width: int, seed: int = 0) -> torch.Tensor:
    """Feature-like rows: normal values with per-row scale and offset, a few outliers."""
    g = _gen(seed)
    x = torch.randn(n, width, generator=g) * (torch.rand(n, 1, generator=g) * 3 + 0.1)
    x += torch.randn(n, 1, generator=g) * 5
    x[::7, 0] = 40.0
    return x


def _block_bounds(x: torch.Tensor, block: int, bits: int, steps: float) -> torch.Tensor:
    """Per-value bound: ``steps`` x (block range)/(2^bits-1), plus fp16 stat rounding slack."""
    n, width = x.shape
    nb = -(-width // block)
    pad = torch.cat([x, x[:, -1:].expand(n, nb * block - width)], dim=1).view(n, nb, block)
    mn, mx = pad.amin(dim=2), pad.amax(dim=2)
    # fp16 rounding widens the stored range: mn down by <= 2^-10 |mn| (or a subnormal ulp), range
    # up by <= 2^-10 of it; the step is the stored range / (2^bits - 1).
    slack = 2.0 ** -10 * (mn.abs() + (mx - mn)) + 2.0 ** -23
    step = (mx - mn + 2 * slack) / ((1 << bits) - 1)
    bound = steps * step + 1e-6 * (mn.abs() + mx.abs())  # + fp32 arithmetic
    return bound.unsqueeze(2).expand(n, nb, block).reshape(n, nb * block)[:, :width]


@pytest.mark.parametrize("bits", [8, 4])
@pytest.mark.parametrize("width", WIDTHS)
def test_nearest_round_trip_within_half_a_step(bits, width):
    x = _rows(50, width)
    t = QuantizedRows(50, width, bits)
    t.write(0, x)
    d = t.gather(torch.arange(50))
    assert d.shape == (50, width) and d.dtype == torch.float32
    err = (d - x).abs()
    assert bool((err <= _block_bounds(x, 64, bits, 0.5)).all()), float(err.max())


@pytest.mark.parametrize("bits", [8, 4])
@pytest.mark.parametrize("width", [256, 100, 7])
def test_stochastic_round_trip_within_one_step(bits, width):
    x = _rows(50, width, seed=1)
    t = QuantizedRows(50, width, bits, rounding="stochastic")
    t.write(0, x, generator=_gen(3))
    err = (t.gather(torch.arange(50)) - x).abs()
    assert bool((err <= _block_bounds(x, 64, bits, 1.0)).all()), float(err.max())
    # Not secretly nearest: errors above half a step occur.
    assert bool((err > _block_bounds(x, 64, bits, 0.5)).any())


@pytest.mark.parametrize("bits", [8, 4])
def test_stochastic_rounding_is_unbiased(bits):
    x = _rows(4, 100, seed=2)
    reps = 400
    t = QuantizedRows(4 * reps, 100, bits, rounding="stochastic")
    t.write(0, x.repeat(reps, 1), generator=_gen(5))
    d = t.gather(torch.arange(4 * reps)).view(reps, 4, 100)
    bias = d.mean(dim=0) - x
    # Per value the error has sd <= step/2; the mean of reps draws has sd <= step/(2 sqrt(reps)).
    step = _block_bounds(x, 64, bits, 1.0)
    z = bias / (step / (2 * reps ** 0.5))
    assert float(z.abs().max()) < 5.0
    assert abs(float(z.mean())) < 5.0 / (z.numel() ** 0.5)  # no systematic drift overall
    # Nearest, by contrast, keeps a fixed error: repeats decode identically.
    tn = QuantizedRows(8, 100, bits)
    tn.write(0, x.repeat(2, 1))
    dn = tn.gather(torch.arange(8))
    assert torch.equal(dn[:4], dn[4:])


@pytest.mark.parametrize("rounding", ["nearest", "stochastic"])
def test_stochastic_is_deterministic_under_seed(rounding):
    x = _rows(20, 100)
    a, b = (QuantizedRows(20, 100, 4, rounding=rounding) for _ in range(2))
    a.write(0, x, generator=_gen(9))
    b.write(0, x, generator=_gen(9))
    assert torch.equal(a.codes, b.codes) and torch.equal(a.gather(torch.arange(20)), b.gather(torch.arange(20)))


@pytest.mark.parametrize("bits", [8, 4])
@pytest.mark.parametrize("width", WIDTHS)
def test_gather_equals_full_decode_at_positions(bits, width):
    x = _rows(40, width, seed=3)
    t = QuantizedRows(40, width, bits)
    t.write(0, x)
    full = t.gather(torch.arange(40))
    pos = torch.tensor([5, 0, 39, 5, 17, 17, 2])
    assert torch.equal(t.gather(pos), full[pos])
    assert torch.equal(t.gather(pos.int()), full[pos])


@pytest.mark.parametrize("bits", [8, 4])
@pytest.mark.parametrize("width,block", [(256, 64), (100, 128), (7, 64), (1, 64), (128, 16)])
def test_gathered_rows_are_a_codec_stream(bits, width, block):
    """Where stream_group() allows, native.dequantize decodes the gathered rows the same way."""
    if not native.available():
        pytest.skip("C kernels unavailable")
    x = _rows(30, width, seed=4)
    t = QuantizedRows(30, width, bits, block=block)
    t.write(0, x)
    group = t.stream_group()
    if (width * bits) % 8:
        assert group == 0
        return
    assert group == min(width, block)
    pos = torch.randperm(30, generator=_gen(1))
    ref = native.dequantize(t.codes[pos].view(-1), 30 * width, group, bits, True,
                            t.mn[pos].view(torch.int16).reshape(-1), t.rng[pos].view(torch.int16).reshape(-1))
    assert torch.allclose(t.gather(pos), ref.view(30, width), rtol=0, atol=1e-5 * float(x.abs().max()))
    assert QuantizedRows(3, 100, bits).stream_group() == 0  # 100 = 64 + 36: unequal blocks


@pytest.mark.parametrize("bits", [8, 4])
@pytest.mark.parametrize("width", [256, 100, 7])
def test_chunked_writes_equal_one_write(bits, width):
    x = _rows(53, width, seed=5)
    one = QuantizedRows(53, width, bits)
    one.write(0, x)
    chunked = QuantizedRows(53, width, bits)
    for s in range(0, 53, 10):  # last chunk is short
        chunked.write(s, x[s:s + 10])
    assert torch.equal(one.codes, chunked.codes)
    assert torch.equal(one.mn, chunked.mn) and torch.equal(one.rng, chunked.rng)
    # Rewriting a chunk leaves the other rows alone.
    chunked.write(20, torch.zeros(5, width))
    d = chunked.gather(torch.arange(53))
    assert bool((d[20:25] == 0).all())
    assert torch.equal(d[:20], one.gather(torch.arange(20)))
    assert torch.equal(d[25:], one.gather(torch.arange(25, 53)))


@pytest.mark.parametrize("bits", [8, 4])
@pytest.mark.parametrize("value", [0.0, 1.0, -2.5, 1024.0, 3.0e-5])
def test_constant_rows_decode_exactly(bits, value):
    # fp16-representable constants get range 0 and come back bit-exact (3e-5 is an fp16 subnormal
    # neighbour, so use its fp16 value).
    value = float(torch.tensor(value).half().float())
    x = torch.full((6, 100), value)
    x[3, :64] = torch.linspace(-1, 1, 64)  # a varying block beside a constant one in the same row
    t = QuantizedRows(6, 100, bits, rounding="stochastic")
    t.write(0, x, generator=_gen(2))
    d = t.gather(torch.arange(6))
    const = torch.ones(6, 100, dtype=torch.bool)
    const[3, :64] = False
    assert bool((d[const] == value).all())


def test_non_fp16_constants_within_an_fp16_ulp():
    x = torch.full((2, 70), 0.1)
    t = QuantizedRows(2, 70, 4)
    t.write(0, x)
    assert float((t.gather(torch.arange(2)) - 0.1).abs().max()) <= 0.1 * 2 ** -10


def test_empty_table_and_empty_gather():
    t = QuantizedRows(0, 100, 4)
    assert t.nbytes == 0 and t.num_rows == 0
    out = t.gather(torch.empty(0, dtype=torch.int64))
    assert out.shape == (0, 100) and out.dtype == torch.float32
    t.write(0, torch.empty(0, 100))
    t2 = QuantizedRows(3, 8, 8)
    assert t2.gather(torch.empty(0, dtype=torch.int64)).shape == (0, 8)
    assert torch.equal(t2.gather(torch.tensor([1])), torch.zeros(1, 8))  # unwritten rows decode to 0


@pytest.mark.parametrize("width", [1, 3, 7, 65, 129])
def test_four_bit_packing_of_odd_widths(width):
    # Values exactly on the 4-bit grid of [0, 15]: every code must survive packing unchanged.
    g = _gen(6)
    x = torch.randint(0, 16, (9, width), generator=g).float()
    x[:, 0], x[:, -1] = 0.0, 15.0  # each row spans [0, 15] in its first and last block
    if width > 64:
        x[:, 63], x[:, 64] = 15.0, 0.0
    t = QuantizedRows(9, width, 4, block=64)
    assert t.codes.shape == (9, (width + 1) // 2)
    t.write(0, x)
    assert torch.equal(t.gather(torch.arange(9)), x)
    assert torch.equal(t.gather(torch.tensor([8, 0])), x[[8, 0]])


@pytest.mark.parametrize("bits", [8, 4])
@pytest.mark.parametrize("width,block", [(256, 64), (100, 64), (7, 64), (1, 64), (4096, 64), (100, 16), (7, 3)])
def test_nbytes(bits, width, block):
    t = QuantizedRows(11, width, bits, block=block)
    assert t.nbytes == 11 * row_nbytes(width, bits, block)
    assert (t.num_rows, t.width, t.bits, t.block) == (11, width, bits, block)
    assert row_nbytes(width, 32) == width * 4
    assert row_nbytes(256, 8) == 256 + 16 and row_nbytes(256, 4) == 128 + 16 and row_nbytes(7, 4) == 4 + 4


@pytest.mark.parametrize("width,block", [(100, 16), (7, 3), (4096, 64), (10, 10)])
def test_other_blocks_round_trip(width, block):
    x = _rows(12, width, seed=7)
    t = QuantizedRows(12, width, 4, block=block)
    t.write(0, x)
    err = (t.gather(torch.arange(12)) - x).abs()
    assert bool((err <= _block_bounds(x, block, 4, 0.5)).all())


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_non_finite_rows_refused_naming_the_row(bad):
    x = _rows(10, 100)
    x[6, 50] = bad
    x[8, 3] = bad
    t = QuantizedRows(20, 100, 8)
    with pytest.raises(ValueError, match=r"row 9 \(rows\[6\]\)"):
        t.write(3, x)
    assert bool((t.codes == 0).all())  # nothing written


def test_values_beyond_fp16_refused():
    t = QuantizedRows(4, 10, 8)
    x = torch.zeros(4, 10)
    x[2, 0] = 1e6
    with pytest.raises(ValueError, match="row 2 .*fp16"):
        t.write(0, x)
    x[2, 0], x[1, 0], x[1, 1] = 0.0, -4e4, 4e4  # range 8e4 overflows fp16
    with pytest.raises(ValueError, match="row 1 "):
        t.write(0, x)


def test_argument_checks():
    with pytest.raises(ValueError):
        QuantizedRows(3, 10, 2)
    with pytest.raises(ValueError):
        QuantizedRows(3, 0, 8)
    with pytest.raises(ValueError):
        QuantizedRows(3, 4097, 8)
    with pytest.raises(ValueError):
        QuantizedRows(3, 10, 8, rounding="up")
    t = QuantizedRows(3, 10, 8)
    with pytest.raises(ValueError):
        t.write(0, torch.zeros(2, 11))
    with pytest.raises(IndexError):
        t.write(2, torch.zeros(2, 10))
    with pytest.raises((IndexError, RuntimeError)):
        t.gather(torch.tensor([3]))
