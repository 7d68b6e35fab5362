"""The GLM gradient's engine: chosen by measurement (memoised per machine and input), forced by
``storage``/``threads``, the same maths on every engine, and the runner's record of it."""

from __future__ import annotations

import math
import os

import numpy as np
import pytest
import torch

from problems import glm, glm_engine
from problems.registry import make_problem

# Above MEASURE_ABOVE stored entries (3000 x 40 at density 0.6: about 72,000): measured.
BIG = dict(dataset="synthetic", nodes=6, lam=0.1, samples=3000, features=40, density=0.6, seed=3)


def test_small_data_take_the_rule_unmeasured(monkeypatch):
    monkeypatch.setattr(glm_engine, "measure", _refuse)
    p = make_problem("logreg", dataset="synthetic", nodes=4, density=0.2)
    assert p._A64.nnz <= glm.MEASURE_ABOVE
    assert p.engine == f"csr/{torch.get_num_threads()}" and p.threads is None
    q = make_problem("logreg", dataset="synthetic", nodes=4, density=0.9)
    assert q.engine.startswith("dense/") and q.dense


def _refuse(*_a, **_k):
    raise AssertionError("measured although memoised or forced")


def test_auto_measures_once_then_reads_the_memo(monkeypatch):
    seen = []
    real = glm_engine.measure
    monkeypatch.setattr(glm_engine, "load_per_core", lambda: 0.1)  # a quiet machine
    monkeypatch.setattr(glm_engine, "busy_elsewhere", lambda since: 0.0)

    def spy(options, apply):
        seen.append(list(options))
        return real(options, apply)

    monkeypatch.setattr(glm_engine, "measure", spy)
    p = make_problem("logreg", **BIG)
    assert len(seen) == 1
    engines = {e for e, _ in seen[0]}
    assert {"csr", "csr-torch", "dense-torch", "csr-scipy", "csc-scipy"} <= engines
    assert p.engine in {glm_engine.describe(e, t) for e, t in seen[0]}
    monkeypatch.setattr(glm_engine, "measure", _refuse)
    q = make_problem("logreg", **BIG)
    assert q.engine == p.engine
    # Another machine (its CPU model in the key) measures afresh.
    monkeypatch.setattr(glm_engine, "machine", lambda: "another CPU|64|x86_64|Linux")
    with pytest.raises(AssertionError, match="measured although"):
        make_problem("logreg", **BIG)


def test_a_change_to_the_timed_code_measures_again(monkeypatch, tmp_path):
    """The memo's key holds a digest of the gradient code (glm_engine.CODE): a choice
    memoised before a kernel changed is not read after it."""
    monkeypatch.setattr(glm_engine, "load_per_core", lambda: 0.1)
    monkeypatch.setattr(glm_engine, "busy_elsewhere", lambda since: 0.0)
    make_problem("logreg", **BIG)  # measured now, or memoised before: either way, kept
    monkeypatch.setattr(glm_engine, "measure", _refuse)
    make_problem("logreg", **BIG)
    assert set(glm_engine.CODE) >= {glm_engine.Path(glm.__file__).resolve()}
    kernel = tmp_path / "glm_kernels.py"
    kernel.write_text("# a kernel\n")
    before = glm_engine.code_version((kernel,))
    kernel.write_text("# a faster kernel\n")
    assert glm_engine.code_version((kernel,)) != before
    monkeypatch.setattr(glm_engine, "_VERSION", glm_engine.code_version((kernel,)))
    with pytest.raises(AssertionError, match="measured although"):
        make_problem("logreg", **BIG)


