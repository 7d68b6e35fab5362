"""Communication graphs for decentralized (peer-to-peer) methods, and their mixing matrices.

A topology is an undirected connected graph on the ``n`` nodes and a symmetric, doubly
stochastic mixing matrix ``W`` supported on its edges and diagonal (``W_ij > 0`` only for
neighbours and ``i = j``). Gossip averaging ``x_i <- sum_j W_ij x_j`` contracts the distance to
consensus by ``1 - rho`` per round in the worst case, where the *spectral gap*

    ``rho = 1 - max(|lambda_2(W)|, |lambda_n(W)|)``

(eigenvalues in decreasing order; ``lambda_1 = 1``), the convention of CHOCO-SGD's code
(epfml/ChocoSGD, ``dl_code/pcode/utils/topology.py``) and of the decentralized papers built on
it; ``beta = ||I - W||_2`` is the other constant their step sizes use. Both are computed
exactly (a dense symmetric eigendecomposition, in float64) when the topology is built.

Graphs (``--topology``):

* ``ring``: node ``i`` linked to ``i - 1`` and ``i + 1`` (mod ``n``);
* ``torus``: the 2-D torus ``r x c`` with ``r`` the largest divisor of ``n`` with
  ``r <= sqrt(n)``, four neighbours each (``n`` must factor as ``r x c`` with ``r, c >= 3``);
* ``complete``: every pair linked;
* ``star``: node 0 linked to every other node;
* ``er:p=P``: Erdős–Rényi, each pair linked with probability ``P``, drawn from the run's seed
  and redrawn (next seed) until connected, up to 1000 draws;
* ``file:PATH``: a user's ``n x n`` matrix in a text file (whitespace or comma separated
  numbers, read by ``numpy.loadtxt``: data only, nothing in it runs): a 0/1 adjacency matrix
  (the weights then follow ``--mixing``), or a mixing matrix itself (any entry strictly between
  0 and 1, or a non-zero diagonal), which must be symmetric and doubly stochastic.

Weights (``--mixing``), for the built-in graphs and adjacency files:

* ``metropolis`` (default): ``W_ij = 1 / (1 + max(d_i, d_j))`` on edges, ``W_ii = 1 - sum_j
  W_ij`` (Metropolis–Hastings in the convention that keeps ``W_ii > 0``; the other convention,
  ``1 / max(d_i, d_j)``, gives an even ring ``W_ii = 0``, ``lambda_n = -1`` and a spectral gap
  of 0). On a ring this is CHOCO's ``1/3`` matrix, on a torus its ``(A + I)/5``;
* ``uniform``: ``W_ij = 1 / (1 + d_max)`` on edges, ``W_ii = 1 - d_i / (1 + d_max)``: on a
  regular graph ``(A + I)/(d + 1)``, CHOCO's matrices again; ``complete`` gives ``11^T / n``.

Bits: a node that gossips sends its message once per incident edge (point to point, no
broadcast medium), so the comm layer charges it ``deg_i`` times the message's bits uplink, and
charges each node the bits of its neighbours' messages downlink (what it receives).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

KINDS = ("ring", "torus", "complete", "star", "er:p=P", "file:PATH")
# The spectral gap is computed exactly by a dense eigendecomposition of W (O(n^3) time, n^2
# memory), and W is held dense: up to this many nodes.
MAX_NODES = 4096
MIXINGS = ("metropolis", "uniform")
ER_DRAWS = 1000
# A matrix read from a file is accepted as symmetric and doubly stochastic to this tolerance.
FILE_TOL = 1e-9


@dataclass(frozen=True)
class Topology:
    """A connected graph on ``n`` nodes and its mixing matrix (see the module docstring).

    Attributes:
        spec: the ``--topology`` text it was built from.
        mixing: ``metropolis``, ``uniform`` or ``file`` (weights given in the file).
        n: the number of nodes.
        W: float64 ``(n, n)``, symmetric and doubly stochastic.
        neighbours: for each node, its neighbours in increasing order (``i`` itself excluded).
        rho: the spectral gap ``1 - max(|lambda_2|, |lambda_n|)``.
        beta: ``||I - W||_2``.
    """

    spec: str
    mixing: str
    n: int
    W: torch.Tensor
    neighbours: tuple[tuple[int, ...], ...]
    rho: float
    beta: float
    eigenvalues: tuple[float, ...] = field(repr=False, default=())

    @property
    def degrees(self) -> torch.Tensor:
        """int64 ``(n,)``: each node's number of neighbours."""
        return torch.tensor([len(nb) for nb in self.neighbours], dtype=torch.int64)

    @property
    def edges(self) -> int:
        """The number of undirected edges."""
        return int(self.degrees.sum()) // 2

    def to_dict(self) -> dict:
        """What ``config.json`` records."""
        deg = self.degrees
        return {
            "spec": self.spec,
            "mixing": self.mixing,
            "n": self.n,
            "edges": self.edges,
            "degree_min": int(deg.min()),
            "degree_max": int(deg.max()),
            "spectral_gap": self.rho,
            "beta": self.beta,
            "lambda_2": self.eigenvalues[1] if self.n > 1 else None,
            "lambda_n": self.eigenvalues[-1],
        }


