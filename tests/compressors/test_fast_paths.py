"""The fast forms of FO-SGD, grid rounding, 3LC and hard threshold (the in-place Walsh-Hadamard
transform and the compiled kernels of :mod:`compressors.compiled_fwht` and
:mod:`compressors.compiled_dense`) give exactly what plain NumPy versions of the docstrings'
formulas give, written here one operation at a time in the same precision, and what the torch
forms (kernels switched off) give: every payload field, the bits and the decoded rows, bit for
bit. Row lengths cross the kernels' chunk edges, where the Elias gaps are joined. SIDCo's,
Bernoulli's and scaled sign's one-pass kernels are held to their torch forms the same way.

The transform is checked against the matrix ``H`` itself: exactly on integer vectors (every
sum exact), to 1e-12 on float64 ones, where the matrix sums each entry left to right and the
transform in a tree, so the roundings differ."""

from __future__ import annotations

import contextlib
import math

import numpy as np
import pytest
import torch

from comm import SimulatedComm
from compressors import compiled_dense, compiled_fwht
from compressors.bernoulli import Bernoulli
from compressors.fosgd import FOSGD, _dither_streams, fwht, fwht_staged, padded_dim
from compressors.grid_round import GridRound
from compressors.scaled_sign import ScaledSign
from compressors.sidco import SIDCo
from compressors.sign import Sign
from compressors.threelc import ZERO_BYTE, ThreeLC
from compressors.threshold import Threshold
from streams import Streams, tags

pytestmark = pytest.mark.skipif(not compiled_dense.ENABLED, reason="numba is not installed")


@pytest.fixture(autouse=True)
def _kernels_at_every_size(monkeypatch):
    """The kernels serve inputs of every size here (in use, only from FAST_FROM entries)."""
    monkeypatch.setattr(compiled_dense, "FAST_FROM", 0)


@contextlib.contextmanager
def _torch_form():
    compiled_dense.ENABLED = compiled_fwht.ENABLED = False
    try:
        yield
    finally:
        compiled_dense.ENABLED = compiled_fwht.ENABLED = True


def _same(a, b) -> bool:
    a, b = torch.as_tensor(a), torch.as_tensor(b)
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    if a.is_floating_point():
        view = {2: torch.int16, 4: torch.int32, 8: torch.int64}[a.element_size()]
        a, b = a.contiguous().view(view), b.contiguous().view(view)
    return torch.equal(a, b)


def _gamma(v: int) -> int:
    return 2 * (int(v).bit_length() - 1) + 1


def _ceil_log2(d: int) -> int:
    return (d - 1).bit_length()


def _hadamard(n: int) -> np.ndarray:
    """Sylvester's ``H_n``: ``H_1 = [1]``, ``H_2k = [[H_k, H_k], [H_k, -H_k]]``."""
    H = np.ones((1, 1))
    while H.shape[0] < n:
        H = np.block([[H, H], [H, -H]])
    return H


