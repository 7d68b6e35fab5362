"""Writes :mod:`problems.glm_lanes_kernels`: the kernels of :mod:`problems.glm_lanes`, one per
width ``W`` in :data:`problems.glm_lanes.WIDTHS`, each with ``W`` scalar accumulators written
out. ``python -m problems.glm_lanes_gen`` rewrites the file; a test checks that it is current.

The file names the digest of :mod:`problems.glm_kernels`, whose ``phi'`` and loss its kernels
inline, in the stamp lines of :mod:`streams.stamps`: numba's cache of a function is keyed by its
own file only, so after a change there the kernels would be loaded as compiled before. A change
of ``glm_kernels.py`` makes the file stale (the test fails) until it is written again, which
gives it a new stamp and numba recompiles."""

from __future__ import annotations

import sys
from pathlib import Path

from problems.glm_lanes import GROUP, WIDTHS
from streams import stamps

__all__ = ["KERNELS", "source"]

KERNELS = Path(__file__).with_name("glm_lanes_kernels.py")

_HEAD = '''"""The kernels of :mod:`problems.glm_lanes`, one per width: written by
:mod:`problems.glm_lanes_gen` (``python -m problems.glm_lanes_gen``); do not edit."""

# fmt: off
from __future__ import annotations

import numba
import numpy as np

from problems.glm_kernels import _dphi_points, _phi_points, _u

_jit = numba.njit(cache=True, nogil=True, error_model="numpy", fastmath={"contract"})
_pjit = numba.njit(cache=True, nogil=True, error_model="numpy", fastmath={"contract"},
                   parallel=True)


@_jit
def _dphi_lanes(code, Zc, bb, n, inv):
    for i in range(n):
        Zc[i] = _dphi_points(code, Zc[i], bb[i]) * inv


@_jit
def _loss_lanes(code, Zc, bb, n, inv, W, Lc, lsum):
    for i in range(n):
        Lc[i] = _phi_points(code, Zc[i], bb[i]) * inv
    for i in range(0, n, W):
        for r in range(W):
            lsum[r] += Lc[i + r]
'''


