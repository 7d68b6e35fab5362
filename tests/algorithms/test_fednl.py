"""FedNL (algorithms.second_order.fednl): the update against a hand-written reference step, bits
per round and at initialisation, the invariant, superlinear convergence at the theory parameters,
option checks, the runner, and parity with gloo processes."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from runs import torch_dist_helpers

from algorithms.registry import ALGORITHMS
from algorithms.run import run
from algorithms.second_order.fednl import FedNL, smat, svec, tri_size
from comm import SimulatedComm
from compressors import parse_spec
from problems.registry import make_problem


@pytest.fixture(scope="module")
def logreg():
    return make_problem("logreg", nodes=3, lam=1e-3, samples=90, features=5, density=0.6)


def topk_matrix(M: np.ndarray, k: int) -> np.ndarray:
    """Top-K of a symmetric matrix on its upper triangle, ranked by |M_jl| with off-diagonal
    entries weighted sqrt(2) (their Frobenius weight), ties to the lower index; symmetric."""
    d = M.shape[0]
    entries = [(i, j) for i in range(d) for j in range(i, d)]
    score = np.array([abs(M[i, j]) * (1.0 if i == j else math.sqrt(2.0)) for i, j in entries])
    keep = sorted(range(len(entries)), key=lambda q: (-score[q], q))[:k]
    S = np.zeros_like(M)
    for q in keep:
        i, j = entries[q]
        S[i, j] = S[j, i] = M[i, j]
    return S


def reference_round(problem, x, H_i, alpha, k, option, mu):
    """One FedNL round from (x, H_i) written with matrices and loops."""
    X = problem.hess(x).numpy()
    g = problem.full_grad(x).numpy()
    H = H_i.mean(0)
    if option == 1:
        lam, V = np.linalg.eigh(H)
        step = V @ ((V.T @ g) / np.maximum(lam, mu))
    else:
        l = np.mean([np.linalg.norm(X[i] - H_i[i]) for i in range(len(H_i))])
        step = np.linalg.solve(H + l * np.eye(len(g)), g)
    new_H = np.stack([H_i[i] + alpha * topk_matrix(X[i] - H_i[i], k) for i in range(len(H_i))])
    return x.numpy() - step, new_H


@pytest.mark.parametrize("option", [1, 2])
def test_rounds_match_the_reference(logreg, option):
    p, k = logreg, 4
    algo, _ = FedNL.configure(p, parse_spec(f"topk:k={k}"), option=option)
    comm = SimulatedComm(p.n, seed=0)
    state = algo.init(torch.zeros(p.d, dtype=torch.float64), p, comm)
    x, H_i = state.x, p.hess(state.x).numpy()
    D = tri_size(p.d)
    # Option 1: the theory's 1 - sqrt(1 - delta); Option 2 (the default): 1, upd_rule 2
    alpha = 1 - math.sqrt(1 - k / D) if option == 1 else 1.0
    assert algo.alpha == pytest.approx(alpha)
    for _ in range(4):
        before = state
        state, _ = algo.step(state, p, comm)
        assert before.h_i is not state.h_i  # never mutated in place
        x_ref, H_ref = reference_round(p, x, H_i, alpha, k, option, 1e-3)
        np.testing.assert_allclose(state.x.numpy(), x_ref, rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(smat(state.h_i, p.d).numpy(), H_ref, rtol=1e-9, atol=1e-13)
        torch.testing.assert_close(state.h, state.h_i.mean(0))  # invariant H = mean_i H_i
        x, H_i = state.x, H_ref


def test_svec_is_an_isometry_and_round_trips():
    A = torch.randn(4, 6, 6, dtype=torch.float64)
    S = A + A.transpose(1, 2)
    v = svec(S)
    assert v.shape == (4, 21)
    torch.testing.assert_close(torch.linalg.vector_norm(v, dim=1), torch.linalg.matrix_norm(S))
    torch.testing.assert_close(smat(v, 6), S)
    torch.testing.assert_close(smat(svec(S, "triu"), 6, "triu"), S)
    assert svec(S, "triu")[0, 1] == S[0, 0, 1]


@pytest.mark.parametrize("option, extra", [(1, 0), (2, 32)])
def test_bits_per_round_are_the_payload_formula(logreg, option, extra):
    p, k = logreg, 4
    D = tri_size(p.d)
    algo, _ = FedNL.configure(p, parse_spec(f"topk:k={k}"), option=option)
    comm = SimulatedComm(p.n, seed=0)
    state = algo.init(p.x0, p, comm)
    assert comm.ledger.up.tolist() == [32 * D] * p.n  # H_i^0 = grad^2 f_i(x^0), once
    assert comm.ledger.down.tolist() == [0] * p.n
    for _ in range(2):
        state, info = algo.step(state, p, comm)
        assert info.bits_up == 32 * p.d + k * (32 + math.ceil(math.log2(D))) + extra
        assert info.bits_down == 32 * p.d
    zero, _ = FedNL.configure(p, parse_spec(f"topk:k={k}"), init_mode="zero")
    comm = SimulatedComm(p.n, seed=0)
    zero.init(p.x0, p, comm)
    assert comm.ledger.up.tolist() == [0] * p.n


def test_superlinear_at_the_theory_parameters(logreg):
    p = logreg
    algo, rec = FedNL.configure(p, parse_spec(f"topk:k={3 * p.d}"), option=1)
    assert rec["gamma"] == 1.0 and rec["params"]["mu"] == pytest.approx(1e-3)
    comm = SimulatedComm(p.n, seed=0)
    state = algo.init(p.x_star + 0.15, p, comm)
    errs = [float(((state.x - p.x_star) ** 2).sum())]
    for _ in range(8):
        state, _ = algo.step(state, p, comm)
        errs.append(float(((state.x - p.x_star) ** 2).sum()))
    assert errs[-1] <= 1e-24 * errs[0]
    above = [e for e in errs if e > 1e-26]  # above the float floor
    r = np.array(above[1:]) / np.array(above[:-1])
    assert r[-2:].max() < 0.1 * r[:2].min()  # the contraction itself vanishes


def test_newton_is_exact_on_a_quadratic_with_its_hessians():
    p = make_problem("quadratic", nodes=4, dim=6)
    algo, _ = FedNL.configure(p, parse_spec("topk:k=3"))
    comm = SimulatedComm(p.n, seed=0)
    state, info = algo.step(algo.init(p.x0, p, comm), p, comm)
    torch.testing.assert_close(state.x, p.x_star, rtol=1e-9, atol=1e-10)
    assert info.extras["H_err"] == pytest.approx(0.0, abs=1e-20)


def test_unbiased_compressors_take_the_unbiased_rate(logreg):
    D = tri_size(logreg.d)
    algo, rec = FedNL.configure(logreg, parse_spec("randk:k=5"))
    assert algo.alpha == pytest.approx(5 / D)  # 1/(omega + 1), omega = D/k - 1
    assert "1/(omega+1)" in rec["theory"]["formula"]


def test_bad_options_and_problems_are_refused(logreg):
    C = parse_spec("topk:k=3")
    for opts, msg in [
        ({"alpha": 1.5}, "alpha must be in"),
        ({"option": 3}, "option must be one of 1, 2"),
        ({"init_mode": "full"}, "init must be one of hessian, zero"),
        ({"hess_vec": "tril"}, "--hess-vec must be one of"),
        ({"l_norm": "nuc"}, "--l-norm must be one of"),
        ({"mu": -1.0}, "mu must be > 0"),
    ]:
        with pytest.raises(ValueError, match=msg):
            FedNL.configure(logreg, C, **opts)
    with pytest.raises(ValueError, match="needs a contractive compressor"):
        FedNL.configure(logreg, parse_spec("round:h=0.01"))
    with pytest.raises(
        ValueError,
        match=r"needs exact per-node Hessians \(hessians\), which problem .mlp. does not give",
    ):
        FedNL.configure(make_problem("mlp", nodes=2), C, step=1.0)
    nonconvex = make_problem("logreg-nonconvex", nodes=2, samples=40, features=3)
    with pytest.raises(ValueError, match="give --mu or use --option 2"):
        FedNL.configure(nonconvex, C, option=1)
    FedNL.configure(nonconvex, C)  # Option 2 (the default) needs no mu


def test_runner(tmp_path):
    assert "fednl" in ALGORITHMS
    out = tmp_path / "r"
    argv = ["fednl", "--compressor", "topk:k=10", "--problem", "logreg", "--lambda", "1e-3",
            "--nodes", "4", "--iters", "12", "--option", "2", "--quiet",
            "--out", str(out)]  # fmt: skip
    assert run(argv) == 0
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["algorithm_class"] == "FedNL" and cfg["step"]["gamma_theory"] == 1.0
    # the compressor is recorded at the Hessian rows' d(d+1)/2 entries, not at d
    d = cfg["problem"]["d"]
    assert cfg["compressor"]["delta"] == pytest.approx(10 / tri_size(d))
    assert cfg["compressor"]["bits_per_message"] == 10 * (32 + math.ceil(math.log2(tri_size(d))))
    with open(out / "history.csv") as fh:
        header = fh.readline().strip().split(",")
    assert "H_err" in header and "l" in header


LOGREG = ["--problem", "logreg", "--lambda", "1e-3", "--iters", "12", "--quiet", "--seed", "3"]


# heavy: CI runs it after the default suite (the default suite's 8-minute budget)
@pytest.mark.heavy
def test_gloo_matches_the_simulation(tmp_path):
    # Hessian learning active (logreg), Rand-K's per-node streams, Option 2's scalar l_i.
    helpers = torch_dist_helpers()
    argv = ["fednl", "--compressor", "randk:k=40", "--option", "2", *LOGREG]
    proc, out = helpers.dist_run(tmp_path, 2, argv)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert run([*argv, "--nodes", "2", "--out", str(tmp_path / "sim")]) == 0
    helpers.assert_same_run(tmp_path / "sim", out)


@pytest.mark.dist
@pytest.mark.parametrize("nproc", [2, 3])
def test_gloo_matches_the_simulation_on_the_quadratic(tmp_path, nproc):
    torch_dist_helpers().parity(tmp_path, nproc, ["fednl", "--compressor", "topk:k=5"])


def test_rank_one_hessian_compression_converges_at_its_payload(logreg):
    # The paper's Rank-1 (compressors.symrank): one eigenpair, 32 (d + 1) bits per node per round.
    p = logreg
    algo, _ = FedNL.configure(p, parse_spec("symrank:r=1"), option=1)
    assert algo.alpha == pytest.approx(1 - math.sqrt(1 - 1 / p.d))  # delta = r/d on svec rows
    comm = SimulatedComm(p.n, seed=0)
    state = algo.init(p.x_star + 0.15, p, comm)
    gaps = []
    for _ in range(6):
        state, info = algo.step(state, p, comm)
        assert info.bits_up == 32 * p.d + 32 * (p.d + 1)
        gaps.append(float(p.loss(state.x)) - p.consts.f_star)
    assert gaps[-1] < 1e-10
    r = np.array(gaps[1:]) / np.array(gaps[:-1])
    assert r.max() < 0.1 and r[-2:].max() < 0.6 * r[0]  # the contraction shrinks


def test_symrank_must_read_the_rows_in_the_methods_layout(logreg):
    with pytest.raises(ValueError, match="symrank reads rows as vec='svec' but --hess-vec is"):
        FedNL.configure(logreg, parse_spec("symrank:r=1"), hess_vec="triu")
    FedNL.configure(logreg, parse_spec("symrank:r=1"))