def ref_fwht(v: np.ndarray) -> np.ndarray:
    """Stage ``h``: ``(a, b) -> (a + b, a - b)`` for the entries ``h`` apart, ``h = 1, 2, ..``."""
    v, n, h = v.copy(), v.shape[-1], 1
    while h < n:
        w = v.reshape(-1, n // (2 * h), 2, h)
        a, b = w[:, :, 0].copy(), w[:, :, 1].copy()
        w[:, :, 0], w[:, :, 1] = a + b, a - b
        h *= 2
    return v


def _rows(m: int, d: int, dtype, seed: int, scale: float = 1.0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(m, d, generator=g, dtype=torch.float64) * scale).to(dtype)


# ---------------------------------------------------------------- the transform
def test_reference_transform_is_the_matrix():
    i = np.arange(16)
    popcount = np.vectorize(lambda v: bin(v).count("1"))(i[:, None] & i[None, :])
    assert np.array_equal(_hadamard(16), (-1.0) ** popcount)  # H_ij = (-1)^<i, j>
    g = np.random.default_rng(0)
    for n in (1, 2, 4, 16, 64):
        v = g.integers(-50, 50, size=(2, n)).astype(np.float64)
        assert np.array_equal(ref_fwht(v), v @ _hadamard(n))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_fwht_is_the_stage_by_stage_transform(dtype):
    # the first plan's in-cache block is 2^13 entries, then rounds of up to 7 stages (a partial
    # one, one, two)
    for k in (0, 1, 2, 3, 5, 6, 7, 8, 11, 12, 13, 14, 16, 20, 21):
        x = _rows(3, 1 << k, dtype, k)
        want = torch.from_numpy(ref_fwht(x.numpy()))
        assert _same(fwht(x), want), k
        with _torch_form():
            assert _same(fwht(x), want), k
        assert _same(fwht_staged(x.clone()), want), k  # the torch form, called directly
        assert _same(fwht(x[1]), want[1])  # one vector; the input is left as it was
        assert _same(x, _rows(3, 1 << k, dtype, k))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_fwht_is_the_same_under_every_plan(dtype, monkeypatch):
    """Each plan (in-cache stages, stages per pass, tile width) runs the stage-by-stage
    butterflies; a length past the threshold takes one of them, timed."""
    x = _rows(2, 1 << 15, dtype, 7)
    want = torch.from_numpy(ref_fwht(x.numpy()))
    for bl, rnd, tile in compiled_fwht.PLANS:
        for p in ((min(bl, 15), rnd, tile), (min(bl, 10), 2, 64), (min(bl, 9), rnd, 8)):
            assert _same(compiled_fwht.transform_(x.clone(), p), want), p
    monkeypatch.setattr(compiled_fwht, "MEASURE_FROM", 1 << 14)
    monkeypatch.setattr(compiled_fwht, "_CHOSEN", {})
    assert _same(fwht(x), want)
    (chosen,) = compiled_fwht._CHOSEN.values()
    assert chosen in [(min(bl, 15), rnd, tile) for bl, rnd, tile in compiled_fwht.PLANS]


def test_fwht_against_the_matrix():
    g = torch.Generator().manual_seed(1)
    for n in (8, 128, 256):
        ints = torch.randint(-1000, 1000, (2, n), generator=g).to(torch.float64)
        H = torch.from_numpy(_hadamard(n))
        assert torch.equal(fwht(ints), ints @ H)  # every partial sum is an exact integer
        x = torch.randn(2, n, generator=g, dtype=torch.float64)
        assert float((fwht(x) - x @ H).abs().max()) <= 1e-12 * float(x.abs().sum(dim=1).max())


# ---------------------------------------------------------------- FO-SGD
@np.errstate(over="ignore", invalid="ignore")  # saturation is tested
def ref_fosgd(x: torch.Tensor, rng: Streams):
    """FO-SGD's encode and decode in NumPy, in the work dtype (float32 for float16 rows)."""
    m, d = x.shape
    n = padded_dim(d)
    w = np.float64 if x.dtype == torch.float64 else np.float32
    big = w(torch.finfo(x.dtype).max)
    xw = x.to(torch.float64 if w is np.float64 else torch.float32).numpy()
    draw = rng.split(tags.FOSGD_SIGNS).bits64(n).numpy()
    signs = np.where(draw & 1, w(-1), w(1))
    top = np.abs(xw).max(axis=1)
    ok = np.isfinite(top) & (top > 0)
    pad = np.zeros((m, n), w)
    pad[:, :d] = xw / np.where(ok, top, w(1))[:, None]
    root = w(math.sqrt(n))
    y = ref_fwht(pad * signs) / root
    lam = np.abs(y).max(axis=1)
    p = w(0.5) * (w(1) + y / np.where(lam > 0, lam, w(1))[:, None])
    u = _dither_streams(rng).uniform(n, dtype=torch.from_numpy(pad).dtype).numpy()
    bits = u < p
    scale = np.where(ok, np.minimum(lam * top, big), w(0))
    pm = np.where(bits, w(1), w(-1))
    out = (signs * (ref_fwht(pm) / root))[:, :d] * scale[:, None]
    return signs, scale, bits, np.clip(out, -big, big)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16])
@pytest.mark.parametrize("m, d", [(1, 1), (1, 2), (3, 7), (2, 1000), (1, 2049), (2, 5000)])
def test_fosgd(m, d, dtype):
    C = FOSGD()
    for seed, shared, scale in ((0, True, 3.0), (1, False, 1.0), (2, True, None)):
        if scale is None:  # the output saturates
            x = _rows(m, d, dtype, seed).sign() * torch.finfo(dtype).max
        else:
            x = _rows(m, d, dtype, seed, scale=scale)
        if shared:
            rng = SimulatedComm(m, seed=seed).rng_for(C, 2)
        else:
            rng = Streams.for_nodes(seed, list(range(m)))
        signs, scale, bits, out = ref_fosgd(x, rng)
        p = C.encode(x, rng)
        f = p.fields
        assert _same(f["signs"], torch.from_numpy(signs))
        assert _same(f["scale"], torch.from_numpy(scale))
        assert torch.equal(f["bits"], torch.from_numpy(bits))
        assert torch.equal(p.nbits, torch.full((m,), padded_dim(d) + 32))
        assert _same(C.decode(p), torch.from_numpy(out).to(dtype))


