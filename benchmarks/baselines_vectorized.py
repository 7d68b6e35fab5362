"""Vectorized NumPy/SciPy scripts of EF21 + Top-K, DIANA, MARINA and DASHA + Rand-K on
``logreg-nonconvex``: the baselines a researcher writes when the per-node loop is too slow
(:mod:`benchmarks.paper`'s third contender, beside compzoo and the loops of
:mod:`benchmarks.baselines_sparse`).

Every node is handled at once, with no Python loop over nodes in the arithmetic: the gradient
is evaluated at the shared ``x`` (all four methods ask for ``grad f_i(x)`` at one point), so
the margins of all ``N`` rows are one product ``A x``, and the ``n`` per-node sums
``A_i^T s_i`` one more call, on one of four storages (:class:`VecData`):

* ``csr``: ``A`` as one CSR matrix for the margins, and the block-diagonal CSR
  ``B^T = diag(A_1^T, ..., A_n^T)`` (``n d x N``) for the sums, so that
  ``(B^T s).reshape(n, d)`` holds every node's gradient: one SciPy call each;
* ``csc``: the same with ``A`` stored by columns for the margins (SciPy then scatters each
  column into ``A x``: faster than the row-wise product when rows are short, as on w8a);
* ``dense``: the rows as a dense ``(n, m, d)`` stack (a view of the ``(N, d)`` array when the
  split is even, else padded with zero rows whose weights are zero), margins
  ``P.reshape(n m, d) @ x`` and sums ``matmul(s[:, None, :], P)``: BLAS on both, with its
  default number of threads;
* ``dense-1``: the same with BLAS held to one thread (``threadpoolctl``) during the gradient.
  On a machine whose cores are busy with other work, a multi-threaded BLAS call can take ten
  times as long as a single-threaded one, and erratically so (measured on this project's
  2-core machine under a load of 3, dense gradient on phishing in rounds of 10 calls: with
  two threads 0.32 ms at best, a median of 1.3 to 8 ms; with one, 0.47 to 0.52 ms).

``variant="auto"`` times all four on a few gradients when the data are built (interleaved
rounds; the median round counts, so that a storage fast only now and then is not chosen) and
keeps the fastest; :attr:`VecData.variant` says which, and :attr:`VecData.timings` the
seconds per gradient each took.

The compressors are vectorized too: Top-K by ``np.argmax`` (K = 1) or ``np.argpartition`` of
``|.|`` per row, values gathered with ``np.take_along_axis``, the sum over nodes by
``np.add.at`` (in node order, in the vectors' dtype, as the loops add). Rand-K indices are
drawn as the loops draw them (``draw="loop"``: node ``i`` calls
``default_rng([seed, i]).choice(d, k, replace=False)``), so the iterates equal the loops' and
hence compzoo's; that draw is the one per-node call left (about 0.15 ms a step for 20 nodes
on this project's machine). ``draw="batch"`` draws all nodes' indices at once from one
generator (the ``k`` smallest of ``n x d`` uniforms per row: uniform ``k``-subsets), as a
script free of that constraint would; its iterates then differ from the loops'.

MARINA's coins are passed in (``syncs``), as to :class:`benchmarks.baselines_sparse.MarinaLoop`.
The maths, initialisations and order of floating-point operations are the loops', so on the
``csr`` storage the iterates are theirs (the same sums in the same order), and on the others
they differ by the rounding of the sums that BLAS or SciPy order otherwise (checked to 1e-12
in ``tests/benchmarks/test_bench_vectorized.py``). Vectors keep the dtype of ``x0``.
"""

from __future__ import annotations

import time

import numpy as np
import scipy.sparse as sp
from threadpoolctl import ThreadpoolController

from benchmarks.baselines_sparse import _reg
from problems.glm_engine import settle

__all__ = ["VARIANTS", "VecData", "EF21Vec", "DianaVec", "MarinaVec", "DashaVec"]

VARIANTS = ("csr", "csc", "dense", "dense-1")
DRAWS = ("loop", "batch")


