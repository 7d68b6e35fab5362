"""Careful per-node NumPy/SciPy-CSR loops of EF21 + Top-K, DIANA, MARINA and DASHA + Rand-K on
``logreg-nonconvex``: the baselines of the papers' benchmark (:mod:`benchmarks.paper`).

They are written the way the papers' own experiment code runs (one Python loop over the nodes
per step, each node with its own rows), but with care: each node's ``A_i`` and ``A_i^T`` are
CSR matrices built once, ``-b_i`` and ``-b_i / m_i`` are precomputed, the regulariser's gradient
(the same for every node at a shared ``x``) is computed once per step, the sigmoid is computed
in place, and a compressed message touches only its ``k`` kept coordinates. The maths are those
of ``algorithms.ef.ef21`` (arXiv 2106.05203, Alg. 2), ``algorithms.shifts.diana`` (arXiv 1901.09269,
``h_i^0 = 0``), ``algorithms.vr.marina`` (arXiv 2102.07845, Alg. 1) and ``algorithms.vr.dasha``
(arXiv 2202.01268, Alg. 1, full gradients), so their iterates equal compzoo's for deterministic
compressors (checked in ``tests/benchmarks/test_bench_paper.py``).

Each method is a class: the constructor is the method's initialisation, :meth:`step` one
iteration, so the benchmark can time steps alone. Vectors keep the dtype of ``x0``.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

__all__ = ["Node", "nodes_from_csr", "EF21Loop", "DianaLoop", "MarinaLoop", "DashaLoop"]


class Node:
    """One node's rows of ``logreg-nonconvex``: ``f_i(x) = (1/m_i) sum_j log(1 + exp(-b_j
    a_j^T x))`` (the shared regulariser is added by the caller)."""

    def __init__(self, A: sp.csr_matrix, b: np.ndarray, dtype) -> None:
        dtype = np.dtype(dtype)
        self.A = sp.csr_matrix(A, dtype=dtype)
        self.At = self.A.T.tocsr()
        self.nb = (-np.asarray(b)).astype(dtype)
        self.nb_m = self.nb / dtype.type(A.shape[0])

    def grad(self, x: np.ndarray) -> np.ndarray:
        """The data term's gradient: ``A_i^T (-b_i sigmoid(-b_i A_i x)) / m_i``."""
        z = self.A @ x
        np.multiply(z, self.nb, out=z)  # margin -b_j a_j^T x
        np.multiply(z, 0.5, out=z)
        np.tanh(z, out=z)  # sigmoid(u) = (1 + tanh(u/2)) / 2, overflow-free
        z += 1.0
        z *= 0.5
        np.multiply(z, self.nb_m, out=z)
        return self.At @ z


def nodes_from_csr(A: sp.csr_matrix, b: np.ndarray, offsets: np.ndarray, dtype) -> list[Node]:
    """Node ``i`` owns rows ``offsets[i]:offsets[i+1]`` (the problem's split, in order)."""
    return [Node(A[s:e], b[s:e], dtype) for s, e in zip(offsets[:-1], offsets[1:], strict=True)]


def _reg(x: np.ndarray, lam: float) -> np.ndarray:
    """Gradient of ``lam sum_k x_k^2 / (1 + x_k^2)``."""
    return 2.0 * lam * x / (1.0 + x * x) ** 2


class _Loop:
    def __init__(self, nodes: list[Node], x0: np.ndarray, gamma: float, k: int, lam: float):
        self.nodes, self.gamma, self.k, self.lam = nodes, gamma, k, lam
        self.n, self.d = len(nodes), x0.size
        self.x = x0.copy()
        self.scale = x0.dtype.type(self.d / k)

    def grads(self, x: np.ndarray) -> np.ndarray:
        r = _reg(x, self.lam)
        return np.stack([nd.grad(x) + r for nd in self.nodes])

    def run(self, iters: int) -> np.ndarray:
        for _ in range(iters):
            self.step()
        return self.x


class EF21Loop(_Loop):
    """EF21 + Top-K (``g_i^0 = grad f_i(x^0)``): ``x += -gamma g``; node ``i`` sends
    ``c_i = TopK(grad f_i(x) - g_i)``, ``g_i += c_i``, ``g += (1/n) sum_i c_i``."""

    def __init__(self, nodes, x0, gamma, k, lam):
        super().__init__(nodes, x0, gamma, k, lam)
        self.g_i = self.grads(self.x)
        self.g = self.g_i.mean(axis=0)

    def step(self) -> None:
        self.x = x = self.x - self.gamma * self.g
        r = _reg(x, self.lam)
        acc = np.zeros_like(x)
        for i, nd in enumerate(self.nodes):
            diff = nd.grad(x)
            diff += r
            diff -= self.g_i[i]
            if self.k == 1:
                idx = np.argmax(np.abs(diff))
            else:
                idx = np.argpartition(np.abs(diff), -self.k)[-self.k :]
            self.g_i[i, idx] += diff[idx]
            acc[idx] += diff[idx]
        self.g = self.g + acc / self.n


