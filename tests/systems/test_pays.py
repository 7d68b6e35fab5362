"""``python -m systems.pays``: bad input, the answer's parts (PowerSGD all-reduced, the fp16
baseline, the split into terms and the dominant one, the sensitivity band and its verdict),
the models' shapes, a user's ``module:factory``, compute and codec given or measured, and
DDP's buckets as DDP itself forms them."""

import json
import math
import sys
import textwrap

import pytest
import torch

from comm.hooks import CommHook, HookStats
from systems import model, pays
from systems.hooks import registry
from systems.layers import TOTALS, model_shapes, model_sizes


def _fake_measure(args, target, hooks, given, buckets, dev):
    """No timing: a linear backward profile and a free codec, so the numbers are the model's."""
    n = len(target.shapes)
    prof = {"ready": [1 - i / n for i in range(n)], "backward_fraction": 2 / 3, "inputs": "fake"}
    specs = [s for s in dict.fromkeys([pays.BASELINE, pays.FP32, *hooks]) if s not in given]
    zero = [0.0] * len(buckets)
    codec = {s: {"encode_s": zero, "decode_s": zero, "buckets": buckets} for s in specs}
    comp = {"compute_s": 0.05, "all_s": [0.05]} if args.measure_compute else None
    return prof, codec, comp, []


@pytest.fixture
def fake(monkeypatch):
    monkeypatch.setattr(pays, "measure_all", _fake_measure)


def _run(tmp_path, *argv) -> dict:
    out = tmp_path / "r.json"
    assert pays.main([*argv, "--json", str(out), "--quiet"]) == 0
    return json.loads(out.read_text())


@pytest.fixture
def user_module(tmp_path, monkeypatch):
    """A module on sys.path with a small net's factory and broken ones."""
    (tmp_path / "pays_user_net.py").write_text(
        textwrap.dedent("""
        from torch import nn

        def make():
            return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))

        def not_a_module():
            return 3

        def frozen():
            net = nn.Linear(2, 2)
            net.requires_grad_(False)
            return net

        def fails():
            raise RuntimeError("no weights here")

        LIMIT = 3
    """)
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "pays_user_net", raising=False)
    yield "pays_user_net"
    sys.modules.pop("pays_user_net", None)


@pytest.mark.parametrize(
    "argv, msg",
    [
        (["--model", "vgg"], "--model 'vgg' is unknown; allowed: resnet18, resnet50"),
        (["--bandwidth", "0"], "--bandwidth must be a finite number > 0, got 0.0"),
        (["--bandwidth", "-3"], "--bandwidth must be a finite number > 0, got -3.0"),
        (["--gpus", "0"], "--gpus must be an integer >= 1, got 0"),
        (["--hooks", "nosuch:rank=4"], "unknown hook 'nosuch'; allowed:"),
        (["--hooks", "powersgd:rank=0"], "rank must be an integer >= 1"),
        (["--hooks", " ; "], "--hooks must name at least one hook spec"),
        (["--latency-us", "-1"], "--latency-us must be a finite number >= 0"),
        (["--compute-ms", "0"], "--compute-ms must be a finite number > 0"),
        (["--compute-ms", "5", "--measure-compute"], "give one (compute given or measured)"),
        (["--speedup-compute", "0"], "--speedup-compute must be a finite number > 0, got 0.0"),
        (["--batch", "0"], "--batch must be an integer >= 1, got 0"),
        (["--encode-ms", "fp16"], "--encode-ms must be one number MS >= 0 or items SPEC=MS"),
        (["--codec-ms", "fp16"], "--encode-ms must be one number MS >= 0 or items SPEC=MS"),
        (["--encode-ms", "-2"], "--encode-ms must be >= 0, got '-2'"),
        (["--encode-ms", "powersgd:rank=8=3"], "names 'powersgd:rank=8', which is not among"),
        (["--compute-range", "2,1"], "--compute-range must be LO,HI with 0 < LO <= HI, got '2,1'"),
        (["--codec-range", "0,2"], "--codec-range must be LO,HI with 0 < LO <= HI"),
        (["--latency-range", "1"], "--latency-range must be LO,HI"),
        (["--bandwidth-range", "0.5,2"], "share of the nominal bandwidth delivered, at most 1"),
        (["--device", "tpu"], "--device 'tpu'"),
        (["--input-shape", "3,8,8"], "--input-shape/--input-vocab are for a module:factory"),
        (["--model", "no_such_pkg_xyz.mod:make"], "cannot import 'no_such_pkg_xyz.mod'"),
        (["--model", "math:"], "is not of the form package.module:factory"),
    ],
)
def test_bad_input_exits_2_with_a_message(argv, msg, capsys, fake):
    assert pays.main(argv) == 2
    err = capsys.readouterr().err
    assert msg in err and "Traceback" not in err


