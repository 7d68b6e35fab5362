"""The hook bench: spec splitting, and a tiny CPU run of the command line."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from compressors.registry import parse_spec
from systems.hooks.bench import split_hooks

ROOT = Path(__file__).resolve().parents[2]


def test_split_hooks_joins_parameters_to_their_spec():
    assert split_hooks("powersgd:rank=4,fp16") == ["powersgd:rank=4", "fp16"]
    assert split_hooks("torch-powersgd:rank=4,start=3,comp:topk:ratio=0.01@ef21,bf16") == [
        "torch-powersgd:rank=4,start=3",
        "comp:topk:ratio=0.01@ef21",
        "bf16",
    ]
    assert split_hooks(
        "comp:qsgd:levels=4,norm=inf@none; comp:compose:topk:k=10+qsgd:levels=4"
    ) == [
        "comp:qsgd:levels=4,norm=inf@none",
        "comp:compose:topk:k=10+qsgd:levels=4",
    ]
    assert split_hooks(" fp16 ,, allreduce ") == ["fp16", "allreduce"]


@pytest.mark.slow
def test_cpu_run_times_every_hook_and_skips_missing_ones(tmp_path):
    out = tmp_path / "bench.json"
    hooks = "fp16,bf16,allreduce,comp:topk:ratio=0.01,nope:rank=2,torch-fp16,torch-powersgd:rank=2"
    cmd = [sys.executable, "-m", "systems.hooks.bench", "--device", "cpu", "--model", "cnn",
           "--hooks", hooks, "--warmup", "2", "--repeats", "2", "--out", str(out)]  # fmt: skip
    env = dict(os.environ, OMP_NUM_THREADS="1")
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=ROOT, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "skipping nope:rank=2: hook 'nope' is not available" in proc.stderr
    assert "comp:topk:ratio=0.01" in proc.stdout and "skipped" in proc.stdout
    record = json.loads(out.read_text())
    res = {r["spec"]: r for r in record["results"]}
    assert list(res) == split_hooks(hooks)
    assert res["nope:rank=2"]["status"] == "skipped"
    d = 16 * 3 * 9 + 16 + 32 * 16 * 9 + 32 + 32 * 8 * 8 * 10 + 10  # the cnn's 25,578 values
    k = round(0.01 * d)
    want_bytes = {
        "allreduce": 4 * d,
        "fp16": 2 * d,
        "bf16": 2 * d,
        "comp:topk:ratio=0.01": math.ceil(k * (32 + math.ceil(math.log2(d))) / 8),
    }
    assert want_bytes["comp:topk:ratio=0.01"] == math.ceil(parse_spec("topk:k=256").bits(d) / 8)
    for spec, r in res.items():
        if spec == "nope:rank=2":
            continue
        assert r["status"] == "ok" and r["buckets"] == 1 and r["bucket_numel"] == [d], spec
        assert len(r["hook_s_all"]) == 2 and r["hook_s"] >= r["hook_s_min"] > 0, spec
        if spec in want_bytes:  # a CommHook: its statistics, and its codec inside its wall time
            assert r["sent_bytes"] == want_bytes[spec], spec
            runs = zip(r["encode_s_all"], r["decode_s_all"], r["hook_s_all"], strict=True)
            for enc, dec, wall in runs:
                assert 0 < enc + dec <= wall, spec
        else:
            assert "sent_bytes" not in r


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--device", "cuda"], "--device cuda: no CUDA device is available"),
        (["--repeats", "0"], "repeats must be >= 1, got 0"),
    ],
)
def test_bad_input_exits_2_with_a_message(argv, message, capsys):
    import torch

    from systems.hooks import bench

    if argv[1] == "cuda" and torch.cuda.is_available():
        pytest.skip("a CUDA device is present")
    assert bench.main(argv) == 2
    assert message in capsys.readouterr().err
