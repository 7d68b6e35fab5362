"""The DDP comm hook: real gloo process groups against single-process references.

``ddp_worker.py`` trains a float64 MLP for 5 SGD steps on every rank (own data per rank) under
several hook configurations and records each hook call. Its small bucket cap makes DDP rebuild
its buckets after the first step (one bucket of all 6 parameters becomes two, in reverse
order), so every check below also covers the buffers following their parameters.
The references keep the per-node buffers in model coordinates (``(n, D)`` over all parameters)
and redo each method on the stacked per-rank gradients, drawing the same streams.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest
import torch

from comm.base import TAG_NODE, TAG_SHARED
from comm.ddp_hook import (
    ERROR_FEEDBACK,
    CompressionState,
    compression_hook,
    register,
    stream_tag,
)
from compressors.registry import parse_spec
from streams import Streams

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import ddp_worker  # noqa: E402

TORCHRUN = shutil.which("torchrun") or os.path.join(os.path.dirname(sys.executable), "torchrun")
RECORDED = [name for name, spec in ddp_worker.SCENARIOS.items() if spec and not spec[4]]


def launch(out: Path, nproc: int) -> list[dict]:
    cmd = [TORCHRUN, "--standalone", f"--nproc_per_node={nproc}", str(HERE / "ddp_worker.py"),
           str(out)]  # fmt: skip
    env = dict(os.environ, OMP_NUM_THREADS="1")
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return [torch.load(out / f"rank{r}.pt") for r in range(nproc)]


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory) -> list[dict]:
    return launch(tmp_path_factory.mktemp("ddp2"), 2)


def compress(C, v, sizes, b: int, t: int, seed: int, layerwise: bool):
    """``C`` applied to the rows ``v`` ``(n, d)`` segment by segment, with the hook's streams
    (node ``i``: ``(seed, TAG_NODE, tag, t, i)``; tag ``b``, or one per layer); and the bits
    of one row."""
    n = v.shape[0]
    parts, start, bits = [], 0, 0
    for j, size in enumerate(sizes):
        tag = stream_tag(b, j) if layerwise else b
        if C.shared_randomness:
            rng = Streams.shared(seed, n, TAG_SHARED, tag, t)
        else:
            rng = Streams.for_nodes(seed, range(n), TAG_NODE, tag, t)
        parts.append(C(v[:, start : start + size], rng))
        bits += C.bits(size)
        start += size
    return torch.cat(parts, dim=1), bits


def reference(results: list[dict], name: str) -> tuple[list[torch.Tensor], int]:
    """The averages the hook must return at each call, and the uplink bits of one rank."""
    spec, ef, seed, layerwise, *_ = ddp_worker.SCENARIOS[name]
    C = parse_spec(spec)
    n = len(results)
    numels = [p.numel() for p in results[0][name]["params"]]
    offsets = [sum(numels[:j]) for j in range(len(numels))]
    D = sum(numels)
    e_i = torch.zeros(n, D, dtype=torch.float64)
    g_i = torch.zeros(n, D, dtype=torch.float64)
    g = torch.zeros(D, dtype=torch.float64)
    ready = torch.zeros(D, dtype=torch.bool)
    steps: dict[int, int] = defaultdict(int)
    outs, bits = [], 0
    for k, call in enumerate(results[0][name]["calls"]):
        b, t = call["b"], steps[call["b"]]
        steps[b] += 1
        idx = torch.cat([torch.arange(offsets[j], offsets[j] + numels[j]) for j in call["params"]])
        x = torch.stack([r[name]["calls"][k]["grad"] for r in results])  # (n, d)
        sizes = [numels[j] for j in call["params"]] if layerwise else [idx.numel()]
        args = (sizes, b, t, seed, layerwise)
        if ef == "none":
            c_i, nb = compress(C, x, *args)
            avg = c_i.mean(0)
        elif ef == "ef14":
            p_i = e_i[:, idx] + x
            c_i, nb = compress(C, p_i, *args)
            e_i[:, idx] = p_i - c_i
            avg = c_i.mean(0)
        elif not ready[idx].all():
            g_i[:, idx], g[idx], ready[idx] = x, x.mean(0), True
            nb = 32 * idx.numel()
            avg = g[idx]
        else:
            c_i, nb = compress(C, x - g_i[:, idx], *args)
            g_i[:, idx] += c_i
            g[idx] += c_i.mean(0)
            avg = g[idx]
        bits += nb
        outs.append(avg.clone())
    return outs, bits


def check_against_reference(results: list[dict], name: str) -> float:
    """Every rank returned the reference's averages; returns the largest deviation."""
    outs, bits = reference(results, name)
    worst = 0.0
    for r, res in enumerate(results):
        calls = res[name]["calls"]
        assert len(calls) == len(outs) == 9  # 5 steps: one bucket, then two after the rebuild
        for k, (call, ref) in enumerate(zip(calls, outs, strict=True)):
            assert torch.equal(call["out"], results[0][name]["calls"][k]["out"]), (r, k)
            worst = max(worst, float((call["out"] - ref).abs().max()))
        assert res[name]["bits"] == bits, (r, res[name]["bits"], bits)
        assert res[name]["rebuilds"] == 1
        assert res[name]["steps"] == {0: 5, 1: 4}
        for p, q in zip(res[name]["params"], results[0][name]["params"], strict=True):
            assert torch.equal(p, q)  # the replicas stay identical
    return worst


