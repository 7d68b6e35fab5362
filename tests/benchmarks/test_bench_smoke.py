"""The benchmark report's arithmetic on injected numbers, and the bandwidth-bound byte counts
against hand computations (no timings are asserted)."""

import numpy as np
import pytest
import torch

from algorithms.ef.ef21 import EF21State
from algorithms.registry import ALGORITHMS
from benchmarks import bandwidth, baselines, report
from comm import SimulatedComm
from compressors import parse_spec
from problems.logreg_nonconvex import LogRegNonconvex
from streams import tags


def _iter_row(**kw):
    row = {
        "case": "c",
        "kind": "dense",
        "n": 20,
        "d": 1000,
        "m_i": 100,
        "dtype": "float64",
        "method": "ef21",
        "spec": "topk:k=10",
        "bytes": 2**25,
        "compzoo_s": 2.0**-4,
    }
    row.update(kw)
    return row


def test_iteration_ratios_and_targets():
    rows = [
        _iter_row(numpy_loop_s=2.0**-3),  # 2x faster, 50% of the bound: both targets met
        _iter_row(numpy_loop_s=2.0**-4, n=1000),  # 1x at n = 1000: misses 10x
        _iter_row(dtype="float32", numpy_loop_s=2.0**-2),  # float32: speed-up target only
        _iter_row(method="dasha-page", batch=1, compzoo_s=2.0**-2),  # minibatch: no bound target
        {"case": "c", "kind": "dense", "method": "x", "spec": "s", "error": "no theory"},
    ]
    out = report.derive_iterations(rows, bandwidth=2.0**30)
    assert out[0]["speedup"] == 2.0
    assert out[0]["pct_bound"] == 50.0
    assert out[0]["target"] == "met"
    assert out[1]["speedup"] == 1.0
    assert out[1]["target"] == "MISSED: speed-up < 10x"
    assert out[2]["speedup"] == 4.0
    assert out[2]["target"] == "met"
    assert out[3]["pct_bound"] == 12.5
    assert "speedup" not in out[3]
    assert out[3]["target"] == "-"
    assert out[4] == rows[4]
    slow = report.derive_iterations([_iter_row(compzoo_s=2.0**-3, numpy_loop_s=2.0**-3)], 2.0**30)
    assert slow[0]["pct_bound"] == 25.0
    assert slow[0]["target"] == "MISSED: speed-up < 1.5x, < 50% of bound"


def test_sparse_compressor_memory_deep_ratios():
    it = [
        {"kind": "sparse", "method": "ef21", "compzoo_s": 0.002},
        {"kind": "densified", "method": "ef21", "compzoo_s": 0.012},
        {"kind": "sparse", "method": "diana", "compzoo_s": 0.004},
        {"kind": "densified", "method": "diana", "compzoo_s": 0.008},
        {"kind": "sparse", "method": "dasha-mvr", "compzoo_s": 0.004, "batch": 1},
        {"kind": "densified", "method": "dasha-mvr", "compzoo_s": 0.008, "batch": 1},
        {"kind": "sparse", "method": "marina", "error": "no theory"},
    ]
    sp = report.derive_sparse(it)
    assert [(r["method"], r["speedup"], r["target"]) for r in sp] == [
        ("ef21", 6.0, "met"),
        ("diana", 2.0, "MISSED: < 5x"),
        ("dasha-mvr", 2.0, "-"),
    ]
    comp = report.derive_compressors(
        [
            {"compressor": "topk:k=10", "elements": 1000, "compzoo_s": 3.0, "primitive_s": 2.0,
             "primitive": "torch.topk+scatter", "copy_s": 0.5},
            {"compressor": "randk:k=10", "elements": 1000, "compzoo_s": 5.0, "primitive_s": 2.0,
             "primitive": "randperm+index_select+scatter", "copy_s": 1.0},
            {"compressor": "natural", "elements": 1000, "compzoo_s": 8.0, "primitive_s": 2.0,
             "primitive": "uniform draw", "copy_s": 4.0},
            {"compressor": "round", "elements": 1000, "compzoo_s": 4.0, "primitive_s": 1.0,
             "primitive": "copy", "copy_s": 1.0},
        ]
    )  # fmt: skip
    assert [(r["slowdown"], r["copies"], r["target"]) for r in comp] == [
        (1.5, 6.0, "met"),  # within 2x of its primitive
        (2.5, 5.0, "MISSED: > 3x copy and > 2x randperm+index_select+scatter"),
        (4.0, 2.0, "met"),  # within 3x of a copy
        (4.0, 4.0, "MISSED: > 3x copy"),
    ]
    mem = report.derive_memory(
        [
            {"method": "a", "extra_bytes": 500, "state_bytes": 400, "data_bytes": 100},
            {
                "method": "b",
                "extra_bytes": 1100,
                "state_bytes": 400,
                "grad_bytes": 300,
                "data_bytes": 100,
            },
        ]
    )
    assert [(r["ratio"], r["target"]) for r in mem] == [
        (1.2, "met"),
        (2.4, "MISSED: > 1.5x state+data"),
    ]
    assert [r["ratio_step"] for r in mem] == [600 / 900, 1200 / 1200]
    deep = report.derive_deep([{"net": "mlp", "batched_s": 0.5, "loop_s": 2.0}])
    assert deep[0]["speedup"] == 4.0


