"""The papers' setups: seconds per step on the LIBSVM sets of the EF21, MARINA and DASHA papers.

``python -m benchmarks --only paper [--quick]``. EF21 + Top-1 (arXiv 2106.05203, Sec. 4),
DIANA and MARINA + Rand-10 (arXiv 2102.07845, Sec. 5) and DASHA + Rand-10 (arXiv 2202.01268,
Sec. 6), each with its theory step, on ``logreg-nonconvex`` (lambda = 0.1) over mushrooms,
phishing, a9a and w8a, split contiguously among ``n = 20`` nodes, in float64 and float32.
The files are read from ``$COMPZOO_DATA`` (``NAME.txt`` or ``libsvm/NAME.txt``), else from
``../shared/data/libsvm/`` beside the repository; a set that is absent is skipped with a
message. compzoo's gradients run on the engine its ``storage=auto`` measured fastest for the
set on this machine (:mod:`problems.glm_engine`): its row names it (``NAME/THREADS``). DIANA
starts from ``h_i^0 = 0`` (its ``init_mode=zero``), as its loop does.

Per (set, dtype, method), in one process, interleaved and repeated (``REPEATS`` rounds).
compzoo and the vectorized script, the two the target compares, are timed back to back in both
orders in each round (compzoo, script, script, compzoo; the next round the other way round),
so that a slow phase of the machine lasting a second or more falls on both rather than on one:
their medians are of ``2 REPEATS`` timings, the loop's and the floor's of ``REPEATS``. The
report also gives the range of the script / compzoo ratio over the rounds (each round's two
script timings over its two compzoo ones): where it straddles 1, the machine's phases decide
the verdict (on the medians) as much as the code does.
(Timed as compzoo, the loop, the script and the floor in turn, with the slow loop between the
two compared, a round could put one of this shared machine's phases 1.5-2x slower than the rest
on one side only.)

* compzoo: ``steps`` calls of ``algo.step`` after an untimed ``init`` (the runner's code path:
  the problem built by ``problems.registry.make_problem``, the method, ``SimulatedComm``; no
  evaluation, no history);
* loop: the same steps of the careful per-node NumPy/SciPy-CSR loop of
  :mod:`benchmarks.baselines_sparse` on the same rows (its initialisation untimed);
* vectorized: the same steps of the all-nodes-at-once NumPy/SciPy script of
  :mod:`benchmarks.baselines_vectorized` (its initialisation untimed), on the storage
  (block-diagonal CSR sums with CSR or CSC margins, or a dense ``(n, m, d)`` stack with
  BLAS's default threads or one thread) that was fastest for its gradient when the set was
  loaded (timed once per set and dtype; the row's ``vectorized_variant``), Rand-K indices
  drawn as the loops draw them, so its iterates are the loops';
* floor: compzoo's step on the same problem with a free gradient (a stored ``(n, d)`` gradient
  copied out): what a step costs besides the gradient, the framework's per-step overhead.

* storage: the full gradient on each engine, forced (float64): the measured costs among which
  ``storage=auto`` chose;
* grad: compzoo's full gradient alone (the problem's compiled kernel), at a shared point
  with non-zero margins (:func:`time_grad`), and the vectorized script's at the same point
  (:func:`time_vec_grad`): where compzoo is the slower, the report splits both steps into
  that gradient and the rest;
* two-touch: the cheapest pass that reads each stored entry of compzoo's storage twice, once
  for a margin and once for the sum, nodes in parallel (no loss, no labels): what a gradient
  costs on this CPU when all else is free. ``loop / (floor + two-touch)`` is then the largest
  loop / compzoo ratio a method could reach on this storage, a measured ceiling for the 5x
  target.

The data-pass bounds are the bytes one full gradient must read (``A x`` and ``A^T s``: the CSR
values, int64 column indices and row pointers, twice; or the dense matrix, twice) divided by
the measured memory bandwidth. The target (issue 16) is loop / compzoo >= 5x in float64.
"""

# built against problems/glm_kernels.py e627c9253ad4909c
# built against streams/compiled.py 9e35d4bc5d1bb3f3

from __future__ import annotations

import logging
import os
import statistics
import time
from pathlib import Path

import numpy as np
import torch

