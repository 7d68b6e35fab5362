"""``decode_sum`` equals the weighted sum of the decoded rows for every registered compressor
(sparse payloads take their scatter-add path, the others the dense one)."""

from __future__ import annotations

import pytest
import torch
from strategies import compressor_cases

from compressors.perm_k import PermK
from compressors.rand_k import RandK
from compressors.top_k import TopK
from streams import Streams

CASES = compressor_cases() + [
    (c.spec(), c) for c in (RandK(k=3, shared=True), TopK(k=1), PermK(n=3).bind(3))
]


@pytest.mark.parametrize("name,C", CASES, ids=[n for n, _ in CASES])
@pytest.mark.parametrize("d", [17, 200])
def test_decode_sum_is_the_weighted_sum_of_decoded_rows(name, C, d):
    m = getattr(C, "n", None) or 3  # PermK examples name their node count
    C = C.bind(m)
    x = Streams.for_nodes(4, range(m), 1).normal(d)
    packet = C.encode(x, Streams.for_nodes(9, range(m), 2))
    rows = C.decode(packet)
    weight = torch.linspace(0.0, 0.5, m, dtype=torch.float64)  # a non-sender among them
    for w, want in ((None, rows.mean(dim=0)), (weight, weight @ rows)):
        got = C.decode_sum(packet, w)
        assert got.shape == (d,) and got.dtype == rows.dtype
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name,C", CASES, ids=[n for n, _ in CASES])
def test_decoded_rows_share_no_memory_with_the_input(name, C):
    """Methods update decoded rows in place (EF21's ``g_i += c_i`` in the message's buffer), so
    ``decode`` must never hand back the encoded input itself."""
    m = getattr(C, "n", None) or 3
    C = C.bind(m)
    x = Streams.for_nodes(4, range(m), 1).normal(40)
    rows = C.decode(C.encode(x, Streams.for_nodes(9, range(m), 2)))
    assert rows.untyped_storage().data_ptr() != x.untyped_storage().data_ptr()