class VecData:
    """All nodes' rows of ``logreg-nonconvex`` (node ``i`` owns rows
    ``offsets[i]:offsets[i+1]`` of ``A``, labels ``b``), stored for gradients of every node at
    once. ``variant``: one of :data:`VARIANTS` or ``"auto"`` (time each in ``rounds`` rounds
    interleaved, a round ``calls`` gradients or as many as fill ``budget_s`` seconds after one
    untimed call, and keep the fastest median round)."""

    def __init__(
        self, A, b, offsets, dtype, variant: str = "auto", calls: int = 5, rounds: int = 5,
        budget_s: float = 0.02,
    ) -> None:  # fmt: skip
        if variant not in (*VARIANTS, "auto"):
            raise ValueError(f"variant must be one of {(*VARIANTS, 'auto')}, got {variant!r}")
        dt = np.dtype(dtype)
        A = sp.csr_matrix(A, dtype=dt)
        offsets = np.asarray(offsets, dtype=np.int64)
        counts = np.diff(offsets)
        self.dtype, self.n, self.d = dt, counts.size, A.shape[1]
        self.N = A.shape[0]
        self.offsets, self.counts = offsets, counts
        # per row: -b_j and -b_j / m_i (the same divisions as the loops' nodes)
        self.nb = (-np.asarray(b)).astype(dt)
        self.nb_m = self.nb / np.repeat(counts, counts).astype(dt)
        self._grads = {"csr": self._grads_csr, "csc": self._grads_csc}
        self._grads.update({"dense": self._grads_dense, "dense-1": self._grads_dense_1})
        self.timings: dict[str, float] = {}
        if variant in ("csr", "csc", "auto"):
            self._build_csr(A)
        if variant in ("dense", "dense-1", "auto"):
            self._build_dense(A)
        if variant == "dense-1" or variant == "auto":
            self._blas = ThreadpoolController().select(user_api="blas")
        self.variant = variant
        if variant == "auto":
            self.variant = self._choose(calls, rounds, budget_s)
            drop = ("P", "nbP", "nb_mP") if self.variant in ("csr", "csc") else ("A", "BT")
            drop += ("Ac",) if self.variant != "csc" else ("A",)
            for name in drop:
                delattr(self, name)

    # ---- storages
    def _build_csr(self, A: sp.csr_matrix) -> None:
        self.A, self.Ac = A, A.tocsc()
        blocks = [A[s:e].T for s, e in zip(self.offsets[:-1], self.offsets[1:], strict=True)]
        self.BT = sp.block_diag(blocks, format="csr").astype(self.dtype)
        self.BT.sort_indices()

    def _build_dense(self, A: sp.csr_matrix) -> None:
        n, m, d = self.n, int(self.counts.max()), self.d
        if (self.counts == m).all():  # an even split: a view of the (N, d) array
            self.P = A.toarray().reshape(n, m, d)
            self.nbP, self.nb_mP = self.nb.reshape(n, m), self.nb_m.reshape(n, m)
        else:  # zero rows pad each node to m rows; their weights are zero
            pad = np.arange(n * m).reshape(n, m) % m < self.counts[:, None]
            self.P = np.zeros((n, m, d), dtype=self.dtype)
            self.P[pad] = A.toarray()
            self.nbP = np.zeros((n, m), dtype=self.dtype)
            self.nb_mP = np.zeros((n, m), dtype=self.dtype)
            self.nbP[pad], self.nb_mP[pad] = self.nb, self.nb_m

    def _choose(self, calls: int, rounds: int, budget_s: float) -> str:
        """The variant of the least median time per gradient. Each round of a variant starts
        with quiet threads (the previous variant's BLAS threads spin for ~0.1 s after a call)
        and one untimed call, which wakes its own, then times gradients for ``budget_s``
        seconds (at least ``calls``): the sustained rate of a script's steps. Five calls
        straight after the wake-up measured the gradients 1.1-2.6x slower than in a run of
        steps (phishing float32, dense: 0.27 ms against 0.10), and mushrooms' float32 script
        took CSR in one run of three though its dense steps are faster there. The point has
        non-zero margins, as in the steps (:func:`benchmarks.paper.time_grad`'s)."""
        x = np.linspace(-0.1, 0.1, self.d).astype(self.dtype)
        for v in VARIANTS:
            self._grads[v](x)  # warm-up
        times: dict[str, list[float]] = {v: [] for v in VARIANTS}
        for _ in range(rounds):
            for v in VARIANTS:
                settle()
                self._grads[v](x)
                done, t0 = 0, time.perf_counter()
                while done < calls or time.perf_counter() - t0 < budget_s:
                    self._grads[v](x)
                    done += 1
                times[v].append((time.perf_counter() - t0) / done)
        self.timings = {v: float(np.median(t)) for v, t in times.items()}
        return min(VARIANTS, key=self.timings.__getitem__)

    # ---- gradients of the data terms, all nodes: an (n, d) array
    @staticmethod
    def _weights(z: np.ndarray, nb: np.ndarray, nb_m: np.ndarray) -> np.ndarray:
        """``z`` (margins ``a_j^T x``) becomes ``-b_j sigmoid(-b_j a_j^T x) / m_i``, in place."""
        np.multiply(z, nb, out=z)
        np.multiply(z, 0.5, out=z)
        np.tanh(z, out=z)  # sigmoid(u) = (1 + tanh(u/2)) / 2, overflow-free
        z += 1.0
        z *= 0.5
        np.multiply(z, nb_m, out=z)
        return z

    def _grads_csr(self, x: np.ndarray) -> np.ndarray:
        s = self._weights(self.A @ x, self.nb, self.nb_m)
        return (self.BT @ s).reshape(self.n, self.d)

    def _grads_csc(self, x: np.ndarray) -> np.ndarray:
        s = self._weights(self.Ac @ x, self.nb, self.nb_m)
        return (self.BT @ s).reshape(self.n, self.d)

    def _grads_dense(self, x: np.ndarray) -> np.ndarray:
        n, m, d = self.P.shape
        z = (self.P.reshape(n * m, d) @ x).reshape(n, m)
        s = self._weights(z, self.nbP, self.nb_mP)
        return np.matmul(s[:, None, :], self.P)[:, 0, :]

    def _grads_dense_1(self, x: np.ndarray) -> np.ndarray:
        with self._blas.limit(limits=1):
            return self._grads_dense(x)

    def grads(self, x: np.ndarray) -> np.ndarray:
        """Every node's data-term gradient at the shared ``x``: a fresh ``(n, d)`` array."""
        return self._grads[self.variant](x)