def parse_topology(spec: str) -> tuple[str, float | str | None]:
    """``(kind, argument)`` of a ``--topology`` spec; ``ValueError`` naming what is allowed."""
    if not isinstance(spec, str) or not spec:
        raise ValueError(f"--topology must be one of {', '.join(KINDS)}, got {spec!r}")
    kind, colon, arg = spec.partition(":")
    if kind in ("ring", "torus", "complete", "star") and not colon:
        return kind, None
    if kind == "er" and colon:
        key, eq, val = arg.partition("=")
        try:
            p = float(val)
        except ValueError:
            p = math.nan
        if key != "p" or not eq or not 0 < p <= 1:
            raise ValueError(f"--topology er:p=P needs a probability 0 < P <= 1, got {spec!r}")
        return "er", p
    if kind == "file" and colon and arg:
        return "file", arg
    raise ValueError(f"--topology must be one of {', '.join(KINDS)}, got {spec!r}")


def build(spec: str, n: int, mixing: str = "metropolis", seed: int = 0) -> Topology:
    """The topology ``spec`` on ``n`` nodes with ``mixing`` weights (``er`` draws from ``seed``).

    Raises:
        ValueError: a bad spec, a graph that does not exist for this ``n`` (a torus of a prime
            number of nodes), a disconnected graph, or a file that is not a valid matrix.
    """
    kind, arg = parse_topology(spec)
    if mixing not in MIXINGS:
        raise ValueError(f"--mixing must be one of {', '.join(MIXINGS)}, got {mixing!r}")
    if isinstance(n, bool) or not isinstance(n, int) or n < 2:
        raise ValueError(f"a topology needs n >= 2 nodes, got {n!r}")
    if n > MAX_NODES:
        raise ValueError(
            f"a topology on {n} nodes: its exact spectral gap needs a dense eigendecomposition "
            f"of W; allowed: n <= {MAX_NODES}"
        )
    if kind == "file":
        A, W = _read_file(Path(str(arg)), n)
        if W is not None:
            return _finish(spec, "file", W)
    elif kind == "ring":
        A = _ring(n)
    elif kind == "torus":
        A = _torus(n)
    elif kind == "complete":
        A = np.ones((n, n), dtype=bool) & ~np.eye(n, dtype=bool)
    elif kind == "star":
        A = np.zeros((n, n), dtype=bool)
        A[0, 1:] = A[1:, 0] = True
    else:
        A = _erdos_renyi(n, float(arg), seed)
    if not _connected(A):
        raise ValueError(f"--topology {spec}: the graph on {n} nodes is not connected")
    return _finish(spec, mixing, _weights(A, mixing))


def _ring(n: int) -> np.ndarray:
    A = np.zeros((n, n), dtype=bool)
    i = np.arange(n)
    A[i, (i + 1) % n] = A[(i + 1) % n, i] = True
    np.fill_diagonal(A, False)  # n = 2: the two "neighbours" are the same node
    return A


def _torus(n: int) -> np.ndarray:
    r = max((k for k in range(1, math.isqrt(n) + 1) if n % k == 0), default=1)
    c = n // r
    if r < 3:
        raise ValueError(
            f"--topology torus needs n = r x c with r, c >= 3 (a 2-D torus, four neighbours "
            f"each), got n = {n}; use ring, complete, star, er:p=P or file:PATH"
        )
    A = np.zeros((n, n), dtype=bool)
    idx = np.arange(n).reshape(r, c)
    for shift, axis in ((1, 0), (1, 1)):
        nb = np.roll(idx, shift, axis=axis)
        A[idx.ravel(), nb.ravel()] = A[nb.ravel(), idx.ravel()] = True
    return A


