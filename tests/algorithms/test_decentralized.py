"""Decentralized methods over a graph (D-SGD, CHOCO-SGD) and the comm layer's gossip: the
mixing product, bits per edge, the reductions between methods, convergence, refusals, the
runner's consensus column, and sharded gloo runs equal to the simulation."""

from __future__ import annotations

import csv
import json

import pytest
import torch

from algorithms.decentralized.base import graph
from algorithms.decentralized.choco_sgd import ChocoSGD, choco_consensus_step
from algorithms.decentralized.d_sgd import DSGD
from algorithms.run import run
from comm import SimulatedComm
from compressors import parse_spec
from problems import make_problem
from tests.runs import torch_dist_helpers, trajectory


@pytest.fixture(scope="module")
def quad():
    return make_problem("quadratic", nodes=8, seed=1, dim=12, zeta2=1.0)


def _packet(C, rows, seed=0):
    comm = SimulatedComm(rows.shape[0], seed=seed)
    return comm, C.encode(rows, comm.rng_for(C, 0))


@pytest.mark.parametrize("spec", ["ring", "star", "er:p=0.4", "complete"])
@pytest.mark.parametrize("comp", ["topk:k=3", "qsgd:levels=2,coding=elias"])  # fixed, variable
def test_gossip_is_the_mixing_product_and_charges_every_edge(spec, comp):
    top = graph(spec, 8, "metropolis", 0)
    C = parse_spec(comp)
    rows = torch.randn(8, 12, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    comm, packet = _packet(C, rows)
    mixed = comm.gossip(packet, C, top)
    assert torch.allclose(mixed, top.W @ C.decode(packet), atol=1e-15)
    deg = top.degrees
    assert comm.ledger.up.tolist() == (packet.nbits * deg).tolist()
    A = (top.W > 0).long() - torch.eye(8, dtype=torch.long)
    assert comm.ledger.down.tolist() == (A @ packet.nbits).tolist()
    assert C.fixed_size or len(set(packet.nbits.tolist())) > 1  # the variable case is variable
    full = SimulatedComm(8, seed=0)
    assert torch.allclose(full.gossip_full(rows, top), top.W @ rows, atol=1e-15)
    assert full.ledger.up.tolist() == (32 * 12 * deg).tolist()


def test_gossip_on_many_nodes_takes_the_sparse_product():
    top = graph("ring", 200, "metropolis", 0)
    rows = torch.randn(200, 5, dtype=torch.float64)
    comm = SimulatedComm(200, seed=0)
    assert torch.allclose(comm.gossip_full(rows, top), top.W @ rows, atol=1e-14)
    plan = comm._gossip_plan(top)
    assert plan[("W", rows.dtype, rows.device)].layout == torch.sparse_csr


def test_choco_with_the_identity_and_consensus_one_is_d_sgd(quad):
    ident = parse_spec("identity")
    dsgd, _ = DSGD.configure(quad, ident, topology="ring")
    choco, rec = ChocoSGD.configure(quad, ident, topology="ring", consensus=1.0)
    assert choco.gamma == dsgd.gamma  # eta = consensus x D-SGD's step
    a, _, _ = trajectory(dsgd, quad, 30)
    b, _, _ = trajectory(choco, quad, 30)
    for sa, sb in zip(a, b, strict=True):
        assert torch.allclose(sa.x_i, sb.x_i, atol=1e-12, rtol=0)
        assert torch.allclose(sa.x, sb.x, atol=1e-12, rtol=0)


def test_choco_converges_and_its_nodes_agree(quad):
    C = parse_spec("topk:k=4")
    algo, _ = ChocoSGD.configure(quad, C, topology="ring", consensus=0.6)
    states, infos, comm = trajectory(algo, quad, 400)
    gap0 = float(quad.loss(states[0].x) - quad.consts.f_star)
    gap = float(quad.loss(states[-1].x) - quad.consts.f_star)
    assert gap < 1e-3 * gap0
    # the nodes disagree by what the heterogeneity forces at these steps: the plateau of the
    # same method with exact public copies (the identity)
    exact, _ = ChocoSGD.configure(quad, parse_spec("identity"), topology="ring", consensus=0.6,
                                  force=True)  # fmt: skip
    _, plain, _ = trajectory(exact, quad, 400)
    plateau = plain[-1].extras["consensus"]
    assert infos[-1].extras["consensus"] == pytest.approx(plateau, rel=0.05)
    # every round each node sends one Top-4 message to each of its two neighbours
    ones = torch.ones(8, 12, dtype=torch.float64)
    per_msg = int(C.encode(ones, comm.rng_for(algo.compressor, 0)).nbits[0])
    assert infos[0].bits_up == per_msg * 2
    # the default steps (theory's consensus step, eta scaled by it) move slowly but never
    # drift: the objective at the average decreases
    slow, _ = ChocoSGD.configure(quad, C, topology="ring")
    s, _, _ = trajectory(slow, quad, 200)
    assert float(quad.loss(s[-1].x)) < float(quad.loss(s[0].x))


def test_the_consensus_step_is_the_recalled_formula_and_shrinks_with_compression(quad):
    top = graph("ring", 8, "metropolis", 0)
    _, rec = ChocoSGD.configure(quad, parse_spec("topk:k=3"), topology="ring")
    # by hand: the ring of 8 with the 1/3 matrix has rho = 1 - (1 + 2 cos(pi/4))/3 and
    # beta = 1 - lambda_n = 4/3; Top-3 of 12 has delta = 1/4; the formula then gives 9.0117e-4
    assert top.rho == pytest.approx(0.19526214587563506) and top.beta == pytest.approx(4 / 3)
    want = 0.0009011694922726744
    assert rec["params"]["consensus"] == pytest.approx(want, rel=1e-12)
    assert choco_consensus_step(top.rho, top.beta, 1 / 4) == pytest.approx(want, rel=1e-12)
    assert want < choco_consensus_step(top.rho, top.beta, 1.0) <= 1
    assert rec["provenance"]["kind"] == "derived"
    eta_dsgd = DSGD.configure(quad, parse_spec("identity"), topology="ring")[0].gamma
    assert rec["gamma"] == pytest.approx(want * eta_dsgd, rel=1e-12)  # eta = consensus x D-SGD's
    assert rec["theory"]["inputs"]["rho"] == pytest.approx(top.rho)


def test_step_does_not_mutate_its_input(quad):
    algo, _ = ChocoSGD.configure(quad, parse_spec("topk:k=3"), topology="ring")
    comm = SimulatedComm(quad.n, seed=0)
    state = algo.init(quad.x0, quad, comm)
    before = {k: v.clone() for k, v in vars(state).items() if isinstance(v, torch.Tensor)}
    algo.step(state, quad, comm)
    for k, v in before.items():
        assert torch.equal(getattr(state, k), v), k


def test_the_runner_logs_the_consensus_error_and_records_the_graph(tmp_path):
    out = tmp_path / "r"
    argv = ["choco-sgd", "--compressor", "topk:k=2", "--problem", "quadratic", "--nodes", "9",
            "--topology", "torus", "--iters", "20", "--quiet", "--out", str(out)]  # fmt: skip
    assert run(argv) == 0
    rows = list(csv.DictReader(open(out / "history.csv")))
    assert "consensus" in rows[0] and float(rows[-1]["consensus"]) >= 0
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["method"]["topology"] == "torus"
    assert cfg["step"]["theory"]["inputs"]["rho"] == pytest.approx(0.6)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["choco-sgd", "--compressor", "randk:k=2"], "needs a contractive compressor"),
        (["ef21", "--compressor", "topk:k=2", "--topology", "ring"], "--topology does not apply"),
        (
            ["choco-sgd", "--compressor", "topk:k=2", "--topology", "torus", "--nodes", "7"],
            "n = r x c",
        ),
        (["d-sgd", "--compressor", "topk:k=2"], "takes no compressor"),
        (["d-sgd", "--topology", "er:p=2"], "0 < P <= 1"),
    ],
)
def test_bad_input_exits_2_with_a_message(tmp_path, capsys, argv, message):
    assert run([*argv, "--problem", "quadratic", "--iters", "3", "--quiet",
                "--out", str(tmp_path / "x")]) == 2  # fmt: skip
    assert message in capsys.readouterr().err