def test_a_loaded_machine_measures_but_memoises_nothing(monkeypatch):
    calls = []
    fake = {("csr", 1): 3e-3, ("csr-scipy", 1): 1e-3}

    def measure(options, apply):
        calls.append(1)
        return fake

    monkeypatch.setattr(glm_engine, "measure", measure)
    options = list(fake)
    # where /proc/stat cannot be read, the load average decides
    monkeypatch.setattr(glm_engine, "cpu_clock", lambda: None)
    monkeypatch.setattr(glm_engine, "load_per_core", lambda: 0.9)
    assert glm_engine.choose(("loaded-input",), options, None) == ("csr-scipy", 1)
    assert glm_engine.choose(("loaded-input",), options, None) == ("csr-scipy", 1)
    assert len(calls) == 2  # measured each time, kept by none
    monkeypatch.setattr(glm_engine, "load_per_core", lambda: 0.1)
    glm_engine.choose(("loaded-input-2",), options, None)
    glm_engine.choose(("loaded-input-2",), options, None)
    assert len(calls) == 3  # quiet: measured once, then read from the memo
    # where it can, the CPUs' own counts during the measurement decide, not the load average
    monkeypatch.setattr(glm_engine, "cpu_clock", lambda: (0.0, 0.0, 0.0))
    monkeypatch.setattr(glm_engine, "busy_elsewhere", lambda since: 0.6)  # a run beside it
    glm_engine.choose(("loaded-input",), options, None)
    glm_engine.choose(("loaded-input",), options, None)
    assert len(calls) == 5  # the load average was low, but another process took the CPUs
    monkeypatch.setattr(glm_engine, "load_per_core", lambda: 0.9)  # lagging after other work
    monkeypatch.setattr(glm_engine, "busy_elsewhere", lambda since: 0.0)
    glm_engine.choose(("loaded-input",), options, None)
    glm_engine.choose(("loaded-input",), options, None)
    assert len(calls) == 6  # the CPUs were free: measured once more, then read from the memo


def test_busy_elsewhere_sees_another_process_on_the_cpus():
    import subprocess
    import sys

    if glm_engine.cpu_clock() is None:
        pytest.skip("no /proc/stat here")
    clock = glm_engine.cpu_clock()
    spin = subprocess.Popen([sys.executable, "-c", "import time\nt=time.time()\n"
                             "while time.time() - t < 0.6: pass"])  # fmt: skip
    spin.wait()
    # one core of the machine's CPUs was busy in the other process for most of the window
    assert glm_engine.busy_elsewhere(clock) > 0.2 / (os.cpu_count() or 1)


def test_settle_waits_while_this_processs_threads_spin_and_not_after():
    """A pool's idle workers spin after a call; the engines are timed only once they stop."""
    import threading
    import time

    until = time.perf_counter() + 0.3

    def spin():  # a worker that keeps a core busy for 0.3 s
        while time.perf_counter() < until:
            pass

    worker = threading.Thread(target=spin)
    worker.start()
    waited = glm_engine.settle(limit=3.0)
    worker.join()
    assert waited >= 0.2  # it did not return while the worker spun
    assert waited < 2.0  # and returned soon after it stopped, well before the limit
    assert glm_engine.settle(limit=3.0) < 1.0  # nothing spins now


def test_settle_waits_for_a_thread_spinning_without_the_gil():
    """A worker spinning in compiled code with no system call (as OpenBLAS's idle workers do)
    has its CPU time counted at the clock's ticks only; settle still waits until it stops."""
    import threading
    import time

    numba = pytest.importorskip("numba")

    @numba.njit(nogil=True)
    def spin(n):  # n dependent additions, the GIL released
        x = 0.0
        for _ in range(n):
            x = x * 0.999999 + 1.0
        return x

    spin(1)  # compiled
    t0 = time.perf_counter()
    spin(10_000_000)
    # about 0.5 s of it where the calibration ran at the worker's speed: the machine's speed
    # moves between the two (a calibration in a slow phase gave 0.15 s of spinning)
    n = int(10_000_000 * 0.5 / max(time.perf_counter() - t0, 1e-4))
    done = []
    start = time.perf_counter()
    worker = threading.Thread(target=lambda: done.append(spin(n) and time.perf_counter()))
    worker.start()
    time.sleep(0.02)
    glm_engine.settle(limit=3.0)
    returned = time.perf_counter()
    worker.join()
    assert done[0] - start > 0.15  # the worker spun for a while
    assert returned >= done[0] - 0.02  # and settle did not return before it stopped
    assert returned < done[0] + 1.0  # but soon after


def test_blas_set_sets_numpys_blas_and_restore_puts_it_back():
    from threadpoolctl import ThreadpoolController, threadpool_info

    def counts():
        infos = [i for i in threadpool_info() if i["user_api"] == "blas"]
        return {i["filepath"]: i["num_threads"] for i in infos}

    before = counts()
    if not before:
        pytest.skip("no BLAS library loaded")
    libs = ThreadpoolController().select(user_api="blas").lib_controllers
    own = {lib.filepath for lib in glm_engine.numpy_blas(libs)}
    assert glm_engine.blas_set(None) is None
    assert glm_engine.blas_set(before[next(iter(own))]) is None  # already the count
    token = glm_engine.blas_set(1)  # the pair the dense-numpy gradient calls
    now = counts()
    assert all(now[f] == 1 for f in own)
    assert all(now[f] == n for f, n in before.items() if f not in own)  # SciPy's untouched
    glm_engine.blas_restore(token)
    assert counts() == before
    glm_engine.blas_restore(None)  # nothing was changed: nothing to put back
    assert counts() == before
    # the dense-numpy gradient puts NumPy's BLAS back when it fails half way
    p = make_problem("logreg-nonconvex", **BIG, storage="dense-numpy", threads=1)
    p.grad(p.x0)
    if p._np is None:
        pytest.skip("dense-numpy needs SciPy's threadpoolctl")

    def fail(z):
        assert all(counts()[f] == 1 for f in own)  # inside: on the gradient's thread count
        raise RuntimeError("the weights failed")

    p._np["dphi_times"] = fail
    with pytest.raises(RuntimeError, match="the weights failed"):
        p.grad(p.x0)
    assert counts() == before