from algorithms.base import step_mode
from algorithms.registry import ALGORITHMS
from benchmarks import bandwidth
from benchmarks.baselines_sparse import DashaLoop, DianaLoop, EF21Loop, MarinaLoop, nodes_from_csr
from benchmarks.baselines_vectorized import DashaVec, DianaVec, EF21Vec, MarinaVec, VecData
from benchmarks.progress import Tracker
from comm import SimulatedComm
from compressors import parse_spec
from problems import glm_engine
from problems.registry import make_problem
from streams import tags
from streams.compiled import launch, numba

log = logging.getLogger(__name__)

DATASETS = ("mushrooms", "phishing", "a9a", "w8a")
METHODS = (("ef21", "topk:k=1"), ("diana", "randk:k=10"), ("marina", "randk:k=10"))
METHODS += (("dasha", "randk:k=10"),)
NODES, LAM, REPEATS = 20, 0.1, 3
STEPS, QUICK_STEPS = 500, 25
DTYPES = ("float64", "float32")
QUICK_DTYPES = ("float64",)  # the dtype of the 5x target
OPTS = {"diana": {"init_mode": "zero"}}


def find_data(name: str) -> Path | None:
    """``NAME.txt`` under ``$COMPZOO_DATA`` (or its ``libsvm/``), else under
    ``../shared/data/libsvm/`` beside the repository; None when absent."""
    roots = []
    if os.environ.get("COMPZOO_DATA"):
        root = Path(os.environ["COMPZOO_DATA"])
        roots += [root, root / "libsvm"]
    roots.append(Path(__file__).resolve().parents[2] / "shared" / "data" / "libsvm")
    return next((r / f"{name}.txt" for r in roots if (r / f"{name}.txt").is_file()), None)


class FreeGrad:
    """``problem`` with a free gradient: ``grad`` returns a copy of one stored ``(n, d)``
    gradient (a copy, since methods may overwrite what ``grad`` returns)."""

    def __init__(self, problem) -> None:
        self._problem = problem
        self._g = problem.grad(problem.x0)

    def grad(self, x, batch=None):
        return self._g.clone()

    def __getattr__(self, name):
        return getattr(self._problem, name)


def configure(problem, name: str, spec: str):
    """compzoo's method ``name`` with compressor ``spec`` and its theory step."""
    algo, _rec = ALGORITHMS[name].configure(problem, parse_spec(spec), **OPTS.get(name, {}))
    return algo


def loop_for(problem, name: str, algo, k: int, steps: int, seed: int = 0):
    """A fresh per-node loop of ``name`` on ``problem``'s rows, with ``algo``'s parameters
    (MARINA's coins are compzoo's, drawn from ``SimulatedComm(n, seed)``)."""
    dt = np.float32 if problem.dtype == torch.float32 else np.float64
    nodes = nodes_from_csr(problem._A64, problem._b64, problem._offsets64, dt)
    x0 = problem.x0.cpu().numpy().astype(dt)
    d, g = problem.d, algo.gamma
    if name == "ef21":
        return EF21Loop(nodes, x0, g, k, LAM)
    if name == "diana":
        return DianaLoop(nodes, x0, g, k, algo._alpha(d), LAM, seed)
    if name == "marina":
        return MarinaLoop(nodes, x0, g, k, marina_syncs(problem, algo, steps, seed), LAM, seed)
    if name == "dasha":
        return DashaLoop(nodes, x0, g, k, algo._a(d), LAM, seed)
    raise ValueError(f"no loop baseline for {name!r}; allowed: {[m for m, _ in METHODS]}")


def marina_syncs(problem, algo, steps: int, seed: int = 0) -> np.ndarray:
    """MARINA's coins of rounds ``0..steps-1``: compzoo's, drawn from
    ``SimulatedComm(n, seed)``."""
    comm = SimulatedComm(problem.n, seed=seed)
    d = problem.d
    return np.array([comm.coin(t, algo._p(d), tag=tags.COIN) for t in range(steps)])


def vec_data(problem, variant: str = "auto") -> VecData:
    """``problem``'s rows for the vectorized baselines, in its dtype; ``variant="auto"`` times
    each storage of :data:`benchmarks.baselines_vectorized.VARIANTS` on a few gradients and
    keeps the fastest."""
    dt = np.float32 if problem.dtype == torch.float32 else np.float64
    return VecData(problem._A64, problem._b64, problem._offsets64, dt, variant)