@pytest.mark.parametrize(
    "extra, msg",
    [
        (["--input-shape", "8"], "has no default compute time: give --compute-ms MS or"),
        ([], "give --input-shape"),
        (["--input-shape", "8,x", "--compute-ms", "5"], "--input-shape must be positive integers"),
    ],
)
def test_user_module_bad_input_exits_2(extra, msg, user_module, capsys, fake):
    assert pays.main(["--model", f"{user_module}:make", *extra]) == 2
    err = capsys.readouterr().err
    assert msg in err and "Traceback" not in err


@pytest.mark.parametrize(
    "factory, msg",
    [
        ("missing", "has no attribute 'missing'"),
        ("LIMIT", "is not callable"),
        ("not_a_module", "returned a int, not a torch.nn.Module"),
        ("frozen", "without trainable parameters"),
        ("fails", "fails() failed: RuntimeError: no weights here"),
    ],
)
def test_user_factory_errors_exit_2(factory, msg, user_module, capsys, fake):
    argv = ["--model", f"{user_module}:{factory}", "--input-shape", "8", "--compute-ms", "5"]
    assert pays.main(argv) == 2
    err = capsys.readouterr().err
    assert msg in err and "Traceback" not in err


def test_cuda_device_without_cuda_exits_2(capsys, fake):
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present")
    assert pays.main(["--device", "cuda"]) == 2
    assert "no CUDA device is available" in capsys.readouterr().err


def test_a_hook_without_plan_is_refused(capsys, fake, monkeypatch):
    class NoPlan(CommHook):
        name = "noplan"

    monkeypatch.setitem(registry.HOOKS, "noplan", NoPlan)
    monkeypatch.setattr(registry, "_load_all", lambda: None)
    assert pays.main(["--hooks", "noplan"]) == 2
    assert "does not declare its collectives" in capsys.readouterr().err


