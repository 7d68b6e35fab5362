"""Compiled CPU kernels: the draws of :class:`streams.Streams` (SplitMix64 in one pass per
element), and the thread set-up every compiled kernel of the project shares (:func:`launch`).

The torch expression of a draw runs about a dozen elementwise kernels over the whole
``(m, count)`` block, each writing a temporary. These kernels compute the same bits (uint64
arithmetic wraps exactly as the int64 form does) with no temporaries, rows in parallel. Numba is
optional: without it :data:`ENABLED` is False and the torch form is used.
"""

from __future__ import annotations

import threading

import numpy as np
import torch

try:
    import numba
except ImportError:  # pragma: no cover - numba is a declared dependency
    numba = None

__all__ = [
    "ENABLED",
    "bits64",
    "compile_vectorised",
    "derive",
    "heap_subset",
    "launch",
    "numba",
    "subset",
    "uniform",
]

ENABLED = numba is not None
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)
_MASK64 = (1 << 64) - 1
_TWO_M24 = np.float32(2.0**-24)
# A subset is drawn through a k-entry heap (no (m, d) block of keys) for rows of this length
# on, or for blocks up to SUBSET_HEAP_BLOCK entries (where torch.topk's fixed costs dominate);
# else a vectorised draw of the whole block and torch.topk are faster.
SUBSET_HEAP_D = 1024
SUBSET_HEAP_BLOCK = 65536
_SUBSET_BUF = 1024  # a subset's outputs are made this many at a time (8 KiB, in L1)
# Subsets of k >= _CUT_K of d <= _CUT_D take the cut (_subset_cut_row): for k below it the
# heap rarely sifts (k = 1 of 112: 2.9 us by the heap, 3.9 by the cut; k = 3 of 123: 4.7 and
# 5.2); its buffers hold d words.
_CUT_K = 8
_CUT_D = 4096
# Longer rows with k >= _LONG_K and k _LONG_RATIO >= d take a cut made a block at a time
# (_subset_long_row); a smaller k sifts the heap rarely (one row of 2.5 * 10^7, k = 2,500:
# 30 ms by the heap, 37-40 by the cut).
_LONG_K, _LONG_RATIO = 64, 1000
_TWO63, _TWO64 = 2.0**63, 2.0**64
_INT64_MAX = np.int64(np.iinfo(np.int64).max)
_LOCK = threading.Lock()
_layer_set = False
#: A launch whose largest array holds fewer entries runs on one thread: its work (microseconds)
#: is below what waking the other threads costs, a cost that grows to milliseconds when the
#: cores are shared with other work (measured: Top-1 of a 20 x 112 block, 7 us on one thread,
#: 5.3 ms on two, on a loaded 2-core machine).
SERIAL_BELOW = 32768


def launch(kernel, *args, serial=None, work: int | None = None) -> None:
    """Run a parallel kernel on as many threads as torch uses, so the two never oversubscribe
    the cores, or on one thread when its largest array argument holds fewer than
    ``SERIAL_BELOW`` entries. Numba's OpenMP layer comes first. Whether it shares torch's
    OpenMP runtime depends on the install: with torch's wheels it does not (torch loads its
    own ``libgomp.so.1``, numba's pool names the system's ``libgomp.so.1.0.0``, and both are
    mapped), so the kernels and torch's operations run on two pools of threads; each spins
    only briefly after a region (``GOMP_SPINCOUNT``, set in :mod:`streams`), which keeps the
    two from contending. Its first launch resets the runtime's thread count, which is put
    back at once. Launches are serialised (not every layer accepts concurrent ones). The
    kernels' results do not depend on their thread count (each output is one thread's work).

    ``serial``: the kernel's one-thread twin (the same rows, one after the other), called
    directly where the work would run on one thread: no lock, no thread set-up, and none of a
    parallel kernel's fixed cost (Top-K of 20 x 112 entries: 4.0 -> 2.6 us).

    ``work``: the entries the kernel goes through, where its largest array understates them
    (:mod:`problems.glm_bits` reads 16 rows from each entry of its masks)."""
    if work is None:
        work = 0
        for a in args:  # a loop: a generator's set-up costs a microsecond a launch
            if isinstance(a, np.ndarray) and a.size > work:
                work = a.size
    if serial is not None and work < SERIAL_BELOW:
        serial(*args)
        return
    with _LOCK, _torch_threads_kept() as want:
        threads = 1 if work < SERIAL_BELOW else max(1, min(want, numba.config.NUMBA_NUM_THREADS))
        if numba.get_num_threads() != threads:
            numba.set_num_threads(threads)
        kernel(*args)


