"""Contract of every registered compressor: shapes, dtypes, determinism, bits, rows."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from strategies import compressor_cases, make_vector, vectors

import compressors
from compressors import COMPRESSORS, Compressor, parse_spec
from streams import Streams

CASES = compressor_cases()
IDS = [name for name, _ in CASES]
ALL = [c for _, c in CASES]
MIN_D = 10  # the largest fixed k among the examples


@pytest.mark.parametrize("name", list(COMPRESSORS))
@pytest.mark.parametrize("d", [1, 2, 3])
def test_tiny_dimensions(name, d):
    c = COMPRESSORS[name]().bind(1)
    x = torch.tensor([[0.5, -2.0, 3.0][:d]], dtype=torch.float64)
    packet = c.encode(x, Streams.shared(0, 1, 1) if c.shared_randomness else 0)
    y = c.decode(packet)
    assert y.shape == (1, d) and torch.isfinite(y).all()
    if c.fixed_size:
        assert packet.nbits.tolist() == [c.bits(d)]


def rows_rng(c: Compressor, m: int, seed: int = 0) -> Streams:
    """Streams for ``m`` rows: the nodes 0..m-1 of one step, shared keys where the compressor
    needs shared randomness (as the comm layer gives them)."""
    n = getattr(c, "n", None) or m
    nodes = torch.arange(m) % n
    if c.shared_randomness:
        return Streams.shared(seed, m, 7, nodes=nodes)
    return Streams.for_nodes(seed, nodes, 7)


def test_every_concrete_compressor_is_registered():
    from compressors.registry import STRUCTURED

    registered = set(COMPRESSORS.values()) | set(STRUCTURED.values())
    found = set()
    for mod in pkgutil.iter_modules(compressors.__path__):
        module = importlib.import_module(f"compressors.{mod.name}")
        for _, obj in inspect.getmembers(module, inspect.isclass):
            if (
                issubclass(obj, Compressor)
                and obj is not Compressor
                and not obj.__name__.startswith("_")
                and getattr(obj, "in_registry", True)
            ):
                found.add(obj)
    assert found - registered == set(), f"not in the registry: {found - registered}"


def test_every_compressor_declares_a_docstring_with_bits_and_a_reference():
    from compressors.registry import STRUCTURED

    for name, cls in [*COMPRESSORS.items(), *STRUCTURED.items()]:
        doc = inspect.getdoc(cls) or ""
        assert "Bits" in doc, f"{name}: docstring states no bit formula"
        assert "arXiv" in doc or "Interspeech" in doc, f"{name}: docstring cites no paper"


@pytest.mark.parametrize("c", ALL, ids=IDS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
@given(x=vectors(min_d=MIN_D, max_d=40, scales=(1e-3, 1.0, 1e3)))
def test_shape_dtype_device_and_finite(c, dtype, x):
    m, d = 3, x.numel()
    x_i = torch.stack([x, 2 * x, -x]).to(dtype)
    packet = c.encode(x_i, rows_rng(c, m))
    y = c.decode(packet)
    assert y.shape == (m, d) and y.dtype == dtype and y.device == x_i.device
    assert torch.isfinite(y).all()
    assert packet.nbits.dtype == torch.int64 and packet.nbits.shape == (m,)
    assert (packet.nbits > 0).all()


@pytest.mark.parametrize("c", ALL, ids=IDS)
def test_zero_maps_to_zero_without_nan(c):
    x = torch.zeros(3, 17, dtype=torch.float64)
    y = c(x, rows_rng(c, 3))
    assert torch.isfinite(y).all()
    if c.preserves_zero:
        assert (y == 0).all()


@pytest.mark.parametrize("c", ALL, ids=IDS)
@given(x=vectors(min_d=MIN_D, max_d=40), seed=st.integers(0, 2**40))
def test_same_streams_same_output_and_rows_are_independent(c, x, seed):
    x_i = torch.stack([x, x.flip(0), 3 * x])
    rng = rows_rng(c, 3, seed)
    y = c(x_i, rng)
    assert torch.equal(y, c(x_i, rng))
    # A node is a row: row j alone, with row j's stream, gives row j of the batch, which is
    # what a rank holding node j alone computes under torch.distributed.
    for j in range(3):
        assert torch.equal(c(x_i[j : j + 1], rng[j : j + 1]), y[j : j + 1])


def _random(c: Compressor) -> bool:
    """Randomness reaches the output (Bernoulli with p = 1 and Perm-K with n = 1 are exact)."""
    return not c.deterministic and not (c.unbiased and c.omega(64) == 0)


@pytest.mark.parametrize(
    "c", [c for c in ALL if _random(c)], ids=[i for i, c in CASES if _random(c)]
)
def test_different_streams_give_different_draws(c):
    x = make_vector("gaussian", 64, 1).expand(16, 64)
    a = c(x, rows_rng(c, 16, seed=1))
    b = c(x, rows_rng(c, 16, seed=2))
    assert not torch.equal(a, b)


@pytest.mark.parametrize("c", ALL, ids=IDS)
def test_generators_are_accepted_per_row(c):
    x = make_vector("gaussian", 30, 3).expand(2, 30).contiguous()
    if c.needs_node_count and c.n == 1:
        x = x[:1]
    m = x.shape[0]
    gens = [torch.Generator().manual_seed(11 + j) for j in range(m)]
    again = [torch.Generator().manual_seed(11 + j) for j in range(m)]
    y1 = c(x, gens)
    y2 = c(x, again)
    assert torch.equal(y1, y2)


@pytest.mark.parametrize("c", ALL, ids=IDS)
@given(x=vectors(min_d=MIN_D, max_d=300))
def test_bits_match_the_declared_formula(c, x):
    d = x.numel()
    x_i = torch.stack([x, -x])
    packet = c.encode(x_i, rows_rng(c, 2))
    if c.fixed_size:
        assert packet.nbits.tolist() == [c.bits(d)] * 2
    else:
        assert (packet.nbits <= c.max_bits(d)).all()
    assert packet.wire <= set(packet.fields), "a wire field the packet does not hold"
    if c.sparsifier:
        k = c.k_of(d)
        assert packet.fields["values"].shape == (2, k)
        assert packet.nbits.tolist() == [c.float_bits * k + c.index_bits(d)] * 2


@pytest.mark.parametrize("c", ALL, ids=IDS)
def test_spec_round_trip(c):
    again = parse_spec(c.spec())
    assert type(again) is type(c) and again.spec() == c.spec()


@pytest.mark.parametrize(
    "c",
    [c for c in ALL if c.deterministic and c.contractive],
    ids=[i for i, c in CASES if c.deterministic and c.contractive],
)
@given(x=vectors(min_d=MIN_D, max_d=64))
def test_deterministic_contraction_holds_for_every_vector(c, x):
    d = x.numel()
    y = c(x[None], rows_rng(c, 1))[0]
    err = float(((y - x) ** 2).sum())
    bound = (1 - c.delta(d)) * float((x**2).sum())
    assert err <= bound * (1 + 1e-9) + 1e-300


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_input_is_not_mutated(dtype):
    """Nor in float64, where a cast to the work dtype is no copy."""
    x = make_vector("gaussian", 20, 0).to(dtype).expand(3, 20).clone()
    before = x.clone()
    for c in ALL:
        c(x, rows_rng(c, 3))
        assert torch.equal(x, before), c.spec()


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("c", ALL, ids=IDS)
def test_cuda_matches_cpu(c):
    x = make_vector("gaussian", 64, 0).expand(3, 64).contiguous()
    rng = rows_rng(c, 3)
    y_cpu = c(x, rng)
    y_gpu = c(x.cuda(), rng.to("cuda"))
    assert y_gpu.device.type == "cuda"
    torch.testing.assert_close(y_gpu.cpu(), y_cpu, rtol=1e-10, atol=1e-12)