class _Vec:
    def __init__(self, data: VecData, x0: np.ndarray, gamma: float, k: int, lam: float):
        self.data, self.gamma, self.k, self.lam = data, gamma, k, lam
        self.n, self.d = data.n, x0.size
        self.x = x0.copy()
        self.scale = x0.dtype.type(self.d / k)
        self.rows = np.arange(self.n)[:, None]

    def grads(self, x: np.ndarray) -> np.ndarray:
        """``grad f_i(x)`` of every node, regulariser included."""
        G = self.data.grads(x)
        G += _reg(x, self.lam)
        return G

    def _sum(self, idx: np.ndarray, vals: np.ndarray) -> np.ndarray:
        """``sum_i`` of the sparse messages (node ``i`` keeps ``vals[i]`` at ``idx[i]``), added
        in node order in the vectors' dtype."""
        acc = np.zeros(self.d, dtype=self.x.dtype)
        np.add.at(acc, idx.ravel(), vals.ravel())
        return acc

    def run(self, iters: int) -> np.ndarray:
        for _ in range(iters):
            self.step()
        return self.x


class EF21Vec(_Vec):
    """EF21 + Top-K (``g_i^0 = grad f_i(x^0)``): ``x += -gamma g``; every node's
    ``c_i = TopK(grad f_i(x) - g_i)``, ``g_i += c_i``, ``g += (1/n) sum_i c_i``."""

    def __init__(self, data, x0, gamma, k, lam):
        super().__init__(data, x0, gamma, k, lam)
        self.g_i = self.grads(self.x)
        self.g = self.g_i.mean(axis=0)

    def step(self) -> None:
        self.x = x = self.x - self.gamma * self.g
        diff = self.grads(x)
        diff -= self.g_i
        if self.k == 1:
            idx = np.argmax(np.abs(diff), axis=1)[:, None]
        else:
            idx = np.argpartition(np.abs(diff), -self.k, axis=1)[:, -self.k :]
        vals = np.take_along_axis(diff, idx, axis=1)
        self.g_i[self.rows, idx] += vals
        self.g = self.g + self._sum(idx, vals) / self.n