# ---------------------------------------------------------------- two gloo processes


def test_identity_hook_reproduces_plain_ddp_bitwise(two_ranks):
    # Plain DDP divides each bucket by the world size and all-reduces; the hook scales its row by
    # 1/n and all-reduces: with n = 2 both scalings are exact, so the sums are the same floats.
    for res in two_ranks:
        plain, hooked = res["plain"]["params"], res["identity"]["params"]
        diffs = [float((p - q).abs().max()) for p, q in zip(plain, hooked, strict=True)]
        assert max(diffs) == 0.0, diffs
        init = [p.detach() for p in ddp_worker.make_model().parameters()]
        moved = [float((p - q).abs().max()) for p, q in zip(plain, init, strict=True)]
        assert min(moved) > 1e-3, moved  # every parameter trained: the equality is not vacuous
        assert res["identity"]["rebuilds"] == 1  # the buckets were rebuilt after step 0
        # identity: 32 bits per value, 257 values, 5 steps, as the bit model counts; the wire
        # moved whole float64 rows (8 bytes a value), which the bitwise equality needs
        assert res["identity"]["bits"] == 32 * 257 * 5 == 41120
        assert 8 * 257 * 5 <= res["identity"]["wire"] <= 2 * 8 * 257 * 5


@pytest.mark.parametrize("name", RECORDED)
def test_hook_matches_the_single_process_reference(two_ranks, name):
    assert check_against_reference(two_ranks, name) <= 1e-12


def test_bits_and_bytes_follow_the_bit_formula(two_ranks):
    C = parse_spec("topk:k=3")
    for res in two_ranks:
        ds = [c["grad"].numel() for c in res["none_topk"]["calls"]]
        assert ds == [257, 145, 112, 145, 112, 145, 112, 145, 112]
        assert res["none_topk"]["bits"] == sum(C.bits(d) for d in ds) == 123 + 4 * 120 + 4 * 117
        # The byte layout is TorchDistComm's business (bit-packed, or values and int64 indices
        # as they are): between the bit model in whole bytes and 16 bytes per kept value, far
        # below the 8 * d bytes of a dense float64 row.
        low = sum((C.bits(d) + 7) // 8 for d in ds)
        assert low == 136 and 8 * sum(ds) == 10280
        assert low <= res["none_topk"]["wire"] <= 432
        # EF21: one uncompressed round of all 257 values, then Top-K on the rebuilt buckets
        # (the rebuild moves g_i and g with their parameters, so no second full round)
        assert res["ef21_topk"]["bits"] == 32 * 257 + 4 * C.bits(145) + 4 * C.bits(112) == 9172


@pytest.mark.dist
def test_three_processes_match_the_reference(tmp_path):
    results = launch(tmp_path, 3)
    for name in RECORDED:
        assert check_against_reference(results, name) <= 1e-12, name


# ---------------------------------------------------------------- in one process


def test_unknown_error_feedback_is_rejected():
    with pytest.raises(
        ValueError, match=r"error_feedback must be one of none, ef14, ef21; got 'ef3'"
    ):
        CompressionState("topk", error_feedback="ef3")
    assert ERROR_FEEDBACK == ("none", "ef14", "ef21")


def test_bad_compressor_and_float_bits_are_rejected():
    with pytest.raises(ValueError, match="unknown compressor 'nope'"):
        CompressionState("nope")
    with pytest.raises(ValueError, match="compressor must be a Compressor or a spec string, got 3"):
        CompressionState(3)
    with pytest.raises(ValueError, match="float_bits must be 16, 32 or 64, got 8"):
        CompressionState("topk", float_bits=8)
    with pytest.raises(ValueError, match="model must be a DistributedDataParallel, got Linear"):
        register(torch.nn.Linear(2, 1), "topk")


def test_stream_tags_are_distinct():
    tags = [stream_tag(b) for b in range(64)]
    tags += [stream_tag(b, j) for b in range(64) for j in range(64)]
    assert len(set(tags)) == 64 + 64 * 64
    assert stream_tag(3) == 3 and stream_tag(0, 0) == 1 << 40
    with pytest.raises(ValueError, match="layer must be in"):
        stream_tag(0, -1)


class FakeBucket:
    """What the hook reads of a ``GradBucket``: index, flat buffer, parameters."""

    def __init__(self, index: int, params: list[torch.Tensor], grads: list[torch.Tensor]):
        self._index, self._params = index, params
        self._buffer = torch.cat([g.reshape(-1) for g in grads])

    def index(self) -> int:
        return self._index

    def buffer(self) -> torch.Tensor:
        return self._buffer

    def parameters(self) -> list[torch.Tensor]:
        return self._params


@pytest.fixture
def solo_group(tmp_path):
    """A one-rank gloo group in this process (the hook needs a process group to exist)."""
    import torch.distributed as dist

    if dist.is_initialized():
        pytest.skip("a process group already exists in this process")
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'pg'}", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def two_layouts(params, grads0, grads1):
    """Step 0: one bucket of (p0, p1, p2); step 1 after a rebuild: (p2, p1) and (p0)."""
    p0, p1, p2 = params
    yield [FakeBucket(0, [p0, p1, p2], grads0)]
    yield [FakeBucket(0, [p2, p1], [grads1[2], grads1[1]]), FakeBucket(1, [p0], [grads1[0]])]