def test_resnet50_on_64_gpus_at_10_gbps(tmp_path, capsys, fake):
    argv = ["--model", "resnet50", "--gpus", "64", "--bandwidth", "10",
            "--hooks", "fp16;powersgd:rank=4"]  # fmt: skip
    r = _run(tmp_path, *argv)
    text = capsys.readouterr().out
    rows = r["hooks"]
    assert list(rows) == ["fp16", "allreduce", "powersgd:rank=4"]
    # PowerSGD: all-reduce only (raw layers, then P, then Q), never all-gather
    kinds = {k for b in rows["powersgd:rank=4"]["collectives_per_bucket"] for k in b}
    assert kinds == {"allreduce"} and r["buckets"] == 5
    # the baseline is 16-bit: half the fp32 bytes, and every speed-up is relative to it
    d = sum(math.prod(s) for s in model_shapes("resnet50"))
    assert rows["fp16"]["sent_MB"] == pytest.approx(2 * d / 1e6)
    assert rows["allreduce"]["sent_MB"] == pytest.approx(4 * d / 1e6)
    assert rows["fp16"]["speedup_vs_fp16"] == 1.0
    t16, t32 = rows["fp16"]["iter_ms"], rows["allreduce"]["iter_ms"]
    tp = rows["powersgd:rank=4"]["iter_ms"]
    assert rows["powersgd:rank=4"]["speedup_vs_fp16"] == pytest.approx(t16 / tp)
    assert t32 > t16  # fp32 sends twice the bytes: the baseline is not fp32
    ps = rows["powersgd:rank=4"]
    lo, hi = ps["band"]
    # free codec: faster at the nominal inputs, but 3 collectives per bucket at 10x latency lose
    assert lo < 1 < ps["speedup_vs_fp16"] < hi and ps["verdict"] == "uncertain"
    assert f"powersgd:rank=4: uncertain at 10 Gbit/s: speed-up 1.67 [{lo:.2f}, {hi:.2f}]" in text
    assert "Assumed:" in text and "compute: 60 ms per iteration, the default" in text
    assert r["compute_source"] == "assumed"

    # the same numbers recomputed: PowerSGD as all-reduce matches, as all-gather would not
    shapes = [tuple(s) for s in model_shapes("resnet50")]
    sizes = [math.prod(s) for s in shapes]
    buckets = model.ddp_buckets(sizes, model.DEFAULT_BUCKET_BYTES, model.DEFAULT_FIRST_BUCKET_BYTES)
    comp = r["compute_ms"] / 1e3
    ready = [comp / 3 + comp * 2 / 3 * max(1 - i / len(sizes) for i in b) for b in buckets]
    plans = pays.plan_hook("powersgd:rank=4", shapes, buckets, 64)

    def t(kind_of):
        pipe = [model.Bucket(rd, tuple((kind_of(c.kind), c.nbytes) for c in cols))
                for rd, cols in zip(ready, plans, strict=True)]  # fmt: skip
        return 1e3 * model.pipeline_time(pipe, comp, 64, 10.0, 10e-6)

    assert tp == pytest.approx(t(lambda k: k), rel=1e-12)
    assert t(lambda k: "allgather") > 1.5 * tp  # an all-gather variant is far slower
    fp16_plan = pays.plan_hook("fp16", shapes, buckets, 64)
    base = [model.Bucket(rd, tuple((c.kind, c.nbytes) for c in cols))
            for rd, cols in zip(ready, fp16_plan, strict=True)]  # fmt: skip
    assert t16 == pytest.approx(1e3 * model.pipeline_time(base, comp, 64, 10.0, 10e-6))
    assert t16 / tp != pytest.approx(t32 / tp)  # the speed-up column would change with fp32


def test_terms_add_up_and_the_dominant_term(tmp_path, fake):
    """The four terms add up to the iteration; fp32 at 0.1 Gbit/s is communication-bound, a
    hook given 5 s of codec is codec-bound, a huge latency makes latency dominate, and with a
    fast link and no codec the iteration is compute."""
    r = _run(tmp_path, "--bandwidth", "0.1", "--hooks", "powersgd:rank=4",
             "--encode-ms", "powersgd:rank=4=5000")  # fmt: skip
    for row in r["hooks"].values():
        assert sum(row["terms_ms"].values()) == pytest.approx(row["iter_ms"], rel=1e-9)
        assert min(row["terms_ms"].values()) >= 0
    fp32 = r["hooks"]["allreduce"]
    assert fp32["dominant"] == "communication"
    assert fp32["terms_ms"]["communication"] > 0.9 * fp32["iter_ms"]
    p = r["hooks"]["powersgd:rank=4"]
    assert p["dominant"] == "codec" and p["terms_ms"]["codec"] == pytest.approx(5000)
    assert p["codec_source"] == "given"
    lat = _run(tmp_path, "--latency-us", "100000", "--bandwidth", "1000", "--hooks", "fp16")
    assert lat["hooks"]["fp16"]["dominant"] == "latency"
    fast = _run(tmp_path, "--bandwidth", "1000", "--latency-us", "0", "--hooks", "fp16")
    assert fast["hooks"]["fp16"]["dominant"] == "compute"
    # the latency term is what latency adds: zero latency leaves only compute and bandwidth
    assert fast["hooks"]["allreduce"]["terms_ms"]["latency"] == 0.0
    assert pays.dominant({"compute": 1, "codec": 3, "communication": 2, "latency": 0}) == "codec"