# ---------------------------------------------------------------- grid rounding
@np.errstate(over="ignore", invalid="ignore")  # saturation is tested
def ref_round(x: torch.Tensor, h: float, rounding: str, rng: Streams):
    m, d = x.shape
    q = x.to(torch.float64).numpy() / h
    esc = ~(np.abs(q) < 2**24 - 1)
    q = np.where(esc, 0.0, q)
    if rounding == "deterministic":
        level = np.rint(q)
    else:
        u = rng.uniform(d, dtype=torch.float64).numpy()
        level = np.floor(q) + (u < q - np.floor(q))
    level = level.astype(np.int32)  # |level| < 2^24
    n_esc = esc.sum(axis=1)
    raw = torch.zeros(m, int(n_esc.max()), dtype=x.dtype)  # each row's escaped values, then 0
    for r in range(m):
        raw[r, : n_esc[r]] = x[r, torch.from_numpy(np.flatnonzero(esc[r]))]
    code = np.where(esc, 1 << 24, np.abs(level))
    nbits = []
    for r in range(m):
        bits, prev = 0, -1
        for j in np.flatnonzero(code[r]):
            bits += _gamma(j - prev) + 1 + _gamma(code[r, j])
            prev = j
        nbits.append(_ceil_log2(d + 1) + 32 * int(esc[r].sum()) + bits)
    y64 = level * h
    y = torch.from_numpy(y64).to(x.dtype)
    big = torch.finfo(x.dtype).max
    y = torch.where(torch.from_numpy(np.isfinite(y64)), y.clamp(-big, big), y)
    out = torch.where(torch.from_numpy(esc), x, y)
    return torch.from_numpy(level), torch.from_numpy(esc), raw, torch.tensor(nbits), out


def _round_inputs(dtype):
    yield _rows(3, 257, dtype, 0, scale=0.3)
    halves = torch.arange(-40, 41, dtype=torch.float64)[None] * 0.125  # ties at h = 0.25
    yield halves.to(dtype)
    x = _rows(2, 3 * 32768 + 7, dtype, 1, scale=1e-6)  # three chunks and a bit
    x[0, [5, 40000, 40001, 98000]] = torch.tensor([0.7, -3.0, 1e9, 2.0], dtype=dtype)
    x[1, [70000, 98309]] = torch.tensor([-0.4, 5.0], dtype=dtype)  # the first chunk empty
    yield x
    big = _rows(1, 50, dtype, 2)
    big[0, ::3] = torch.finfo(dtype).max / 3
    yield big
    # codes non-zero almost everywhere (at h = 1e-3): blocks of 2048 entries without a zero
    # code take the kernel's gaps of 1, the others the gaps in turn; zeros at block edges,
    # a block all zero, one escaped entry, across three chunks
    dense = _rows(2, 2 * 32768 + 3 * 2048 + 5, dtype, 3)
    dense[0, [0, 2047, 2048, 4095, 40000]] = 0.0
    dense[1, 32768 : 32768 + 2048] = 0.0
    dense[1, 32768 + 2048] = 1e30 if dtype == torch.float64 else 1e20
    yield dense


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize(
    "h, rounding", [(1e-3, "deterministic"), (0.25, "random"), (0.25, "deterministic")]
)
def test_round(h, rounding, dtype):
    C = GridRound(h=h, rounding=rounding)
    for i, x in enumerate(_round_inputs(dtype)):
        rng = Streams.for_nodes(i, list(range(x.shape[0])))
        level, esc, raw, nbits, out = ref_round(x, h, rounding, rng)
        p = C.encode(x, rng)
        assert torch.equal(p.fields["levels"], level)
        assert torch.equal(p.fields["escaped"], esc)
        assert _same(p.fields["raw"], raw)
        assert torch.equal(p.nbits, nbits)
        assert _same(C.decode(p), out)


@pytest.mark.parametrize("dtype, h", [(torch.float32, 2.0**105), (torch.float64, 2.0**1001)])
def test_round_saturates(dtype, h):
    top = torch.finfo(dtype).max  # its level rounds up to 2^23: float32 output, float64 product
    x = torch.tensor([[top, -top, top / 4, 1.0]], dtype=dtype)  # past the range
    C = GridRound(h=h)
    level, esc, raw, nbits, out = ref_round(x, h, "deterministic", None)
    p = C.encode(x, 0)
    assert int(p.fields["levels"][0, 0]) == 1 << 23 and not bool(esc.any())
    assert torch.equal(p.fields["levels"], level) and torch.equal(p.nbits, nbits)
    assert _same(C.decode(p), out)


