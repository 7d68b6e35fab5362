"""The command line: its table from injected measurements, real tiny measurements, bad input."""

import json

import pytest

from systems import measure as measure_mod
from systems import model
from systems.layers import model_sizes
from systems.measure import Measurement, collective_of, measure, measure_cached
from systems.utility import main

FAKE = {
    "identity": Measurement("identity", 0, "flat", 0, 0.0, 0.0, 0.0, 1, "fake", "allreduce"),
    "topk:ratio=0.01": Measurement(
        "topk:ratio=0.01", 0, "flat", 14_567_490, 0.040, 0.002, 0.001, 1, "fake", "allgather"
    ),
}


def fake(spec, sizes):
    m = FAKE[spec]
    bits = 32 * sum(sizes) if spec == "identity" else m.bits
    return Measurement(**{**m.__dict__, "d": sum(sizes), "bits": bits})


def test_table_has_the_columns_and_the_model_numbers(capsys):
    argv = ["--model", "resnet50", "--workers", "8", "--bandwidth", "1",
            "--compressors", "identity", "topk:ratio=0.01"]  # fmt: skip
    assert main(argv, measurer=fake) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("model resnet50: d=25557032, workers=8, bandwidth=1 Gbit/s")
    header = out[3].split()
    assert header[:6] == ["compressor", "collective", "bits", "ratio", "enc+dec", "ms"]
    assert header[6:] == ["iter", "ms", "speedup", "break-even", "Gbps"]
    # the speed-ups are over the 16-bit baseline (fp16 all-reduce of DDP's buckets), no longer
    # over fp32 all-reduce (printed beside it); the default compute is systems.pays's (60 ms)
    s = model.Setting(tuple(model_sizes("resnet50")), 8, 0.06, wire_bytes=2)
    t_sync = float(model.sync_sgd_time(s, 1.0))
    t_fp32 = float(model.sync_sgd_time(model.Setting(s.sizes, 8, 0.06), 1.0))
    assert out[1].endswith(f"{t_fp32 * 1e3:.1f} ms") and "fp32" in out[1]
    assert out[2].endswith(f"{t_sync * 1e3:.1f} ms") and "fp16" in out[2]
    assert t_fp32 > 1.5 * t_sync  # a speed-up over fp32 would be far rosier
    t_top = 0.06 + 0.040 + 8 * 0.002 + 7 * 14_567_490 / 8 / 1.25e8 + 7 * 10e-6
    row = out[6].split()
    assert row[:4] == ["topk:ratio=0.01", "allgather", "0.0178", "42.0"]
    assert float(row[4]) == pytest.approx(t_top * 1e3, abs=0.05)
    assert float(row[5]) == pytest.approx(t_sync / t_top, abs=5e-4)
    ident = out[5].split()
    assert ident[:4] == ["identity", "allreduce", "1.0000", "0.0"]
    # the uncompressed all-reduce without overlap is never faster than overlapped sync SGD
    assert float(ident[5]) <= 1.0 and ident[6] == "never"
    assert out[8].startswith("predicted speedup over fp16 sync SGD at 1, 10, 25, 100 Gbit/s")
    assert out[9].split() == ["compressor", "1", "Gbps", "10", "Gbps", "25", "Gbps", "100", "Gbps"]
    assert float(out[11].split()[1]) == pytest.approx(t_sync / t_top, abs=5e-4)


def test_hooks_are_answered_by_pays(capsys, monkeypatch):
    from systems import pays

    seen = []
    monkeypatch.setattr(pays, "main", lambda argv: seen.append(argv) or 0)
    argv = ["--model", "resnet50", "--workers", "64", "--bandwidth", "10",
            "--hooks", "powersgd:rank=4", "--quiet"]  # fmt: skip
    assert main(argv) == 0
    assert seen[0][:8] == ["--model", "resnet50", "--gpus", "64", "--bandwidth", "10.0",
                           "--hooks", "powersgd:rank=4"]  # fmt: skip
    assert "answered by python -m systems.pays" in capsys.readouterr().err