def _erdos_renyi(n: int, p: float, seed: int) -> np.ndarray:
    for k in range(ER_DRAWS):
        rng = np.random.default_rng([seed, k, 0xE7])
        upper = np.triu(rng.random((n, n)) < p, 1)
        A = upper | upper.T
        if _connected(A):
            return A
    raise ValueError(
        f"--topology er:p={p:g}: no connected graph on {n} nodes in {ER_DRAWS} draws; raise P"
    )


def _connected(A: np.ndarray) -> bool:
    seen = np.zeros(A.shape[0], dtype=bool)
    seen[0] = True
    frontier = seen.copy()
    while frontier.any():
        frontier = A[frontier].any(axis=0) & ~seen
        seen |= frontier
    return bool(seen.all())


def _weights(A: np.ndarray, mixing: str) -> np.ndarray:
    deg = A.sum(axis=1).astype(np.float64)
    if mixing == "metropolis":
        W = np.where(A, 1.0 / (1.0 + np.maximum(deg[:, None], deg[None, :])), 0.0)
    else:
        W = np.where(A, 1.0 / (1.0 + deg.max()), 0.0)
    W[np.diag_indices_from(W)] = 1.0 - W.sum(axis=1)
    return W


def _read_file(path: Path, n: int) -> tuple[np.ndarray, np.ndarray | None]:
    """``(adjacency, W or None)`` from a text matrix: W when the file holds weights."""
    if not path.is_file():
        raise ValueError(f"--topology file:{path}: file not found")
    try:
        text = path.read_text()
        M = np.loadtxt(text.replace(",", " ").splitlines(), dtype=np.float64, ndmin=2)
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise ValueError(
            f"--topology file:{path}: not a matrix of numbers ({str(e).splitlines()[0]})"
        ) from None
    if M.shape != (n, n):
        raise ValueError(
            f"--topology file:{path}: a {n} x {n} matrix is needed for {n} nodes, got "
            f"{M.shape[0]} x {M.shape[1]}"
        )
    if not np.isfinite(M).all() or (M < 0).any():
        raise ValueError(f"--topology file:{path}: entries must be finite and >= 0")
    if not np.allclose(M, M.T, atol=FILE_TOL, rtol=0):
        raise ValueError(f"--topology file:{path}: the matrix is not symmetric")
    off = M.copy()
    np.fill_diagonal(off, 0.0)
    A = off > 0
    weights = bool(((M > 0) & (M < 1)).any() or np.diag(M).any())
    if not _connected(A):
        raise ValueError(f"--topology file:{path}: the graph on {n} nodes is not connected")
    if not weights:
        return A, None
    rows = M.sum(axis=1)
    if not np.allclose(rows, 1.0, atol=FILE_TOL, rtol=0):
        worst = int(np.argmax(np.abs(rows - 1.0)))
        raise ValueError(
            f"--topology file:{path}: a mixing matrix must be doubly stochastic; row {worst} "
            f"sums to {rows[worst]:.12g} (give a 0/1 adjacency matrix to have the weights built)"
        )
    return A, M


def _finish(spec: str, mixing: str, W: np.ndarray) -> Topology:
    W = 0.5 * (W + W.T)
    lam = np.sort(np.linalg.eigvalsh(W))[::-1]
    second = max(abs(lam[1]), abs(lam[-1])) if lam.size > 1 else 0.0
    rho = float(1.0 - second)
    beta = float(np.abs(1.0 - lam).max())
    n = W.shape[0]
    off = W.copy()
    np.fill_diagonal(off, 0.0)
    neighbours = tuple(tuple(int(j) for j in np.flatnonzero(off[i] > 0)) for i in range(n))
    if rho <= 1e-12:
        raise ValueError(
            f"--topology {spec} with {mixing} weights has spectral gap {rho:.3g}: gossip does "
            "not converge (lambda_n = -1 on a bipartite graph with zero self-weights)"
        )
    return Topology(
        spec=spec,
        mixing=mixing,
        n=n,
        W=torch.from_numpy(W.copy()),
        neighbours=neighbours,
        rho=rho,
        beta=beta,
        eigenvalues=tuple(float(v) for v in lam),
    )
