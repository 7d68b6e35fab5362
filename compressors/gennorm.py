"""GenNorm lossless coding: a uniform stochastic quantizer whose indices are Huffman coded with
probabilities from a generalized normal law fitted to the row."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import torch

from compressors import compiled_gennorm as compiled
from compressors import compiled_shared_scale
from compressors.base import Compressor, Packet, check_float_bits, work_dtype
from compressors.bitpack import BitReader, BitWriter
from compressors.dithering import QSGD
from streams import Streams

BETA_RANGE = (0.1, 20.0)  # shapes the fit and the code accept (Laplace 1, normal 2)
SCALE_RANGE = (2.0**-30, 2.0**30)  # the scale in quantizer steps
DEFAULT = (2.0, 1.0)  # the code's parameters for a row whose fit is not finite
WEIGHT_ONE = 2.0**40  # Huffman weights: probabilities in units of 2^-40, at least 1
LJ = 62  # canonical codewords left-justified to this many bits (every length is at most 60)
_BISECT = 45


#: the ``k`` of ``k / b`` in the moment ratio, one row each
_KS = torch.tensor([[2.0], [1.0], [3.0]], dtype=torch.float64)


def fit_gennorm(y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Shape ``beta`` and scale ``alpha`` of a zero-mean generalized normal law fitted to each
    row of ``y`` (float64 ``(m, d)``) by the method of moments: ``beta`` solves
    ``Gamma(2/b)^2 / (Gamma(1/b) Gamma(3/b)) = (mean |y|)^2 / mean y^2`` (bisection in
    ``log b`` over :data:`BETA_RANGE`, clamped at its ends), then
    ``alpha = mean|y| Gamma(1/b) / Gamma(2/b)``. Rows of zeros give NaN."""
    return _fit_moments(y.abs().mean(dim=1), (y * y).mean(dim=1))