def _choose_layer() -> None:
    """Numba's threading layer, OpenMP first, chosen before its first start (under _LOCK)."""
    global _layer_set
    numba.config.THREADING_LAYER_PRIORITY = ["omp", "workqueue", "tbb"]
    _layer_set = True


class _torch_threads_kept:  # named as the function it replaced
    """Under ``_LOCK``: numba's threading layer chosen (OpenMP first) before its first start,
    and torch's thread count (given to the body) put back after it. Starting the layer, at a
    parallel kernel's first call or compilation, sets torch's count to numba's: a sweep's
    one-thread runs then ran on two threads each (two w8a batches side by side: 82 s each
    instead of 14). A class rather than a generator context: every launch enters it, and a
    generator's set-up cost a microsecond."""

    __slots__ = ("want",)

    def __enter__(self) -> int:
        if not _layer_set:
            _choose_layer()
        self.want = torch.get_num_threads()
        return self.want

    def __exit__(self, *exc) -> None:
        if torch.get_num_threads() != self.want:
            torch.set_num_threads(self.want)


def compile_vectorised(kernel, args: tuple) -> None:
    """Compile ``kernel`` for ``args`` with LLVM's SLP vectoriser on (or load it from numba's
    cache, where it was compiled so before): numba leaves SLP off (it once miscompiled some
    code), and kernels whose inner statements are written out lane by lane need it to become
    vector instructions (:mod:`problems.glm_lanes`). Numba's compiler lock is held, so no other
    function is compiled meanwhile with the setting, and the setting is restored; so is torch's
    thread count, as :func:`launch` keeps it."""
    sig = tuple(numba.typeof(a) for a in args)
    if sig in kernel.overloads:
        return
    from numba.core import config
    from numba.core.compiler_lock import global_compiler_lock

    with _LOCK, _torch_threads_kept(), global_compiler_lock:
        old = config.SLP_VECTORIZE
        config.SLP_VECTORIZE = 1
        try:
            kernel.compile(sig)
        finally:
            config.SLP_VECTORIZE = old


def bits64(keys: torch.Tensor, count: int) -> torch.Tensor:
    """int64 ``(m, count)``: element ``c`` of row ``j`` is SplitMix64's ``c``-th output for
    ``keys[j]`` (the same bits as ``Streams.bits64``)."""
    out = torch.empty(keys.numel(), count, dtype=torch.int64)
    words = out.numpy().view(np.uint64)
    launch(_draw, keys.numpy().view(np.uint64), np.uint64(0), np.uint64(1), words,
           serial=_draw_serial)  # fmt: skip
    return out


def uniform(keys: torch.Tensor, count: int, dtype: torch.dtype) -> torch.Tensor:
    """``(m, count)`` uniforms on [0, 1) in float64 (53 bits) or float32 (24 bits), the same
    numbers as ``Streams.uniform``."""
    out = torch.empty(keys.numel(), count, dtype=dtype)
    # 53 random bits scaled by 2^-53 (float64), or 24 by 2^-24 (float32): exact either way
    bits, scale = (53, 2.0**-53) if dtype == torch.float64 else (24, _TWO_M24)
    launch(_draw, keys.numpy().view(np.uint64), np.uint64(64 - bits), scale, out.numpy(),
           serial=_draw_serial)  # fmt: skip
    return out


def all_finite(x: torch.Tensor) -> bool | None:
    """Whether every entry of ``x`` is finite, for a small contiguous float32/float64 CPU
    tensor (fewer than ``SERIAL_BELOW`` entries), in one compiled loop that stops at the first
    NaN or infinity; None where it does not serve (the caller then uses torch)."""
    if (
        not ENABLED or x.device.type != "cpu" or x.dtype not in (torch.float32, torch.float64)
        or x.numel() >= SERIAL_BELOW or not x.is_contiguous()
    ):  # fmt: skip
        return None
    return bool(_all_finite(x.detach().numpy().reshape(-1)))