def test_bound_bytes_match_hand_computation():
    # EF21 at (n, d, m_i) = (20, 1000, 100), float64: the data pass reads 2000 x 1000 doubles
    # twice; the state is x (1000), g_i (20 x 1000) and g (1000) doubles.
    n, d = 20, 1000
    state = EF21State(
        x=torch.zeros(d, dtype=torch.float64),
        t=0,
        g_i=torch.zeros(n, d, dtype=torch.float64),
        g=torch.zeros(d, dtype=torch.float64),
    )
    data = bandwidth.data_bytes(n * 100, d, 8)
    assert data == 2 * 2000 * 1000 * 8 == 32_000_000
    assert bandwidth.state_bytes(state) == (1000 + 20_000 + 1000) * 8 == 176_000
    assert bandwidth.iteration_bytes(data, 176_000) == 32_352_000
    # An aliased tensor counts once.
    alias = EF21State(x=state.x, t=0, g_i=state.g_i, g=state.x)
    assert bandwidth.state_bytes(alias) == 168_000
    # Sparse w8a shape: 50,000 rows, 600,000 nonzeros, int64 indices and row pointers.
    assert (
        bandwidth.data_bytes(50_000, 300, 8, nnz=600_000)
        == 2 * (600_000 * 16 + 50_001 * 8)
        == 20_000_016
    )


def test_bad_input_names_the_value():
    with pytest.raises(ValueError, match="rows must be a positive integer, got 0"):
        bandwidth.data_bytes(0, 10, 8)
    with pytest.raises(ValueError, match=r"nnz must be an integer in \[0, rows\*d=20\], got 21"):
        bandwidth.data_bytes(2, 10, 8, nnz=21)
    with pytest.raises(ValueError, match="state must be a dataclass instance, got int"):
        bandwidth.state_bytes(3)


def test_markdown_shows_the_ratios():
    res = {
        "meta": "m",
        "bandwidth": {"numpy": 1e10, "torch": 2e10, "best": 2e10},
        "iterations": report.derive_iterations([_iter_row(numpy_loop_s=2.0**-3)], 2.0**30),
        "sparse": [],
        "compressors": [],
        "memory": [],
        "deep": report.derive_deep(
            [{"net": "mlp", "d": 5, "batch": 2, "batched_s": 0.5, "loop_s": 2.0}]
        ),
    }
    text = report.markdown(res)
    assert "| c | ef21 (topk:k=10) | 62.5 | 125 | 2.00x | 33.6 | 50.0% | met |" in text
    assert "| mlp | 5 | 2 | 500 | 2e+03 | 4.00x |" in text
    assert "| 10.00 | 20.00 | 20.00 |" in text


