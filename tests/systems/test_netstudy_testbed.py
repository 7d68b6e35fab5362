"""The measured study's account of its testbed: repeats and their interval, cores, the probed
link's prediction, emulated latency, and time to accuracy on the shipped teacher task."""

from __future__ import annotations

import math
import os
import time

import pytest
import torch
import torch.distributed as dist

from systems import netns, netstudy, nettestbed, networker, teacher

OK, WHY = netns.available() if os.geteuid() == 0 else (False, "not root")


def test_interval_is_the_median_and_the_t_interval_of_the_mean():
    med, lo, hi = nettestbed.interval([1.0, 2.0, 6.0])
    half = 4.302652729911275 * math.sqrt(7.0) / math.sqrt(3)  # t(0.975, 2) * sd / sqrt(3)
    assert med == 2.0 and lo == pytest.approx(3.0 - half) and hi == pytest.approx(3.0 + half)
    one = nettestbed.interval([0.5])
    assert one[0] == 0.5 and math.isnan(one[1]) and math.isnan(one[2])
    with pytest.raises(ValueError, match="at least one value"):
        nettestbed.interval([])


def _launch(W, bw, rep, iter_s, its=None, threads=1):
    m = {"method": "fp16", "allreducible": True, "sizes": [1000, 50000], "compute_s": 0.01,
         "encode_s": 0.0, "decode_s": 0.0, "sent_bytes": 102000.0, "iter_s": iter_s,
         "comm_s": iter_s - 0.01}  # fmt: skip
    h = {**m, "method": "powersgd", "sent_bytes": 4000.0, "iter_s": 2 * iter_s,
         "comm_s": 0.001, "encode_s": 0.002, "decode_s": 0.001}  # fmt: skip
    if its is not None:
        m.update(iters_to_target=its[0], final_acc=0.8, trained_iters=100)
        h.update(iters_to_target=its[1], final_acc=0.6, trained_iters=100)
    return {"workers": W, "model": "mlp", "nominal_gbps": bw, "repeat": rep, "threads": threads,
            "latency_mode": "worker", "latency_s": 1e-4, "emulated_s": 1e-4,
            "calibration": {"gbps": 0.9 + 0.01 * rep, "alpha_s": 1e-4 * (rep + 1)},
            "probe": {"ring_min_gbps": 0.95, "latency_s": 1e-5, "ring_gbps": [0.95, 0.96],
                      "links": [{"worker": 0, "up_gbps": 0.96, "down_gbps": 0.97,
                                 "rtt_us": 20.0}]},
            "methods": [m, h]}  # fmt: skip


def test_repeats_merge_to_medians_with_their_runs_and_accuracy_kept():
    raw = [_launch(2, 1.0, 0, 0.3, its=(40, -1)), _launch(2, 1.0, 1, 0.1),
           _launch(2, 1.0, 2, 0.2)]  # fmt: skip
    (merged,) = nettestbed.merge_repeats(raw)
    assert merged["repeats"] == 3
    assert merged["calibration"]["gbps"] == pytest.approx(0.91)
    assert merged["calibration"]["alpha_s"] == pytest.approx(2e-4)
    fp16 = merged["methods"][0]
    assert fp16["iter_s"] == 0.2 and fp16["iter_s_runs"] == [0.3, 0.1, 0.2]
    assert fp16["iters_to_target"] == 40 and fp16["trained_iters"] == 100


def test_rows_carry_interval_probe_prediction_cores_and_unreached_targets(monkeypatch):
    monkeypatch.setattr(nettestbed, "cores", lambda: 2)
    raw = [_launch(2, 1.0, r, t, its=(40, -1) if r == 0 else None) for r, t in
           enumerate((0.3, 0.1, 0.2))] + [_launch(4, 1.0, 0, 0.5, its=(30, 60))]  # fmt: skip
    merged = nettestbed.merge_repeats(raw)
    netstudy._fill_accuracy(merged)
    rows = netstudy.table_rows(merged, bucket_mb=25)
    r = next(x for x in rows if x["workers"] == 2 and x["method"] == "fp16")
    assert r["repeats"] == 3 and r["iter_s"] == 0.2
    assert (r["iter_ci_lo"], r["iter_ci_hi"]) == pytest.approx(
        nettestbed.interval([0.3, 0.1, 0.2])[1:]
    )
    assert r["probed_gbps"] == 0.95 and r["comm_share"] == pytest.approx(0.19 / 0.2)
    # the probed link: ring bottleneck, pair latency plus the workers' emulated delay
    want = netstudy.predict(merged[0]["methods"][0], 2, 0.95, 1e-5 + 1e-4, 25, model="mlp")
    assert r["predicted_probe_s"] == pytest.approx(want, rel=1e-12)
    assert r["predicted_probe_s"] != pytest.approx(
        netstudy.predict(merged[0]["methods"][0], 2, 0.95, 1e-5, 25, model="mlp"), rel=1e-9
    )
    assert r["cpus"] == "2x1/2" and r["oversubscribed"] is False
    w4 = next(x for x in rows if x["workers"] == 4 and x["method"] == "fp16")
    assert w4["cpus"] == "4x1/2" and w4["oversubscribed"] is True
    # reached: iterations times the median iteration; not reached: said, no seconds
    assert r["target_reached"] is True and r["time_to_target_s"] == pytest.approx(40 * 0.2)
    miss = next(x for x in rows if x["workers"] == 2 and x["method"] == "powersgd")
    assert miss["target_reached"] is False and miss["time_to_target_s"] is None
    assert miss["iters_to_target"] == "not reached in 100" and miss["final_acc"] == 0.6
    text = netstudy.accuracy_markdown(rows, 0.75)
    assert "| 2 | powersgd | not reached in 100 | 0.6 | not reached |" in text
    assert "Not reaching the target: powersgd (W=2)." in text
    assert "| 4 | powersgd | 60 | 0.6 | 60 |" in text  # 60 iterations x 1.0 s
    assert "W=2 1 Gbit/s fp16 95%" in text
    md = netstudy.markdown_table(rows)
    assert "not reached in 100" in md and "True" in md