def test_numpy_blas_is_numpys_own_library():
    """NumPy's wheel brings its BLAS in ``numpy.libs`` (or inside the package), SciPy's wheel
    another: only NumPy's serves ``dense-numpy``; a BLAS found elsewhere (shared) is kept."""
    import types

    pkg = os.path.dirname(np.__file__)

    def lib(path):
        return types.SimpleNamespace(filepath=path)

    numpy_lib, scipy_lib = lib(pkg + ".libs/libopenblas64_.so"), lib(pkg + "_x.libs/libblas.so")
    assert glm_engine.numpy_blas([scipy_lib, numpy_lib]) == [numpy_lib]
    inside = lib(os.path.join(pkg, "_core", "libblas.so"))
    assert glm_engine.numpy_blas([inside, scipy_lib]) == [inside]
    shared = [lib("/usr/lib/libopenblas.so"), lib(None)]
    assert glm_engine.numpy_blas(shared) == shared


def test_a_slow_first_call_alone_drops_no_candidate(monkeypatch):
    """A candidate whose first call carries a one-time cost (a pool of threads started, a
    buffer touched) is measured, and wins where it is the fastest; one slow on its first two
    calls is dropped unmeasured."""
    import time

    monkeypatch.setattr(glm_engine, "settle", lambda: 0.0)
    monkeypatch.setattr(glm_engine, "BUDGET_S", 0.005)
    monkeypatch.setattr(glm_engine, "WARM_S", 0.0)  # the first call alone goes untimed
    cost = {"steady": [0.002], "warming": [0.03, 0.0005], "slow": [0.03]}
    calls = {k: 0 for k in cost}

    def apply(engine, threads):
        def call():
            seconds = cost[engine]
            time.sleep(seconds[min(calls[engine], len(seconds) - 1)])
            calls[engine] += 1

        return call

    options = [("steady", 1), ("warming", 1), ("slow", 1)]
    times = glm_engine.measure(options, apply)
    assert set(times) == {("steady", 1), ("warming", 1)}  # slow: dropped after two calls
    assert calls["slow"] == 3 and min(times, key=times.get) == ("warming", 1)


def test_candidates_are_timed_after_a_warm_up(monkeypatch):
    """Each candidate is timed after ``WARM_S`` seconds of its own untimed calls: one whose calls
    run slow for a while after the wait between candidates (as a two-thread kernel's do on an
    idle virtual machine) but fast after wins against a steady, slower one."""
    import time

    monkeypatch.setattr(glm_engine, "settle", lambda: 0.0)
    monkeypatch.setattr(glm_engine, "BUDGET_S", 0.01)
    monkeypatch.setattr(glm_engine, "WARM_S", 0.04)
    since = {}

    def apply(engine, threads):
        since[engine] = time.perf_counter()  # its slow spell starts at every switch to it

        def call():
            late = time.perf_counter() - since[engine] > 0.03
            time.sleep(0.002 if engine == "steady" else (0.001 if late else 0.006))

        return call

    times = glm_engine.measure([("steady", 1), ("waking", 2)], apply)
    assert min(times, key=times.get) == ("waking", 2), times


