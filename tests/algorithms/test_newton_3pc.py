"""Newton-3PC (algorithms.second_order.newton_3pc): the update against a hand-written reference,
Bernoulli aggregation (per-node coins, skips, bits), the invariant, convergence at the theory
parameters, option checks, the runner, and parity with gloo processes."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from runs import torch_dist_helpers

from algorithms.registry import ALGORITHMS
from algorithms.run import run
from algorithms.second_order.fednl import smat, tri_size
from algorithms.second_order.newton_3pc import Newton3PC
from comm import SimulatedComm
from compressors import parse_spec
from problems.registry import make_problem


@pytest.fixture(scope="module")
def logreg():
    return make_problem("logreg", nodes=3, lam=1e-3, samples=90, features=5, density=0.6)


def topk_matrix(M: np.ndarray, k: int) -> np.ndarray:
    """Top-K of a symmetric matrix by its upper triangle, off-diagonal entries weighted sqrt(2)
    (their Frobenius weight), ties to the lower index."""
    d = M.shape[0]
    entries = [(i, j) for i in range(d) for j in range(i, d)]
    score = [abs(M[i, j]) * (1.0 if i == j else math.sqrt(2.0)) for i, j in entries]
    S = np.zeros_like(M)
    for q in sorted(range(len(entries)), key=lambda q: (-score[q], q))[:k]:
        i, j = entries[q]
        S[i, j] = S[j, i] = M[i, j]
    return S


def project_solve(H: np.ndarray, g: np.ndarray, mu: float) -> np.ndarray:
    lam, V = np.linalg.eigh(H)
    return V @ ((V.T @ g) / np.maximum(lam, mu))


def test_ef21_rounds_match_the_reference(logreg):
    # Alg. 1: x^{k+1} = x^k - [H^k]_mu^{-1} grad f(x^k), then H_i^{k+1} = H_i^k +
    # TopK(grad^2 f_i(x^{k+1}) - H_i^k): the step uses the Hessians learned at x^k itself.
    p, k = logreg, 4
    algo, _ = Newton3PC.configure(p, parse_spec(f"topk:k={k}"), mechanism="ef21")
    comm = SimulatedComm(p.n, seed=0)
    x = torch.zeros(p.d, dtype=torch.float64)
    state = algo.init(x, p, comm)
    H_i = p.hess(x).numpy()
    for _ in range(4):
        x_ref = x.numpy() - project_solve(H_i.mean(0), p.full_grad(x).numpy(), 1e-3)
        X = p.hess(torch.from_numpy(x_ref)).numpy()
        H_i = np.stack([H_i[i] + topk_matrix(X[i] - H_i[i], k) for i in range(p.n)])
        before = state
        state, _ = algo.step(state, p, comm)
        assert before.h_i is not state.h_i
        np.testing.assert_allclose(state.x.numpy(), x_ref, rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(smat(state.h_i, p.d).numpy(), H_i, rtol=1e-9, atol=1e-13)
        torch.testing.assert_close(state.h, state.h_i.mean(0))
        torch.testing.assert_close(state.g, p.full_grad(state.x))
        x = state.x


def test_cbag_skips_keep_the_estimate_and_cost_a_flag(logreg):
    p, k = logreg, 4
    D = tri_size(p.d)
    algo, _ = Newton3PC.configure(p, parse_spec(f"topk:k={k}"), mechanism="cbag", p=0.5)
    comm = SimulatedComm(p.n, seed=1)
    state = algo.init(p.x0, p, comm)
    assert comm.ledger.up.tolist() == [32 * D + 32 * p.d] * p.n  # H_i^0 and grad f_i(x^0)
    payload = k * (32 + math.ceil(math.log2(D)))
    skips = sends = 0
    for _ in range(12):
        up0 = comm.ledger.up.clone()
        new, info = algo.step(state, p, comm)
        moved = (new.h_i != state.h_i).any(dim=1)
        per_node = (comm.ledger.up - up0).tolist()
        for i in range(p.n):
            assert per_node[i] == 32 * p.d + (payload if moved[i] else 1)
        assert info.bits_down == 32 * p.d
        assert info.extras["sent"] == pytest.approx(float(moved.double().mean()))
        torch.testing.assert_close(new.h, new.h_i.mean(0))
        skips, sends = skips + int((~moved).sum()), sends + int(moved.sum())
        state = new
    assert skips > 5 and sends > 5  # 36 coins of p = 1/2


def test_cbag_with_p_one_is_ef21(logreg):
    C = parse_spec("topk:k=4")
    runs = []
    for opts in ({"mechanism": "cbag", "p": 1.0}, {"mechanism": "ef21"}):
        algo, _ = Newton3PC.configure(logreg, C, **opts)
        comm = SimulatedComm(logreg.n, seed=0)
        state = algo.init(logreg.x0, logreg, comm)
        for _ in range(3):
            state, _ = algo.step(state, logreg, comm)
        runs.append((state.x, comm.ledger.up.clone()))
    torch.testing.assert_close(runs[0][0], runs[1][0])
    assert torch.equal(runs[0][1], runs[1][1])


def test_clag_with_a_large_trigger_skips(logreg):
    algo, _ = Newton3PC.configure(logreg, parse_spec("topk:k=4"), mechanism="clag", zeta=1e12)
    comm = SimulatedComm(logreg.n, seed=0)
    state = algo.init(logreg.x0, logreg, comm)
    state, info = algo.step(state, logreg, comm)
    assert info.extras["sent"] == 0.0 and info.bits_up == 32 * logreg.d + 1


def test_superlinear_at_the_theory_parameters(logreg):
    p = logreg
    algo, rec = Newton3PC.configure(p, parse_spec(f"topk:k={3 * p.d}"))
    assert rec["gamma"] == 1.0 and rec["params"]["p"] == 0.75
    assert 0 < rec["theory"]["inputs"]["A"] <= 1
    comm = SimulatedComm(p.n, seed=0)
    state = algo.init(p.x_star + 0.15, p, comm)
    errs = [float(((state.x - p.x_star) ** 2).sum())]
    for _ in range(8):
        state, _ = algo.step(state, p, comm)
        errs.append(float(((state.x - p.x_star) ** 2).sum()))
    assert errs[-1] <= 1e-24 * errs[0]
    assert all(e <= errs[0] * 2.0**-k for k, e in enumerate(errs))


def test_newton_is_exact_on_a_quadratic():
    p = make_problem("quadratic", nodes=4, dim=6)
    algo, _ = Newton3PC.configure(p, parse_spec("topk:k=3"), option=2)
    comm = SimulatedComm(p.n, seed=0)
    state, info = algo.step(algo.init(p.x0, p, comm), p, comm)
    torch.testing.assert_close(state.x, p.x_star, rtol=1e-9, atol=1e-10)
    assert info.extras["l"] == pytest.approx(0.0, abs=1e-12)


def test_bad_options_are_refused(logreg):
    C = parse_spec("topk:k=3")
    for opts, msg in [
        ({"mechanism": "v9"}, "mechanism must be one of"),
        ({"p": 0.0}, "p must be in"),
        ({"p": 1.5}, "p must be in"),
        ({"zeta": -1.0}, "zeta must be >= 0"),
        ({"option": 0}, "option must be one of 1, 2"),
    ]:
        with pytest.raises(ValueError, match=msg):
            Newton3PC.configure(logreg, C, **opts)
    with pytest.raises(ValueError, match="needs a contractive compressor"):
        Newton3PC.configure(logreg, parse_spec("randk:k=3"))
    with pytest.raises(
        ValueError,
        match=r"needs exact per-node Hessians \(hessians\), which problem .mlp. does not give",
    ):
        Newton3PC.configure(make_problem("mlp", nodes=2), C, step=1.0)


def test_runner(tmp_path):
    assert "newton-3pc" in ALGORITHMS
    out = tmp_path / "r"
    argv = ["newton-3pc", "--compressor", "topk:k=10", "--problem", "logreg", "--nodes", "4",
            "--iters", "10", "--p", "0.5", "--quiet", "--out", str(out)]  # fmt: skip
    assert run(argv) == 0
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["algorithm_class"] == "Newton3PC" and cfg["step"]["gamma_theory"] == 1.0
    with open(out / "history.csv") as fh:
        header = fh.readline().strip().split(",")
    assert "H_err" in header and "sent" in header


LOGREG = ["--problem", "logreg", "--lambda", "1e-3", "--iters", "12", "--quiet", "--seed", "3"]


# The default suite runs one parity test per mechanism (adiana, mcm, fednl, byz-vr-marina,
# compressed-scaffnew); this one runs under -m dist.
@pytest.mark.dist
def test_gloo_matches_the_simulation(tmp_path):
    # Per-node Bernoulli coins and skips (weights), Hessian learning on logreg, Option 2.
    helpers = torch_dist_helpers()
    argv = ["newton-3pc", "--compressor", "topk:k=40", "--p", "0.5", "--option", "2", *LOGREG]
    proc, out = helpers.dist_run(tmp_path, 2, argv)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert run([*argv, "--nodes", "2", "--out", str(tmp_path / "sim")]) == 0
    helpers.assert_same_run(tmp_path / "sim", out)


@pytest.mark.dist
@pytest.mark.parametrize("nproc", [2, 3])
def test_gloo_matches_the_simulation_on_the_quadratic(tmp_path, nproc):
    argv = ["newton-3pc", "--compressor", "topk:k=5", "--mechanism", "clag"]
    torch_dist_helpers().parity(tmp_path, nproc, argv)