class _RandLoop(_Loop):
    """A loop whose node ``i`` draws its Rand-K indices from its own generator."""

    def __init__(self, nodes, x0, gamma, k, lam, seed=0):
        super().__init__(nodes, x0, gamma, k, lam)
        self.rngs = [np.random.default_rng([seed, i]) for i in range(self.n)]

    def _idx(self, i: int) -> np.ndarray:
        return self.rngs[i].choice(self.d, self.k, replace=False)


class DianaLoop(_RandLoop):
    """DIANA + Rand-K (``h_i^0 = 0``): ``q_i = Q(grad f_i(x) - h_i)``, ``h_i += alpha q_i``;
    ``x += -gamma (h + mean_i q_i)``, ``h += alpha mean_i q_i``."""

    def __init__(self, nodes, x0, gamma, k, alpha, lam, seed=0):
        super().__init__(nodes, x0, gamma, k, lam, seed)
        self.alpha = alpha
        self.h_i = np.zeros((self.n, self.d), dtype=x0.dtype)
        self.h = np.zeros_like(x0)

    def step(self) -> None:
        x, r = self.x, _reg(self.x, self.lam)
        est = np.zeros_like(x)
        for i, nd in enumerate(self.nodes):
            idx = self._idx(i)
            q = (nd.grad(x)[idx] + r[idx] - self.h_i[i, idx]) * self.scale
            self.h_i[i, idx] += self.alpha * q
            est[idx] += q
        est /= self.n
        self.x = x - self.gamma * (self.h + est)
        self.h = self.h + self.alpha * est


class MarinaLoop(_RandLoop):
    """MARINA + Rand-K (``g^0 = grad f(x^0)``); ``syncs[t]`` is round ``t``'s shared coin: a
    synchronising round sets ``g = mean_i grad f_i(x)``, any other adds
    ``mean_i Q(grad f_i(x^{t+1}) - grad f_i(x^t))``."""

    def __init__(self, nodes, x0, gamma, k, syncs, lam, seed=0):
        super().__init__(nodes, x0, gamma, k, lam, seed)
        self.syncs, self.t = syncs, 0
        self.grad_i = self.grads(self.x)
        self.g = self.grad_i.mean(axis=0)

    def step(self) -> None:
        self.x = x = self.x - self.gamma * self.g
        r = _reg(x, self.lam)
        sync = bool(self.syncs[self.t])
        acc = np.zeros_like(x)
        for i, nd in enumerate(self.nodes):
            new = nd.grad(x)
            new += r
            if sync:
                acc += new
            else:
                idx = self._idx(i)
                acc[idx] += (new[idx] - self.grad_i[i, idx]) * self.scale
            self.grad_i[i] = new
        self.g = acc / self.n if sync else self.g + acc / self.n
        self.t += 1


class DashaLoop(_RandLoop):
    """DASHA + Rand-K with full gradients (``g_i^0 = h_i^0 = grad f_i(x^0)``):
    ``m_i = Q(h_i^{t+1} - h_i^t - a (g_i^t - h_i^t))``, ``g_i += m_i``, ``g += mean_i m_i``."""

    def __init__(self, nodes, x0, gamma, k, a, lam, seed=0):
        super().__init__(nodes, x0, gamma, k, lam, seed)
        self.a = a
        self.h_i = self.grads(self.x)
        self.g_i = self.h_i.copy()
        self.g = self.g_i.mean(axis=0)

    def step(self) -> None:
        self.x = x = self.x - self.gamma * self.g
        r = _reg(x, self.lam)
        acc = np.zeros_like(x)
        for i, nd in enumerate(self.nodes):
            new = nd.grad(x)
            new += r
            idx = self._idx(i)
            h, gi = self.h_i[i, idx], self.g_i[i, idx]
            m = (new[idx] - h - self.a * (gi - h)) * self.scale
            self.g_i[i, idx] += m
            acc[idx] += m
            self.h_i[i] = new
        self.g = self.g + acc / self.n