def vec_for(problem, name: str, algo, k: int, steps: int, data: VecData, seed: int = 0):
    """A fresh vectorized baseline of ``name`` on ``data`` (from :func:`vec_data`), with
    ``algo``'s parameters and the loop's Rand-K draws and MARINA coins."""
    dt = data.dtype
    x0 = problem.x0.cpu().numpy().astype(dt)
    d, g = problem.d, algo.gamma
    if name == "ef21":
        return EF21Vec(data, x0, g, k, LAM)
    if name == "diana":
        return DianaVec(data, x0, g, k, algo._alpha(d), LAM, seed)
    if name == "marina":
        return MarinaVec(data, x0, g, k, marina_syncs(problem, algo, steps, seed), LAM, seed)
    if name == "dasha":
        return DashaVec(data, x0, g, k, algo._a(d), LAM, seed)
    raise ValueError(f"no vectorized baseline for {name!r}; allowed: {[m for m, _ in METHODS]}")


def time_compzoo(algo, problem, steps: int) -> float:
    """Seconds per step of ``steps`` steps after an untimed ``init``, in the runner's autograd
    mode (:func:`algorithms.base.step_mode`)."""
    with step_mode(problem):
        comm = SimulatedComm(problem.n, seed=0)
        state = algo.init(problem.x0, problem, comm)
        t0 = time.perf_counter()
        for _ in range(steps):
            state, _info = algo.step(state, problem, comm)
        return (time.perf_counter() - t0) / steps


def paper_problem(path: Path, dtype: str, storage: str = "auto"):
    """The papers' problem on the LIBSVM file ``path``: logreg-nonconvex, lambda 0.1, 20 nodes,
    a contiguous split, starting at the origin."""
    return make_problem(
        "logreg-nonconvex", dataset=f"libsvm:{path}", split="contiguous", nodes=NODES, lam=LAM,
        dtype=dtype, x0="zeros", storage=storage,
    )  # fmt: skip


def storage_costs(path: Path, dtype: str, steps: int, repeats: int) -> dict:
    """``{"csr_grad_s": ..., "csr-scipy_grad_s": ..., ...}``: the full gradient's seconds on
    each engine of :data:`problems.glm_engine.ENGINES` (``--problem-opt storage=NAME``, its
    thread count chosen as ``auto`` chooses it), interleaved, median of ``repeats``: the
    measured costs among which ``storage=auto`` chose."""
    probs = {e: paper_problem(path, dtype, e) for e in glm_engine.ENGINES}
    times: dict[str, list[float]] = {e: [] for e in probs}
    for _ in range(repeats):
        for e, p in probs.items():
            times[e].append(time_grad(p, steps))
    return {f"{e}_grad_s": statistics.median(t) for e, t in times.items()}


def time_grad(problem, steps: int) -> float:
    """Seconds per call of compzoo's full gradient at one point shared by the nodes (what
    EF21's step asks of the problem): ``linspace(-0.1, 0.1, d)``, as the engines are timed
    at set-up. Not the start ``x0 = 0``, where every margin is 0 and ``exp(0)`` takes the
    library's fast path: the compiled kernel on mushrooms took 0.146 ms there and 0.164 ms at
    random points near it, 0.18 ms inside EF21's steps."""
    x = torch.linspace(-0.1, 0.1, problem.d, dtype=problem.dtype)
    problem.grad(x)
    t0 = time.perf_counter()
    for _ in range(steps):
        problem.grad(x)
    return (time.perf_counter() - t0) / steps


def time_vec_grad(data: VecData, d: int, steps: int) -> float:
    """Seconds per call of the vectorized script's gradient (its data term, on the storage it
    chose) at the point :func:`time_grad` uses."""
    x = np.linspace(-0.1, 0.1, d).astype(data.dtype)
    data.grads(x)
    t0 = time.perf_counter()
    for _ in range(steps):
        data.grads(x)
    return (time.perf_counter() - t0) / steps


