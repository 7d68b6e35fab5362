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

from problems.glm_lanes import WIDTHS
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
    L = range(W)

    def lines(fmt: str, indent: int) -> list[str]:
        return [" " * indent + fmt.format(r=r) for r in L]

    def entries(unit: str, valued: str) -> list[str]:
        """The loop over a row's stored entries, ``unit`` per lane on binary rows, ``valued``
        (with the entry's value ``v``) otherwise."""
        head = [" " * 16 + "for p in range(_u(p0), _u(p1)):"]
        head += [" " * 20 + f"o = _u(indices[p]) * _u({W})"]
        return [
            "            if unit:", *head, *lines(unit, 20),
            "            else:", *head, "                    v = values[p]", *lines(valued, 20),
        ]  # fmt: skip

    out = [
        "",
        "",
        "@_jit",
        f"def _node_{W}(indptr, indices, values, unit, PT, b, rows, lo, hi, code, with_loss, "
        "zero, Zc,",
        f"{' ' * (10 + len(str(W)))}bb, Lc, g, lsum):",
        "    inv = 1.0 / (hi - lo)",
        f"    chunk = bb.size // {W}",
        "    for c0 in range(lo, hi, chunk):",
        "        c1 = min(c0 + chunk, hi)",
        "        for j in range(c0, c1):",
        "            row = rows[j]",
        "            p0, p1 = indptr[row], indptr[row + 1]",
    ]
    out += lines("z{r} = zero", 12)
    out += entries("z{r} += PT[o + _u({r})]", "z{r} += v * PT[o + _u({r})]")
    out += [f"            q = (j - c0) * {W}", "            bj = b[row]"]
    out += lines("Zc[q + {r}] = z{r}", 12)
    out += lines("bb[q + {r}] = bj", 12)
    out += [f"        n = (c1 - c0) * {W}", "        if with_loss:"]
    out += [f"            _loss_lanes(code, Zc, bb, n, inv, {W}, Lc, lsum)"]
    out += ["        _dphi_lanes(code, Zc, bb, n, inv)", "        for j in range(c0, c1):"]
    out += ["            row = rows[j]", "            p0, p1 = indptr[row], indptr[row + 1]"]
    out += [f"            q = (j - c0) * {W}"]
    out += lines("z{r} = Zc[q + {r}]", 12)
    out += entries("g[o + _u({r})] += z{r}", "g[o + _u({r})] += v * z{r}")
    out += [
        "",
        "",
        "@_pjit",
        f"def points_{W}(indptr, indices, values, unit, b, rows, ptr, PT, code, with_loss, zero, "
        "chunk,",
        f"{' ' * (12 + len(str(W)))}reg, out, lout):",
        "    R, d = reg.shape",
        "    for i in numba.prange(ptr.size - 1):",
        f"        Zc = np.empty(chunk * {W}, dtype=PT.dtype)",
        f"        bb = np.empty(chunk * {W}, dtype=PT.dtype)",
        f"        Lc = np.empty(chunk * {W}, dtype=np.float64)",
        f"        g = np.empty(d * {W}, dtype=PT.dtype)",
        "        g[:] = zero",
        "        lsum = lout[i]",
        "        lsum[:] = zero",
        f"        _node_{W}(indptr, indices, values, unit, PT, b, rows, ptr[i], ptr[i + 1], code,",
        f"{' ' * (len(str(W)) + 15)}with_loss, zero, Zc, bb, Lc, g, lsum)",
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
