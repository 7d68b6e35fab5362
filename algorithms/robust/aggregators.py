"""Robust aggregators: ``(n, d)`` messages of every node to one ``(d,)`` vector.

An aggregator ``ARAgg`` is **(delta, c)-robust** (Karimireddy, He & Jaggi 2022, arXiv 2006.09365,
Def. A; Gorbunov, Horváth, Richtárik & Gidel 2022, arXiv 2206.00529, Def. 1.1) when, for any set
``G`` of at least ``(1 - delta) n`` honest inputs and any ``n - |G|`` others,
``E ||ARAgg(x_1..x_n) - xbar_G||^2 <= c delta sigma^2`` with ``xbar_G`` the honest mean and
``sigma^2 = (1/(|G|(|G|-1))) sum_{i,l in G} E ||x_i - x_l||^2``. Coordinate median, the
geometric median and Krum are (delta, c)-robust only after **bucketing** (:func:`bucketing`:
shuffle, average buckets of ``s``, aggregate the bucket means), with ``s = floor(delta_max /
delta)`` and ``c = O(1)`` (Karimireddy et al., Thm I); centred clipping is robust from a good
centre (Karimireddy, He & Jaggi 2021, arXiv 2012.10333). The coordinate-wise trimmed mean
(Yin et al. 2018) trims the number of Byzantine nodes from each side.

Definitions and default parameters follow epfml/byzantine-robust-noniid-optimizer
(``codes/aggregator``: ``CM``, ``RFA(T=8, nu=0.1)``, ``Krum(m=1)``, ``Clipping(tau, n_iter=3)``)
and the bucketing wrapper of ``codes/utils.py``, read, not copied. Everything is vectorised
over the node axis; the only loops are the fixed iteration counts of Weiszfeld and clipping.
"""

from __future__ import annotations

import torch

__all__ = [
    "AGGREGATORS",
    "aggregate",
    "bucketing",
    "centered_clipping",
    "coordinate_median",
    "geometric_median",
    "krum",
    "mean",
    "trimmed_mean",
]


def mean(x: torch.Tensor) -> torch.Tensor:
    """The plain average (not robust: one node moves it arbitrarily far)."""
    return x.mean(dim=0)


def coordinate_median(x: torch.Tensor) -> torch.Tensor:
    """The median of each coordinate; for an even count the mean of the two middle values
    (``numpy.median``'s convention, as the reference code; ``torch.median`` takes the lower)."""
    s, n = x.sort(dim=0).values, x.shape[0]
    return 0.5 * (s[(n - 1) // 2] + s[n // 2])


def trimmed_mean(x: torch.Tensor, b: int) -> torch.Tensor:
    """Coordinate-wise trimmed mean (Yin, Chen, Ramchandran & Bartlett 2018, arXiv 1803.01498,
    Def. 2): per coordinate, the ``b`` largest and ``b`` smallest values dropped and the other
    ``n - 2b`` averaged; ``b`` is cut to ``floor((n - 1)/2)`` so that one value is left."""
    n = x.shape[0]
    b = max(0, min(int(b), (n - 1) // 2))
    return x.sort(dim=0).values[b : n - b].mean(dim=0)


def geometric_median(x: torch.Tensor, iters: int = 8, nu: float = 0.1) -> torch.Tensor:
    """Smoothed Weiszfeld (RFA, Pillutla, Kakade & Harchaoui, arXiv 1912.13445): from ``z = 0``,
    ``iters`` times ``beta_i = 1/max(nu, ||z - x_i||)``, ``z = sum beta_i x_i / sum beta_i``."""
    z = torch.zeros_like(x[0])
    for _ in range(iters):
        beta = 1.0 / torch.linalg.vector_norm(x - z, dim=1).clamp_min(nu)
        z = (beta @ x) / beta.sum()
    return z


def krum(x: torch.Tensor, f: int, m: int = 1) -> torch.Tensor:
    """Krum (Blanchard et al. 2017): node ``i``'s score is the sum of its ``n - f - 2`` smallest
    squared distances to the other nodes; the mean of the ``m`` lowest-scoring messages (ties
    toward the lower index)."""
    n = x.shape[0]
    k = max(1, n - f - 2)
    d2 = torch.cdist(x, x, compute_mode="donot_use_mm_for_euclid_dist").square()
    d2.fill_diagonal_(float("inf"))
    score = d2.topk(min(k, n - 1), dim=1, largest=False).values.sum(dim=1)
    order = torch.sort(score, stable=True).indices[: max(1, min(m, n))]
    return x[order].mean(dim=0)


def centered_clipping(
    x: torch.Tensor, center: torch.Tensor | None, tau: float = 10.0, iters: int = 3
) -> torch.Tensor:
    """Centred clipping (Karimireddy, He & Jaggi 2021, arXiv 2012.10333): from ``v = center``
    (the previous round's output; zero when None), ``iters`` times
    ``v <- v + mean_i (x_i - v) min(1, tau/||x_i - v||)``."""
    v = torch.zeros_like(x[0]) if center is None else center.to(x.dtype)
    for _ in range(iters):
        u = x - v
        scale = (tau / torch.linalg.vector_norm(u, dim=1).clamp_min(1e-300)).clamp(max=1.0)
        v = v + (scale[:, None] * u).mean(dim=0)
    return v


def bucketing(x: torch.Tensor, s: int, perm: torch.Tensor) -> torch.Tensor:
    """Bucket means (Karimireddy et al. 2022, Alg. 1): the rows in the order ``perm``, averaged
    in consecutive buckets of ``s`` (the last one smaller when ``s`` does not divide ``n``):
    ``(ceil(n/s), d)``."""
    n = x.shape[0]
    if s <= 1:
        return x[perm]
    bucket = torch.arange(n, device=x.device) // s
    k = -(-n // s)
    sums = torch.zeros(k, x.shape[1], dtype=x.dtype, device=x.device)
    sums.index_add_(0, bucket, x[perm.to(x.device)])
    counts = torch.bincount(bucket, minlength=k).to(x.dtype)
    return sums / counts[:, None]


#: Aggregator names on the command line (``--aggregator``).
AGGREGATORS = ("mean", "cm", "gm", "krum", "cc", "tm")


def aggregate(
    name: str,
    x: torch.Tensor,
    *,
    f: int = 0,
    bucket: int = 1,
    perm: torch.Tensor | None = None,
    center: torch.Tensor | None = None,
    gm_iters: int = 8,
    gm_nu: float = 0.1,
    krum_m: int = 1,
    cc_tau: float = 10.0,
    cc_iters: int = 3,
) -> torch.Tensor:
    """``ARAgg`` named ``name`` of the rows ``x`` ``(n, d)``, after bucketing by ``bucket``
    with the permutation ``perm`` (the server's draw). ``f``: the number of Byzantine nodes
    Krum assumes and the trimmed mean (``tm``) trims from each side (among the buckets:
    ``ceil(f/s)`` at most can hold one)."""
    if bucket > 1:
        if perm is None:
            raise ValueError("bucketing needs the server's permutation perm")
        x = bucketing(x, bucket, perm)
        f = min(f, x.shape[0])
    if name == "mean":
        return mean(x)
    if name == "cm":
        return coordinate_median(x)
    if name == "gm":
        return geometric_median(x, gm_iters, gm_nu)
    if name == "krum":
        return krum(x, f, krum_m)
    if name == "cc":
        return centered_clipping(x, center, cc_tau, cc_iters)
    if name == "tm":
        return trimmed_mean(x, f)
    raise ValueError(f"aggregator must be one of {', '.join(AGGREGATORS)}, got {name!r}")
