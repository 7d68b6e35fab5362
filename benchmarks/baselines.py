"""Per-node-loop NumPy implementations of EF21 + Top-K and DIANA + Rand-K on
``logreg-nonconvex``: the way reference experiment code is usually written (one Python loop
over the nodes per iteration, NumPy inside). They are the baselines the benchmarks compare
against, and they follow the same maths as ``algorithms.ef21`` and ``algorithms.diana``.
"""

from __future__ import annotations

import numpy as np


def _node_grad(A: np.ndarray, b: np.ndarray, x: np.ndarray, lam: float) -> np.ndarray:
    """Gradient of ``(1/m) sum_j log(1 + exp(-b_j a_j^T x)) + lam sum_k x_k^2/(1 + x_k^2)``."""
    margin = -b * (A @ x)
    s = 0.5 * (1.0 + np.tanh(0.5 * margin))  # sigmoid(margin), overflow-free
    return A.T @ (-b * s) / A.shape[0] + 2.0 * lam * x / (1.0 + x * x) ** 2


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
    h_i = [np.zeros(d) for _ in range(n)]
    h = np.zeros(d)
    for _ in range(iters):
        est = np.zeros(d)
        for i in range(n):
            delta = _node_grad(A_nodes[i], b_nodes[i], x, lam) - h_i[i]
            idx = rngs[i].choice(d, k, replace=False)
            q = np.zeros(d)
            q[idx] = delta[idx] * (d / k)
            h_i[i] = h_i[i] + alpha * q
            est += q / n
        x = x - gamma * (h + est)
        h = h + alpha * est
    return x