def heap_subset(m: int, d: int) -> bool:
    """Whether :func:`subset` is the faster way to draw ``m`` subsets of ``range(d)``."""
    return d >= SUBSET_HEAP_D or m * d <= SUBSET_HEAP_BLOCK


def derive(keys: torch.Tensor, tag: torch.Tensor) -> torch.Tensor:
    """``mix(keys ^ mix(tag golden + golden))`` per row (``tag``: one int64 or one per row), the
    child keys of ``Streams.split``, in one pass instead of a score of tiny torch kernels."""
    tags = tag.expand(keys.shape).contiguous()
    out = torch.empty_like(keys)
    _derive(keys.numpy().view(np.uint64), tags.numpy().view(np.uint64), out.numpy().view(np.uint64))
    return out


def mix_each(base: int, mixed: np.ndarray) -> torch.Tensor:
    """``mix(base ^ mixed[j])`` per row, int64 ``(m,)`` (``mixed`` uint64 ``(m,)``, ``base`` a
    64-bit integer): :func:`derive` of the key ``base`` when each row's tag mix is already
    known. NumPy's buffers and views: a step's keys of 20 nodes, 6.5 -> 4.1 us."""
    out = np.empty(mixed.size, np.uint64)
    _mix_each(np.uint64(base & _MASK64), mixed, out)
    return torch.from_numpy(out.view(np.int64))


def subset(keys: torch.Tensor, d: int, k: int) -> torch.Tensor:
    """int64 ``(m, k)``, ascending: per row the positions of the ``k`` largest of the first
    ``d`` SplitMix64 outputs (as signed int64), the subset ``Streams.subset`` draws. Each row
    is drawn on its own, through a cut over its ``d`` outputs (``k >= 8``, ``d <= 4096``:
    :func:`_subset_cut_row`), through a cut made a block at a time (``k >= 64``, ``4096 < d <=
    1000 k``: :func:`_subset_long_row`) or through a ``k``-entry heap fed a block at a time: no
    ``(m, d)`` block is made."""
    out = np.empty((keys.numel(), k), np.int64)
    launch(_subset, keys.numpy().view(np.uint64), d, out, serial=_subset_serial)
    return torch.from_numpy(out)