def time_touch(problem, steps: int) -> float:
    """Seconds per call of the two-touch pass on compzoo's own storage of the data (its
    engine's layout, dense or CSR, as the compiled kernels hold it): for every
    node's rows, the margin ``sum_k a_jk x_k`` and then ``g += s a_j``, with no loss, label
    or regulariser, nodes in parallel on as many threads as compzoo's kernels. Every gradient
    of a GLM on this storage reads each stored entry for a margin and for the sum, so this is
    what the gradient costs on this CPU when everything but those two reads is free."""
    if numba is None:
        return float("nan")
    data = problem._kdata if problem._kernels else problem._points_kdata()
    X = torch.zeros(problem.n, problem.d, dtype=problem.dtype).numpy()
    out, ptr = np.empty_like(X), problem._ptr.numpy()
    if len(data) > 1:
        indptr, indices, values, unit, _d = data
        args = (indptr, indices, values if not unit else indices[:0].astype(X.dtype), unit, ptr)
        call = lambda: launch(_touch_csr, *args, X, out)  # noqa: E731
    else:
        call = lambda: launch(_touch_dense, data[0], ptr, X, out)  # noqa: E731
    call()
    t0 = time.perf_counter()
    for _ in range(steps):
        call()
    return (time.perf_counter() - t0) / steps


if numba is not None:
    from problems.glm_kernels import _u  # unsigned indices, as the kernels index

    @numba.njit(cache=True, nogil=True, parallel=True)
    def _touch_csr(indptr, indices, values, unit, ptr, X, out):
        for i in numba.prange(ptr.size - 1):
            x, g = X[i], out[i]
            g[:] = 0
            for row in range(ptr[i], ptr[i + 1]):
                s = x[0] * 0
                p0, p1 = _u(indptr[row]), _u(indptr[row + 1])
                if unit:
                    for p in range(p0, p1):
                        s += x[_u(indices[p])]
                    for p in range(p0, p1):
                        g[_u(indices[p])] += s
                else:
                    for p in range(p0, p1):
                        s += values[p] * x[_u(indices[p])]
                    for p in range(p0, p1):
                        g[_u(indices[p])] += s * values[p]

    @numba.njit(cache=True, nogil=True, parallel=True, fastmath={"reassoc", "contract"})
    def _touch_dense(A, ptr, X, out):
        for i in numba.prange(ptr.size - 1):
            x, g = X[i], out[i]
            g[:] = 0
            for row in range(ptr[i], ptr[i + 1]):
                a = A[row]
                s = x[0] * 0
                for k in range(a.size):
                    s += a[k] * x[k]
                for k in range(a.size):
                    g[k] += s * a[k]


def time_loop(make, steps: int) -> float:
    """Seconds per step of a fresh loop's (or vectorized baseline's) ``steps`` steps (its
    initialisation untimed)."""
    loop = make()
    t0 = time.perf_counter()
    loop.run(steps)
    return (time.perf_counter() - t0) / steps