# ---------------------------------------------------------------- 3LC
@np.errstate(over="ignore", invalid="ignore")  # saturation is tested
def ref_threelc(x: torch.Tensor, s: float):
    w = np.float64 if x.dtype == torch.float64 else np.float32
    xw = x.numpy().astype(w)
    amax = np.abs(xw).max(axis=1)
    den = np.where(amax > 0, amax, w(1))
    q = np.clip(np.rint((xw / den[:, None]) / w(s)), -1, 1).astype(np.int8)
    nbits = []
    for row in q.tolist():
        row = row + [0] * (-len(row) % 5)
        quart = [
            sum((row[i + j] + 1) * 3 ** (4 - j) for j in range(5)) for i in range(0, len(row), 5)
        ]
        length, run = 0, 0
        for b in quart + [None]:  # a zero run costs one byte per piece of at most 14
            if b == ZERO_BYTE:
                run += 1
                continue
            length += math.ceil(run / 14) + (b is not None)
            run = 0
        nbits.append(32 + 8 * length)
    scale = torch.from_numpy(amax).to(x.dtype)
    big = w(torch.finfo(x.dtype).max)
    out = np.clip((q.astype(w) * scale.numpy().astype(w)[:, None]) * w(s), -big, big)
    return torch.from_numpy(q), scale, torch.tensor(nbits), torch.from_numpy(out).to(x.dtype)


def _threelc_inputs(dtype):
    yield _rows(3, 13, dtype, 0)
    yield torch.tensor([[2.0, 1.0, -1.0, 0.5, -2.0, 1.75, -1.75, 0.0]], dtype=dtype)  # ties
    top = torch.finfo(dtype).max  # (q scale) s overflows: saturated
    yield torch.tensor([[top, -top, top / 2, 1.0, 0.0]], dtype=dtype)
    x = _rows(2, 2 * 32770 + 3, dtype, 1, scale=1e-3)  # zero runs across the tasks' edges
    x[0, [3, 32771, 65542]] = torch.tensor([1.0, -1.0, 0.9], dtype=dtype)
    x[1] = 0.0
    yield x
    # zero bytes in runs of every length, across the 8-byte words the kernel tests at once
    gen = torch.Generator().manual_seed(2)
    x = torch.zeros(4, 5 * 9000 + 2, dtype=dtype)
    for r, p in enumerate((0.002, 0.02, 0.1, 0.5)):
        hit = torch.rand(x.shape[1], generator=gen) < p
        sign = torch.randint(0, 2, (int(hit.sum()),), generator=gen) * 2 - 1
        x[r, hit] = sign.to(dtype)
    yield x


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16])
@pytest.mark.parametrize("s", [1.0, 1.75])
def test_threelc(s, dtype):
    C = ThreeLC(s=s)
    for x in _threelc_inputs(dtype):
        q, scale, nbits, out = ref_threelc(x, s)
        p = C.encode(x, 0)
        assert torch.equal(p.fields["q"], q)
        assert _same(p.fields["scale"], scale)
        assert torch.equal(p.nbits, nbits)
        assert _same(C.decode(p), out)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_threelc_threshold_is_the_division_form(dtype):
    """3LC's kernel compares ``|x|`` with a per-row threshold ``T`` instead of dividing: ``T``
    is the largest float whose ``(T / den) / s`` is at most 1/2 (the next float's is above),
    so ``q`` is the division form's at ``T``, at its neighbours and at every entry, for row
    scales from the subnormal to the huge and several ``s``."""
    rng = np.random.default_rng(7)
    expo = (-40, 38) if dtype == np.float32 else (-300, 300)
    for s in (1.0, 1.75, 0.3, 1e-3, 1e5):
        x = rng.standard_normal((40, 30)) * 10.0 ** rng.integers(*expo, (40, 1))
        x = x.astype(dtype)
        amax = np.abs(x).max(axis=1)
        den = np.where(amax > 0, amax, dtype(1)).astype(dtype)
        T = compiled_dense.ternary_thresholds(den, dtype(s), dtype(0.5))
        with np.errstate(all="ignore"):  # huge rows: T's next float is infinite
            up = np.nextafter(T, dtype(np.inf))
            assert ((T / den) / dtype(s) <= 0.5).all() and ((up / den) / dtype(s) > 0.5).all()
            probes = np.concatenate(
                [T[:, None], up[:, None], np.nextafter(T, dtype(0))[:, None], x], 1
            )
            probes = np.concatenate([probes, -probes], axis=1)
            v = (probes / den[:, None]) / dtype(s)
        want = (v > 0.5).astype(np.int8) - (v < -0.5).astype(np.int8)
        got = (probes > T[:, None]).astype(np.int8) - (probes < -T[:, None]).astype(np.int8)
        assert np.array_equal(got, want)


