"""Compiled CPU kernels of spherical compression's shared codebook (see :mod:`streams.compiled`
for the set-up).

The torch form draws the ``K x d`` codebook as ``ndtri(u + 2^-54)`` of the stream's uniforms,
scales it by its rows' norms and scores it against the row: whole-array passes of ``K d``
entries each (the uniforms, the shift, ``torch.special.ndtri`` -- most of the time: it evaluates
Cephes' rational approximations one entry at a time --, the norm, the division, the cast, the
product). The kernel draws each codebook row's normals in one pass, the same numbers bit for
bit: the uniform is the stream's (SplitMix64), ``ndtri`` is Cephes' as torch writes it
(``calc_ndtri`` in ATen's ``Math.h``: the central branch ``|y - 1/2| <= 1/2 - e^-2``, a
rational function of ``(y - 1/2)^2``, evaluated for a block of entries at once; the tails
``y < e^-2`` or ``1 - y < e^-2`` gathered, their two logarithms taken one by one with the C
library's ``log``, as torch's, the rest again for the block at once), and the Horner steps
``r x + a`` are fused multiply-adds, as the compiler builds torch's x86 kernels
(``-ffp-contract=fast`` with FMA: :func:`ndtri_ok` checks this against torch once per process;
where it does not hold, the torch form is used). Each codeword is drawn into a scratch row, its
norm added up as it is drawn, in torch's ``vector_norm`` order
(:func:`compressors.compiled_mlmc.norm_form`), and its products with the row written from the
scratch; the scores keep torch's own sum of those products (``(book * unit).sum(dim=2)``, whose
order of additions is torch's), and the chosen codeword is drawn again (``1/K`` more draws)
rather than keeping the ``(m, K, d)`` float64 codebook. The draws are the cost that remains:
two C-library logarithms per tail entry (about a quarter of them) and the central branch's
rational function.
"""

# built against compressors/compiled_mlmc.py 50b37795d01e10b3
# built against streams/compiled.py 9e35d4bc5d1bb3f3

from __future__ import annotations

import math

import numpy as np
import torch

from compressors import compiled_mlmc
from streams.compiled import _GOLDEN, _MIX1, _MIX2, launch, numba

__all__ = ["ENABLED", "codebook", "ndtri_ok", "normals", "products", "serves", "words"]

ENABLED = numba is not None
#: Codebooks with fewer entries take the torch form (the same numbers): a process that never
#: meets a large one never compiles these kernels.
FAST_FROM = 1 << 15
_E2 = 0.13533528323661269189  # exp(-2), as calc_ndtri writes it
_BLOCK = 512  # entries drawn at once: the central branch vectorizes over them


def serves(device: torch.device, dtype: torch.dtype, entries: int) -> bool:
    """Whether the kernels serve a codebook of ``entries`` entries of ``dtype`` on ``device``."""
    return (
        ENABLED
        and device.type == "cpu"
        and dtype in (torch.float32, torch.float64)
        and entries >= max(1, FAST_FROM)
        and ndtri_ok()
    )


