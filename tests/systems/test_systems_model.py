"""The performance model's formulas against hand computations, and its monotonicity."""

import math

import numpy as np
import pytest

from systems import model
from systems.layers import TOTALS, model_shapes, model_sizes


def test_collective_formulas_by_hand():
    # 8 Gbit/s = 1e9 bytes/s
    assert model.ring_allreduce_time(1e9, 4, 8.0, 1e-3) == pytest.approx(1.5 + 6e-3, rel=1e-12)
    assert model.allgather_time(1e9, 4, 8.0, 1e-3) == pytest.approx(3.0 + 3e-3, rel=1e-12)
    assert model.parameter_server_time(1e9, 2e9, 2, 8.0, 0.5) == pytest.approx(7.0, rel=1e-12)
    assert model.ring_allreduce_time(1e9, 1, 8.0, 1e-3) == 0.0
    assert model.allgather_time(1e9, 1, 8.0, 1e-3) == 0.0


def test_buckets_follow_ddp_rule():
    nbytes, ready = model.buckets((10, 20, 30), bucket_bytes=100)
    np.testing.assert_array_equal(nbytes, [120.0, 120.0])  # 30 floats close one, 20+10 the next
    np.testing.assert_array_equal(ready, [0.5, 1.0])
    nbytes, ready = model.buckets((60,), bucket_bytes=100)  # a flat vector: equal pieces
    np.testing.assert_array_equal(nbytes, [100.0, 100.0, 40.0])
    np.testing.assert_allclose(ready, [100 / 240, 200 / 240, 1.0], rtol=1e-15)
    nbytes, _ = model.buckets(model_sizes("resnet50"), 25 * 2**20)
    assert nbytes.sum() == 4 * TOTALS["resnet50"] and len(nbytes) == 4


def test_sync_sgd_overlap_by_hand():
    # first_bucket_bytes=None: an explicit cap, which DDP also applies to the first bucket (the
    # default Setting has DDP's 1 MiB first bucket, which would hold all 240 bytes here)
    s = model.Setting((10, 20, 30), workers=2, compute_s=3.0, alpha=0.0, bucket_bytes=100,
                      first_bucket_bytes=None)  # fmt: skip
    # 1 byte/s: each 120-byte bucket takes 2*(1/2)*120 = 120 s; ready at 1 + 2*0.5 = 2 and 3
    assert model.sync_sgd_time(s, 8e-9) == pytest.approx(max(2 + 240, 3 + 120), rel=1e-12)
    # 1e12 bytes/s: the last bucket's 1.2e-10 s after the backward pass is all that shows
    assert model.sync_sgd_time(s, 8e3) == pytest.approx(3 + 1.2e-10, rel=1e-13)
    np.testing.assert_allclose(
        model.sync_sgd_time(s, np.array([8e-9, 8e3])), [242.0, 3 + 1.2e-10], rtol=1e-13
    )


def test_compressed_time_by_hand():
    s = model.Setting((60,), workers=4, compute_s=1.0, speedup=2.0, alpha=0.0)
    kw = dict(bits=8e9, encode_s=0.1, decode_s=0.01, extra_s=0.2)
    # compute 0.5, encode 0.1, extra 0.2; all-gather decodes 4 messages and moves 3e9 bytes
    assert model.compressed_time(s, 8.0, collective="allgather", **kw) == pytest.approx(3.84)
    assert model.compressed_time(s, 8.0, collective="allreduce", **kw) == pytest.approx(2.31)
    ps = 0.5 + 0.1 + 0.01 + 0.2 + 4 * (1e9 + 240) / 1e9
    assert model.compressed_time(s, 8.0, collective="ps", **kw) == pytest.approx(ps, rel=1e-12)


def test_break_even_by_hand():
    # no overlap window: sync = compute + 2(p-1)/p M/B, compressed = compute + codec + same of
    # M_c, so B* = 2(p-1)/p (M - M_c) / codec = (4e6 - 1e6) / 0.01 bytes/s = 2.4 Gbit/s
    s = model.Setting((10**6,), workers=2, compute_s=0.1, alpha=0.0, backward_fraction=0.0)
    kw = dict(bits=8e6, encode_s=0.01, decode_s=0.0, collective="allreduce")
    assert model.break_even_bandwidth(s, **kw) == pytest.approx(2.4, rel=1e-9)
    assert model.speedup(s, 2.0, **kw) > 1 > model.speedup(s, 3.0, **kw)
    assert model.break_even_bandwidth(s, **{**kw, "encode_s": 10.0}) == pytest.approx(2.4e-3)
    assert model.break_even_bandwidth(s, **{**kw, "bits": 64e6, "encode_s": 0.0}) == 0.0
    assert model.break_even_bandwidth(s, **{**kw, "encode_s": 0.0}) == math.inf