def test_band_widens_with_a_range_and_the_verdict_follows_it(tmp_path, fake):
    """Ranges of 1,1 collapse the band onto the nominal speed-up; widening the bandwidth range
    widens it; a band that straddles 1 is "uncertain", wholly above "pays", below "does not
    pay"."""
    ones = ["--bandwidth-range", "1,1", "--compute-range", "1,1", "--codec-range", "1,1",
            "--latency-range", "1,1"]  # fmt: skip
    common = ["--bandwidth", "10", "--gpus", "64", "--hooks", "powersgd:rank=4",
              "--encode-ms", "powersgd:rank=4=30"]  # fmt: skip
    point = _run(tmp_path, *common, *ones)["hooks"]["powersgd:rank=4"]
    s = point["speedup_vs_fp16"]
    assert point["band"] == pytest.approx([s, s]) and s > 1 and point["verdict"] == "pays"
    narrow = _run(tmp_path, *common, *ones[:-2], "--latency-range", "1,2")["hooks"]
    wide = _run(tmp_path, *common, *ones[:-2], "--latency-range", "1,2",
                "--bandwidth-range", "0.25,1")["hooks"]  # fmt: skip
    (nl, nh), (wl, wh) = narrow["powersgd:rank=4"]["band"], wide["powersgd:rank=4"]["band"]
    assert wl <= nl and wh >= nh and (wh - wl) > (nh - nl)
    # a codec that may be 4x slower than given: the band straddles 1, the verdict is uncertain
    unsure = _run(tmp_path, *common, *ones[:4], "--codec-range", "0.5,4", *ones[6:])
    lo, hi = unsure["hooks"]["powersgd:rank=4"]["band"]
    assert lo < 1 < hi and unsure["hooks"]["powersgd:rank=4"]["verdict"] == "uncertain"
    assert lo <= s <= hi
    # fp32 all-reduce never pays at 10 Gbit/s: its whole band is below 1
    assert unsure["hooks"]["allreduce"]["band"][1] < 1
    assert unsure["hooks"]["allreduce"]["verdict"] == "does not pay"


def test_band_takes_the_extremes_of_every_input():
    """On a made-up iteration the band is the min and max over the grid of range ends; a
    band that looked at the nominal point only (the broken variant) would be one point."""

    def it(spec, bandwidth, compute, codec, latency):
        return 1.0 if spec == "fp16" else 0.5 * codec + 0.1 * latency + 0.4 / bandwidth

    ranges = {"bandwidth": (0.5, 1.0), "compute": (1.0, 1.0), "codec": (0.5, 2.0),
              "latency": (1.0, 3.0)}  # fmt: skip
    lo, hi = pays.band(it, ["h"], ranges)["h"]
    assert hi == pytest.approx(1 / (0.25 + 0.1 + 0.4))
    assert lo == pytest.approx(1 / (1.0 + 0.3 + 0.8))
    nominal = 1 / it("h", 1.0, 1.0, 1.0, 1.0)
    assert lo < nominal < hi
    assert pays.verdict(1.01, 2) == "pays" and pays.verdict(0.5, 0.99) == "does not pay"
    assert pays.verdict(0.9, 1.1) == "uncertain"


