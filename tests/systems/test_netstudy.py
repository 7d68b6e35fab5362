"""The measured study: namespaces and links made and removed, its tables and findings, and a
tiny two-worker run over a throttled link."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import pytest

from systems import netns, netstudy
from systems.model import Setting, allgather_time, compressed_time, sync_sgd_time
from systems.networker import fit_link

OK, WHY = netns.available() if os.geteuid() == 0 else (False, "not root")
needs_netns = pytest.mark.skipif(not OK, reason=f"ip netns not permitted here: {WHY}")


@needs_netns
def test_testbed_makes_shaped_links_and_removes_them():
    with netns.Testbed(2, gbps=0.5, tag="9990001") as tb:
        made = set(netns.namespaces())
        assert set(tb.all_namespaces()) <= made
        q = tb.qdiscs()
        assert len(q) == 4 and all("tbf" in v and "500Mbit" in v for v in q.values()), q
        tb.set_links(2.0)
        assert all("2Gbit" in v for v in tb.qdiscs().values())
        # the workers reach each other over the bridge
        ping = subprocess.run(
            tb.exec_prefix(0)
            + [sys.executable, "-c", f"import socket; socket.create_connection(('{tb.address(1)}',"
               " 9), 2)"],
            capture_output=True, text=True,
        )  # fmt: skip
        assert "refused" in ping.stderr.lower(), ping.stderr  # reached: no listener there
    assert not set(tb.all_namespaces()) & set(netns.namespaces())


@needs_netns
def test_testbed_is_removed_when_the_body_raises_and_stale_ones_are_cleaned():
    with pytest.raises(RuntimeError, match="boom"):
        with netns.Testbed(2, tag="9990002") as tb:
            raise RuntimeError("boom")
    assert not set(tb.all_namespaces()) & set(netns.namespaces())
    # a testbed whose process is gone (tag = a pid that does not exist) is stale
    dead = netns.Testbed(1, tag="4194999").build()
    dead._restore_handlers()
    assert dead.ns(0) in netns.cleanup_stale()
    assert dead.ns(0) not in netns.namespaces() and dead.switch not in netns.namespaces()


def test_testbed_refuses_bad_links():
    with pytest.raises(ValueError, match=r"bandwidth must be in \[0.001, 100\] Gbit/s, got 0"):
        netns.Testbed(2, gbps=0)
    with pytest.raises(ValueError, match="workers must be an integer in"):
        netns.Testbed(0)


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--bandwidth", "fast"], "--bandwidth must be comma-separated numbers, got 'fast'"),
        (["--workers", "1"], "--workers values must be integers in [2, 16], got '1'"),
        (["--methods", "fp16;nope"], "unknown hook 'nope'; allowed:"),
        (["--methods", "powersgd:rank=0"], "powersgd: rank must be"),
        (["--warmup", "1"], "--warmup must be >= 2, got 1"),
    ],
)
def test_bad_input_exits_2_naming_the_value(argv, message, capsys, tmp_path):
    assert netstudy.main([*argv, "--out", str(tmp_path / "o")]) == 2
    assert message in capsys.readouterr().err


def test_a_non_empty_out_is_never_reused(tmp_path, capsys):
    (tmp_path / "keep.txt").write_text("earlier results")
    assert netstudy.main(["--out", str(tmp_path)]) == 2
    assert "exists and is not empty" in capsys.readouterr().err
    assert (tmp_path / "keep.txt").read_text() == "earlier results"


def test_fit_link_recovers_bandwidth_and_latency():
    p, gbps, alpha = 4, 2.5, 40e-6
    sizes = [64, 16384, 2**20, 2**22, 2**24]
    secs = [2 * (p - 1) / p * m / (gbps * 1e9 / 8) + 2 * (p - 1) * alpha for m in sizes]
    b, a = fit_link(sizes, secs, p)
    assert b == pytest.approx(gbps, rel=1e-9) and a == pytest.approx(alpha, rel=1e-6)


def _launch(W, bw, ar_iter, ag_iter, ag_comm):
    sizes = [1000, 10, 50000]
    base = dict(sizes=sizes, compute_s=0.01, encode_s=0.0, decode_s=0.0, allreducible=True)
    return {
        "workers": W, "model": "cnn", "nominal_gbps": bw, "latency_applied": False,
        "latency_s": 0.0, "calibration": {"gbps": bw * 0.9, "alpha_s": 1e-5},
        "methods": [
            {**base, "method": "fp16", "sent_bytes": 2 * 51010, "iter_s": 0.02, "comm_s": 0.01,
             "iters_to_target": 50, "final_acc": 0.95},
            {**base, "method": "powersgd", "sent_bytes": 4000, "iter_s": ar_iter,
             "comm_s": 0.001, "encode_s": 0.002, "decode_s": 0.001},
            {**base, "method": "dgc", "allreducible": False, "sent_bytes": 8000,
             "iter_s": ag_iter, "comm_s": ag_comm, "encode_s": 0.003, "decode_s": 0.004},
        ],
    }  # fmt: skip


def test_predictions_are_the_model_on_the_calibrated_link_and_findings_use_the_numbers():
    measured = [_launch(2, 1.0, 0.015, 0.03, 0.002), _launch(2, 0.1, 0.012, 0.01, 0.003),
                _launch(4, 0.1, 0.012, 0.012, 0.009)]  # fmt: skip
    measured[1]["methods"][0]["iter_s"] = 0.05
    netstudy._fill_accuracy(measured)
    rows = netstudy.table_rows(measured, bucket_mb=25)
    r = next(x for x in rows if x["method"] == "dgc" and x["workers"] == 4)
    s = Setting((1000, 10, 50000), 4, 0.01, 1.0, 1e-5)
    want = 0.01 + 0.003 + 0.004 + allgather_time(8000, 4, 0.09, 1e-5)
    assert r["predicted_s"] == pytest.approx(want, rel=1e-12)
    assert r["predicted_s"] == pytest.approx(
        compressed_time(s, 0.09, bits=64000, encode_s=0.003, decode_s=0.001,
                        collective="allgather"), rel=1e-12)  # fmt: skip
    f = next(x for x in rows if x["method"] == "fp16" and x["workers"] == 2 and
             x["nominal_gbps"] == 1.0)  # fmt: skip
    s16 = Setting((1000, 10, 50000), 2, 0.01, 1.0, 1e-5, float_bytes=2)
    assert f["predicted_s"] == pytest.approx(float(sync_sgd_time(s16, 0.9)), rel=1e-12)
    assert r["rel_error"] == pytest.approx((r["predicted_s"] - 0.012) / 0.012)
    # speed-up over fp16, and iterations-to-target carried to the other bandwidths
    slow = next(x for x in rows if x["method"] == "powersgd" and x["nominal_gbps"] == 0.1
                and x["workers"] == 2)  # fmt: skip
    assert slow["speedup_vs_fp16"] == pytest.approx(0.05 / 0.012)
    fp = next(x for x in rows if x["method"] == "fp16" and x["nominal_gbps"] == 0.1
              and x["workers"] == 2)  # fmt: skip
    assert fp["time_to_target_s"] == pytest.approx(50 * 0.05)
    text = "\n".join(netstudy.findings(rows, measured, 25))
    # dgc: speed-up 0.05/0.01 = 5 at 0.09 Gbit/s, 0.02/0.03 at 0.9: crossover between them
    cross = netstudy._crossover([0.09, 0.9], [5.0, 2 / 3])
    assert 0.09 < cross < 0.9 and f"dgc (W=2): measured {cross:.2f}" in text
    # all-gather comm grew x3 from W=2 to W=4 at 0.1 Gbit/s, all-reduce x1
    assert "all-gather x3.00, all-reduce x1.00" in text and "Held." in text


def test_crossover_interpolates_in_log_bandwidth():
    assert netstudy._crossover([1, 100], [10, 0.1]) == pytest.approx(10.0)
    assert netstudy._crossover([1, 10], [2, 3]) is None


@needs_netns
@pytest.mark.dist
def test_tiny_two_worker_run_over_a_throttled_link(tmp_path):
    out = tmp_path / "study"
    before = set(netns.namespaces())
    rc = netstudy.main(["--bandwidth", "0.5", "--workers", "2", "--methods", "fp32;fp16;bf16",
                        "--iters", "3", "--train-iters", "20", "--eval-every", "10",
                        "--repeats", "2", "--probe-seconds", "0.2",
                        "--out", str(out), "--quiet"])  # fmt: skip
    assert rc == 0
    assert set(netns.namespaces()) == before  # links removed
    measured = json.loads((out / "measurements.json").read_text())
    assert [x["repeat"] for x in measured] == [0, 1]  # separate launches
    cal = measured[0]["calibration"]
    assert 0.2 < cal["gbps"] < 0.6, cal  # the shaper holds the link near its 0.5 Gbit/s
    probe = measured[0]["probe"]
    assert 0.15 < probe["ring_min_gbps"] < 0.52 and len(probe["links"]) == 2, probe
    rows = list(netstudy.csv.DictReader(open(out / "table.csv")))
    assert {r["method"] for r in rows} == {"fp32", "fp16", "bf16"}
    assert all(r["repeats"] == "2" and float(r["iter_ci_lo"]) <= float(r["iter_ci_hi"])
               and float(r["predicted_probe_s"]) > 0 for r in rows)  # fmt: skip
    text = (out / "report.md").read_text()
    assert "## Testbed" in text and "## Time to target accuracy" in text
    assert ("EMULATED" in text) != netns.netem_available()[0]
    by = {r["method"]: r for r in rows}
    assert float(by["fp16"]["sent_MB"]) * 2 == pytest.approx(float(by["fp32"]["sent_MB"]))
    assert all(math.isfinite(float(r["predicted_s"])) for r in rows)
    assert (out / "speedup.png").is_file() and "findings" in (out / "report.md").read_text()


def _cnn_hook(method: str, compute_s: float, enc: float, dec: float) -> tuple[dict, int]:
    """A measured hook on the digits CNN whose sent bytes are its plan's, and its collectives
    per step under 4 KiB buckets."""
    import torch

    from systems.hooks.registry import make_hook
    from systems.model import ddp_buckets
    from systems.networker import _model

    shapes = [tuple(p.shape) for p in _model("cnn", 0).parameters()]
    sizes = [math.prod(s) for s in shapes]
    plans = [make_hook(method).plan([shapes[i] for i in g], 2, torch.float32)
             for g in ddp_buckets(sizes, 4096)]  # fmt: skip
    sent = sum(c.nbytes for p in plans for c in p)
    m = {"method": method, "sizes": sizes, "compute_s": compute_s, "encode_s": enc,
         "decode_s": dec, "allreducible": True, "sent_bytes": sent,
         "collectives": {"allreduce": {"count": sum(map(len, plans)), "bytes": sent}}}  # fmt: skip
    return m, sum(map(len, plans))


def test_a_hook_pays_one_latency_per_declared_collective_and_overlaps_the_backward_pass():
    mb = 4096 / 2**20
    m, n = _cnn_hook("powersgd", 0.0, 0.0, 0.0)
    assert n > 3  # several buckets, each with P's and Q's all-reduce (and the raw layers')
    fast = 1e6  # Gbit/s: the bandwidth term vanishes
    lat = netstudy.predict(m, 2, fast, 1e-3, mb, model="cnn")
    assert lat == pytest.approx(n * 2 * (2 - 1) * 1e-3, rel=1e-3)  # not one per iteration
    # with a backward pass to hide behind, the step is shorter than compute + codec + wire
    m, _ = _cnn_hook("powersgd", 0.05, 0.002, 0.001)
    wire = netstudy.wire_seconds(m, 2, 0.01, mb, model="cnn")
    t = netstudy.predict(m, 2, 0.01, 0.0, mb, model="cnn")
    assert 0.05 + 0.003 <= t < 0.05 + 0.003 + wire - 0.2 * wire
    # ... and without the model's shapes (an older measurement) nothing overlaps
    flat = netstudy.predict(m, 2, 0.01, 0.0, mb)
    assert flat == pytest.approx(0.05 + 0.003 + wire, rel=1e-9)