def test_close_candidates_are_timed_again_until_they_part(monkeypatch):
    """Three rounds can leave two engines a few percent apart in the wrong order (one round
    slow for the faster); those within ``CLOSE`` of the best get further rounds, up to
    ``MAX_ROUNDS``, and the median of all of them decides. A candidate far behind is not timed
    again."""
    monkeypatch.setattr(glm_engine, "settle", lambda: 0.0)
    monkeypatch.setattr(glm_engine, "WARM_S", 0.0)
    # seconds per call of each timing, in turn: "fast" is slow in its first three rounds
    plan = {"fast": [1.08, 1.08, 1.08] + [1.0] * 20, "steady": [1.05] * 23, "far": [2.0] * 23}
    timed = {k: 0 for k in plan}

    def apply(engine, threads):
        def call():
            pass

        call.engine = engine
        return call

    def fake_time(call):
        timed[call.engine] += 1
        return plan[call.engine][timed[call.engine] - 1] * 1e-3

    monkeypatch.setattr(glm_engine, "_time", fake_time)
    times = glm_engine.measure([("steady", 1), ("fast", 2), ("far", 1)], apply)
    assert min(times, key=times.get) == ("fast", 2), times
    assert timed == {"fast": glm_engine.MAX_ROUNDS, "steady": glm_engine.MAX_ROUNDS,
                     "far": glm_engine.ROUNDS}  # fmt: skip
    # apart after three rounds: no more
    timed.update(fast=0, steady=0, far=0)
    plan["fast"] = [0.5] * 23
    glm_engine.measure([("steady", 1), ("fast", 2)], apply)
    assert timed["fast"] == timed["steady"] == glm_engine.ROUNDS


def test_choose_keeps_the_fastest(monkeypatch):
    options = [("csr", 1), ("csr", 2), ("dense-torch", 1)]
    fake = {("csr", 1): 3e-3, ("csr", 2): 1e-3, ("dense-torch", 1): 2e-3}
    monkeypatch.setattr(glm_engine, "measure", lambda opts, apply: fake)
    assert glm_engine.choose(("fake-input", 1), options, None) == ("csr", 2)
    assert glm_engine.choose(("one",), [("dense", 1)], None) == ("dense", 1)  # forced: no call


@pytest.mark.parametrize("storage", glm_engine.ENGINES)
@pytest.mark.parametrize("threads", [1, "auto"])
def test_every_engine_computes_the_same_gradients(storage, threads):
    ref = make_problem("logreg-nonconvex", **BIG, storage="csr", threads=1)
    p = make_problem("logreg-nonconvex", **BIG, storage=storage, threads=threads)
    g = torch.Generator().manual_seed(0)
    X = 0.3 * torch.randn(p.n, p.d, generator=g, dtype=torch.float64)
    close = dict(rtol=1e-12, atol=1e-13)
    torch.testing.assert_close(p.grad(X), ref.grad(X), **close)
    torch.testing.assert_close(p.grad(X[0]), ref.grad(X[0]), **close)
    torch.testing.assert_close(p.node_loss(X), ref.node_loss(X), **close)
    torch.testing.assert_close(p.full_grad(X[1]), ref.full_grad(X[1]), **close)
    batch = p.sample(7, 5)
    torch.testing.assert_close(p.grad(X, batch), ref.grad(X, batch), **close)
    name = p.engine.split("/")[0]
    assert name in (storage, f"{storage}-torch")  # the compiled ones fall back without numba
    assert p.dense == name.startswith("dense")


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_dense_numpy_gradient_is_the_torch_composition_bit_for_bit(dtype):
    """dense-numpy's gradient (margins and sums by NumPy's BLAS, the weights in place in NumPy
    around torch's sigmoid, the regulariser's gradient added in NumPy) equals, bit for bit, the
    same BLAS products around torch's weights and torch's add of the regulariser's gradient:
    at one point, at a point per node, and at points with an infinity, a NaN and an overflow,
    with no warning from NumPy (torch is silent there). Seven nodes share 3000 rows unevenly,
    so the stack holds padding rows of weight 0."""
    import warnings

    kw = BIG | {"nodes": 7}
    p = make_problem("logreg-nonconvex", **kw, storage="dense-numpy", threads=1, dtype=dtype)
    if p._np is None:
        pytest.skip("dense-numpy needs SciPy's threadpoolctl")
    S = p._np
    P, (m, c, d) = S["P"], S["P"].shape
    assert m * c > p.counts.sum()  # padded
    torch_weights = p._dphi_times_of(S["b"], S["w"])

    def reference(X):
        Xn = X.detach().contiguous().numpy()
        with np.errstate(all="ignore"):
            z = np.matmul(P, Xn[:, :, None])[:, :, 0] if X.shape[0] > 1 else (S["P2"] @ Xn[0])
        u = torch_weights(torch.from_numpy(z.reshape(m, c))).numpy()
        G = torch.from_numpy(np.ascontiguousarray(np.matmul(u[:, None, :], P)[:, 0, :]))
        return G.add_(p.reg_grad(X, p.lam))

    g = torch.Generator().manual_seed(1)
    X = (0.3 * torch.randn(m, d, generator=g, dtype=torch.float64)).to(p.dtype)
    odd = X.clone()
    odd[0, 0], odd[1, 2], odd[2, 4] = math.inf, math.nan, 1e30
    bits = torch.int64 if dtype == "float64" else torch.int32
    for pt in (X[:1], X, X[0][None].expand(m, d), odd):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            got = p.grad(pt) if pt.shape[0] > 1 else p.grad(pt[0])
        want = reference(pt if pt.stride(0) else pt[:1]).expand(m, d)
        nan = torch.isnan(want)
        assert torch.equal(nan, torch.isnan(got))
        assert torch.equal(got[~nan].view(bits), want[~nan].view(bits))


