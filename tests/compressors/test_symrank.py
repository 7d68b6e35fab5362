"""SymRank: rows of ``d(d+1)/2`` entries as symmetric matrices, truncated to their ``r``
eigenpairs of largest ``|lambda|``. References: FedNL's own ``svec``/``smat`` layouts and an SVD
truncation (the authors' ``Low_Rank``), computed independently of the compressor."""

from __future__ import annotations

import math

import pytest
import torch

from algorithms.second_order.fednl import smat, svec, tri_size
from compressors import parse_spec
from compressors.symrank import SymRank

F64 = torch.float64


def sym(d: int, seed: int, rank: int | None = None) -> torch.Tensor:
    """A random symmetric ``d x d`` matrix (of the given rank, eigenvalues of both signs)."""
    g = torch.Generator().manual_seed(seed)
    if rank is None:
        B = torch.randn(d, d, generator=g, dtype=F64)
        return B + B.T
    U = torch.linalg.qr(torch.randn(d, rank, generator=g, dtype=F64)).Q
    lam = torch.linspace(1.0, 3.0, rank, dtype=F64) * (-1.0) ** torch.arange(rank)
    return (U * lam) @ U.T


def svd_truncation(A: torch.Tensor, r: int) -> torch.Tensor:
    """Best rank-r approximation from the SVD (Eckart–Young), as the authors' code forms it."""
    U, S, Vh = torch.linalg.svd(A)
    return (U[:, :r] * S[:r]) @ Vh[:r]


@pytest.mark.parametrize("vec", ["svec", "triu"])
@pytest.mark.parametrize("d,r", [(4, 1), (6, 2), (9, 3)])
def test_rank_r_matrices_pass_exactly(vec, d, r):
    A = torch.stack([sym(d, s, rank=r) for s in range(3)])
    x = svec(A, vec)
    c = SymRank(r=r, vec=vec)
    y = c(x, 0)
    torch.testing.assert_close(y, x, rtol=0, atol=1e-13)
    # one rank fewer is not exact: the dropped eigenvalue (|lambda| = 1) is the error
    if r > 1:
        err = smat(SymRank(r=r - 1, vec=vec)(x, 0) - x, d, vec)
        assert torch.linalg.matrix_norm(err).min() > 0.9


@pytest.mark.parametrize("vec", ["svec", "triu"])
@pytest.mark.parametrize("d,r", [(5, 1), (8, 3)])
def test_output_is_the_svd_truncation_of_the_matrix(vec, d, r):
    A = torch.stack([sym(d, 10 + s) for s in range(4)])
    y = SymRank(r=r, vec=vec)(svec(A, vec), 0)
    want = torch.stack([svd_truncation(a, r) for a in A])
    torch.testing.assert_close(smat(y, d, vec), want, rtol=0, atol=1e-12)


@pytest.mark.parametrize("d,r", [(3, 1), (6, 2), (10, 1), (10, 4)])
def test_eckart_young_bound_holds_and_is_tight_at_the_identity(d, r):
    c, D = SymRank(r=r), tri_size(d)
    assert c.delta(D) == r / d
    A = torch.stack([sym(d, 100 + s) for s in range(20)])
    x = svec(A)
    torch.testing.assert_close(x.norm(dim=1), torch.linalg.matrix_norm(A), rtol=1e-14, atol=0)
    err = ((c(x, 0) - x) ** 2).sum(dim=1)
    lam2 = torch.linalg.eigvalsh(A).abs().sort(dim=1, descending=True).values ** 2
    torch.testing.assert_close(err, lam2[:, r:].sum(dim=1), rtol=1e-10, atol=1e-12)
    assert (err <= (1 - r / d) * (x**2).sum(dim=1) * (1 + 1e-12)).all()
    # every |lambda| equal: the bound is attained, for any basis eigh picks
    for eye in (c.worst_case(D), svec(torch.eye(d, dtype=F64))):
        e = float(((c(eye[None], 0)[0] - eye) ** 2).sum())
        assert e == pytest.approx((1 - r / d) * float((eye**2).sum()), rel=1e-12)


def test_ties_in_magnitude_go_to_the_positive_eigenvalue():
    A = torch.diag(torch.tensor([-2.0, 2.0, 1.0], dtype=F64))
    y = SymRank(r=1)(svec(A)[None], 0)[0]
    torch.testing.assert_close(smat(y, 3), torch.diag(torch.tensor([0.0, 2.0, 0.0], dtype=F64)))
    # a negative eigenvalue of larger magnitude wins
    A[0, 0] = -2.5
    y = SymRank(r=1)(svec(A)[None], 0)[0]
    torch.testing.assert_close(smat(y, 3), torch.diag(torch.tensor([-2.5, 0.0, 0.0], dtype=F64)))