def _kernel(W: int) -> str:
    G = GROUP
    L = range(W)

    def ind(n: int) -> str:
        return " " * n

    def walk(n: int, acc: str, seqs: list[int], idx: str, val: str, src: str,
             unit: bool) -> list[str]:  # fmt: skip
        """Sequences ``s{g}..e{g}`` (``g`` in ``seqs``) of entries ``idx[p]`` (times ``val[p]``
        unless ``unit``) summed lane by lane from ``src[idx[p] * W + r]`` into ``{acc}{g}_{r}``:
        together over their common length (independent chains for the out-of-order core), then
        each sequence's rest alone; each sum takes its entries in storage order."""
        v = "" if unit else "v * "
        if len(seqs) == 1:
            g = seqs[0]
            o = [
                ind(n) + f"for p in range(_u(s{g}), _u(e{g})):",
                ind(n + 4) + f"o = _u({idx}[p]) * _u({W})",
            ]
            o += [] if unit else [ind(n + 4) + f"v = {val}[p]"]
            return o + [ind(n + 4) + f"{acc}{g}_{r} += {v}{src}[o + _u({r})]" for r in L]
        o = [
            ind(n) + "nc = min(" + ", ".join(f"e{g} - s{g}" for g in seqs) + ")",
            ind(n) + "for t in range(_u(nc)):",
        ]
        for g in seqs:
            o += [ind(n + 4) + f"o{g} = _u({idx}[_u(s{g}) + t]) * _u({W})"]
            o += [] if unit else [ind(n + 4) + f"v{g} = {val}[_u(s{g}) + t]"]
        vg = (lambda g: "") if unit else (lambda g: f"v{g} * ")
        o += [ind(n + 4) + f"{acc}{g}_{r} += {vg(g)}{src}[o{g} + _u({r})]" for g in seqs for r in L]
        for g in seqs:
            o += [ind(n) + f"s{g} += nc"] + walk(n, acc, [g], idx, val, src, unit)
        return o

    def both(n: int, seqs: list[int], acc: str, idx: str, val: str, src: str) -> list[str]:
        return (
            [ind(n) + "if unit:"]
            + walk(n + 4, acc, seqs, idx, val, src, True)
            + [ind(n) + "else:"]
            + walk(n + 4, acc, seqs, idx, val, src, False)
        )

    def rows(n: int, seqs: list[int]) -> list[str]:
        o = []
        for g in seqs:
            o += [
                ind(n) + f"q{g} = rperm[lo + j + {g}]",
                ind(n) + f"r{g} = rows[lo + q{g}]",
                ind(n) + f"s{g}, e{g} = indptr[r{g}], indptr[r{g} + 1]",
            ]
            o += [ind(n) + f"z{g}_{r} = zero" for r in L]
        o += both(n, seqs, "z", "indices", "values", "PT")
        for g in seqs:
            o += [ind(n) + f"w = q{g} * {W}", ind(n) + f"bj = b[r{g}]"]
            o += [ind(n) + f"Zc[w + {r}] = z{g}_{r}" for r in L]
            o += [ind(n) + f"bb[w + {r}] = bj" for r in L]
        return o + [ind(n) + f"j += {len(seqs)}"]

    def cols(n: int, seqs: list[int]) -> list[str]:
        o = []
        for g in seqs:
            o += [
                ind(n) + f"c{g} = _u(ccol[k + {g}]) * _u({W})",
                ind(n) + f"s{g}, e{g} = cptr[k + {g}], cptr[k + {g} + 1]",
            ]
            o += [ind(n) + f"a{g}_{r} = g[c{g} + _u({r})]" for r in L]
        o += both(n, seqs, "a", "crow", "cval", "Zc")
        for g in seqs:
            o += [ind(n) + f"g[c{g} + _u({r})] = a{g}_{r}" for r in L]
        return o + [ind(n) + f"k += {len(seqs)}"]

    def groups(sig: str, at: str, start: str, end: str, body) -> list[str]:
        """A function taking its sequences ``G`` at a time, then one by one."""
        head = ["", "", "@_jit", sig, f"    {at} = {start}", f"    while {at} + {G} <= {end}:"]
        return head + body(8, list(range(G))) + [f"    while {at} < {end}:"] + body(8, [0])

    out = groups(f"def _margins_{W}(indptr, indices, values, unit, PT, b, rows, rperm, lo, hi, "
                 "zero, Zc, bb):", "j", "0", "hi - lo", rows)  # fmt: skip
    out += groups(f"def _columns_{W}(unit, ccol, cptr, crow, cval, k0, k1, Zc, g):", "k", "k0",
                  "k1", cols)  # fmt: skip
    out += [
        "",
        "",
        "@_pjit",
        f"def points_{W}(indptr, indices, values, unit, b, rows, ptr, plan, PT, code, with_loss, "
        "zero,",
        f"{' ' * (12 + len(str(W)))}reg, out, lout):",
        "    R, d = reg.shape",
        "    nch, cpos, kp, ccol, cptr, crow, cval, rperm = plan",
        "    most = 0",
        "    for c in range(cpos.size - 1):",
        "        most = max(most, cpos[c + 1] - cpos[c])",
        "    for i in numba.prange(ptr.size - 1):",
        f"        Zc = np.empty(most * {W}, dtype=PT.dtype)",
        f"        bb = np.empty(most * {W}, dtype=PT.dtype)",
        f"        Lc = np.empty(most * {W}, dtype=np.float64)",
        f"        g = np.empty(d * {W}, dtype=PT.dtype)",
        "        g[:] = zero",
        "        lsum = lout[i]",
        "        lsum[:] = zero",
        "        inv = 1.0 / (ptr[i + 1] - ptr[i])",
        "        for c in range(nch[i], nch[i + 1]):",
        "            lo, hi = cpos[c], cpos[c + 1]",
        f"            _margins_{W}(indptr, indices, values, unit, PT, b, rows, rperm, lo, hi,",
        f"{' ' * (22 + len(str(W)))}zero, Zc, bb)",
        f"            n = (hi - lo) * {W}",
        "            if with_loss:",
        f"                _loss_lanes(code, Zc, bb, n, inv, {W}, Lc, lsum)",
        "            _dphi_lanes(code, Zc, bb, n, inv)",
        f"            _columns_{W}(unit, ccol, cptr, crow, cval, kp[c], kp[c + 1], Zc, g)",
        "        for r in range(R):",
        "            o, rr = out[r, i], reg[r]",
        "            for k in range(d):",
        f"                o[k] = g[_u(k) * _u({W}) + _u(r)] + rr[k]",
    ]
    return "\n".join(out) + "\n"


def source() -> str:
    """The text of :mod:`problems.glm_lanes_kernels`."""
    text = _HEAD + "".join(_kernel(W) for W in WIDTHS)
    return stamps.stamp_as(KERNELS.resolve().relative_to(stamps.ROOT).as_posix(), text)


if __name__ == "__main__":
    KERNELS.write_text(source())
    print(f"wrote {KERNELS}", file=sys.stderr)
    sys.exit(0)
