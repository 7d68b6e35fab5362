"""What the tests of the compiled compressor kernels share: the torch form switched on, a
bitwise comparison, and inputs that reach every branch of a kernel."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from types import ModuleType

import torch

from streams import Streams


@contextlib.contextmanager
def torch_form(kernels: ModuleType) -> Iterator[None]:
    """The torch form (``kernels.ENABLED`` off) inside the block."""
    kernels.ENABLED = False
    try:
        yield
    finally:
        kernels.ENABLED = True


def bit_view(t: torch.Tensor) -> torch.Tensor:
    """A float tensor's bits as integers (so that NaNs and signed zeros compare exactly)."""
    if not t.is_floating_point():
        return t
    return t.view({2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()])


def same(a: torch.Tensor, b: torch.Tensor) -> bool:
    """The same dtype, shape and bits."""
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(bit_view(a), bit_view(b))


def varied_input(
    m: int, d: int, kind: int, dtype: torch.dtype, gen: torch.Generator, tail: bool = False
) -> torch.Tensor:
    """``(m, d)`` rows of one of six kinds: 0 normal, 1 magnitudes over the whole range, 2 the
    extremes (zeros of both signs, the largest and smallest values, infinities, NaN) mixed in,
    3 exact grid points with ties and zeros, 4 the finite extremes only, 5 a zero row and a flat
    row (with ``tail``, the rest scaled by a heavy-tailed factor)."""
    x = torch.randn(m, d, generator=gen, dtype=torch.float64)
    fi = torch.finfo(dtype)
    if kind == 1:
        x = x * torch.exp(30 * torch.randn(m, d, generator=gen, dtype=torch.float64))
    elif kind == 2:
        special = [0.0, -0.0, fi.max, -fi.max, fi.tiny, -fi.tiny / 8, math.inf, math.nan]
        vals = torch.tensor(special, dtype=torch.float64)
        pick = torch.randint(0, len(special), (m, d), generator=gen)
        x = torch.where(torch.rand(m, d, generator=gen) < 0.3, vals[pick], x)
    elif kind == 3:
        x = torch.round(4 * x) / 4
    elif kind == 4:
        special = [0.0, -0.0, fi.max, -fi.max, fi.tiny, -fi.tiny / 8]
        vals = torch.tensor(special, dtype=torch.float64)
        pick = torch.randint(0, len(special), (m, d), generator=gen)
        x = torch.where(torch.rand(m, d, generator=gen) < 0.5, vals[pick], x)
    elif kind == 5:
        x[0] = 0.0
        x[-1] = 0.5
        if tail:
            x = x * torch.exp(2 * torch.randn(m, d, generator=gen, dtype=torch.float64))
    return x.to(dtype)


def same_packet(got, want, fields: list[str] | None = None) -> None:
    """The same fields (``fields``, or all of them and no other) and the same bit counts."""
    if fields is None:
        assert set(got.fields) == set(want.fields)
    for name in want.fields if fields is None else fields:
        assert same(got.fields[name], want.fields[name]), name
    assert torch.equal(got.nbits, want.nbits)


def check_against_torch_form(
    kernels: ModuleType,
    C,
    x: torch.Tensor,
    rng,
    *,
    fields: list[str] | None = None,
    cross: bool = False,
    wire: bool = False,
):
    """``C`` encodes ``x`` with ``kernels`` and in the torch form to the same packet, and both
    decode to the same bits; ``cross``: the torch form decodes the kernels' packet to them too;
    ``wire``: so does the kernels' packet after its bytes. Returns both packets."""
    got = C.encode(x, rng)
    with torch_form(kernels):
        want = C.encode(x, rng)
        want_dec = C.decode(want)
        crossed = C.decode(got) if cross else None
    same_packet(got, want, fields)
    assert same(C.decode(got), want_dec)
    if cross:
        assert same(crossed, want_dec)
    if wire:
        data, nbytes = C.to_bytes(got)
        back = C.from_bytes(data, nbytes, like=got, nodes=torch.arange(x.shape[0]))
        assert same(C.decode(back), want_dec)
    return got, want


def spike_case(kernels: ModuleType, C, d: int, col: int, seed: int):
    """Two rows of ``d`` entries, the first varied and the second zero but for ``-3`` at
    ``col`` (its whole norm: the top level), encoded by ``kernels`` and checked against the
    torch form, crossed and through the wire (:func:`check_against_torch_form`); the kernels'
    packet."""
    x = varied_input(2, d, 0, torch.float32, torch.Generator().manual_seed(seed))
    x[1] = 0.0
    x[1, col] = -3.0
    got, _ = check_against_torch_form(
        kernels, C, x, Streams.for_nodes(seed, [0, 1]), cross=True, wire=True
    )
    return got