def test_testbed_section_states_latency_mode_and_oversubscription():
    merged = nettestbed.merge_repeats([_launch(2, 1.0, 0, 0.2), _launch(4, 1.0, 0, 0.2)])
    text = nettestbed.testbed_markdown(merged, 50.0, threads=1, ncores=2)
    assert "EMULATED inside the workers" in text and "`steps x 100 us`" in text
    assert "**Oversubscribed** at W=4" in text
    assert "| 2 | 1 | 0 | 0.96 | 0.97 | 20 | 0.95 | 10 | 0.9 | 100 |" in text
    merged[0]["latency_mode"] = "off"
    assert "**NOT APPLIED**" in nettestbed.testbed_markdown(merged, 50.0, 1, 8)
    assert "No launch oversubscribes" in nettestbed.testbed_markdown(merged, 50.0, 1, 8)


class _Work:
    def __init__(self):
        self.fut = torch.futures.Future()
        self.fut.set_result([torch.ones(1)])

    def wait(self):
        return True

    def get_future(self):
        return self.fut


def test_emulated_latency_delays_each_collective_by_its_ring_messages(monkeypatch):
    for name in networker.LATENCY_STEPS:  # stubs, restored by monkeypatch afterwards
        monkeypatch.setattr(dist, name, lambda *a, **k: _Work(), raising=False)
    slept = []
    monkeypatch.setattr(time, "sleep", slept.append)
    applied = networker.emulate_latency(1e-3, 4)
    assert applied["all_reduce"] == pytest.approx(6e-3)  # 2(p-1) messages
    assert applied["all_gather"] == pytest.approx(3e-3) and applied["broadcast"] == 3e-3
    dist.all_reduce(torch.ones(1))
    assert slept == [pytest.approx(6e-3)]
    fut = dist.all_gather([], torch.ones(1), async_op=True).get_future()
    assert fut.wait()[0].item() == 1.0 and slept[-1] == pytest.approx(3e-3)
    dist.broadcast(torch.ones(1), 0, async_op=True).wait()
    assert len(slept) == 3
    assert networker.emulate_latency(1e-3, 1) == {}  # one worker: no messages, no delay


def test_teacher_task_is_deterministic_balanced_enough_and_wide():
    (X, y), (Xt, yt) = teacher.teacher_data(0)
    (X2, y2), _ = teacher.teacher_data(0)
    assert torch.equal(X, X2) and torch.equal(y, y2)
    assert not torch.equal(teacher.teacher_data(1)[0][1], y)
    assert X.shape == (teacher.N_TRAIN, teacher.DIM) and Xt.shape == (teacher.N_TEST, teacher.DIM)
    counts = torch.bincount(y, minlength=teacher.CLASSES)
    assert counts.min() > 0 and counts.max() / len(y) < 0.25  # no class near a trivial answer
    n = sum(p.numel() for p in networker._model("mlp", 0).parameters())
    assert n == 32 * 2048 + 2048 + 2048 * 2048 + 2048 + 2048 * 10 + 10
    with pytest.raises(ValueError, match="width must be >= 1, got 0"):
        teacher.wide_mlp(0)


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--repeats", "0"], "--repeats must be >= 1, got 0"),
        (["--probe-seconds", "0"], "--probe-seconds must be in (0, 10], got 0.0"),
        (["--model", "vgg"], "invalid choice: 'vgg'"),
    ],
)
def test_bad_testbed_options_exit_2(argv, message, capsys, tmp_path):
    try:
        rc = netstudy.main([*argv, "--out", str(tmp_path / "o")])
    except SystemExit as exc:  # argparse's own choices
        rc = exc.code
    assert rc == 2 and message in capsys.readouterr().err


@pytest.mark.skipif(not OK, reason=f"ip netns not permitted here: {WHY}")
def test_asking_for_netem_where_the_kernel_lacks_it_exits_2(capsys, tmp_path):
    if netns.netem_available()[0]:
        pytest.skip("this kernel has netem")
    assert netstudy.main(["--latency-emulation", "netem", "--out", str(tmp_path / "o")]) == 2
    assert "--latency-emulation netem" in capsys.readouterr().err