def test_speedup_falls_with_bandwidth_and_allgather_grows_with_workers():
    # an explicit 25 MiB cap (DDP then has no 1 MiB first bucket): the last bucket, whose
    # all-reduce is what stays exposed at high bandwidth, is 16.5 MiB (33 MB on the ring), more
    # than the all-gather's 63 x 0.4 MB, so the speed-up falls all the way. With DDP's default
    # 1 MiB first bucket the exposed tail is 9.3 MiB (18 MB), less than the all-gather's 25 MB,
    # and above ~25 Gbit/s the speed-up rises again slightly towards its limit.
    s = model.Setting(tuple(model_sizes("resnet50")), workers=64, compute_s=0.3,
                      first_bucket_bytes=None)  # fmt: skip
    bw = np.geomspace(0.1, 1000, 300)
    for collective in ("allreduce", "allgather"):
        # a payload moving less than the dense all-reduce (all-gather: 63 x 0.4 MB < 200 MB)
        sp = model.speedup(s, bw, bits=1e5 * 32, encode_s=0.02, decode_s=0.001,
                           collective=collective)  # fmt: skip
        assert np.all(np.diff(sp) <= 1e-12), collective
    # one server link carrying 64 dense replies moves more than the ring: it gains with bandwidth
    sp = model.speedup(s, bw, bits=1e5 * 32, encode_s=0.02, decode_s=0.001, collective="ps")
    assert np.all(np.diff(sp) >= 0) and sp[-1] < 1
    p = np.arange(1, 257)
    ag = np.array([model.allgather_time(1e6, int(k), 10.0, 1e-5) for k in p])
    ar = np.array([model.ring_allreduce_time(1e6, int(k), 10.0, 0.0) for k in p])
    assert np.all(np.diff(ag) > 0)
    np.testing.assert_allclose(ag[-1], 255 * (1e6 / 1.25e9 + 1e-5), rtol=1e-12)
    assert ar.max() < 2 * 1e6 / 1.25e9  # ring all-reduce saturates below 2 M / B


def test_bad_input_names_the_value():
    with pytest.raises(ValueError, match=r"bandwidth must be > 0 Gbit/s, got 0"):
        model.ring_allreduce_time(1.0, 2, 0)
    with pytest.raises(ValueError, match=r"workers must be an integer >= 1, got 0"):
        model.allgather_time(1.0, 0, 1.0)
    with pytest.raises(ValueError, match=r"unknown collective 'bcast'; allowed: allreduce, all"):
        s = model.Setting((10,), 2, 1.0)
        model.compressed_time(s, 1.0, bits=1, encode_s=0, decode_s=0, collective="bcast")
    with pytest.raises(ValueError, match=r"speedup must be > 0, got -1"):
        model.Setting((10,), 2, 1.0, speedup=-1)


def test_model_shapes_sum_to_the_published_totals():
    counts = {"resnet18": 62, "resnet50": 161, "resnet101": 314, "vgg16": 32, "bert-base": 199}
    for name, total in TOTALS.items():
        assert sum(model_sizes(name)) == total
        assert len(model_shapes(name)) == counts[name]
    assert model_shapes("resnet50")[0] == (64, 3, 7, 7)
    assert model_shapes("resnet50")[-2:] == [(1000, 2048), (1000,)]
    assert model_shapes("bert-base")[0] == (30522, 768)
    with pytest.raises(
        ValueError, match=r"unknown model 'vgg'; allowed: resnet18, resnet50, resnet101, vgg16"
    ):
        model_shapes("vgg")


def test_fitted_network_recovers_the_model_exactly():
    from systems.validate import fit_collective

    d = np.array([1e3, 1e5, 1e6, 4e6])
    for p in (2, 4):
        t = model.ring_allreduce_time(4 * d, p, 5.0, 1e-4)
        gbps, alpha = fit_collective(4 * d, t, p, "allreduce")
        assert gbps == pytest.approx(5.0, rel=1e-9) and alpha == pytest.approx(1e-4, rel=1e-6)
        t = model.allgather_time(d / 8, p, 0.5, 2e-4)
        gbps, alpha = fit_collective(d / 8, t, p, "allgather")
        assert gbps == pytest.approx(0.5, rel=1e-9) and alpha == pytest.approx(2e-4, rel=1e-6)
    with pytest.raises(ValueError, match="do not grow with size"):
        fit_collective(d, d[::-1] * 1e-9, 2)


def test_modeled_run_seconds_by_hand():
    it = np.array([0, 1, 2])
    bits = 8e9 * it  # 1e9 bytes per iteration; 8 Gbit/s = 1e9 bytes/s
    args = (it, bits, 0.5 * it, 0.2 * it, 0.1 * it, 8.0)
    ar = model.modeled_run_seconds(*args, workers=4, collective="allreduce", alpha=0.01)
    np.testing.assert_allclose(ar, (0.5 + 0.2 + 0.1 + 1.5 + 0.06) * it, rtol=1e-12)
    ag = model.modeled_run_seconds(*args, workers=4, collective="allgather", held=2)
    np.testing.assert_allclose(ag, (0.5 + 0.1 + 4 * 0.05 + 3.0) * it, rtol=1e-12)