def test_baselines_follow_the_methods_maths():
    # Top-K is deterministic and Rand-K with k = d is the identity, so the per-node loops must
    # reproduce compzoo's iterates to rounding.
    n, d, m, T, lam = 4, 20, 10, 6, 0.1
    rng = np.random.default_rng(0)
    A = rng.standard_normal((n * m, d))
    b = np.where(rng.random(n * m) < 0.5, -1.0, 1.0)
    p = LogRegNonconvex(A, b, np.full(n, m), lam=lam, x0="zeros")
    An = [A[i * m : (i + 1) * m] for i in range(n)]
    bn = [b[i * m : (i + 1) * m] for i in range(n)]
    x0 = np.zeros(d)

    def ours(name, spec, **opts):
        algo, _ = ALGORITHMS[name].configure(p, parse_spec(spec), **opts)
        comm = SimulatedComm(n, seed=0)
        s = algo.init(p.x0, p, comm)
        for _ in range(T):
            s, _info = algo.step(s, p, comm)
        return algo, s.x.numpy()

    a, x = ours("ef21", "topk:k=3")
    np.testing.assert_allclose(x, baselines.ef21_topk(An, bn, x0, a.gamma, 3, lam, T), atol=1e-14)
    a, x = ours("diana", f"randk:k={d}", init_mode="zero")
    base = baselines.diana_randk(An, bn, x0, a.gamma, d, a.alpha, lam, T)
    np.testing.assert_allclose(x, base, atol=1e-14)
    a, x = ours("marina", f"randk:k={d}", p=0.5)
    comm = SimulatedComm(n, seed=0)
    syncs = [comm.coin(t, 0.5, tag=tags.COIN) for t in range(T)]
    assert syncs == [False, False, True, True, False, False]
    base = baselines.marina_randk(An, bn, x0, a.gamma, d, syncs, lam, T)
    np.testing.assert_allclose(x, base, atol=1e-14)
    a, x = ours("dasha", f"randk:k={d}")
    base = baselines.dasha_randk(An, bn, x0, a.gamma, d, a._a(d), lam, T)
    np.testing.assert_allclose(x, base, atol=1e-14)
    assert np.abs(x).max() > 0.1  # the iterates moved: the comparison is not of zeros


def test_only_randomized_compressors_are_bounded_by_a_draw():
    """A compressor held to the uniform draw (not to a copy) must draw: each one the benchmark
    lists is randomized, and every deterministic compressor is held to a copy."""
    from benchmarks import compressors_bench
    from compressors.registry import COMPRESSORS

    x = torch.ones(1, 8)
    for name in compressors_bench.DRAWS:
        assert COMPRESSORS[name]().deterministic is False, name
        bound, _ = compressors_bench._primitive(name, x, 1, torch.Generator())
        assert bound == "uniform draw"
    for name, cls in COMPRESSORS.items():
        if name not in compressors_bench.SKIP and cls().deterministic is True:
            bound, _ = compressors_bench._primitive(name, x, 1, torch.Generator())
            assert bound in ("copy", "torch.topk+scatter"), name


def test_rotating_compressors_are_bounded_by_two_transforms_of_the_padded_row():
    """FO-SGD's and THC's bound transforms the zero-padded row there and back (``H H = n I``)
    and no other compressor is held to it (the staged transform itself is checked against the
    stage-by-stage reference in ``tests/compressors/test_fast_paths.py``)."""
    from benchmarks import compressors_bench
    from compressors.registry import COMPRESSORS

    x = torch.randn(1, 5, generator=torch.Generator().manual_seed(0))
    before = x.clone()
    for name in compressors_bench.ROTATIONS:
        bound, fn = compressors_bench._primitive(name, x, 1, torch.Generator())
        assert bound == "2 x torch WHT"
        torch.testing.assert_close(fn(), torch.cat([8 * x, torch.zeros(1, 3)], dim=1))
        assert torch.equal(x, before)
    for name in COMPRESSORS:
        if name not in compressors_bench.ROTATIONS and name not in compressors_bench.SKIP:
            bound, _ = compressors_bench._primitive(name, x, 1, torch.Generator())
            assert bound != "2 x torch WHT", name


def test_rank_r_is_bounded_by_its_power_step():
    """Rank-r's bound is PowerSGD's power step on the padded near-square view of the row:
    ``p = M q / ||M q||``, ``r = M^T p``, output ``p r^T`` unpadded, the row left unchanged."""
    from benchmarks import compressors_bench

    x = torch.randn(1, 14, generator=torch.Generator().manual_seed(0))
    before = x.clone()
    bound, fn = compressors_bench._primitive("rank", x, 1, torch.Generator().manual_seed(1))
    assert bound == "power step (3 x bmm)"
    q = torch.randn(1, 4, 1, generator=torch.Generator().manual_seed(1))[0, :, 0]  # the same q
    M = torch.cat([x[0], torch.zeros(2)]).view(4, 4)
    p = M @ q
    p = p / p.norm()
    torch.testing.assert_close(fn(), torch.outer(p, M.T @ p).reshape(1, -1)[:, :14])
    assert torch.equal(x, before)
