"""The scale benchmark: its arithmetic on injected numbers, and one tiny real launch of two
ranks holding blocks of nodes (peak memory and seconds per step read back)."""

from __future__ import annotations

import pytest

from benchmarks import scale


def test_derive_per_node_cost_and_the_million_node_prediction():
    common = {"s_per_step": 1e-3, "iters": 5}
    rows = [
        {**common, "n": 100, "d": 10, "world": 1, "peak_mib_max": 400.0, "peak_mib_mean": 400.0,
         "base": True},
        {**common, "n": 100, "d": 10, "world": 2, "peak_mib_max": 450.0, "peak_mib_mean": 440.0,
         "base": True},
        {**common, "n": 10_100, "d": 10, "world": 1, "peak_mib_max": 500.0,
         "peak_mib_mean": 500.0},
        {**common, "n": 10_100, "d": 10, "world": 2, "peak_mib_max": 500.0,
         "peak_mib_mean": 499.0},
        {"n": 10_100, "d": 10, "world": 4, "error": "boom"},
    ]  # fmt: skip
    out = scale.derive(rows)
    assert out[0] == rows[0] and out[4] == rows[4]
    assert out[2]["nodes_mib"] == 100.0 and out[3]["nodes_mib"] == 50.0
    assert out[2]["per_node_mib"] == pytest.approx(0.01)  # 100 MiB over 10^4 extra nodes
    assert out[2]["million_mib"] == pytest.approx(400 + 0.01 * 10**6)
    assert out[3]["rel_w1"] == pytest.approx(0.5)
    assert out[3]["million_mib"] == pytest.approx(450 + 0.01 * 10**6 / 2)
    text = scale.markdown(out)
    assert "| 10100 | 10 | 2 | 0.001 | 500 | 499 | 50 | 0.50 | 0.50 | 10.2 | 5450 |" in text
    assert "| 10100 | 10 | 4 | error: boom |" in text
    assert "| 100 (base) | 10 | 2 | | 450 |" in text


def test_a_tiny_sharded_launch(tmp_path):
    row = scale.launch(12, 6, 2, 2, tmp_path)
    assert "error" not in row, row
    assert row["world"] == 2 and row["s_per_step"] > 0
    # each rank's VmHWM was read (0 if not): a process that imported torch holds > 150 MiB
    assert 150 < row["peak_mib_mean"] <= row["peak_mib_max"] < 4096