if numba is not None:
    _pjit = numba.njit(cache=True, nogil=True, parallel=True)
    _jit = numba.njit(cache=True, nogil=True)
    _inline = numba.njit(inline="always", cache=True)

    @_inline
    def _mix(z):
        z = (z ^ (z >> np.uint64(30))) * _MIX1
        z = (z ^ (z >> np.uint64(27))) * _MIX2
        return z ^ (z >> np.uint64(31))

    @_inline
    def _draw_row(z, shift, scale, row):
        """``row[c] = (mix(z + (c + 1) golden) >> shift) * scale``."""
        for c in range(row.size):
            z += _GOLDEN
            row[c] = (_mix(z) >> shift) * scale

    @_pjit
    def _draw(keys, shift, scale, out):
        """``out[j, c] = (mix(keys[j] + (c + 1) golden) >> shift) * scale``: raw words
        (``shift = 0``, ``scale = 1``) or uniforms, by the types of ``scale`` and ``out``."""
        for j in numba.prange(keys.size):
            _draw_row(keys[j], shift, scale, out[j])

    @_jit
    def _draw_serial(keys, shift, scale, out):
        """:func:`_draw` on this thread."""
        for j in range(keys.size):
            _draw_row(keys[j], shift, scale, out[j])

    @_jit
    def _all_finite(a):
        for v in a:
            if v - v != 0:  # NaN for NaN and the infinities, 0 for every finite value
                return False
        return True

    @_jit
    def _derive(keys, tags, out):
        for j in range(keys.size):
            out[j] = _mix(keys[j] ^ _mix(tags[j] * _GOLDEN + _GOLDEN))

    @_jit
    def _mix_each(base, mixed, out):
        for j in range(mixed.size):
            out[j] = _mix(base ^ mixed[j])

    @_jit
    def _sift_down(heap, pos, i, k):
        """Restore the min-heap order of ``heap`` (with ``pos`` alongside) below ``i``."""
        while True:
            small, left = i, 2 * i + 1
            if left < k and heap[left] < heap[small]:
                small = left
            if left + 1 < k and heap[left + 1] < heap[small]:
                small = left + 1
            if small == i:
                return
            heap[i], heap[small] = heap[small], heap[i]
            pos[i], pos[small] = pos[small], pos[i]
            i = small

    @_jit
    def _subset_row(key, d, heap, pos, buf):
        """``pos``: the positions of the ``k = pos.size`` largest of the first ``d`` outputs
        of ``key``'s stream, ascending. The first ``k`` fill the heap; the rest are made a
        block (``buf``) at a time, a loop with no branch that the compiler vectorises, and
        then scanned against the heap's smallest (20 rows, k = 10 of d = 112, new keys each
        call: the draw took 27 us in one loop doing both, 20 us so)."""
        k = pos.size
        z = key
        for c in range(k):
            z += _GOLDEN
            heap[c], pos[c] = np.int64(_mix(z)), c
        for i in range(k // 2 - 1, -1, -1):
            _sift_down(heap, pos, i, k)
        top = heap[0]
        for start in range(k, d, buf.size):
            n = min(buf.size, d - start)
            for i in range(n):  # output c is mix(key + (c + 1) golden)
                buf[i] = np.int64(_mix(key + np.uint64(start + i + 1) * _GOLDEN))
            for i in range(n):
                if buf[i] > top:
                    heap[0], pos[0] = buf[i], start + i
                    _sift_down(heap, pos, 0, k)
                    top = heap[0]
        if k <= 32:  # insertion sort: numba's sort costs more on a few entries
            for i in range(1, k):
                p, j = pos[i], i - 1
                while j >= 0 and pos[j] > p:
                    pos[j + 1] = pos[j]
                    j -= 1
                pos[j + 1] = p
        else:
            pos.sort()

    @_jit
    def _kth_largest(a, k):
        """The ``k``-th largest entry of ``a`` (which is reordered): quickselect."""
        lo, hi, target = 0, a.size - 1, a.size - k
        while lo < hi:
            mid = (lo + hi) // 2  # median of three as the pivot
            if a[mid] < a[lo]:
                a[mid], a[lo] = a[lo], a[mid]
            if a[hi] < a[lo]:
                a[hi], a[lo] = a[lo], a[hi]
            if a[hi] < a[mid]:
                a[hi], a[mid] = a[mid], a[hi]
            pivot = a[mid]
            i, j = lo, hi
            while i <= j:
                while a[i] < pivot:
                    i += 1
                while a[j] > pivot:
                    j -= 1
                if i <= j:
                    a[i], a[j] = a[j], a[i]
                    i += 1
                    j -= 1
            if target <= j:
                hi = j
            elif target >= i:
                lo = i
            else:
                break
        return a[target]

    @_jit
    def _top_of_gathered(v, k):
        """Which ``k`` of the gathered ``v`` (``k <= v.size``) are the ``k`` largest, as
        ascending indices into ``v``: those above the ``k``-th largest (a quickselect of a
        copy) and, of those equal to it, the earliest."""
        top = _kth_largest(v.copy(), k)
        room = k
        for a in range(v.size):
            if v[a] > top:
                room -= 1
        chosen = np.empty(k, np.int64)
        o = 0
        for a in range(v.size):
            if v[a] > top or (v[a] == top and room > 0):
                if v[a] == top:
                    room -= 1
                chosen[o] = a
                o += 1
        return chosen

    @_jit
    def _subset_long_row(key, d, tau, cap, pos, buf, cv, ci):
        """:func:`_subset_row` of a long row through a cut, or False where it misses (nothing
        written then): the outputs made a block (``buf``) at a time, those above ``tau`` (about
        ``k + 3 sqrt(k) + 2``) gathered in order, sixteen outputs tested at once and gathered
        only where one passes, so the scan has no branch on each random word; the ``k``-th
        largest of the gathered by a quickselect, and the positions of those above it (and of
        the earliest equal ones) taken in order. A heap sifts about ``k ln(d / k)`` times,
        each sift a few cache misses once the heap outgrows the caches (one row of 2.5 * 10^7,
        ``k`` = 250,000: 272 ms by the heap, 44 ms so). Fewer than ``k`` above the cut, or
        more than ``cap``: False, and the row takes the heap."""
        k = pos.size
        c = 0
        for start in range(0, d, buf.size):
            n = min(buf.size, d - start)
            for i in range(n):  # output c is mix(key + (c + 1) golden)
                buf[i] = np.int64(_mix(key + np.uint64(start + i + 1) * _GOLDEN))
            for g in range(0, n, 16):
                e = min(n, g + 16)
                hit = False
                for i in range(g, e):
                    hit |= buf[i] > tau
                if hit:
                    for i in range(g, e):
                        cv[c], ci[c] = buf[i], start + i
                        c += buf[i] > tau
            if c > cap:
                return False
        if c < k:
            return False
        chosen = _top_of_gathered(cv[:c], k)
        for o in range(k):
            pos[o] = ci[chosen[o]]
        return True

    @_jit
    def _subset_cut_row(key, d, tau, cap, pos, words, cv, ci, heap, buf):
        """:func:`_subset_row` through a cut: the ``d`` outputs made at once (``words``), those
        above ``tau`` (about ``k + 2 sqrt(k) + 2`` of them) gathered in order with no branch,
        and the smallest dropped until ``k`` remain; the positions are then in order, with no
        sort. A heap's sifts branch on random words, which no predictor learns (20 rows, k =
        10 of d = 112, new keys each call: 15.0 us through the heap, 6.6 us through the cut).
        With fewer than ``k`` above the cut (under 1 % of rows), or more than ``cap``, the
        row takes the heap. Equal words (probability below ``d^2 / 2^64``): the earlier
        position is kept."""
        k = pos.size
        for i in range(d):
            words[i] = np.int64(_mix(key + np.uint64(i + 1) * _GOLDEN))
        c = 0
        for i in range(d):
            v = words[i]
            cv[c], ci[c] = v, i
            c += v > tau
        if c < k or c > cap:
            _subset_row(key, d, heap, pos, buf)
            return
        for _ in range(c - k):  # drop the smallest, the latest of equal ones first
            low, at = cv[0], 0
            for b in range(1, c):
                if cv[b] <= low:
                    low, at = cv[b], b
            cv[at], ci[at] = _INT64_MAX, -1
        o = 0
        for a in range(c):
            if ci[a] >= 0 and o < k:  # (o < k: never past the row, even at a word of 2^63 - 1)
                pos[o] = ci[a]
                o += 1

    @_jit
    def _subset_rows(keys, d, out, start, stop):
        """Rows ``start:stop`` of :func:`_subset`: through the cut where ``k`` is not small
        and the row fits the buffers, else through the heap."""
        k = out.shape[1]
        heap = np.empty(k, np.int64)  # the k largest outputs so far, smallest on top
        buf = np.empty(min(d, _SUBSET_BUF), np.int64)
        want = k + 2.0 * np.sqrt(k) + 2.0  # about 2 standard deviations above k
        if k >= _CUT_K and d <= _CUT_D and want < d:
            tau = np.int64(_TWO63 - want / d * _TWO64)  # P(word > tau) = want / d
            cap = np.int64(2.0 * want) + 16
            words = np.empty(d, np.int64)
            cv, ci = np.empty(d, np.int64), np.empty(d, np.int64)
            for j in range(start, stop):
                _subset_cut_row(keys[j], d, tau, cap, out[j], words, cv, ci, heap, buf)
        elif k >= _LONG_K and k * _LONG_RATIO >= d > _CUT_D and k + 3.0 * np.sqrt(k) + 2.0 < d:
            want = k + 3.0 * np.sqrt(k) + 2.0  # about 3 standard deviations above k
            tau = np.int64(_TWO63 - want / d * _TWO64)
            cap = np.int64(2.0 * want) + 16
            cv, ci = np.empty(cap + buf.size, np.int64), np.empty(cap + buf.size, np.int64)
            for j in range(start, stop):
                if not _subset_long_row(keys[j], d, tau, cap, out[j], buf, cv, ci):
                    _subset_row(keys[j], d, heap, out[j], buf)
        else:
            for j in range(start, stop):
                _subset_row(keys[j], d, heap, out[j], buf)

    @_jit
    def _subset_serial(keys, d, out):
        """:func:`_subset` on this thread."""
        _subset_rows(keys, d, out, 0, out.shape[0])

    @_pjit
    def _subset(keys, d, out):
        m = out.shape[0]
        chunks = min(m, 64)
        for c in numba.prange(chunks):
            _subset_rows(keys, d, out, c * m // chunks, (c + 1) * m // chunks)
