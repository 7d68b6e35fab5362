"""The GLM kernels compiled for a number of points (:mod:`problems.glm_lanes`): the generic
kernel's gradients bit for bit (its losses to 4 ulps), the file of kernels current, the SLP
setting scoped to them, torch's thread count kept."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
import torch

from problems import glm_kernels, glm_lanes, glm_lanes_gen
from streams import compiled

pytestmark = pytest.mark.skipif(not glm_lanes.available(4, torch.float64, torch.device("cpu")),
                                reason="numba is not installed")  # fmt: skip


def _data(unit: bool, dtype: torch.dtype, seed: int = 0, rows: int = 300, d: int = 37):
    """CSR rows (binary with ``unit``), labels in {-1, 1}, a row list of 5 uneven nodes, one
    of them holding no row."""
    rng = np.random.default_rng(seed)
    A = sp.random(rows, d, density=0.2, format="csr", random_state=rng)
    if unit:
        A.data[:] = 1.0
    else:
        A.data = rng.standard_normal(A.nnz)
    A.sort_indices()
    npdt = np.float32 if dtype == torch.float32 else np.float64
    crow, col = torch.from_numpy(A.indptr.astype(np.int64)), torch.from_numpy(A.indices)
    csr = glm_kernels.pack(None, (crow, col, torch.from_numpy(A.data.astype(npdt))), d)
    assert csr[3] == unit
    b = torch.from_numpy(np.where(rng.random(rows) < 0.5, -1.0, 1.0).astype(npdt))
    order = torch.from_numpy(rng.permutation(rows).astype(np.int64))
    ptr = torch.tensor([0, 41, 41, 150, 222, rows], dtype=torch.int64)
    return csr, b, order, ptr, d


@pytest.mark.parametrize(
    "R, dtype", [(3, torch.float64), (12, torch.float64), (5, torch.float32), (21, torch.float64)]
)  # widths 4, 12, 8, and 16 then 8
@pytest.mark.parametrize("unit", [True, False])
def test_the_lanes_kernels_give_the_generic_kernels_gradients_bit_for_bit(R, dtype, unit):
    _check(R, dtype, unit)


@pytest.mark.heavy
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_every_width_and_count_of_points_gives_the_generic_numbers(dtype):
    for R in range(1, glm_lanes.MAX_WIDTH + 1):
        for unit in (True, False):
            _check(R, dtype, unit, seed=R)


@pytest.mark.parametrize("chunk", [1, 5, 16, 64])
@pytest.mark.parametrize("R, dtype", [(12, torch.float64), (7, torch.float32)])
def test_any_size_of_chunk_gives_the_generic_kernels_gradients_bit_for_bit(chunk, R, dtype):
    """Nodes of 41, 0, 109, 72 and 78 rows in chunks of at most ``chunk`` rows: each column's
    sum goes on from chunk to chunk in the rows' order, as the generic kernel adds them."""
    for unit in (True, False):
        _check(R, dtype, unit, seed=chunk, chunk=chunk)