# heavy: CI runs it after the default suite (the default suite's 8-minute budget)
@pytest.mark.heavy
def test_sharded_gloo_equals_the_simulation(tmp_path):
    helpers = torch_dist_helpers()
    helpers.sharded_parity(tmp_path, 2, 8, ["choco-sgd", "--compressor", "topk:k=2",
                                            "--topology", "ring"])  # fmt: skip


@pytest.mark.dist
@pytest.mark.parametrize(
    ("nproc", "nodes", "argv"),
    [
        (2, 2, ["choco-sgd", "--compressor", "topk:k=2"]),
        (3, 7, ["choco-sgd", "--compressor", "scaled:randk:k=3", "--topology", "er:p=0.5"]),
        (2, 9, ["choco-sgd", "--compressor", "scaled-sign", "--topology", "torus"]),
        (2, 6, ["choco-sgd", "--compressor", "scaled:qsgd:levels=4,coding=elias"]),
        (2, 6, ["d-sgd", "--topology", "star"]),
    ],
)
def test_gloo_runs_equal_the_simulation(tmp_path, nproc, nodes, argv):
    helpers = torch_dist_helpers()
    if nproc == nodes:
        helpers.parity(tmp_path, nproc, argv)
    else:
        helpers.sharded_parity(tmp_path, nproc, nodes, argv)


