"""The papers' benchmark (issue 16): its per-node CSR loops reproduce compzoo's iterates on a
tiny LIBSVM file, its data lookup and free-gradient floor, and its report arithmetic on
injected numbers (no timings are asserted)."""

import numpy as np
import pytest
import torch

from algorithms.registry import ALGORITHMS
from benchmarks import __main__ as bench_main
from benchmarks import paper, report
from comm import SimulatedComm
from compressors import parse_spec
from problems.glm_engine import ENGINES
from problems.registry import make_problem

N, D, NODES = 90, 12, 5


@pytest.fixture(scope="module")
def tiny_file(tmp_path_factory):
    """A LIBSVM file of sparse rows (values 0.5, 1 or 2) and labels -1/+1."""
    rng = np.random.default_rng(3)
    lines = []
    for _ in range(N):
        cols = np.flatnonzero(rng.random(D) < 0.2) + 1
        vals = rng.choice([1.0, 0.5, 2.0], cols.size)
        feats = " ".join(f"{c}:{v:g}" for c, v in zip(cols, vals, strict=True))
        lines.append(f"{rng.choice([-1, 1]):+d} {feats}")
    path = tmp_path_factory.mktemp("libsvm") / "tiny.txt"
    path.write_text("\n".join(lines) + "\n")
    return path


def _make(path, dtype):
    """The problem as the benchmark builds it (contiguous split, lambda = 0.1, x0 = 0)."""
    return make_problem(
        "logreg-nonconvex",
        dataset=f"libsvm:{path}",
        split="contiguous",
        nodes=NODES,
        lam=paper.LAM,
        dtype=dtype,
        x0="zeros",
    )


@pytest.fixture(scope="module")
def problem(tiny_file):
    p = _make(tiny_file, "float64")
    assert not p.dense  # the CSR path, as on the LIBSVM sets
    return p


def _compzoo(algo, problem, steps):
    comm = SimulatedComm(problem.n, seed=0)
    s = algo.init(problem.x0, problem, comm)
    for _ in range(steps):
        s, _info = algo.step(s, problem, comm)
    return s.x.numpy()


@pytest.mark.parametrize(
    ("name", "spec", "opts", "steps"),
    [
        ("ef21", "topk:k=1", {}, 40),  # the benchmark's Top-1: deterministic
        ("ef21", "topk:k=3", {}, 30),
        ("diana", f"randk:k={D}", {"init_mode": "zero"}, 30),  # Rand-K with K = d: identity
        ("marina", f"randk:k={D}", {"p": 0.5}, 30),  # both kinds of round
        ("dasha", f"randk:k={D}", {}, 30),
    ],
)
def test_loop_iterates_equal_compzoo(problem, name, spec, opts, steps):
    algo, _ = ALGORITHMS[name].configure(problem, parse_spec(spec), **opts)
    ours = _compzoo(algo, problem, steps)
    loop = paper.loop_for(problem, name, algo, parse_spec(spec).k, steps)
    base = loop.run(steps)
    np.testing.assert_allclose(base, ours, rtol=0, atol=1e-10)
    assert np.abs(ours).max() > 1e-3  # the iterates moved: not a comparison of zeros
    if name == "marina":
        assert 0 < loop.syncs.sum() < steps


def test_loop_differs_when_the_maths_differ(problem):
    # The check can fail: a loop with another step drifts away from compzoo's iterates.
    algo, _ = ALGORITHMS["ef21"].configure(problem, parse_spec("topk:k=1"))
    ours = _compzoo(algo, problem, 20)
    loop = paper.loop_for(problem, "ef21", algo, 1, 20)
    loop.gamma *= 1.01
    assert np.abs(loop.run(20) - ours).max() > 1e-10


def test_float32_loop_keeps_its_dtype(tiny_file):
    p32 = _make(tiny_file, "float32")
    algo = paper.configure(p32, "dasha", f"randk:k={D}")
    loop = paper.loop_for(p32, "dasha", algo, D, 5)
    x = loop.run(5)
    assert x.dtype == np.float32 and loop.g_i.dtype == np.float32
    np.testing.assert_allclose(x, _compzoo(algo, p32, 5), atol=1e-5)


def test_free_gradient_returns_fresh_copies(problem):
    free = paper.FreeGrad(problem)
    g1, g2 = free.grad(problem.x0), free.grad(torch.ones(D, dtype=torch.float64))
    torch.testing.assert_close(g1, problem.grad(problem.x0))
    assert g1.data_ptr() != g2.data_ptr()
    assert free.d == D and free.n == NODES
    algo = paper.configure(problem, "ef21", "topk:k=1")
    assert paper.time_compzoo(algo, free, 2) > 0
    assert paper.time_grad(problem, 2) > 0 and paper.time_touch(problem, 2) > 0


def test_find_data_and_skip(monkeypatch, tmp_path):
    (tmp_path / "libsvm").mkdir()
    (tmp_path / "libsvm" / "a9a.txt").write_text("+1 1:1\n")
    monkeypatch.setenv("COMPZOO_DATA", str(tmp_path))
    assert paper.find_data("a9a") == tmp_path / "libsvm" / "a9a.txt"
    monkeypatch.setenv("COMPZOO_DATA", str(tmp_path / "none"))
    monkeypatch.setattr(paper, "find_data", lambda name: None)
    rows = paper.run(quick=True, datasets=("w8a",))
    assert rows == [{"dataset": "w8a", "skipped": rows[0]["skipped"]}]
    assert "w8a.txt not found" in rows[0]["skipped"]