class _RandVec(_Vec):
    """Rand-K indices of every node: ``draw="loop"`` as the loops draw them (node ``i``'s own
    generator ``default_rng([seed, i])``), ``draw="batch"`` all at once from one generator."""

    def __init__(self, data, x0, gamma, k, lam, seed=0, draw="loop"):
        super().__init__(data, x0, gamma, k, lam)
        if draw not in DRAWS:
            raise ValueError(f"draw must be one of {DRAWS}, got {draw!r}")
        self.draw = draw
        if draw == "loop":
            self.rngs = [np.random.default_rng([seed, i]) for i in range(self.n)]
        else:
            self.rng = np.random.default_rng(seed)

    def _idx(self) -> np.ndarray:
        """An ``(n, k)`` array: row ``i`` holds node ``i``'s ``k`` distinct indices."""
        if self.draw == "loop":
            return np.stack([g.choice(self.d, self.k, replace=False) for g in self.rngs])
        u = self.rng.random((self.n, self.d))
        if self.k == self.d:
            return np.argsort(u, axis=1)
        return np.argpartition(u, self.k - 1, axis=1)[:, : self.k]


class DianaVec(_RandVec):
    """DIANA + Rand-K (``h_i^0 = 0``): ``q_i = Q(grad f_i(x) - h_i)``, ``h_i += alpha q_i``;
    ``x += -gamma (h + mean_i q_i)``, ``h += alpha mean_i q_i``."""

    def __init__(self, data, x0, gamma, k, alpha, lam, seed=0, draw="loop"):
        super().__init__(data, x0, gamma, k, lam, seed, draw)
        self.alpha = alpha
        self.h_i = np.zeros((self.n, self.d), dtype=x0.dtype)
        self.h = np.zeros_like(x0)

    def step(self) -> None:
        x, r = self.x, _reg(self.x, self.lam)
        G = self.data.grads(x)
        idx = self._idx()
        q = np.take_along_axis(G, idx, axis=1) + r[idx]
        q -= self.h_i[self.rows, idx]
        q *= self.scale
        self.h_i[self.rows, idx] += self.alpha * q
        est = self._sum(idx, q)
        est /= self.n
        self.x = x - self.gamma * (self.h + est)
        self.h = self.h + self.alpha * est


class MarinaVec(_RandVec):
    """MARINA + Rand-K (``g^0 = grad f(x^0)``); ``syncs[t]`` is round ``t``'s shared coin: a
    synchronising round sets ``g = mean_i grad f_i(x)``, any other adds
    ``mean_i Q(grad f_i(x^{t+1}) - grad f_i(x^t))``."""

    def __init__(self, data, x0, gamma, k, syncs, lam, seed=0, draw="loop"):
        super().__init__(data, x0, gamma, k, lam, seed, draw)
        self.syncs, self.t = syncs, 0
        self.grad_i = self.grads(self.x)
        self.g = self.grad_i.mean(axis=0)

    def step(self) -> None:
        self.x = x = self.x - self.gamma * self.g
        new = self.grads(x)
        if self.syncs[self.t]:
            self.g = new.sum(axis=0) / self.n  # rows added in node order
        else:
            idx = self._idx()
            vals = np.take_along_axis(new, idx, axis=1)
            vals -= self.grad_i[self.rows, idx]
            vals *= self.scale
            self.g = self.g + self._sum(idx, vals) / self.n
        self.grad_i = new
        self.t += 1


class DashaVec(_RandVec):
    """DASHA + Rand-K with full gradients (``g_i^0 = h_i^0 = grad f_i(x^0)``):
    ``m_i = Q(h_i^{t+1} - h_i^t - a (g_i^t - h_i^t))``, ``g_i += m_i``, ``g += mean_i m_i``."""

    def __init__(self, data, x0, gamma, k, a, lam, seed=0, draw="loop"):
        super().__init__(data, x0, gamma, k, lam, seed, draw)
        self.a = a
        self.h_i = self.grads(self.x)
        self.g_i = self.h_i.copy()
        self.g = self.g_i.mean(axis=0)

    def step(self) -> None:
        self.x = x = self.x - self.gamma * self.g
        new = self.grads(x)
        idx = self._idx()
        h, gi = self.h_i[self.rows, idx], self.g_i[self.rows, idx]
        m = (np.take_along_axis(new, idx, axis=1) - h - self.a * (gi - h)) * self.scale
        self.g_i[self.rows, idx] += m
        self.h_i = new
        self.g = self.g + self._sum(idx, m) / self.n