# ------------------------------------------------------------------ gradient tracking, BEER
def _beer(quad, spec="topk:k=4", **kw):
    from algorithms.registry import get_algorithm

    name = kw.pop("name", "beer")
    kw.setdefault("consensus", 0.5)
    algo, _ = get_algorithm(name).configure(quad, parse_spec(spec), step=0.1, topology="ring", **kw)
    return algo


def test_gradient_tracking_is_beer_with_the_identity_and_consensus_one(quad):
    gt = _beer(quad, "identity", name="gt", consensus=None)
    beer = _beer(quad, "identity", consensus=1.0)
    a, ia, _ = trajectory(gt, quad, 40)
    b, ib, _ = trajectory(beer, quad, 40)
    for sa, sb in zip(a, b, strict=True):
        assert torch.allclose(sa.x_i, sb.x_i, atol=1e-12, rtol=0)
    # uncompressed: the iterate and the tracker, 32 d bits each, to each of two neighbours
    assert ia[0].bits_up == ib[0].bits_up == 2 * 2 * 32 * quad.d


def test_motef_with_momentum_one_is_beer(quad):
    a, _, _ = trajectory(_beer(quad, name="motef", momentum=1.0), quad, 40)
    b, _, _ = trajectory(_beer(quad), quad, 40)
    for sa, sb in zip(a, b, strict=True):
        assert torch.equal(sa.x_i, sb.x_i)
    c, _, _ = trajectory(_beer(quad, name="motef", momentum=0.5), quad, 40)
    assert not torch.allclose(c[-1].x_i, b[-1].x_i)


def test_the_tracker_averages_the_gradient_estimates(quad):
    states, infos, _ = trajectory(_beer(quad, name="motef", momentum=0.3), quad, 50)
    for s in states:  # mean_i v_i = mean_i m_i: W is doubly stochastic
        assert torch.allclose(s.v_i.mean(0), s.m_i.mean(0), atol=1e-12, rtol=0)
    assert infos[0].bits_up == 2 * 2 * int(
        parse_spec("topk:k=4").encode(torch.ones(8, quad.d, dtype=torch.float64),
                                      SimulatedComm(8, 0).rng_for(parse_spec("topk:k=4"), 0)
                                      ).nbits[0])  # fmt: skip


def test_beer_needs_its_steps(tmp_path, capsys):
    base = ["--compressor", "topk:k=2", "--problem", "quadratic", "--iters", "3", "--quiet"]
    assert run(["beer", *base, "--out", str(tmp_path / "a")]) == 2
    assert "give --step" in capsys.readouterr().err
    assert run(["beer", *base, "--step", "0.1", "--out", str(tmp_path / "b")]) == 2
    assert "--consensus" in capsys.readouterr().err
    argv = ["motef", *base, "--step", "0.1", "--consensus", "0.5", "--out", str(tmp_path / "c")]
    assert run(argv) == 2
    assert "--momentum" in capsys.readouterr().err


@pytest.mark.dist
def test_beer_sharded_gloo_equals_the_simulation(tmp_path):
    torch_dist_helpers().sharded_parity(
        tmp_path, 2, 6, ["beer", "--compressor", "topk:k=2", "--step", "0.1", "--consensus",
                         "0.5", "--topology", "ring"])  # fmt: skip


@pytest.mark.dist
@pytest.mark.parametrize(
    ("nproc", "nodes", "argv"),
    [
        (3, 7, ["motef", "--compressor", "scaled:randk:k=3", "--momentum", "0.5"]),
        (2, 9, ["gt", "--topology", "torus"]),
        (2, 2, ["beer", "--compressor", "topk:k=2"]),
    ],
)
def test_tracking_gloo_runs_equal_the_simulation(tmp_path, nproc, nodes, argv):
    argv = [*argv, "--step", "0.1", *(["--consensus", "0.5"] if argv[0] != "gt" else [])]
    helpers = torch_dist_helpers()
    if nproc == nodes:
        helpers.parity(tmp_path, nproc, argv)
    else:
        helpers.sharded_parity(tmp_path, nproc, nodes, argv)