def test_paper_report_ratios_bounds_and_misses():
    row = {"dataset": "mushrooms", "method": "ef21", "spec": "topk:k=1", "n": 20, "N": 8124}
    row.update(d=112, nnz=170_604, steps=500, sparse_bytes=2**20, dense_bytes=2**22)
    t64 = {"dtype": "float64", "loop_s": 8e-3, "floor_s": 2.5e-4}
    rows = [
        {**row, **t64, "compzoo_s": 1e-3, "grad_s": 5e-4, "touch_s": 7.5e-4},
        {**row, **t64, "compzoo_s": 4e-3, "grad_s": 2e-3, "touch_s": 1e-3},
        {**row, **t64, "dtype": "float32", "compzoo_s": 4e-3, "grad_s": 2e-3, "touch_s": 1e-3},
        {"dataset": "w8a", "skipped": "w8a.txt not found: skipped"},
    ]
    out = report.derive_paper(rows, bandwidth=2.0**30)
    assert out[0]["speedup"] == 8.0 and out[0]["target"] == "met"
    assert out[0]["floor_share"] == 0.25
    assert out[0]["sparse_bound_s"] == 2.0**-10 and out[0]["dense_bound_s"] == 2.0**-8
    assert out[0]["ceiling"] == 8.0  # 8 / (0.25 + 0.75)
    assert out[0]["bound_ratio"] == pytest.approx(1e-3 / (2.0**-10 + 2.5e-4))
    assert out[0]["bound_target"] == "met"
    assert out[1]["target"] == "MISSED: 2.00x < 5x (compzoo 2.5x too slow; ceiling 6.40x)"
    ratio = 4e-3 / (2.0**-10 + 2.5e-4)
    assert out[1]["bound_target"] == f"MISSED: {ratio:.2f}x > 3x"
    assert out[2]["target"] == "-"
    assert out[3] == rows[3]
    text = report.paper_markdown(out)
    first = "| ef21 (topk:k=1) | 1 | 8 | 8.00x | 0.25 | 25% | 0.5 | 0.75 | 8.00x | 0.977 | 3.91 | "
    assert first + f"{out[0]['bound_ratio']:.2f}x (met) | met |" in text
    assert "- mushrooms float64 ef21: MISSED: 2.00x < 5x" in text
    assert f"- mushrooms float64 ef21: MISSED: {ratio:.2f}x > 3x (bound + floor)" in text
    assert "- mushrooms float32 ef21: MISSED" not in text
    assert "Storage by measured cost" not in text
    assert "slower than the script's" not in text  # no vectorized timings: no split

    vec = {"vectorized_variant": "dense", "vectorized_grad_s": 6e-4}
    slow = [{**out[0], "vectorized_s": 2e-3, **vec}, {**out[0], "vectorized_s": 8e-4, **vec}]
    split = report.paper_markdown(report.derive_paper(slow, bandwidth=2.0**30))
    assert "slower than the script's" in split  # the second: 1 ms against the script's 0.8
    assert "| mushrooms | float64 | ef21 | 1 | 0.5 | 0.5 | 0.8 | 0.6 | 0.2 |" in split
    assert "| mushrooms | float64 | ef21 | 1 | 0.5 | 0.5 | 2 |" not in split  # compzoo faster

    def costs(**given):  # every engine 5 ms unless given
        return {f"{e.replace('_', '-')}_grad_s": given.get(e.replace("-", "_"), 5e-3)
                for e in ENGINES}  # fmt: skip

    layouts = [
        {**out[0], "storage": "csr/1", **costs(csr=1e-3, dense=2e-3)},
        {**out[0], "dataset": "a", "storage": "csr/2", **costs(csr=3e-3, dense=1e-3)},
        {**out[0], "dataset": "b", "storage": "csr/1", **costs(csr=1e-3, dense=1.04e-3)},
        {**out[0], "dataset": "c", "storage": "csc-scipy/1", **costs(csc_scipy=1e-3)},
    ]
    table = report.paper_markdown(layouts)
    assert "| mushrooms | 2 | 1 | 5 | 5 | 5 | 5 | 5 | 5 | 5 | csr | csr/1 | yes |" in table
    assert "| a | 1 | 3 | 5 | 5 | 5 | 5 | 5 | 5 | 5 | dense | csr/2 | no |" in table
    tie = "csr (tie within 5%: dense, csr)"
    assert f"| b | 1.04 | 1 | 5 | 5 | 5 | 5 | 5 | 5 | 5 | {tie} | csr/1 | yes |" in table
    assert "| c | 5 | 5 | 5 | 5 | 5 | 1 | 5 | 5 | 5 | csc-scipy | csc-scipy/1 | yes |" in table
    assert "w8a.txt not found: skipped" in text


def test_cli_knows_the_part():
    assert "paper" in bench_main.PARTS
    with pytest.raises(SystemExit) as e:
        bench_main.main(["--only", "papers"])
    assert e.value.code == 2


def test_each_round_keeps_its_timings_of_the_two_compared(tiny_file):
    """Every row keeps each round's two compzoo and two script timings (taken back to back),
    whose medians are the row's times and whose per-round ratios the report prints."""
    rows = report.derive_paper(paper.bench_set(tiny_file, "tiny", "float32", steps=2, repeats=2),
                               2.0**30)  # fmt: skip
    assert [r["method"] for r in rows] == [m for m, _ in paper.METHODS]
    for r in rows:
        ours, vec = r["compzoo_rounds_s"], r["vectorized_rounds_s"]
        assert len(ours) == len(vec) == 4, r
        assert r["compzoo_s"] == np.median(ours) and r["vectorized_s"] == np.median(vec)
        assert r["vectorized_ratio_rounds"] == pytest.approx(
            [(vec[0] + vec[1]) / (ours[0] + ours[1]), (vec[2] + vec[3]) / (ours[2] + ours[3])]
        )
