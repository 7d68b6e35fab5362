"""``compressors.base.level_dtype``: the narrowest integer field of levels or indices, which
dithering, sparse dithering, SSQ/MSQ and THC take their fields' dtype from."""

from __future__ import annotations

import pytest
import torch

from compressors import parse_spec
from compressors.base import level_dtype
from streams import Streams


@pytest.mark.parametrize(
    "top, signed, dtype",
    [
        (0, False, torch.uint8),
        (255, False, torch.uint8),
        (256, False, torch.int32),
        (2**31 - 1, False, torch.int32),
        (127, True, torch.int8),
        (128, True, torch.int16),
        (32767, True, torch.int16),
        (32768, True, torch.int32),
    ],
)
def test_the_narrowest_dtype_holding_the_top_level(top, signed, dtype):
    assert level_dtype(top, signed) == dtype
    info = torch.iinfo(dtype)
    assert info.max >= top and (not signed or info.min <= -top)


def test_levels_past_int32_are_refused():
    with pytest.raises(ValueError, match="exceed int32"):
        level_dtype(2**31)


@pytest.mark.parametrize(
    "spec, field, dtype",
    [
        ("natural-dithering", "levels", torch.uint8),
        ("qsgd:levels=300", "levels", torch.int32),
        ("thc", "index", torch.uint8),
        ("ssq:width=8", "levels", torch.int16),
    ],
)
def test_the_compressors_fields_take_it(spec, field, dtype):
    x = torch.randn(2, 64, generator=torch.Generator().manual_seed(0))
    p = parse_spec(spec).bind(2).encode(x, Streams.for_nodes(0, [0, 1]))
    assert p.fields[field].dtype == dtype
