"""``python -m compressors.warm``: the rows it compresses are large enough for the kernels, and
the command runs every compressor it is given, in both dtypes, and says so."""

from __future__ import annotations

import torch

from compressors import compiled_dense, warm
from compressors.registry import COMPRESSORS


def test_the_rows_reach_the_kernels():
    assert all(m * d >= compiled_dense.FAST_FROM for m, d in warm.SHAPES)
    assert any(m == 1 for m, _ in warm.SHAPES) and any(m > 1 for m, _ in warm.SHAPES)


def test_every_compressor_encodes_decodes_and_sums_in_both_dtypes(monkeypatch, capsys):
    seen = []
    picked = {k: COMPRESSORS[k] for k in ("topk", "qsgd")}

    def spy(cls):
        class Spy(cls):
            def encode(self, x, rng):
                seen.append((cls.__name__, x.dtype, tuple(x.shape)))
                return super().encode(x, rng)

        return Spy

    monkeypatch.setattr(warm, "COMPRESSORS", {k: spy(v) for k, v in picked.items()})
    monkeypatch.setattr(warm, "SHAPES", ((2, 8), (1, 16)))
    assert warm.main(["--quiet"]) == 0
    assert "compiled the kernels of 2 compressors" in capsys.readouterr().out
    want = {(c.__name__, dt, s) for c in picked.values()
            for dt in (torch.float32, torch.float64) for s in ((2, 8), (1, 16))}  # fmt: skip
    assert set(seen) == want and len(seen) == len(want)