def test_real_tiny_measurement_is_cached_and_plotted(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COMPZOO_CACHE", str(tmp_path / "cache"))
    fig = tmp_path / "fig.png"
    specs = ["topk:k=10", "randk:k=10,shared=true"]
    argv = ["--params", "1000", "--workers", "4", "--compressors", *specs, "--plot", str(fig)]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "flat vector of 1000 floats: d=1000, workers=4" in out
    cache = json.loads((tmp_path / "cache" / "systems_measurements.json").read_text())
    assert len(cache) == 2
    (top,) = [v for k, v in cache.items() if k.endswith("|d=1000|flat|n=1|wire|topk:k=10")]
    assert top["bits"] == 10 * (32 + 10) and top["collective"] == "allgather"
    assert fig.stat().st_size > 1000

    def boom(*a, **k):
        raise AssertionError("the cache should have answered")

    monkeypatch.setattr(measure_mod, "measure", boom)
    assert main(argv[:-2]) == 0
    assert "randk:k=10,shared=true allreduce" in capsys.readouterr().out


def test_measure_counts_bits_per_layer():
    flat = measure("topk:k=10", (1000,), repeats=1, budget_s=0.5)
    assert (flat.bits, flat.d, flat.layout) == (420, 1000, "flat")
    blocks = measure("topk:k=10", (600, 400), repeats=1, budget_s=0.5)
    assert (blocks.bits, blocks.d, blocks.layout) == (10 * 42 + 10 * 41, 1000, "layers2")
    assert blocks.repeats >= 1 and blocks.encode_s > 0 and blocks.decode_s > 0


def test_collective_follows_the_declarations():
    from compressors.registry import parse_spec

    assert collective_of(parse_spec("identity")) == "allreduce"
    assert collective_of(parse_spec("randk:shared=true")) == "allreduce"
    assert collective_of(parse_spec("randk")) == "allgather"  # private supports do not add up
    assert collective_of(parse_spec("rank:r=4")) == "allgather"  # a private Gaussian query
    assert collective_of(parse_spec("sign")) == "allgather"


def test_remeasure_ignores_the_cache(tmp_path):
    path = tmp_path / "c.json"
    a = measure_cached("sign", (64,), path=path)
    cache = json.loads(path.read_text())
    path.write_text(json.dumps({k: {**v, "bits": -1} for k, v in cache.items()}))
    assert measure_cached("sign", (64,), path=path).bits == -1
    assert measure_cached("sign", (64,), path=path, remeasure=True).bits == a.bits == 64


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--model", "vgg"], "invalid choice: 'vgg' (choose from"),
        (["--compressors", "foo"], "unknown compressor 'foo'; allowed: identity, randk, topk"),
        (["--bandwidth", "0"], "--bandwidth must be a finite number > 0 Gbit/s, got 0.0"),
        (["--bandwidth", "-3"], "--bandwidth must be a finite number > 0 Gbit/s, got -3.0"),
        (["--workers", "0"], "--workers must be an integer >= 1, got 0"),
        (["--table-bandwidths", "1,x"], "--table-bandwidths must be numbers joined by commas"),
    ],
)
def test_bad_input_exits_2_naming_the_value(argv, message, capsys):
    try:
        rc = main(argv, measurer=fake)
    except SystemExit as e:
        rc = e.code
    assert rc == 2
    err = capsys.readouterr().err
    assert message in err
    if argv[0] == "--model":  # argparse lists the allowed models (quoted or not, by version)
        assert all(name in err for name in ("resnet50", "resnet101", "bert-base"))


def test_cached_measurements_are_announced_with_their_origin(tmp_path, capsys, monkeypatch):
    import os
    import platform

    monkeypatch.setenv("COMPZOO_CACHE", str(tmp_path / "cache"))
    path = tmp_path / "cache" / "systems_measurements.json"
    argv = ["--params", "1000", "--workers", "2", "--compressors", "topk:k=10", "sign"]
    assert main(argv) == 0  # nothing cached: measured, with a progress bar
    err = capsys.readouterr().err
    assert "measuring" in err and "2/2" in err and "cached" not in err
    entry = next(iter(json.loads(path.read_text()).values()))
    assert entry["measured"]["host"] == (platform.node() or None)
    assert entry["measured"]["pid"] == os.getpid()
    when = entry["measured"]["at"]

    assert main(argv) == 0  # all cached: said on stderr, from where, when, by whom
    err = capsys.readouterr().err
    assert err.splitlines()[:-1] == [  # the last line: the note on what is assumed
        f"note: using cached measurements for 2 of 2 compressors, from {path}:",
        f"  measured {when} on host {platform.node()}, process {os.getpid()}: topk:k=10, sign",
        "  (--remeasure measures them afresh on this machine and updates the cache)",
    ]

    cache = json.loads(path.read_text())  # entries written before provenance was recorded
    path.write_text(json.dumps({k: {f: v for f, v in e.items() if f != "measured"}
                                for k, e in cache.items()}))  # fmt: skip
    assert main([*argv[:-1], "qsgd", "--quiet"]) == 0
    err = capsys.readouterr().err
    assert "for 1 of 2 compressors" in err and "at an unknown time" in err
    assert "measuring" not in err  # qsgd was measured, quietly

    assert main([*argv, "--remeasure", "--quiet"]) == 0
    err = capsys.readouterr().err  # only the note on what was measured here and what assumed
    assert err.startswith("note: encode/decode times are this machine's (cpu); compute is the")
    assert len(err.splitlines()) == 1
    assert all("measured" in e for e in json.loads(path.read_text()).values())


def test_plot_that_cannot_be_written_exits_2(tmp_path, capsys):
    (tmp_path / "file").write_text("")
    argv = ["--compressors", "identity", "--plot", str(tmp_path / "file" / "fig.png")]
    assert main(argv, measurer=fake) == 2
    assert "error: cannot write the plot" in capsys.readouterr().err