def test_use_engine_switches_and_threads_are_restored():
    p = make_problem("logreg", **BIG, storage="csr", threads=1)
    X = torch.full((p.n, p.d), 0.1, dtype=torch.float64)
    before = torch.get_num_threads()
    g = p.grad(X)
    assert torch.get_num_threads() == before  # the engine's count only inside the maths
    p.use_engine("csr-torch/1")
    assert p.engine == "csr-torch/1" and not p._kernels
    torch.testing.assert_close(p.grad(X), g, rtol=1e-12, atol=1e-13)
    one = p.local([2])
    assert one.engine == "csr-torch/1"
    torch.testing.assert_close(one.grad(X[:1]), g[2:3], rtol=1e-12, atol=1e-13)
    with pytest.raises(
        ValueError, match="NAME one of dense, csr, dense-torch, csr-torch, csr-scipy"
    ):
        p.use_engine("gpu/2")
    with pytest.raises(ValueError, match="threads must be auto or a positive integer, got 0"):
        make_problem("logreg", **BIG, threads=0)


def test_the_command_lines_thread_count_reaches_the_engine():
    """``--problem-opt threads=N`` is typed by the knob's default (``auto``, a string): the
    count arrives as text and is taken as the integer it names; a bad one is refused with the
    allowed values."""
    from runner.cli import BadInput, parse_knobs

    knobs = parse_knobs("logreg-nonconvex", ["threads=1", "storage=csr"])
    assert knobs["threads"] == "1"
    p = make_problem("logreg-nonconvex", **BIG, **knobs)
    assert p.threads == 1 and p.engine in ("csr/1", "csr-torch/1")  # -torch: without numba
    for bad in ("0", "-1", "two"):
        with pytest.raises(ValueError, match="threads must be auto or a positive integer"):
            make_problem("logreg-nonconvex", **BIG, threads=bad)
    with pytest.raises(BadInput, match="unknown --problem-opt 'thread'"):
        parse_knobs("logreg-nonconvex", ["thread=1"])


def test_the_run_records_its_engine(tmp_path):
    from algorithms.api import run

    res = run("ef21", "topk:k=2", make_problem("logreg", **BIG), iters=3)
    assert res.config["problem"]["engine"] in {
        glm_engine.describe(e, t) for e in glm_engine.ENGINES for t in (1, 2, 4, 8, 16)
    }


def test_the_points_kernels_exp_is_within_one_ulp_and_ieee_at_the_edges():
    """The branch-free ``exp`` of the kernels of many points (``glm_kernels._exp``): within
    1.01 ulp of NumPy's on normal results, and inf, 0 and NaN where ``exp`` gives them."""
    import numba
    import numpy as np

    from problems import glm_kernels

    if glm_kernels.numba is None:
        pytest.skip("numba is absent")

    @numba.njit
    def run(x, out):
        for i in range(x.size):
            out[i] = glm_kernels._exp(x[i])

    rng = np.random.default_rng(0)
    x = np.concatenate([rng.normal(0, 30, 200_000), rng.uniform(-745, 709, 100_000)])
    edges = np.array([np.nan, np.inf, -np.inf, 709.7, 710.0, 800.0, -746.0, -800.0, 0.0])
    got, got_edges = np.empty_like(x), np.empty_like(edges)
    run(x, got)
    run(edges, got_edges)
    with np.errstate(over="ignore"):
        want, want_edges = np.exp(x), np.exp(edges)
    normal = want > np.finfo(np.float64).tiny
    ulps = np.abs(got[normal] - want[normal]) / (want[normal] * np.finfo(np.float64).eps)
    assert ulps.max() <= 1.01
    np.testing.assert_array_equal(got_edges, want_edges)