@pytest.mark.parametrize("ef", ["ef14", "ef21"])
def test_rebuilt_buckets_carry_the_buffers_of_their_parameters(solo_group, ef):
    gen = torch.Generator().manual_seed(5)
    params = [torch.zeros(3), torch.zeros(2), torch.zeros(4)]
    grads = [[torch.randn(p.shape, generator=gen, dtype=torch.float64) for p in params]
             for _ in range(2)]  # fmt: skip
    C = parse_spec("topk:k=1")
    state = CompressionState(C, error_feedback=ef)
    out: dict[int, list[torch.Tensor]] = {0: [], 1: []}  # per step, per parameter
    for step, buckets in enumerate(two_layouts(params, *grads)):
        for bucket in buckets:
            avg = compression_hook(state, bucket).value()
            sizes = [p.numel() for p in bucket.parameters()]
            out[step] += list(zip(bucket.parameters(), avg.split(sizes), strict=True))
    by_param = {step: {id(p): v for p, v in pairs} for step, pairs in out.items()}
    assert state.rebuilds == 1 and state.steps() == {0: 2, 1: 1}
    flat = [torch.cat([g.reshape(-1) for g in gs]) for gs in grads]  # (p0, p1, p2) order
    if ef == "ef14":
        # one node: p = e + grad, e = p - Top1(p); after the rebuild e follows each parameter
        c0 = C(flat[0][None], 0)[0]
        e = flat[0] - c0
        p = e + flat[1]
        got1 = torch.cat([by_param[1][id(q)] for q in params])
        e_p2p1, e_p0 = state.buckets[0].e_i[0], state.buckets[1].e_i[0]
        e1 = torch.cat([e_p0, e_p2p1[4:], e_p2p1[:4]])
        assert torch.equal(got1 + e1, p)  # the sent part and the error split p exactly
        assert float((got1 + e1 - flat[1] - flat[0] + c0).abs().max()) <= 1e-15
        assert state.bits_up() == C.bits(9) + C.bits(6) + C.bits(3) == 36 + 35 + 34
    else:
        # g = g_i = grad after the full round; then g += Top1(grad - g) per rebuilt bucket
        got1 = torch.cat([by_param[1][id(q)] for q in params])
        diff = flat[1] - flat[0]
        want = flat[0].clone()
        for sl in (slice(5, 9), slice(3, 5)), (slice(0, 3),):
            seg = torch.cat([diff[s] for s in sl])
            top = C(seg[None], 0)[0]
            start = 0
            for s in sl:
                n = s.stop - s.start
                want[s] += top[start : start + n]
                start += n
        assert torch.equal(got1, want)
        assert state.bits_up() == 32 * 9 + C.bits(6) + C.bits(3) == 288 + 35 + 34


def test_ef21_restarts_a_bucket_holding_a_new_parameter(solo_group):
    state = CompressionState("topk:k=1", error_feedback="ef21")
    a, b = torch.zeros(2), torch.zeros(3)
    g = torch.tensor([1.0, -2.0, 3.0, 0.5, -0.25], dtype=torch.float64)
    compression_hook(state, FakeBucket(0, [a], [g[:2]]))
    out = compression_hook(state, FakeBucket(0, [a, b], [g[:2], g[2:]])).value()
    assert torch.equal(out, g)  # a new parameter: the whole bucket is sent uncompressed again
    assert state.bits_up() == 32 * 2 + 32 * 5 and state.rebuilds == 1