def test_the_plan_takes_each_row_and_entry_of_a_chunk_once_in_its_order():
    csr, _, rows, ptr, d = _data(False, torch.float64, seed=3)
    indptr, indices, values = csr[:3]
    nch, cpos, kp, ccol, cptr, crow, cval, rperm = glm_lanes.plan(csr, rows, ptr, 16)
    sizes = np.diff(ptr.numpy())
    assert np.array_equal(np.diff(nch), -(-sizes // 16))  # the fewest chunks of <= 16 rows
    assert cpos[0] == 0 and cpos[-1] == ptr[-1] and np.all(np.diff(cpos) >= 1)
    assert np.all(np.diff(cpos) <= 16) and np.all(np.isin(ptr.numpy()[:-1][sizes > 0], cpos))
    for c in range(nch[-1]):
        lo, hi = cpos[c], cpos[c + 1]
        order = rperm[lo:hi]
        assert sorted(order) == list(range(hi - lo))
        held = rows.numpy()[lo + order]
        assert np.all(np.diff(indptr[held + 1] - indptr[held]) <= 0)  # longest rows first
        dense = np.zeros((hi - lo, d))  # the chunk's rows as its columns give them
        counts = np.diff(cptr[kp[c] : kp[c + 1] + 1])
        assert np.all(counts >= 1) and np.all(np.diff(counts) <= 0)  # longest columns first
        assert len(set(ccol[kp[c] : kp[c + 1]])) == kp[c + 1] - kp[c]
        for t in range(kp[c], kp[c + 1]):
            at = crow[cptr[t] : cptr[t + 1]]
            assert np.all(np.diff(at) > 0)  # each column's rows in order
            dense[at, ccol[t]] = cval[cptr[t] : cptr[t + 1]]
        want = np.zeros_like(dense)
        for q, row in enumerate(rows.numpy()[lo:hi]):
            want[q, indices[indptr[row] : indptr[row + 1]]] = values[indptr[row] : indptr[row + 1]]
        assert np.array_equal(dense, want)


def _check(R: int, dtype: torch.dtype, unit: bool, seed: int = 0, chunk: int | None = None):
    csr, b, rows, ptr, d = _data(unit, dtype, seed)
    gen = torch.Generator().manual_seed(seed)
    P = torch.randn(R, d, generator=gen, dtype=dtype)
    P[0] *= 40.0  # saturating margins: exp overflows in phi'
    reg = torch.randn(R, d, generator=gen, dtype=dtype)
    order = None if chunk is None else glm_lanes.plan(csr, rows, ptr, chunk)
    for loss, code in glm_kernels.LOSSES.items():
        for with_loss in (False, True):
            G, L = glm_lanes.grad_points(csr, b, rows, ptr, P, code, with_loss, order=order)
            G0, L0 = glm_kernels.grad_points(csr, b, rows, ptr, P, loss, with_loss)
            assert G.shape == (R, 5, d) and G0.shape == (5, d, R)
            assert torch.equal(G, G0.permute(2, 0, 1)), (loss, R, dtype, unit)
            # the regulariser's term, added as the sums are written out: one addition
            Gr, _ = glm_lanes.grad_points(csr, b, rows, ptr, P, code, with_loss, reg, order)
            assert torch.equal(Gr, G0.permute(2, 0, 1) + reg[:, None, :]), (loss, R, dtype)
            G = G.permute(1, 2, 0)
            if with_loss:  # the generic kernel compiles the loss with reassociation
                eps = torch.finfo(dtype).eps
                torch.testing.assert_close(L, L0, rtol=4 * eps, atol=0.0)
            assert torch.isfinite(G).all()
            assert (G[1] == 0).all()  # the node with no row


def test_widths_round_up_to_a_kernel_and_more_points_go_in_pieces():
    assert [glm_lanes.width(R) for R in (1, 3, 4, 5, 12, 13, 16)] == [4, 4, 4, 8, 12, 16, 16]
    assert glm_lanes.width(17) is None
    cpu = torch.device("cpu")
    assert glm_lanes.available(17, torch.float64, cpu)  # in pieces
    assert glm_lanes.pieces(16) == [(0, 16)] and glm_lanes.pieces(37) == [(0, 16), (16, 32),
                                                                           (32, 37)]  # fmt: skip
    assert not glm_lanes.available(0, torch.float64, cpu)
    assert not glm_lanes.available(4, torch.float16, cpu)


def test_the_file_of_kernels_is_the_generators_output():
    """Also after a change of ``glm_kernels.py``, whose helpers the kernels inline: numba's
    cache would otherwise keep serving them as compiled before."""
    assert glm_lanes_gen.KERNELS.read_text() == glm_lanes_gen.source(), (
        "problems/glm_lanes_kernels.py is stale: run python -m problems.glm_lanes_gen"
    )
    assert "# built against problems/glm_kernels.py " in glm_lanes_gen.source().splitlines()[3]


def test_the_kernels_compile_with_slp_on_and_leave_the_setting_as_it_was(monkeypatch):
    from numba.core import config

    seen = []

    class Kernel:  # stands in for a numba dispatcher not yet compiled for these arguments
        overloads: dict = {}

        def compile(self, sig):
            seen.append((config.SLP_VECTORIZE, sig))

    before = config.SLP_VECTORIZE
    compiled.compile_vectorised(Kernel(), (np.zeros(3), True, 2))
    assert [s for s, _ in seen] == [1] and config.SLP_VECTORIZE == before
    assert len(seen[0][1]) == 3

    class Failing(Kernel):
        def compile(self, sig):
            raise RuntimeError("no")

    with pytest.raises(RuntimeError):
        compiled.compile_vectorised(Failing(), (np.zeros(3),))
    assert config.SLP_VECTORIZE == before


def test_compiling_a_kernel_leaves_torchs_thread_count_as_it_was():
    """Compiling (or loading) a parallel kernel starts numba's threading layer, which set
    torch's thread count to numba's: a sweep's one-thread runs then ran on two threads each."""
    before = torch.get_num_threads()

    class Kernel:
        overloads: dict = {}

        def compile(self, sig):
            torch.set_num_threads(before + 1)

    try:
        compiled.compile_vectorised(Kernel(), (np.zeros(3),))
        assert torch.get_num_threads() == before
    finally:
        torch.set_num_threads(before)


def test_the_vectorisable_loss_is_within_a_few_ulps_of_the_library_form():
    """The points kernels' logistic loss (no library call, so that it vectorises) against the
    per-row kernels' ``log1p(exp(.))`` form, on random and saturating margins and specials."""
    import numba

    from problems.glm_kernels import _phi, _phi_points

    @numba.njit
    def both(code, z, b, out, ref):
        for i in range(z.size):
            out[i] = _phi_points(code, z[i], b[i])
            ref[i] = _phi(code, z[i], b[i])

    rng = np.random.default_rng(0)
    z = np.concatenate([rng.standard_normal(100_000) * 30, [np.inf, -np.inf, np.nan, 0.0, 800.0,
                                                            -800.0, 1e-300, -40.0]])  # fmt: skip
    b = np.where(rng.random(z.size) < 0.5, -1.0, 1.0)
    for code in (0, 1, 2):
        out, ref = np.empty_like(z), np.empty_like(z)
        both(code, z, b, out, ref)
        assert np.array_equal(np.isnan(out), np.isnan(ref))
        ok = np.isfinite(ref)
        assert np.array_equal(out[~ok & ~np.isnan(ref)], ref[~ok & ~np.isnan(ref)])
        scale = np.spacing(np.maximum(np.abs(ref[ok]), np.finfo(np.float64).tiny))
        assert (np.abs(out[ok] - ref[ok]) <= 8 * scale).all(), code