@pytest.mark.parametrize(
    "spec,d,bits",
    [
        ("symrank", 10, 32 * 11),
        ("symrank:r=3", 10, 32 * 3 * 11),
        ("symrank:r=2,float_bits=16", 7, 16 * 2 * 8),
        ("symrank:r=2,vec=triu,float_bits=64", 20, 64 * 2 * 21),
        ("symrank:r=5", 5, 32 * 15),  # r >= d: the D entries themselves
    ],
)
def test_bits_are_r_eigenpairs(spec, d, bits):
    c, D = parse_spec(spec), tri_size(d)
    assert c.bits(D) == bits
    x = svec(sym(d, 3))[None].float()
    p = c.encode(x.expand(2, D), 0)
    assert p.nbits.tolist() == [bits, bits]
    if c.float_bits == 32:  # stored at the counted width: the bytes are the bits, padded
        assert c.to_bytes(p)[1].tolist() == [math.ceil(bits / 8)] * 2


def test_r_at_least_d_is_the_identity_bitwise():
    x = svec(sym(4, 7))[None]
    for c in (SymRank(r=4), SymRank(r=9, vec="triu")):
        assert torch.equal(c(x, 0), x) and c.delta(10) == 1.0


def test_triu_delta_is_declared_only_where_the_bound_gives_one():
    assert SymRank(r=4, vec="triu").delta(tri_size(6)) == pytest.approx(2 * 4 / 6 - 1)
    with pytest.raises(ValueError, match="no delta at D=15"):
        SymRank(r=2, vec="triu").delta(15)
    # the bound holds where declared
    d, r = 6, 4
    c = SymRank(r=r, vec="triu")
    A = torch.stack([sym(d, 200 + s) for s in range(30)])
    A[::2] -= torch.diag_embed(torch.diagonal(A[::2], dim1=1, dim2=2))  # zero diagonals
    x = svec(A, "triu")
    err = ((c(x, 0) - x) ** 2).sum(dim=1)
    assert (err <= (1 - c.delta(tri_size(d))) * (x**2).sum(dim=1) * (1 + 1e-12)).all()
    # and none can be declared at r = 1: the raw-entry row error exceeds the row's norm
    d = 10
    u = torch.full((d,), d**-0.5, dtype=F64)
    P = torch.outer(u, u)
    A = (1 + 1e-6) * P - (torch.eye(d, dtype=F64) - P)
    x = svec(A, "triu")[None]
    ratio = float(((SymRank(vec="triu")(x, 0) - x) ** 2).sum() / (x**2).sum())
    assert ratio == pytest.approx(1.0427, abs=1e-3)
    x = svec(A)[None]  # the same matrix as an svec row contracts as declared
    assert float(((SymRank()(x, 0) - x) ** 2).sum() / (x**2).sum()) <= 1 - 1 / d + 1e-12


@pytest.mark.parametrize("D", [2, 4, 16, 1000])
def test_a_row_that_is_not_a_triangle_is_refused_naming_D(D):
    c = SymRank()
    for call in (lambda: c.encode(torch.ones(1, D), 0), lambda: c.delta(D), lambda: c.bits(D)):
        with pytest.raises(ValueError, match=f"D={D} is not triangular"):
            call()
    assert c.worst_case(D) is None


@pytest.mark.parametrize(
    "kwargs,words",
    [
        ({"r": 0}, "r \\(the rank\\) must be an integer >= 1, got r=0"),
        ({"r": 1.5}, "got r=1.5"),
        ({"vec": "full"}, "vec must be one of svec, triu; got 'full'"),
        ({"float_bits": 8}, "float_bits must be 16, 32 or 64"),
    ],
)
def test_bad_parameters_raise(kwargs, words):
    with pytest.raises(ValueError, match=words):
        SymRank(**kwargs)


def test_declarations():
    assert SymRank().projection and not SymRank(vec="triu").projection
    assert SymRank.contractive and SymRank.deterministic and SymRank.preserves_zero
    assert parse_spec("symrank:r=2,vec=triu") == SymRank(r=2, vec="triu")
    x = torch.zeros(2, 21)
    assert torch.equal(SymRank(r=2)(x, 0), x)