def bench_set(path: Path, name: str, dtype: str, steps: int, repeats: int) -> list[dict]:
    """One row per method on one data set and dtype; the methods' timings interleaved."""
    problem = paper_problem(path, dtype)
    free = FreeGrad(problem)
    glm_engine.settle()  # let torch's worker threads go quiet before NumPy is timed
    data = vec_data(problem)  # times its storages on a few gradients, keeps the fastest
    log.info(
        "paper %s %s: vectorized baseline on %s (gradient ms: %s)",
        name, dtype, data.variant,
        ", ".join(f"{v} {1e3 * t:.3g}" for v, t in data.timings.items()),
    )  # fmt: skip
    N, d, nnz = problem._A64.shape[0], problem.d, int(problem._A64.nnz)
    itemsize = torch.finfo(problem.dtype).bits // 8
    jobs = []
    for method, spec in METHODS:
        algo = configure(problem, method, spec)
        k = parse_spec(spec).k
        jobs.append({"method": method, "spec": spec, "algo": algo, "k": k, "t": [], "ours": [],
                     "vec": []})  # fmt: skip
    for job in jobs:  # warm-up: lazy constants, numba compilation, allocator
        time_compzoo(job["algo"], problem, 2)
        time_compzoo(job["algo"], free, 2)
        time_loop(lambda j=job: loop_for(problem, j["method"], j["algo"], j["k"], 2), 2)
        time_loop(lambda j=job: vec_for(problem, j["method"], j["algo"], j["k"], 2, data), 2)
    grads, vec_grads, touches = [], [], []
    for rnd in range(repeats):
        glm_engine.settle()
        grads.append(time_grad(problem, steps))
        glm_engine.settle()
        vec_grads.append(time_vec_grad(data, d, steps))
        glm_engine.settle()
        touches.append(time_touch(problem, steps))
        for job in jobs:
            a, m, k = job["algo"], job["method"], job["k"]
            pair = [
                ("ours", lambda a=a: time_compzoo(a, problem, steps)),
                ("vec", lambda a=a, m=m, k=k: time_loop(
                    lambda: vec_for(problem, m, a, k, steps, data), steps)),
            ]  # fmt: skip
            if rnd % 2:  # odd rounds: the script first
                pair.reverse()
            # each side timed once the threads of the one before have gone quiet (a pool's
            # idle workers spin for up to 0.1 s after a call and would share its cores)
            for side, timed in (*pair, *pair[::-1]):
                glm_engine.settle()
                job[side].append(timed())
            glm_engine.settle()
            loop = time_loop(lambda a=a, m=m, k=k: loop_for(problem, m, a, k, steps), steps)
            glm_engine.settle()
            job["t"].append((loop, time_compzoo(a, free, steps)))
    layouts = storage_costs(path, dtype, steps, repeats) if dtype == "float64" else {}
    rows = []
    for job in jobs:
        loop, floor = (statistics.median(c) for c in zip(*job["t"], strict=True))
        ours, vec = statistics.median(job["ours"]), statistics.median(job["vec"])
        rows.append(
            {
                "dataset": name,
                "dtype": dtype,
                "method": job["method"],
                "spec": job["spec"],
                "n": NODES,
                "N": N,
                "d": d,
                "nnz": nnz,
                "storage": problem.engine,  # the engine storage=auto chose (NAME/THREADS)
                "steps": steps,
                "compzoo_s": ours,
                "loop_s": loop,
                "floor_s": floor,
                "vectorized_s": vec,
                # every timing of the two compared, in the order taken: two a round each
                "compzoo_rounds_s": list(job["ours"]),
                "vectorized_rounds_s": list(job["vec"]),
                "vectorized_variant": data.variant,
                **{f"vectorized_{v}_grad_s": t for v, t in data.timings.items()},
                "grad_s": statistics.median(grads),
                "vectorized_grad_s": statistics.median(vec_grads),
                **layouts,
                "touch_s": statistics.median(touches),
                "sparse_bytes": bandwidth.data_bytes(N, d, itemsize, nnz),
                "dense_bytes": bandwidth.data_bytes(N, d, itemsize),
            }
        )
    return rows


def run(quick: bool = False, device: str = "cpu", datasets=DATASETS, track=None) -> list[dict]:
    """Every set of ``datasets`` found, in float64 and float32: 500 steps a timing, 3 rounds
    (with ``quick``: float64 only, 25 steps). A set that is absent gives a ``skipped`` row.
    ``track`` (:class:`benchmarks.progress.Tracker`) hears of each (set, dtype) as a case."""
    if device != "cpu":
        log.warning("paper: the loop baselines run on the CPU; compzoo runs on cpu here too")
    steps, dtypes = (QUICK_STEPS, QUICK_DTYPES) if quick else (STEPS, DTYPES)
    track = track or Tracker()
    paths = {name: find_data(name) for name in datasets}
    track.plan(sum(len(dtypes) if p is not None else 1 for p in paths.values()))
    rows = []
    for name, path in paths.items():
        if path is None:
            msg = f"{name}.txt not found in $COMPZOO_DATA or ../shared/data/libsvm/: skipped"
            track.case(f"{name} (absent)")
            log.warning("paper: %s", msg)
            rows.append({"dataset": name, "skipped": msg})
            track.rows(rows[-1:])
            continue
        for dtype in dtypes:
            t0 = time.perf_counter()
            track.case(f"{name} {dtype}")
            new = bench_set(path, name, dtype, steps, REPEATS)
            rows += new
            track.rows(new)
            log.debug("paper %s %s: %.1f s", name, dtype, time.perf_counter() - t0)
    return rows