def test_codec_given_or_scaled_and_compute_faster(tmp_path, monkeypatch):
    def measured(args, target, hooks, given, buckets, dev):
        prof, codec, comp, notes = _fake_measure(args, target, hooks, given, buckets, dev)
        for rec in codec.values():
            rec["encode_s"] = [0.01] * len(buckets)
        return prof, codec, comp, notes

    monkeypatch.setattr(pays, "measure_all", measured)
    base = ["--hooks", "powersgd:rank=4;dgc"]
    one = _run(tmp_path, *base)["hooks"]
    assert one["powersgd:rank=4"]["codec_source"] == "measured"
    half = _run(tmp_path, *base, "--codec-scale", "0.5")["hooks"]
    assert half["powersgd:rank=4"]["encode_ms"] == pytest.approx(
        one["powersgd:rank=4"]["encode_ms"] / 2
    )
    for flag in ("--encode-ms", "--codec-ms"):  # the old name is an alias
        set7 = _run(tmp_path, *base, flag, "powersgd:rank=4=7")["hooks"]
        assert set7["powersgd:rank=4"]["encode_ms"] + set7["powersgd:rank=4"][
            "decode_ms"
        ] == pytest.approx(7.0)
        assert set7["dgc"]["codec_source"] == "measured"
    # one number: every hook but the fp16/fp32 baselines, all-gathered ones included as given
    every = _run(tmp_path, *base, "--encode-ms", "3")["hooks"]
    for spec in ("powersgd:rank=4", "dgc"):
        assert every[spec]["terms_ms"]["codec"] == pytest.approx(3.0)
        assert every[spec]["codec_source"] == "given"
    assert every["fp16"]["codec_source"] == "measured"
    # --speedup-compute divides compute only
    r1 = _run(tmp_path, *base, "--compute-ms", "80")
    r4 = _run(tmp_path, *base, "--compute-ms", "80", "--speedup-compute", "4")
    assert r1["compute_ms"] == 80 and r4["compute_ms"] == pytest.approx(20)
    assert r4["compute_source"] == "given" and r4["compute_ms_before_speedup"] == 80
    p1, p4 = r1["hooks"]["powersgd:rank=4"], r4["hooks"]["powersgd:rank=4"]
    assert p4["terms_ms"]["codec"] == pytest.approx(p1["terms_ms"]["codec"])
    assert p4["terms_ms"]["compute"] == pytest.approx(p1["terms_ms"]["compute"] / 4)
    # the default compute scales with --batch; measured compute is said to be measured
    rb = _run(tmp_path, *base, "--model", "resnet18", "--batch", "128")
    assert rb["compute_ms"] == pytest.approx(2 * pays.DEFAULT_COMPUTE_MS["resnet18"])
    rm = _run(tmp_path, *base, "--measure-compute")
    assert rm["compute_source"] == "measured" and rm["compute_ms"] == pytest.approx(50)


def test_model_parameter_totals():
    """The commonly quoted counts (torchvision, the reference BertModel)."""
    quoted = {"resnet18": 11_689_512, "resnet50": 25_557_032, "resnet101": 44_549_160,
              "vgg16": 138_357_544, "bert-base": 109_482_240}  # fmt: skip
    assert TOTALS == quoted
    for name, total in quoted.items():
        assert sum(model_sizes(name)) == total, name


def test_modules_match_the_layer_shapes():
    from systems.nets import build

    for name in ("resnet18", "resnet50", "vgg16", "bert-base"):
        net = build(name)
        assert [tuple(p.shape) for p in net.parameters()] == [tuple(s) for s in model_shapes(name)]
    with pytest.raises(ValueError, match="unknown model 'vgg'"):
        build("vgg")


def test_resnet18_profile_and_forward():
    from systems.nets import backward_profile

    prof = backward_profile("resnet18", repeats=1)
    ready = prof["ready"]
    assert len(ready) == len(model_shapes("resnet18")) and 0 < prof["backward_fraction"] < 1
    assert ready[-1] < ready[0]  # the classifier's gradient is ready before the stem's


def test_user_module_measured_here(tmp_path, user_module, monkeypatch, capsys):
    """A user's module end to end on this CPU: profile, codec and compute measured (and
    cached: a second run reads them back)."""
    monkeypatch.setenv("COMPZOO_CACHE", str(tmp_path / "cache"))
    argv = ["--model", f"{user_module}:make", "--input-shape", "8", "--measure-compute", "--batch",
            "4", "--device", "cpu", "--hooks", "fp16;powersgd:rank=2", "--gpus", "4"]  # fmt: skip
    r = _run(tmp_path, *argv)
    text = capsys.readouterr().out
    assert r["model"] == f"{user_module}:make" and r["parameters"] == 8 * 16 + 16 + 16 * 4 + 4
    assert r["compute_source"] == "measured" and r["compute_ms"] > 0 and r["device"] == "cpu"
    assert "compute: forward+backward of pays_user_net:make at batch 4 on cpu" in text
    assert "encode/decode on cpu on the model's DDP buckets for fp16, allreduce" in text
    assert r["profile_inputs"] == "batch 2, 8"
    assert all(row["codec_source"] == "measured" for row in r["hooks"].values())
    again = _run(tmp_path, *argv)
    assert again["compute_ms"] == r["compute_ms"]
    assert "compute|pays_user_net:make#" in capsys.readouterr().out  # said to be cached