# ------------------------------------------------------------------ COLD, Dyna-COLD
def _cold(quad, spec="topk:k=4", name="cold", **kw):
    from algorithms.registry import get_algorithm

    algo, _ = get_algorithm(name).configure(quad, parse_spec(spec), topology="ring", **kw)
    return algo


def test_cold_with_the_identity_is_nids(quad):
    """COLD with the identity and consensus step 1 is NIDS, written in its closed form
    ``x^{k+1} = Wt (2 x^k - x^{k-1} - eta (g^k - g^{k-1}))``, ``Wt = (I + W)/2``, ``x^1 = Wt
    (x^0 - eta g^0)`` (Li, Shi & Yan 2019)."""
    algo = _cold(quad, "identity")
    states, infos, _ = trajectory(algo, quad, 30)
    W = torch.as_tensor(graph("ring", 8, "metropolis", 0).W, dtype=torch.float64)
    Wt, eta = (torch.eye(8, dtype=torch.float64) + W) / 2, algo.gamma
    prev = quad.x0.expand(8, -1).clone()
    x = Wt @ (prev - eta * quad.grad(prev))
    assert torch.allclose(states[1].x_i, x, atol=1e-12, rtol=0)
    for k in range(1, 30):
        x, prev = Wt @ (2 * x - prev - eta * (quad.grad(x) - quad.grad(prev))), x
        assert torch.allclose(states[k + 1].x_i, x, atol=1e-10, rtol=0)
    # one uncompressed vector per node to each of its two neighbours
    assert infos[0].bits_up == 2 * 32 * quad.d


def test_cold_by_hand_with_top_k(quad):
    """COLD's round with Top-4, written out from the docstring: y = x - eta g - eta d;
    h += Top4(y - h); d += (1/(2 eta)) (I - W) h; x = x - eta g - eta d."""
    algo = _cold(quad)
    states, _, _ = trajectory(algo, quad, 20)
    W = torch.as_tensor(graph("ring", 8, "metropolis", 0).W, dtype=torch.float64)
    eta = algo.gamma
    x = quad.x0.expand(8, -1).clone()
    d, h = torch.zeros_like(x), torch.zeros_like(x)
    for k in range(20):
        g = quad.grad(x)
        y = x - eta * g - eta * d
        r = y - h
        keep = torch.zeros_like(r).scatter_(1, r.abs().topk(4, dim=1).indices, 1.0)
        h = h + keep * r
        d = d + (h - W @ h) / (2 * eta)
        x = x - eta * g - eta * d
        assert torch.allclose(states[k + 1].x_i, x, atol=1e-10, rtol=0)


def test_cold_is_exact_under_heterogeneity_where_choco_is_not():
    het = make_problem("quadratic", nodes=8, seed=1, dim=12, zeta2=10.0)
    states, infos, _ = trajectory(_cold(het), het, 800)
    dist = float(((states[-1].x - het.x_star) ** 2).sum()) / float((het.x_star**2).sum())
    assert dist < 1e-8 and infos[-1].extras["consensus"] < 1e-8
    # the d_i sum to zero at every round
    assert all(float(s.d_i.sum(0).abs().max()) < 1e-9 for s in states)


def test_dyna_cold_scales_the_binary_quantizer(quad):
    algo = _cold(quad, "sign", name="dyna-cold", scale=2.0, decay=0.9)
    states, infos, _ = trajectory(algo, quad, 3)
    # round t sends sign((y - h)/s_t) and moves h by s_t = 2 * 0.9^t per coordinate
    for t in range(3):
        step = (states[t + 1].h_i - states[t].h_i).abs()
        assert torch.allclose(step, torch.full_like(step, 2.0 * 0.9**t), atol=1e-12, rtol=0)
    assert infos[0].bits_up == 2 * quad.d  # one bit per coordinate to each of two neighbours
    with pytest.raises(ValueError, match="decay"):
        _cold(quad, "sign", name="dyna-cold", decay=1.5)
    with pytest.raises(ValueError, match="scale"):
        _cold(quad, "sign", name="dyna-cold", scale=0.0)


@pytest.mark.dist
@pytest.mark.parametrize(
    ("nproc", "nodes", "argv"),
    [
        (2, 8, ["cold", "--compressor", "topk:k=5", "--topology", "ring"]),
        (3, 7, ["dyna-cold", "--compressor", "sign", "--topology", "er:p=0.5"]),
    ],
)
def test_cold_gloo_runs_equal_the_simulation(tmp_path, nproc, nodes, argv):
    torch_dist_helpers().sharded_parity(tmp_path, nproc, nodes, argv)