def test_each_collective_pays_its_own_latency():
    # one bucket ready when compute ends, three empty all-reduces on 5 workers: 3 x 2(p-1) alpha
    # (one latency per iteration, the old model, would give 1.0 + 8e-3)
    b = model.Bucket(1.0, (("allreduce", 0.0),) * 3)
    assert model.pipeline_time([b], 1.0, 5, 10.0, 1e-3) == pytest.approx(1.0 + 24e-3, rel=1e-12)
    # two buckets of an all-gather each: (p-1) alpha per collective, serial on the link
    bs = [model.Bucket(1.0, (("allgather", 0.0),)), model.Bucket(1.0, (("allgather", 0.0),))]
    assert model.pipeline_time(bs, 1.0, 5, 10.0, 1e-3) == pytest.approx(1.008, rel=1e-12)
    s = model.Setting((60,), workers=5, compute_s=1.0, alpha=1e-3)
    kw = dict(bits=0, encode_s=0.0, decode_s=0.0, collective="allreduce")
    assert model.compressed_time(s, 8.0, **kw, collectives=4) == pytest.approx(1.032)
    assert model.compressed_time(s, 8.0, **kw) == pytest.approx(1.008)
    with pytest.raises(ValueError, match="collectives must be an integer >= 1, got 0"):
        model.compressed_time(s, 8.0, **kw, collectives=0)


def test_pipeline_encode_delays_and_decode_follows():
    # 1 byte/s links (8e-9 Gbit/s), p = 2: an all-reduce of M bytes takes M seconds
    bs = [model.Bucket(2.0, (("allreduce", 10.0),), encode_s=1.0, decode_s=0.5),
          model.Bucket(3.0, (("allreduce", 4.0),), encode_s=1.0, decode_s=0.5)]  # fmt: skip
    # bucket 0 starts at 2 + 1, ends at 13; bucket 1 ready at 3 + 2 encodes = 5, waits for the
    # link, ends at 17, then its decode: 17.5; bucket 0's decode also after 13: 13 + 1 < 17.5
    assert model.pipeline_time(bs, 3.0, 2, 8e-9) == pytest.approx(17.5, rel=1e-12)
    # fast link: the device's work, compute + encodes + decodes, is what shows
    assert model.pipeline_time(bs, 3.0, 2, 8e6) == pytest.approx(6.0, rel=1e-6)


def test_buckets_are_ddps_with_its_1_mib_first_bucket():
    sizes = model_sizes("resnet50")
    # DDP's default: the classifier (ready first) closes a 1 MiB first bucket, then 25 MiB caps
    nbytes, ready = model.buckets(sizes, 25 * 2**20, 4, model.DEFAULT_FIRST_BUCKET_BYTES)
    assert len(nbytes) == 5 and nbytes[0] == 4 * (1000 * 2048 + 1000)
    assert nbytes.sum() == 4 * TOTALS["resnet50"] and np.all(np.diff(ready) >= 0)
    # the default Setting is DDP's default; the old model had 4 buckets and no small first one
    s = model.Setting(tuple(sizes), workers=8, compute_s=0.1)
    plan = model.sync_bucket_plan(s)
    assert len(plan) == 5 and plan[0].collectives[0][1] == nbytes[0]


def test_fp16_baseline_is_bucketed_on_the_fp32_parameters():
    # DDP forms buckets on the parameters' bytes and the fp16 hook halves each message: as many
    # messages as fp32, each half the size (bucketing 2-byte entries would give fewer buckets)
    sizes = tuple(model_sizes("resnet50"))
    s32 = model.Setting(sizes, workers=8, compute_s=0.1)
    s16 = model.Setting(sizes, workers=8, compute_s=0.1, wire_bytes=2)
    p32, p16 = model.sync_bucket_plan(s32), model.sync_bucket_plan(s16)
    assert len(p16) == len(p32) == 5
    assert [b.collectives[0][1] * 2 for b in p16] == [b.collectives[0][1] for b in p32]
    wrong = model.buckets(sizes, 25 * 2**20, 2, model.DEFAULT_FIRST_BUCKET_BYTES)[0]
    assert len(wrong) == 3  # what bucketing the 2-byte entries would have given
    # the baseline pays one latency per bucket: at a huge bandwidth, the last bucket's 2(p-1)a
    t = model.sync_sgd_time(model.Setting(sizes, 8, 0.1, alpha=1e-5, wire_bytes=2), 1e9)
    assert t == pytest.approx(0.1 + 14e-5, rel=1e-6)
    # at 1 ms per collective the five buckets' latencies queue on the link: 5 x 14 ms from the
    # 4th bucket's readiness on would not fit before the end of compute
    t = model.sync_sgd_time(model.Setting(sizes, 8, 0.1, alpha=1e-3, wire_bytes=2), 1e9)
    assert t > 0.1 + 14e-3