def test_user_module_that_fails_on_the_input_exits_2(tmp_path, user_module, monkeypatch, capsys):
    monkeypatch.setenv("COMPZOO_CACHE", str(tmp_path / "cache"))
    argv = ["--model", f"{user_module}:make", "--input-shape", "3", "--compute-ms", "5"]
    assert pays.main([*argv, "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "a forward/backward on batch 2, 3 failed: RuntimeError" in err
    assert "Traceback" not in err


def test_time_compute_and_tokens_on_cpu():
    from systems.nets import InputSpec, time_compute

    net = torch.nn.Sequential(torch.nn.Embedding(50, 4), torch.nn.Flatten(), torch.nn.Linear(12, 2))
    x = InputSpec((3,), vocab=50).make(5, torch.Generator().manual_seed(0))
    assert x.dtype == torch.int64 and x.shape == (5, 3) and int(x.max()) < 50
    rec = time_compute(net, x, "cpu", repeats=2)
    assert len(rec["all_s"]) == 2 and rec["compute_s"] > 0 and rec["device"] == "cpu"


def test_sync_timer_adds_time_measured_elsewhere():
    from systems.hookcodec import SyncTimer

    stats = HookStats()
    SyncTimer(stats, torch.device("cpu")).add("decode", 0.25)
    assert stats.decode_s == pytest.approx(0.25, abs=1e-3) and stats.encode_s == 0


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_hook_codec_and_compute_on_cuda():
    """On CUDA (NCCL, world size 1): the synchronised split adds up to the call time, and the
    buckets are DDP's."""
    from systems.hookcodec import time_hook
    from systems.nets import time_compute

    shapes = [(512, 1024)] * 4 + [(7,)]
    rec = time_hook("powersgd:rank=4", shapes, None, repeats=2, device="cuda")
    assert rec["device"].startswith("cuda")
    for e, d, c in zip(rec["encode_s"], rec["decode_s"], rec["call_s"], strict=True):
        assert e + d == pytest.approx(c) and e > 0
    sizes = [math.prod(s) for s in shapes]
    want = model.ddp_buckets(sizes, model.DEFAULT_BUCKET_BYTES, model.DEFAULT_FIRST_BUCKET_BYTES)
    assert [sorted(b) for b in rec["buckets"]] == [sorted(b) for b in want]
    net = torch.nn.Linear(64, 64)
    out = time_compute(net, torch.randn(32, 64), "cuda", repeats=2)
    assert out["device"].startswith("cuda") and out["compute_s"] > 0


def test_ddp_buckets_are_what_ddp_forms():
    """torch's assignment as DDP calls it, checked against a real DDP's rebuilt buckets: 2 MiB
    tensors give a first bucket of one tensor (1 MiB cap), then 13 (25 MiB cap), then the rest;
    with an explicit cap every bucket, the first included, uses it."""
    from systems.hookcodec import time_hook

    shapes = [(512, 1024)] * 16 + [(7,)]
    sizes = [math.prod(s) for s in shapes]
    want = model.ddp_buckets(sizes, model.DEFAULT_BUCKET_BYTES, model.DEFAULT_FIRST_BUCKET_BYTES)
    assert [len(b) for b in want] == [2, 13, 2]  # the vector (ready first) joins the first
    rec = time_hook("allreduce", shapes, None, repeats=1, device="cpu")
    assert [sorted(b) for b in rec["buckets"]] == [sorted(b) for b in want]
    assert rec["device"] == "cpu"
    want = model.ddp_buckets(sizes, 5 * 2**20, None)
    assert [len(b) for b in want] == [4, 3, 3, 3, 3, 1]
    got = time_hook("allreduce", shapes, 5.0, repeats=1)["buckets"]
    assert [sorted(b) for b in got] == [sorted(b) for b in want]
    # the rule without torch's function gives the same
    assert model.ddp_buckets(sizes, 5 * 2**20, None) == _rule(sizes, 5 * 2**20, 5 * 2**20)
    assert want != _rule(sizes, 5 * 2**20, 2**20)  # a 1 MiB first bucket would differ


def _rule(sizes, first, cap):
    out, cur, filled = [], [], 0
    for i in reversed(range(len(sizes))):
        cur.append(i)
        filled += 4 * sizes[i]
        if filled >= (first if not out else cap):
            out.append(cur)
            cur, filled = [], 0
    return out + ([cur] if cur else [])
