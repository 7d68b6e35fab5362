"""``python -m compressors.warm``: the rows it compresses are large enough for the kernels (and
small enough for their one-thread twins), and the command runs every configuration of every
compressor it is given (its shifted form too), in both dtypes, and says so."""

from __future__ import annotations

import torch

from compressors import compiled_dense, warm
from compressors.registry import COMPRESSORS
from streams.compiled import SERIAL_BELOW


def test_the_rows_reach_the_kernels():
    big = [(m, d) for m, d in warm.SHAPES if m * d >= compiled_dense.FAST_FROM]
    assert any(m == 1 for m, _ in big) and any(m > 1 for m, _ in big)
    assert any(m * d < SERIAL_BELOW for m, d in warm.SHAPES)  # the one-thread kernels


def test_every_compressor_encodes_decodes_and_sums_in_both_dtypes(monkeypatch, capsys):
    seen, shifted, inside = [], [], []
    picked = {k: COMPRESSORS[k] for k in ("topk", "qsgd")}

    def spy(cls):
        class Spy(cls):
            def encode(self, x, rng):
                if not inside:  # not the generic shifted form's own encode
                    seen.append((repr(self), x.dtype, tuple(x.shape)))
                return super().encode(x, rng)

            def encode_shifted(self, x, h, rng):
                shifted.append((repr(self), x.dtype, tuple(x.shape)))
                inside.append(1)
                try:
                    return super().encode_shifted(x, h, rng)
                finally:
                    inside.pop()

        return Spy

    spies = {k: spy(v) for k, v in picked.items()}
    monkeypatch.setattr(warm, "COMPRESSORS", spies)
    monkeypatch.setattr(warm, "SHAPES", ((2, 8), (1, 16)))
    assert warm.main(["--quiet"]) == 0
    assert "compiled the kernels of 2 compressors" in capsys.readouterr().out
    examples = [repr(e) for c in spies.values() for e in c.examples()]
    assert len(set(examples)) > len(spies)  # more than the default instances
    want = {(e, dt, s) for e in examples
            for dt in (torch.float32, torch.float64) for s in ((2, 8), (1, 16))}  # fmt: skip
    assert set(seen) == want and len(seen) == len(want)
    assert set(shifted) == want and len(shifted) == len(want)


def test_an_example_made_for_another_node_count_is_left_out(monkeypatch, capsys):
    seen = []

    class Spy(COMPRESSORS["permk"]):
        def encode(self, x, rng):
            seen.append(self.n)
            return super().encode(x, rng)

    monkeypatch.setattr(warm, "COMPRESSORS", {"permk": Spy})
    monkeypatch.setattr(warm, "SHAPES", ((warm.NODES, 8),))
    assert {e.n for e in Spy.examples()} - {warm.NODES}  # some are made for another count
    assert warm.main(["--quiet"]) == 0
    assert "compiled the kernels of 1 compressors" in capsys.readouterr().out
    assert seen and set(seen) == {warm.NODES}