def normals(keys: torch.Tensor, K: int, d: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(c, norm)``: ``c = ndtri(u + 2^-54)``, float64 ``(m, K, d)``, ``u`` the ``K d`` uniforms
    of each row's stream ``keys``, and ``torch.linalg.vector_norm(c, dim=2, keepdim=True)``."""
    m = keys.numel()
    c = torch.empty(m, K, d, dtype=torch.float64)
    form = compiled_mlmc.norm_form()
    lanes, fma = form if form is not None else (0, False)
    norm = torch.empty(m, K, 1, dtype=torch.float64)
    launch(_normals, _keys(keys), lanes, fma, c.numpy(), norm.numpy())
    if form is None:
        norm = torch.linalg.vector_norm(c, dim=2, keepdim=True)
    return c, norm


def codebook(keys: torch.Tensor, K: int, d: int, dtype: torch.dtype) -> torch.Tensor:
    """The codebooks ``(c / norm).to(dtype)``, ``(m, K, d)``, of :func:`normals`."""
    c, norm = normals(keys, K, d)
    return (c / norm).to(dtype)


def products(keys: torch.Tensor, K: int, unit: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(prod, norm)``: the codebooks of the streams ``keys`` (:func:`codebook`, in ``unit``'s
    dtype) times the rows ``unit`` (``(m, d)``), ``(m, K, d)``, the products whose sums are the
    codewords' scores; and the codewords' norms, float64 ``(m, K, 1)``. Where torch's order of
    additions for the norm is known, each codeword is drawn into a scratch row, its norm added
    up as it is drawn, and its products written from the scratch: no ``(m, K, d)`` float64
    codebook is kept."""
    m, d = unit.shape
    unit = unit.contiguous()
    form = compiled_mlmc.norm_form()
    if form is None:
        c, norm = normals(keys, K, d)
        out = torch.empty(m, K, d, dtype=unit.dtype)
        launch(_products, c.numpy(), norm.numpy(), unit.numpy(), out.numpy())
        return out, norm
    out = torch.empty(m, K, d, dtype=unit.dtype)
    norm = torch.empty(m, K, 1, dtype=torch.float64)
    workers = max(1, min(torch.get_num_threads(), m * K))  # each draws into its own scratch
    launch(_drawn_products, _keys(keys), *form, workers, unit.numpy(), out.numpy(), norm.numpy())
    return out, norm


def words(keys: torch.Tensor, d: int, j: torch.Tensor, norm: torch.Tensor, dtype: torch.dtype):
    """Codeword ``j[r]`` of each row ``r``'s codebook (:func:`codebook`), ``(m, d)`` in
    ``dtype``, drawn again from the streams ``keys`` (``norm``: the codewords' norms,
    ``(m, K, 1)``, as :func:`products` gave them)."""
    out = torch.empty(keys.numel(), d, dtype=dtype)
    args = (_keys(keys), j.contiguous().numpy(), norm.numpy())
    launch(_words, *args, out.numpy())
    return out


def _keys(keys: torch.Tensor) -> np.ndarray:
    return keys.contiguous().numpy().view(np.uint64)


_OK: list = []


def ndtri_ok() -> bool:
    """Whether the kernel's ``ndtri`` gives torch's bits, checked once per process on probe
    points of every branch: the central one, both tails, the far tails (below ``e^-32``) and
    the ends (0 and 1)."""
    if not _OK:
        g = torch.Generator().manual_seed(0)
        y = torch.rand(20000, generator=g, dtype=torch.float64)
        tiny = torch.exp(-torch.rand(4000, generator=g, dtype=torch.float64) * 700)
        edge = torch.tensor([0.0, 1.0, _E2, 1 - _E2, math.exp(-32), 0.5, 2.0**-54, 1 - 2.0**-53])
        y = torch.cat([y, tiny, 1 - tiny, edge.to(torch.float64)])
        got = torch.empty_like(y)
        ok = False
        if numba is not None:
            _ndtri_probe(y.numpy(), got.numpy())
            ok = torch.equal(got.view(torch.int64), torch.special.ndtri(y).view(torch.int64))
        _OK.append(ok)
    return _OK[0]


if numba is not None:
    _cjit = numba.njit(cache=True, nogil=True, fastmath={"contract"}, error_model="numpy")
    _jit = numba.njit(cache=True, nogil=True, error_model="numpy")
    _pjit = numba.njit(cache=True, nogil=True, parallel=True, error_model="numpy")
    _TWO_M53 = 2.0**-53
    _TWO_M54 = 2.0**-54
    _S2PI = 2.50662827463100050242e0  # sqrt(2 pi)

    @_cjit
    def _poly(z, a0, a1, a2, a3, a4, a5, a6, a7, a8):
        """Cephes' ``polevl`` of degree 8 (Horner from the highest coefficient)."""
        r = a0 * z + a1
        r = r * z + a2
        r = r * z + a3
        r = r * z + a4
        r = r * z + a5
        r = r * z + a6
        r = r * z + a7
        return r * z + a8

    @_cjit
    def _central(y):
        """``calc_ndtri``'s branch for ``e^-2 < y``, ``y <= 1 - e^-2`` (any ``y`` computes)."""
        w = y - 0.5
        w2 = w * w
        p = -5.99633501014107895267e1 * w2 + 9.80010754185999661536e1
        p = p * w2 - 5.66762857469070293439e1
        p = p * w2 + 1.39312609387279679503e1
        p = p * w2 - 1.23916583867381258016e0
        q = _poly(
            w2,
            1.0,
            1.95448858338141759834e0,
            4.67627912898881538453e0,
            8.63602421390890590575e1,
            -2.25462687854119370527e2,
            2.00260212380060660359e2,
            -8.20372256168333339912e1,
            1.59056225126211695515e1,
            -1.18331621121330003142e0,
        )
        return (w + w * (w2 * p / q)) * _S2PI

    @_cjit
    def _tail_end(x, lx, code):
        """``calc_ndtri``'s tails from ``x = sqrt(-2 log y)`` and ``lx = log(x)`` (negated where
        ``code``); both of its rational functions are evaluated and one is kept, so that a block
        of entries vectorizes."""
        x0 = x - lx / x
        z = 1.0 / x
        p1 = _poly(
            z,
            4.05544892305962419923e0,
            3.15251094599893866154e1,
            5.71628192246421288162e1,
            4.40805073893200834700e1,
            1.46849561928858024014e1,
            2.18663306850790267539e0,
            -1.40256079171354495875e-1,
            -3.50424626827848203418e-2,
            -8.57456785154685413611e-4,
        )
        q1 = _poly(
            z,
            1.0,
            1.57799883256466749731e1,
            4.53907635128879210584e1,
            4.13172038254672030440e1,
            1.50425385692907503408e1,
            2.50464946208309415979e0,
            -1.42182922854787788574e-1,
            -3.80806407691578277194e-2,
            -9.33259480895457427372e-4,
        )
        p2 = _poly(
            z,
            3.23774891776946035970e0,
            6.91522889068984211695e0,
            3.93881025292474443415e0,
            1.33303460815807542389e0,
            2.01485389549179081538e-1,
            1.23716634817820021358e-2,
            3.01581553508235416007e-4,
            2.65806974686737550832e-6,
            6.23974539184983293730e-9,
        )
        q2 = _poly(
            z,
            1.0,
            6.02427039364742014255e0,
            3.67983563856160859403e0,
            1.37702099489081330271e0,
            2.16236993594496635890e-1,
            1.34204006088543189037e-2,
            3.28014464682127739104e-4,
            2.89247864745380683936e-6,
            6.79019408009981274425e-9,
        )
        near = x < 8.0  # y > exp(-32)
        r = x0 - (z * p1 / q1 if near else z * p2 / q2)
        return -r if code else r

    @_jit
    def _ndtri_block(y0, out, ty, lx, up, at):
        """``out = calc_ndtri(y0)`` for a block: the central branch for every entry (it
        vectorizes); then the tails (``y < e^-2``, ``y = y0`` or ``1 - y0``, the upper one
        when ``up``) gathered into the scratch ``ty``, ``lx``, ``up``, ``at``, their two
        logarithms taken one by one (the C library's ``log``, as torch's), the rest for all of
        them at once; the ends (``y0`` 0 or 1) last."""
        n = y0.size
        for i in range(n):
            y = y0[i]
            out[i] = _central(1.0 - y if y > 1.0 - _E2 else y)
        nt = 0
        for i in range(n):  # without branches: each entry is written, the tails kept
            y = y0[i]
            hi = y > 1.0 - _E2
            y = 1.0 - y if hi else y
            ty[nt], up[nt], at[nt] = y, hi, i
            nt += not y > _E2
        for t in range(nt):
            lx[t] = math.log(ty[t])
        for t in range(nt):
            ty[t] = math.sqrt(-2.0 * lx[t])
        for t in range(nt):
            lx[t] = math.log(ty[t])
        for t in range(nt):
            ty[t] = _tail_end(ty[t], lx[t], not up[t])
        for t in range(nt):
            y = y0[at[t]]
            out[at[t]] = ty[t] if 0.0 < y < 1.0 else (-np.inf if y == 0.0 else np.inf)

    @_jit
    def _ndtri_probe(y, out):
        n = y.size
        _ndtri_block(y, out, np.empty(n), np.empty(n), np.empty(n, np.bool_), np.empty(n, np.int64))

    @_jit
    def _mix(z):
        z = (z ^ (z >> np.uint64(30))) * _MIX1
        z = (z ^ (z >> np.uint64(27))) * _MIX2
        return z ^ (z >> np.uint64(31))

    @_jit
    def _draw(key, start, out, y, ty, lx, up, at):
        """``out = ndtri(u + 2^-54)``, ``u`` the stream ``key``'s uniforms ``start + 1 ..``
        (53 bits each, as ``Streams.uniform``), a block at a time (scratch ``y .. at``)."""
        for a in range(0, out.size, _BLOCK):
            blk = out[a : a + _BLOCK]
            n = blk.size
            for i in range(n):
                z = key + np.uint64(start + a + i + 1) * _GOLDEN
                y[i] = np.float64(_mix(z) >> np.uint64(11)) * _TWO_M53 + _TWO_M54
            _ndtri_block(y[:n], blk, ty, lx, up, at)

    @_jit
    def _scratch():
        y, ty, lx = np.empty(_BLOCK), np.empty(_BLOCK), np.empty(_BLOCK)
        return y, ty, lx, np.empty(_BLOCK, np.bool_), np.empty(_BLOCK, np.int64)

    @_jit
    def _normal_row(key, start, lanes, fma, out):
        """:func:`_draw` of a whole codeword, and its norm in the form ``(lanes, fma)`` of
        :func:`compressors.compiled_mlmc.norm_form` (``lanes`` 0: not taken)."""
        d = out.size
        y, ty, lx, up, at = _scratch()
        main = d - d % lanes if lanes else 0
        acc = np.zeros(max(lanes, 1))
        for a in range(0, d, _BLOCK):  # _BLOCK is a multiple of the lanes
            blk = out[a : a + _BLOCK]
            _draw(key, start + a, blk, y, ty, lx, up, at)
            if lanes:
                compiled_mlmc._lanes_add(acc, blk[: max(0, min(blk.size, main - a))])
        return compiled_mlmc._lanes_end(acc, fma, out[main:]) if lanes else 0.0

    @_pjit
    def _normals(keys, lanes, fma, c, norm):
        m, K, d = c.shape
        for t in numba.prange(m * K):
            r, k = t // K, t % K
            norm[r, k, 0] = _normal_row(keys[r], k * d, lanes, fma, c[r, k])

    @_jit
    def _products_row(c, n, unit, out):
        for i in range(out.size):
            out[i] = out.dtype.type(c[i] / n) * unit[i]

    @_pjit
    def _products(c, norm, unit, out):
        m, K, d = c.shape
        for t in numba.prange(m * K):
            r, k = t // K, t % K
            _products_row(c[r, k], norm[r, k, 0], unit[r], out[r, k])

    @_pjit
    def _drawn_products(keys, lanes, fma, workers, unit, out, norm):
        m, K, d = out.shape
        for w in numba.prange(workers):
            c = np.empty(d)  # one codeword at a time, reused
            for t in range(w, m * K, workers):
                r, k = t // K, t % K
                n = _normal_row(keys[r], k * d, lanes, fma, c)
                norm[r, k, 0] = n
                _products_row(c, n, unit[r], out[r, k])

    @_pjit
    def _words(keys, j, norm, out):
        m, d = out.shape
        chunk = 1 << 16
        n = (d + chunk - 1) // chunk
        for t in numba.prange(m * n):
            r, lo = t // n, (t % n) * chunk
            hi = min(d, lo + chunk)
            c = np.empty(hi - lo)
            y, ty, lx, up, at = _scratch()
            _draw(keys[r], j[r] * d + lo, c, y, ty, lx, up, at)
            nr = norm[r, j[r], 0]
            row = out[r, lo:hi]
            for i in range(row.size):
                row[i] = row.dtype.type(c[i] / nr)