# ---------------------------------------------------------------- hard threshold
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("lam, index", [(0.7, "list"), (0.05, "auto"), (1e-3, "bitmap")])
def test_threshold(lam, index, dtype):
    C = Threshold(lam=lam, index=index)
    x = _rows(3, 2 * 32768 + 11, dtype, 0)
    x[0, :4] = torch.tensor([lam, -lam, math.nextafter(lam, 0), -0.0], dtype=dtype)
    x[1, 7:] *= 0.01  # a sparse row: "auto" picks the list
    xn = x.numpy()
    keep = ~(np.abs(xn) < xn.dtype.type(lam))  # compared in the rows' dtype
    nnz = keep.sum(axis=1)
    listed = _ceil_log2(x.shape[1] + 1) + nnz * (_ceil_log2(x.shape[1]) + 32)
    bitmap = x.shape[1] + nnz * 32
    nbits = {"list": listed, "bitmap": bitmap, "auto": 1 + np.minimum(listed, bitmap)}[index]
    values = torch.from_numpy(np.where(keep, xn, xn.dtype.type(0)))
    p = C.encode(x, 0)
    assert torch.equal(p.fields["keep"], torch.from_numpy(keep))
    assert _same(p.fields["values"], values)
    assert torch.equal(p.nbits, torch.from_numpy(nbits))
    _decodes_to_fresh_rows(C, p, values)


def _decodes_to_fresh_rows(C, p, values):
    """The first decode (the rows the encoder wrote beside the payload) and a second one
    (afresh) both give ``values``, the first in memory of its own that the caller may change."""
    out = C.decode(p)
    assert _same(out, values) and out.data_ptr() != p.fields["values"].data_ptr()
    out.fill_(1.0)
    assert _same(p.fields["values"], values)
    assert _same(C.decode(p), values)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_sidco_decodes_the_rows_its_encoder_wrote(dtype):
    C = SIDCo(ratio=0.05)
    x = _rows(2, 2 * 32768 + 11, dtype, 3)
    p = C.encode(x, 0)
    t = C.thresholds(x)
    keep = ~(x.double().abs() < t[:, None])
    assert torch.equal(p.fields["keep"], keep) and 0 < int(keep.sum()) < x.numel() // 10
    _decodes_to_fresh_rows(C, p, torch.where(keep, x, torch.zeros((), dtype=dtype)))


# ---------------------------------------------------------------- against the torch forms
def _special(m: int, d: int, dtype, seed: int) -> list[torch.Tensor]:
    x = _rows(m, d, dtype, seed)
    y = x.clone()
    y[0, 1] = math.nan
    y[-1, 0] = math.inf
    z = x.clone()
    z[:, ::3] = torch.finfo(dtype).max / 3
    z[:, 1::4] = torch.finfo(dtype).tiny / 4
    return [x, y, z, torch.zeros(m, d, dtype=dtype)]


@pytest.mark.parametrize(
    "spec",
    [
        FOSGD(),
        GridRound(),
        GridRound(h=0.25, rounding="random"),
        ThreeLC(),
        ThreeLC(s=1.75),
        Threshold(),
        Threshold(lam=0.05, index="auto"),
        SIDCo(),
        SIDCo(ratio=0.2, index="auto"),
        Bernoulli(),
        Bernoulli(p=0.1),
        Bernoulli(p=1.0),
        ScaledSign(),
        Sign(),
    ],
)
def test_same_as_torch_form(spec):
    for dtype in (torch.float32, torch.float64, torch.float16, torch.bfloat16):
        for seed, (m, d) in enumerate([(1, 5), (3, 100), (2, 4097)]):
            for x in _special(m, d, dtype, seed):
                rng = Streams.for_nodes(seed, list(range(m)))
                p = spec.encode(x, rng)
                out = spec.decode(p)
                with _torch_form():
                    p0 = spec.encode(x, rng)
                    out0 = spec.decode(p0)
                    out1 = spec.decode(p)  # the torch decode of the fast payload
                assert p.fields.keys() == p0.fields.keys()
                for k in p.fields:
                    assert _same(p.fields[k], p0.fields[k]), (k, dtype, m, d)
                assert torch.equal(p.nbits, p0.nbits)
                assert _same(out, out0) and _same(out1, out0), (dtype, m, d)