def _fit_moments(m1: torch.Tensor, m2: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`fit_gennorm` from the rows' ``mean |y|`` and ``mean y^2``. On a CPU in float64 the
    bisection's arithmetic runs in NumPy on the tensors' memory, with torch's own ``exp`` and
    ``lgamma``: the same IEEE operations, so the same numbers. All in torch, its 45 steps made
    about 700 calls on a few entries, some 2 us each (one row: the fit 1.54 -> 0.74 ms; 20 x 68
    float32 rows: GenNorm's encode and decode 2.19 -> 1.40 ms)."""
    target = m1 * m1 / m2
    if target.device.type == "cpu" and target.dtype == torch.float64:
        lo, hi = _bisect(target.numpy(), np, _numpy_of(torch.exp), _numpy_of(torch.lgamma),
                         _KS.numpy())  # fmt: skip
        lo, hi = torch.from_numpy(lo), torch.from_numpy(hi)
    else:
        ks = _KS.to(target.device, target.dtype)
        lo, hi = _bisect(target, torch, torch.exp, torch.lgamma, ks)
    beta = torch.exp(0.5 * (lo + hi))
    beta = torch.where(torch.isfinite(target), beta, torch.nan)
    alpha = m1 * torch.exp(torch.lgamma(1 / beta) - torch.lgamma(2 / beta))
    return beta, alpha


def _bisect(target, xp, exp, lgamma, ks) -> tuple:
    """The bisection of :func:`fit_gennorm` in ``log b``: the ends ``(lo, hi)`` after
    :data:`_BISECT` halvings, ``target`` and the ends arrays of ``xp`` (NumPy or torch), ``exp``
    and ``lgamma`` torch's on them. The moment ratio is ``exp(2 lgamma(2 / b) - lgamma(1 / b) -
    lgamma(3 / b))``, with ``k / b`` as torch's reflected division makes it, ``reciprocal(b) *
    k`` (``ks``: the three ``k`` as a column)."""
    lo = xp.full_like(target, math.log(BETA_RANGE[0]))
    hi = xp.full_like(target, math.log(BETA_RANGE[1]))
    for _ in range(_BISECT):
        mid = 0.5 * (lo + hi)
        L = lgamma(1.0 / exp(mid) * ks)
        below = exp(2 * L[0] - L[1] - L[2]) < target
        lo = xp.where(below, mid, lo)
        hi = xp.where(below, hi, mid)
    return lo, hi


def _numpy_of(fn):
    """Torch's elementwise ``fn`` on a NumPy array, through views of its memory."""
    return lambda a: fn(torch.from_numpy(a)).numpy()


def code_params(beta: torch.Tensor, scale: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The parameters the code is built from, float64: the transmitted ones clamped to
    :data:`BETA_RANGE` and :data:`SCALE_RANGE`, :data:`DEFAULT` where not finite. Sender and
    receiver both build the code from these."""
    b = beta.to(torch.float64)
    a = scale.to(torch.float64)
    ok = torch.isfinite(b) & torch.isfinite(a)
    b = torch.where(ok, b, DEFAULT[0]).clamp(*BETA_RANGE)
    a = torch.where(ok, a, DEFAULT[1]).clamp(*SCALE_RANGE)
    return b, a


def index_probs(beta: torch.Tensor, scale: torch.Tensor, s: int) -> torch.Tensor:
    """Probabilities of the indices ``k = -s..s`` (columns ``0..2s``) that stochastic rounding
    to the integers gives for ``Y ~ GenNorm(0, scale, beta)`` with the tails beyond ``±s`` sent
    to ``±s``: float64 ``(m, 2s + 1)``.

    With ``G(y) = E (Y - y)_+ = (m1 Q(2/b, z) - y Q(1/b, z)) / 2`` for ``y >= 0``
    (``z = (y/scale)^b``, ``Q`` the regularized upper incomplete gamma function,
    ``m1 = E|Y| = scale Gamma(2/b) / Gamma(1/b)``): ``P(0) = 1 + 2 G(1) - 2 G(0)``,
    ``P(±k) = G(k + 1) - 2 G(k) + G(k - 1)`` for ``0 < k < s`` (the expectation of the
    rounding's tent ``(1 - |Y - k|)_+``) and ``P(±s) = G(s - 1) - G(s)``."""
    b = beta[:, None]
    a = scale[:, None]
    y = torch.arange(s + 1, dtype=torch.float64, device=beta.device)[None, :]
    z = (y / a) ** b
    m1 = a * torch.exp(torch.lgamma(2 / b) - torch.lgamma(1 / b))
    G = 0.5 * (m1 * torch.special.gammaincc(2 / b, z) - y * torch.special.gammaincc(1 / b, z))
    half = torch.empty(beta.shape[0], s + 1, dtype=torch.float64, device=beta.device)
    half[:, 0] = 1 + 2 * G[:, 1] - 2 * G[:, 0]
    if s > 1:
        half[:, 1:s] = G[:, 2:] - 2 * G[:, 1:s] + G[:, : s - 1]
    half[:, s] = G[:, s - 1] - G[:, s]
    half = half.clamp(0.0, 1.0)
    return torch.cat([half.flip(1)[:, :s], half], dim=1)


def huffman_lengths(weights: torch.Tensor) -> torch.Tensor:
    """Huffman code lengths of ``K`` symbols per row from int64 weights ``(m, K)``, all rows at
    once: ``K - 1`` merges of the two lightest nodes (ties to the lower node index, leaves
    before merged nodes), then each leaf's depth. int64 ``(m, K)``."""
    m, K = weights.shape
    dev = weights.device
    big = torch.iinfo(torch.int64).max
    w = torch.full((m, 2 * K - 1), big, dtype=torch.int64, device=dev)
    w[:, :K] = weights
    parent = torch.zeros(m, 2 * K - 1, dtype=torch.int64, device=dev)
    rows = torch.arange(m, device=dev)
    for i in range(K - 1):
        j1 = torch.argmin(w, dim=1)  # the first index among equal minima
        w1 = w[rows, j1]
        w[rows, j1] = big
        j2 = torch.argmin(w, dim=1)
        w2 = w[rows, j2]
        w[rows, j2] = big
        w[:, K + i] = w1 + w2
        parent[rows, j1] = K + i
        parent[rows, j2] = K + i
    root = 2 * K - 2
    parent[:, root] = root
    # depth = ancestors up to the root, by pointer doubling: log2(2K) gathers
    depth = torch.ones_like(parent)
    depth[:, root] = 0
    for _ in range((2 * K - 1).bit_length()):
        depth = depth + torch.gather(depth, 1, parent)
        parent = torch.gather(parent, 1, parent)
    return depth[:, :K]


def canonical(lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The canonical prefix code of the lengths ``(m, K)``: codewords in order of (length,
    symbol), each the running Kraft sum. Returns ``(codes (m, K) by symbol, order (m, K): the
    symbols in canonical order, starts (m, K): their codewords left-justified to LJ bits)``."""
    K = lengths.shape[1]
    sym = torch.arange(K, device=lengths.device)
    order = torch.argsort(lengths * K + sym, dim=1)
    sl = torch.gather(lengths, 1, order)
    kraft = torch.ones_like(sl) << (LJ - sl)
    starts = torch.cumsum(kraft, dim=1) - kraft
    codes = torch.zeros_like(lengths).scatter_(1, order, starts >> (LJ - sl))
    return codes, order, starts


@dataclass(frozen=True)
class GenNorm(Compressor):
    """GenNorm lossless coding of quantized gradients (Chen, Hernandez, Huang & Rini, "DNN
    gradient lossless compression: Can GenNorm be the answer?", ICC 2022, arXiv 2111.07599).
    Only the abstract could be read: gradient entries fit a generalized normal (GenNorm) law
    better than a normal one, and Huffman coding the quantized gradient with the GenNorm model's
    probabilities compresses it better. The quantizer, the fit and the layout below are this
    library's choices, not the paper's.

    Quantizer: unbiased stochastic rounding to a uniform grid of ``2 s + 1`` points, step
    ``M / s`` with ``M = max_j |x_j|``: ``C(x) = M sign(x) xi / s``, ``xi_j`` the stochastic
    rounding of ``s |x_j| / M`` (QSGD with the max norm, :class:`~compressors.dithering.QSGD`
    ``norm=inf``, whose draws these are). Index ``k_j = sign(x_j) xi_j`` in ``-s..s``.

    Fit: a zero-mean GenNorm law, ``f(y) ∝ exp(-(|y| / alpha)^beta)``, to the row in quantizer
    steps, ``y = s x / M``, by the method of moments (:func:`fit_gennorm`: ``beta`` from the
    ratio ``(mean|y|)^2 / mean y^2``, then ``alpha``). ``beta`` and ``alpha`` (in steps) are sent
    as floats, with ``M``.

    Code: the probability of each index under the fitted law and the stochastic rounding
    (:func:`index_probs`, closed form through incomplete gamma functions), as integer weights
    (units of ``2^-40``, at least 1), give a Huffman code (:func:`huffman_lengths`, ties broken
    by index) in canonical form (:func:`canonical`); the ``d`` indices travel as its codewords,
    most significant bit first. The receiver rebuilds the same code from the transmitted
    ``beta`` and ``alpha`` (as stored, clamped to the ranges of :func:`code_params`).

    Class: unbiased, the constant of QSGD with the max norm and ``s`` levels: ``omega =
    min((d - 1) / (4 s^2), sqrt(d) / s)``, ``(sqrt(d) - 1) / 2`` for ``s = 1``; the coding is
    lossless, so the values are QSGD's.

    Bits: ``3 float_bits`` (``M``, ``beta``, ``alpha``) plus the lengths of the ``d`` codewords
    actually sent, counted from the code built for the row: a variable-size payload of at most
    ``3 float_bits + 2 s d`` bits (a Huffman code on ``2 s + 1`` symbols has no codeword longer
    than ``2 s``); its mean is not assumed (``expected_bits`` is None). On the wire the three
    floats travel in the dtype they are stored in (the input's). A row with a NaN or inf entry
    has a non-finite ``M`` and indices 0; it decodes non-finite. Building the code on another
    platform assumes the same float64 results of the incomplete gamma functions at the same
    inputs up to the weights' rounding.

    Args:
        levels: ``s``, positive grid points on each side (``1 <= s <= 30``).
        float_bits: wire width of ``M``, ``beta`` and ``alpha`` each.
    """

    unbiased: ClassVar[bool] = True
    fixed_size: ClassVar[bool] = False

    levels: int = 8
    float_bits: int = 32

    def __post_init__(self) -> None:
        check_float_bits(self.float_bits)
        s = self.levels
        if isinstance(s, bool) or not isinstance(s, int) or not 1 <= s <= 30:
            raise ValueError(f"levels must be an integer in [1, 30], got levels={s!r}")

    @property
    def _quantizer(self) -> QSGD:
        return QSGD(levels=self.levels, norm="inf", float_bits=self.float_bits)

    # ---------------------------------------------------------------- theory and bits
    def omega(self, d: int) -> float:
        return self._quantizer.omega(d)

    def worst_case(self, d: int) -> torch.Tensor | None:
        return self._quantizer.worst_case(d)

    def expected_bits(self, d: int) -> float | None:
        return None

    def max_bits(self, d: int) -> int:
        return 3 * self.float_bits + 2 * self.levels * d

    @classmethod
    def examples(cls) -> list[Compressor]:
        return [cls(), cls(levels=1), cls(levels=30)]

    # ---------------------------------------------------------------- the code
    def code(self, beta: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
        """Huffman code lengths ``(m, 2 s + 1)`` for the transmitted parameters."""
        b, a = code_params(beta, scale)
        p = index_probs(b, a, self.levels)
        weights = torch.round(p * WEIGHT_ONE).to(torch.int64).clamp(min=1)
        if compiled.ENABLED and weights.device.type == "cpu":
            return compiled.huffman_lengths(weights)  # the same lengths, in one call
        return huffman_lengths(weights)

    def symbols(self, packet: Packet) -> torch.Tensor:
        """Each coordinate's index ``k + s`` in ``0..2s``, int64 ``(m, d)``."""
        f = packet.fields
        level = f["levels"].to(torch.int64)
        return self.levels + torch.where(f["signs"], -level, level)

    def fit(self, x_i: torch.Tensor, norm: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(beta, alpha)`` of each row, alpha in quantizer steps, in the input's dtype."""
        n = norm.to(torch.float64)
        y = x_i.to(torch.float64) * (self.levels / torch.where(n > 0, n, 1.0))[:, None]
        beta, alpha = fit_gennorm(y)
        return beta.to(x_i.dtype), alpha.to(x_i.dtype)

    def _encode(self, x_i: torch.Tensor, rng: Streams) -> Packet:
        x = x_i.to(work_dtype(x_i.dtype))
        if compiled.usable(x):
            return self._encode_compiled(x_i, x, rng)
        q = self._quantizer.encode(x_i, rng).fields
        levels = q["levels"]
        signs = q["signs"] & (levels > 0)
        beta, alpha = self.fit(x_i, q["norm"])
        sym = self.levels + torch.where(signs, -levels.to(torch.int64), levels.to(torch.int64))
        lengths = self.code(beta, alpha)
        nbits = 3 * self.float_bits + torch.gather(lengths, 1, sym).sum(dim=1)
        return self._made(x_i, nbits, q["norm"], signs, levels, beta, alpha)

    def _encode_compiled(self, x_i: torch.Tensor, x: torch.Tensor, rng: Streams) -> Packet:
        """:meth:`_encode` with the quantizer, the fit's means and the symbols' counts in one
        pass (:func:`compressors.compiled_gennorm.encode`): the same packet."""
        norm = compiled_shared_scale.max_abs(x)  # QSGD's max norm, the same bits
        n = norm.to(torch.float64)
        factor = self.levels / torch.where(n > 0, n, 1.0)  # as in fit
        signs, levels, counts, m1, m2 = compiled.encode(x, norm, factor, self.levels, rng.keys)
        if bool(torch.isfinite(n).all()):
            beta, alpha = (v.to(x_i.dtype) for v in _fit_moments(m1, m2))
        else:  # a row with a NaN or inf entry: torch's means (their NaN bits too)
            beta, alpha = self.fit(x_i, norm)
        nbits = 3 * self.float_bits + (counts * self.code(beta, alpha)).sum(dim=1)
        return self._made(x_i, nbits, norm, signs, levels, beta, alpha)

    def _made(self, x_i, nbits, norm, signs, levels, beta, alpha) -> Packet:
        return self._packet(
            x_i,
            nbits,
            {"norm", "signs", "levels", "beta", "alpha"},
            norm=norm,
            signs=signs,
            levels=levels,
            beta=beta,
            alpha=alpha,
        )

    def _decode(self, packet: Packet) -> torch.Tensor:
        return self._quantizer._decode(packet)

    # ---------------------------------------------------------------- the wire form
    def _write(self, packet: Packet, w: BitWriter) -> None:
        f = packet.fields
        for name in ("norm", "beta", "alpha"):
            w.floats(f[name][:, None])
        lengths = self.code(f["beta"], f["alpha"])
        codes = canonical(lengths)[0]
        sym = self.symbols(packet)
        length = torch.gather(lengths, 1, sym)
        word = torch.gather(codes, 1, sym)
        off = torch.cumsum(length, dim=1) - length

        def write(buf: torch.Tensor, start: torch.Tensor) -> None:
            pos = start[:, None] + off
            for t in range(int(length.max()) if length.numel() else 0):
                on = t < length
                bit = (word >> (length - 1 - t).clamp(min=0)) & 1
                rows, cols = on.nonzero(as_tuple=True)
                buf[rows, pos[rows, cols] + t] = bit[rows, cols].to(torch.uint8)

        w.piece(length.sum(dim=1), write)

    def _read(self, rd: BitReader, like: Packet, nodes: torch.Tensor) -> Packet:
        d, r, s = like.d, rd.r, self.levels
        f = like.fields
        norm = rd.floats(1, f["norm"].dtype)[:, 0]
        beta = rd.floats(1, f["beta"].dtype)[:, 0]
        alpha = rd.floats(1, f["alpha"].dtype)[:, 0]
        lengths = self.code(beta, alpha)
        _, order, starts = canonical(lengths)
        sorted_len = torch.gather(lengths, 1, order)
        bits = rd.bits
        T = bits.shape[1]
        dev = rd.device
        Lm = int(lengths.max()) if r else 0
        # the next Lm bits at every position, as an integer left-justified to LJ bits
        padded = torch.cat([bits, torch.zeros(r, Lm, dtype=bits.dtype, device=dev)], dim=1)
        window = torch.zeros(r, T, dtype=torch.int64, device=dev)
        for t in range(Lm):
            window |= padded[:, t : t + T].to(torch.int64) << (LJ - 1 - t)
        idx = torch.searchsorted(starts, window, right=True) - 1  # canonical index there
        length_at = torch.gather(sorted_len, 1, idx)
        sym_at = torch.gather(order, 1, idx)
        # the chain of codeword starts from the cursor, by pointer doubling (log2 d gathers)
        step = torch.cat(
            [
                (torch.arange(T, device=dev) + length_at).clamp(max=T),
                torch.full((r, 1), T, device=dev),
            ],
            dim=1,
        )
        c = torch.arange(d, device=dev)
        cur = rd.cursor[:, None].expand(r, d).clone()
        jump = step
        for k in range(max(d - 1, 0).bit_length()):
            cur = torch.where(((c >> k) & 1).bool(), jump.gather(1, cur), cur)
            jump = jump.gather(1, jump)
        if r and d and bool((cur >= rd.limit[:, None]).any()):
            raise ValueError(f"a row holds fewer than d={d} codewords: wrong width or corrupt data")
        if d:
            last = cur[:, -1]
            end = last + torch.gather(length_at, 1, last[:, None].clamp(max=T - 1))[:, 0]
        else:
            end = rd.cursor
        start = rd.cursor
        rd.advance(end)
        sym = torch.gather(sym_at, 1, cur.clamp(max=T - 1)) if d else cur
        levels = (sym - s).abs().to(f["levels"].dtype)
        signs = sym < s
        nbits = 3 * self.float_bits + (end - start)
        return self._rebuilt(
            like, r, nbits, norm=norm, signs=signs, levels=levels, beta=beta, alpha=alpha
        )
