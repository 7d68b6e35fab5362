"""Per-node-loop NumPy implementations of EF21 + Top-K, DIANA + Rand-K, MARINA + Rand-K and
DASHA + Rand-K on ``logreg-nonconvex``: the way reference experiment code is usually written
(one Python loop over the nodes per iteration, NumPy inside). They are the baselines the
benchmarks compare against, and they follow the same maths as ``algorithms.ef.ef21``,
``algorithms.shifts.diana``, ``algorithms.vr.marina`` and ``algorithms.vr.dasha``.

Node data may be dense NumPy arrays or SciPy CSR matrices (``A @ x`` and ``A.T @ s`` work on
both); every vector keeps the dtype of ``x0``.
"""

from __future__ import annotations

import numpy as np


def _node_grad(A: np.ndarray, b: np.ndarray, x: np.ndarray, lam: float) -> np.ndarray:
    """Gradient of ``(1/m) sum_j log(1 + exp(-b_j a_j^T x)) + lam sum_k x_k^2/(1 + x_k^2)``."""
    margin = -b * np.asarray(A @ x).reshape(-1)
    s = 0.5 * (1.0 + np.tanh(0.5 * margin))  # sigmoid(margin), overflow-free
    g = np.asarray(A.T @ (-b * s)).reshape(-1) / A.shape[0]
    return g + 2.0 * lam * x / (1.0 + x * x) ** 2


def ef21_topk(
    A_nodes: list[np.ndarray],
    b_nodes: list[np.ndarray],
    x0: np.ndarray,
    gamma: float,
    k: int,
    lam: float,
    iters: int,
) -> np.ndarray:
    """EF21 with Top-K (``g_i^0 = grad f_i(x^0)``), one node at a time."""
    n = len(A_nodes)
    x = x0.copy()
    g_i = [_node_grad(A, b, x, lam) for A, b in zip(A_nodes, b_nodes, strict=True)]
    g = sum(g_i) / n
    for _ in range(iters):
        x = x - gamma * g
        for i in range(n):
            diff = _node_grad(A_nodes[i], b_nodes[i], x, lam) - g_i[i]
            idx = np.argpartition(np.abs(diff), -k)[-k:]
            c = np.zeros_like(diff)
            c[idx] = diff[idx]
            g_i[i] = g_i[i] + c
            g = g + c / n
    return x


def diana_randk(
    A_nodes: list[np.ndarray],
    b_nodes: list[np.ndarray],
    x0: np.ndarray,
    gamma: float,
    k: int,
    alpha: float,
    lam: float,
    iters: int,
    seed: int = 0,
) -> np.ndarray:
    """DIANA with Rand-K (``h_i^0 = 0``), one node at a time, each with its own generator."""
    n, d = len(A_nodes), x0.size
    rngs = [np.random.default_rng([seed, i]) for i in range(n)]
    x = x0.copy()
    h_i = [np.zeros_like(x0) for _ in range(n)]
    h = np.zeros_like(x0)
    for _ in range(iters):
        est = np.zeros_like(x0)
        for i in range(n):
            delta = _node_grad(A_nodes[i], b_nodes[i], x, lam) - h_i[i]
            idx = rngs[i].choice(d, k, replace=False)
            q = np.zeros_like(x0)
            q[idx] = delta[idx] * (d / k)
            h_i[i] = h_i[i] + alpha * q
            est += q / n
        x = x - gamma * (h + est)
        h = h + alpha * est
    return x


def _randk(v: np.ndarray, k: int, rng: np.random.Generator) -> np.ndarray:
    """Unbiased Rand-K of one node's vector: ``k`` coordinates kept, scaled by ``d/k``."""
    d = v.size
    idx = rng.choice(d, k, replace=False)
    q = np.zeros_like(v)
    q[idx] = v[idx] * (d / k)
    return q


def marina_randk(
    A_nodes: list[np.ndarray],
    b_nodes: list[np.ndarray],
    x0: np.ndarray,
    gamma: float,
    k: int,
    syncs: np.ndarray,
    lam: float,
    iters: int,
    seed: int = 0,
) -> np.ndarray:
    """MARINA with Rand-K, one node at a time; ``syncs[t]`` is round ``t``'s shared coin.

    ``g^0 = grad f(x^0)``; a synchronising round sets ``g = mean_i grad f_i(x)``, any other
    adds ``mean_i Q(grad f_i(x^{k+1}) - grad f_i(x^k))``.
    """
    n = len(A_nodes)
    rngs = [np.random.default_rng([seed, i]) for i in range(n)]
    x = x0.copy()
    grad_i = [_node_grad(A, b, x, lam) for A, b in zip(A_nodes, b_nodes, strict=True)]
    g = sum(grad_i) / n
    for t in range(iters):
        x = x - gamma * g
        acc = np.zeros_like(x0)
        for i in range(n):
            new = _node_grad(A_nodes[i], b_nodes[i], x, lam)
            acc += new if syncs[t] else _randk(new - grad_i[i], k, rngs[i])
            grad_i[i] = new
        g = acc / n if syncs[t] else g + acc / n
    return x


def dasha_randk(
    A_nodes: list[np.ndarray],
    b_nodes: list[np.ndarray],
    x0: np.ndarray,
    gamma: float,
    k: int,
    a: float,
    lam: float,
    iters: int,
    seed: int = 0,
) -> np.ndarray:
    """DASHA with Rand-K and full gradients (``g_i^0 = h_i^0 = grad f_i(x^0)``), one node at a
    time: ``m_i = Q(h_i^{t+1} - h_i^t - a (g_i^t - h_i^t))``, ``g_i += m_i``,
    ``g += mean_i m_i``."""
    n = len(A_nodes)
    rngs = [np.random.default_rng([seed, i]) for i in range(n)]
    x = x0.copy()
    h_i = [_node_grad(A, b, x, lam) for A, b in zip(A_nodes, b_nodes, strict=True)]
    g_i = [h.copy() for h in h_i]
    g = sum(g_i) / n
    for _ in range(iters):
        x = x - gamma * g
        for i in range(n):
            h_new = _node_grad(A_nodes[i], b_nodes[i], x, lam)
            m = _randk(h_new - h_i[i] - a * (g_i[i] - h_i[i]), k, rngs[i])
            g_i[i] = g_i[i] + m
            g = g + m / n
            h_i[i] = h_new
    return x
