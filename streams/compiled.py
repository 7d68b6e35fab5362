"""Compiled CPU kernels: the draws of :class:`streams.Streams` (SplitMix64 in one pass per
element), and the thread set-up every compiled kernel of the project shares (:func:`launch`).

The torch expression of a draw runs about a dozen elementwise kernels over the whole
``(m, count)`` block, each writing a temporary. These kernels compute the same bits (uint64
arithmetic wraps exactly as the int64 form does) with no temporaries, rows in parallel. Numba is
optional: without it :data:`ENABLED` is False and the torch form is used.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

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
_LOCK = threading.Lock()
_layer_set = False
#: A launch whose largest array holds fewer entries runs on one thread: its work (microseconds)
#: is below what waking the other threads costs, a cost that grows to milliseconds when the
#: cores are shared with other work (measured: Top-1 of a 20 x 112 block, 7 us on one thread,
#: 5.3 ms on two, on a loaded 2-core machine).
SERIAL_BELOW = 32768


def launch(kernel, *args, serial=None) -> None:
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
    parallel kernel's fixed cost (Top-K of 20 x 112 entries: 4.0 -> 2.6 us)."""
    work = max((a.size for a in args if isinstance(a, np.ndarray)), default=0)
    if serial is not None and work < SERIAL_BELOW:
        serial(*args)
        return
    with _LOCK, _torch_threads_kept() as want:
        threads = 1 if work < SERIAL_BELOW else max(1, min(want, numba.config.NUMBA_NUM_THREADS))
        if numba.get_num_threads() != threads:
            numba.set_num_threads(threads)
        kernel(*args)


@contextlib.contextmanager
def _torch_threads_kept() -> Iterator[int]:
    """Under ``_LOCK``: numba's threading layer chosen (OpenMP first) before its first start,
    and torch's thread count (given to the body) put back after it. Starting the layer, at a
    parallel kernel's first call or compilation, sets torch's count to numba's: a sweep's
    one-thread runs then ran on two threads each (two w8a batches side by side: 82 s each
    instead of 14)."""
    global _layer_set
    if not _layer_set:
        numba.config.THREADING_LAYER_PRIORITY = ["omp", "workqueue", "tbb"]
        _layer_set = True
    want = torch.get_num_threads()
    try:
        yield want
    finally:
        if torch.get_num_threads() != want:
            torch.set_num_threads(want)


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


def mix_each(base: int, mixed: torch.Tensor) -> torch.Tensor:
    """``mix(base ^ mixed[j])`` per row (``mixed`` int64 ``(m,)``, ``base`` a signed 64-bit
    integer): :func:`derive` of the key ``base`` when each row's tag mix is already known."""
    out = torch.empty_like(mixed)
    z = np.uint64(base & _MASK64)
    _mix_each(z, mixed.contiguous().numpy().view(np.uint64), out.numpy().view(np.uint64))
    return out


def subset(keys: torch.Tensor, d: int, k: int) -> torch.Tensor:
    """int64 ``(m, k)``, ascending: per row the positions of the ``k`` largest of the first
    ``d`` SplitMix64 outputs (as signed int64), the subset ``Streams.subset`` draws. The
    outputs are generated on the fly into a ``k``-entry heap: no ``(m, d)`` block is made."""
    out = torch.empty(keys.numel(), k, dtype=torch.int64)
    launch(_subset, keys.numpy().view(np.uint64), d, out.numpy(), serial=_subset_serial)
    return out


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
        then scanned against the heap's smallest (1.6-1.8x the speed of one loop doing both:
        20 rows, k = 10 of d = 112, 9.9 -> 5.7 us)."""
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
    def _subset_serial(keys, d, out):
        """:func:`_subset` on this thread."""
        heap = np.empty(out.shape[1], np.int64)
        buf = np.empty(min(d, _SUBSET_BUF), np.int64)
        for j in range(out.shape[0]):
            _subset_row(keys[j], d, heap, out[j], buf)

    @_pjit
    def _subset(keys, d, out):
        m, k = out.shape
        chunks = min(m, 64)
        for c in numba.prange(chunks):
            heap = np.empty(k, np.int64)  # the k largest outputs so far, smallest on top
            buf = np.empty(min(d, _SUBSET_BUF), np.int64)
            for j in range(c * m // chunks, (c + 1) * m // chunks):
                _subset_row(keys[j], d, heap, out[j], buf)
