"""Simulated nodes vs real process groups (gloo, one node per process): same trajectory."""

from __future__ import annotations

import csv
import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

from algorithms.registry import ALGORITHMS, usual_argv, usual_compressor
from algorithms.run import run

TORCHRUN = shutil.which("torchrun") or os.path.join(os.path.dirname(sys.executable), "torchrun")
COMMON = ["--problem", "quadratic", "--iters", "40", "--quiet", "--seed", "3"]


def history(path) -> list[dict]:
    with open(path / "history.csv") as fh:
        return list(csv.DictReader(fh))


def dist_run(tmp_path, nproc: int, argv: list[str]):
    out = tmp_path / f"dist{nproc}"
    cmd = [TORCHRUN, "--standalone", f"--nproc_per_node={nproc}", "-m", "algorithms.run",
           *argv, "--out", str(out)]  # fmt: skip
    env = dict(os.environ, OMP_NUM_THREADS="1")
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=240, env=env)
    return proc, out


def assert_same_run(sim, dist) -> None:
    a, b = history(sim), history(dist)
    assert len(a) == len(b)
    for ra, rb in zip(a, b, strict=True):
        for key in ("bits_up", "bits_down", "bits_up_max", "bits_down_max", "iter"):
            assert ra[key] == rb[key], (key, ra, rb)
        for key in ("f", "grad_norm_sq"):
            fa, fb = float(ra[key]), float(rb[key])
            assert abs(fa - fb) <= 1e-10 * max(1.0, abs(fa)), (key, ra["iter"], fa, fb)


def parity(tmp_path, nproc: int, argv: list[str]) -> None:
    proc, out = dist_run(tmp_path, nproc, [*argv, *COMMON])
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert run([*argv, *COMMON, "--nodes", str(nproc), "--out", str(tmp_path / "sim")]) == 0
    assert_same_run(tmp_path / "sim", out)


@pytest.mark.parametrize(
    "argv",
    [
        ["ef21", "--compressor", "topk:k=2"],  # deterministic compressor
        # per-node streams, a shared coin, all-gather: after the default suite (its budget)
        pytest.param(["marina", "--compressor", "randk:k=3"], marks=pytest.mark.heavy),
        # one support, an all-reduce of k values: in the dist suite (the default's budget)
        pytest.param(["marina", "--compressor", "randk:k=3,shared=true"], marks=pytest.mark.dist),
    ],
)
def test_gloo_two_processes_match_the_simulation(tmp_path, argv):
    parity(tmp_path, 2, argv)


def method_argv(name: str) -> list[str]:
    """A run of ``name`` with a compressor of the class its theory assumes (randomized ones
    for the unbiased methods, so the per-node streams are exercised)."""
    compressor = usual_compressor(name, 2 if ALGORITHMS[name].needs == "contractive" else 3)
    return [name, "--compressor", compressor, "--step", "0.05", *usual_argv(name)]


@pytest.mark.dist
@pytest.mark.parametrize("nproc", [2, 4])
@pytest.mark.parametrize(
    "argv",
    [method_argv(name) for name in sorted(ALGORITHMS)]
    + [
        ["dcgd", "--compressor", "natural"],
        ["ef21-pp", "--compressor", "topk:k=2", "--participation", "0.5"],
        ["3pc", "--compressor", "topk:k=2", "--mechanism", "clag"],
        ["marina", "--compressor", "permk"],
        ["diana", "--compressor", "qsgd:levels=4,coding=elias"],
    ],
    ids=lambda a: "-".join(a[:3]),
)
def test_gloo_matches_the_simulation_for_every_method(tmp_path, argv, nproc):
    parity(tmp_path, nproc, argv)


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--nodes", "1"], "--nodes 1 is less than the world size 2"),
        (["--timeout", "0"], "--timeout must be a positive number of seconds, got 0"),
        (["--backend", "nccl"], "--backend nccl needs --device cuda"),
    ],
)
def test_every_rank_names_a_refusal_before_the_group_starts(monkeypatch, capsys, argv, message):
    """torchrun stops the other ranks as soon as one exits: a rank other than 0 that refuses
    bad input before the group starts names it itself (it had left that to rank 0, whose
    message was lost when the other rank exited first: seen under load in CI)."""
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")
    assert run(["ef21", "--compressor", "topk", *argv, *COMMON]) == 2
    assert message in capsys.readouterr().err


def test_fewer_nodes_than_processes_is_refused(tmp_path):
    proc, _ = dist_run(tmp_path, 2, ["ef21", "--compressor", "topk", "--nodes", "1", *COMMON])
    assert proc.returncode != 0  # torchrun reports a failed child as 1
    assert "--nodes 1 is less than the world size 2" in proc.stderr
    assert "allowed: --nodes >= 2" in proc.stderr


def per_node_bits(out) -> dict:
    per = json.loads((out / "summary.json").read_text())["per_node"]
    return {k: per[k] for k in ("bits_up", "bits_down")}


def sharded_parity(tmp_path, nproc: int, nodes: int, argv: list[str]) -> None:
    """``nodes`` simulated nodes over ``nproc`` processes against the ``nodes``-node
    simulation: the same history (to the reductions' order) and every node's bits."""
    full = [*argv, *COMMON, "--nodes", str(nodes)]
    proc, out = dist_run(tmp_path, nproc, full)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert run([*full, "--out", str(tmp_path / "sim")]) == 0
    assert_same_run(tmp_path / "sim", out)
    assert per_node_bits(out) == per_node_bits(tmp_path / "sim")
    assert len(per_node_bits(out)["bits_up"]) == nodes


@pytest.mark.parametrize(
    "nodes, argv",
    [
        (8, ["ef21", "--compressor", "topk:k=2"]),  # N = 4W
        # N not divisible by W, per-node streams; weights: after the default suite (its budget)
        pytest.param(5, ["marina", "--compressor", "randk:k=3"], marks=pytest.mark.heavy),
        pytest.param(
            5,
            ["ef21-pp", "--compressor", "topk:k=2", "--participation", "0.5"],
            marks=pytest.mark.heavy,
        ),
    ],
)
def test_sharded_nodes_match_the_simulation(tmp_path, nodes, argv):
    sharded_parity(tmp_path, 2, nodes, argv)


@pytest.mark.dist
@pytest.mark.parametrize("nproc, nodes", [(2, 8), (2, 5), (3, 7)])
@pytest.mark.parametrize(
    "argv",
    [method_argv(name) for name in sorted(ALGORITHMS)]
    + [
        ["marina", "--compressor", "randk:k=3,shared=true"],
        ["dcgd", "--compressor", "natural"],
        ["diana", "--compressor", "qsgd:levels=4,coding=elias"],
    ],
)
def test_sharded_nodes_match_the_simulation_for_every_method(tmp_path, argv, nproc, nodes):
    sharded_parity(tmp_path, nproc, nodes, argv)


@pytest.mark.dist  # about 17 s: the default suite's budget (a plain gloo resume stays there)
def test_a_sharded_run_resumes_on_another_process_count(tmp_path):
    argv = ["diana", "--compressor", "randk:k=3", "--problem", "quadratic", "--seed", "4",
            "--log-every", "1", "--quiet", "--nodes", "6"]  # fmt: skip
    proc, out = dist_run(tmp_path, 2, [*argv, "--iters", "13", "--checkpoint-every", "5"])
    assert proc.returncode == 0, proc.stderr[-2000:]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    other = [TORCHRUN, "--standalone", "--nproc_per_node=3", "-m", "algorithms.run",
             "--resume", str(out), "--iters", "30"]  # fmt: skip
    resumed = subprocess.run(other, capture_output=True, text=True, timeout=240, env=env)
    assert resumed.returncode == 0, resumed.stderr[-2000:]  # 2 processes' checkpoint, 3 now
    sim = tmp_path / "sim"
    assert run([*argv, "--iters", "30", "--out", str(sim)]) == 0
    assert_same_run(sim, out)
    assert per_node_bits(out) == per_node_bits(sim)
    # and back into one process: the 6 nodes' rows gathered from the 3 files
    again = tmp_path / "again"
    proc, again = dist_run(tmp_path / "b", 3, [*argv, "--iters", "13", "--checkpoint-every", "5"])
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert run(["--resume", str(again), "--iters", "30"]) == 0
    assert_same_run(sim, again)
    assert per_node_bits(again) == per_node_bits(sim)


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch_ranks(nproc: int, argv: list[str]) -> list[subprocess.Popen]:
    """Start ``nproc`` ranks by hand (what torchrun does), so a test can kill or stop one."""
    port = free_port()
    procs = []
    for rank in range(nproc):
        env = dict(os.environ, OMP_NUM_THREADS="1", RANK=str(rank), LOCAL_RANK=str(rank),
                   WORLD_SIZE=str(nproc), LOCAL_WORLD_SIZE=str(nproc),
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))  # fmt: skip
        cmd = [sys.executable, "-m", "algorithms.run", *argv]
        procs.append(subprocess.Popen(cmd, env=env, stderr=subprocess.PIPE, text=True))
    return procs


def wait_for_rows(path, count: int, procs, limit: float = 120.0) -> None:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if path.exists() and len(path.read_text().splitlines()) > count:
            return
        assert all(p.poll() is None for p in procs), [p.stderr.read() for p in procs]
        time.sleep(0.02)
    raise AssertionError(f"{path} never reached {count} rows")


# The hung case waits out a timeout (about 15 s): in the dist suite, the killed case by default.
@pytest.mark.parametrize("fault", ["killed", pytest.param("hung", marks=pytest.mark.dist)])
def test_a_dead_or_hung_rank_makes_the_others_fail_within_the_timeout(tmp_path, fault):
    timeout = 12  # above the ranks' start-up skew on a loaded 2-core machine
    argv = ["ef21", "--compressor", "topk:k=2", "--problem", "quadratic", "--iters", "100000",
            "--log-every", "1", "--quiet", "--timeout", str(timeout),
            "--out", str(tmp_path / "r")]  # fmt: skip
    procs = launch_ranks(3, argv)
    try:
        wait_for_rows(tmp_path / "r" / "history.csv", 3, procs)
        victim = procs[2]
        victim.send_signal(signal.SIGKILL if fault == "killed" else signal.SIGSTOP)
        start = time.monotonic()
        for p in procs[:2]:
            p.wait(timeout=timeout + 60)
        waited = time.monotonic() - start
        for p in procs[:2]:
            assert p.returncode == 4, p.stderr.read()
            err = p.stderr.read()
            assert "a collective failed" in err and f"--timeout {timeout} s" in err, err
        assert waited <= timeout + 30
        if fault == "hung":
            assert waited >= timeout * 0.8  # the others waited for the timeout, then gave up
        assert len((tmp_path / "r" / "history.csv").read_text().splitlines()) > 3  # kept
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()


@pytest.mark.heavy  # 17 s: two gloo launches, a simulation (on 2 cores)
def test_a_resumed_gloo_run_follows_the_uninterrupted_simulation(tmp_path):
    argv = ["marina", "--compressor", "randk:k=3", "--problem", "quadratic", "--seed", "4",
            "--log-every", "1", "--quiet"]  # fmt: skip
    proc, out = dist_run(tmp_path, 2, [*argv, "--iters", "13", "--checkpoint-every", "5"])
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert sorted(p.name for p in (out / "checkpoint").iterdir()) == [
        "meta.json", "rank0-iter13.pt", "rank1-iter13.pt"
    ]  # fmt: skip
    cmd = [TORCHRUN, "--standalone", "--nproc_per_node=2", "-m", "algorithms.run",
           "--resume", str(out), "--iters", "30"]  # fmt: skip
    env = dict(os.environ, OMP_NUM_THREADS="1")
    resumed = subprocess.run(cmd, capture_output=True, text=True, timeout=240, env=env)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    sim = tmp_path / "sim"
    assert run([*argv, "--iters", "30", "--nodes", "2", "--out", str(sim)]) == 0
    assert_same_run(sim, out)


WIRE = ["--problem", "quadratic", "--problem-opt", "dim=1000", "--dtype", "float32", "--iters",
        "6", "--quiet", "--seed", "2", "--step", "0.1"]  # fmt: skip


def assert_wire_matches_bits(tmp_path, argv: list[str], nproc: int = 2) -> dict:
    """Bytes handed to collectives vs the accounted bits (float32 values, float_bits 32)."""
    proc, out = dist_run(tmp_path, nproc, [*argv, *WIRE])
    assert proc.returncode == 0, proc.stderr[-2000:]
    last = history(out)[-1]
    wire, bits = 8 * float(last["wire_bytes_up"]), float(last["bits_up"])
    assert bits > 0 and abs(wire - bits) <= 0.02 * bits, (wire, bits)
    return last


@pytest.mark.parametrize(
    "argv",
    [
        ["ef21", "--compressor", "topk:k=10"],  # bit-packed indices + float32 values
        # variable size, Elias code: after the default suite (its budget)
        pytest.param(
            ["diana", "--compressor", "qsgd:levels=4,coding=elias"], marks=pytest.mark.heavy
        ),
        # one bit per sign + a scale: in the dist suite (the default suite's budget)
        pytest.param(["dcgd", "--compressor", "scaled-sign"], marks=pytest.mark.dist),
    ],
)
def test_wire_bytes_match_the_accounted_bits(tmp_path, argv):
    assert_wire_matches_bits(tmp_path, argv)


@pytest.mark.dist
@pytest.mark.parametrize(
    "argv",
    [
        ["diana", "--compressor", "randk:k=10"],
        ["marina", "--compressor", "randk:k=10,shared=true"],
        ["marina", "--compressor", "permk"],
        ["diana", "--compressor", "natural"],
        ["diana", "--compressor", "qsgd:levels=8"],
        ["ef21", "--compressor", "rank:r=2"],
        ["ef21", "--compressor", "compose:topk:k=20+qsgd:levels=4", "--force-compressor"],
        ["ef21-pp", "--compressor", "topk:k=10", "--participation", "0.5"],
        ["dasha", "--compressor", "terngrad"],
    ],
)
def test_wire_bytes_match_the_accounted_bits_for_more_payloads(tmp_path, argv):
    assert_wire_matches_bits(tmp_path, argv, nproc=3)


# heavy: CI runs it after the default suite (the default suite's 8-minute budget)
@pytest.mark.heavy
def test_two_launchers_over_loopback_match_the_simulation(tmp_path):
    """The multi-host launch of the README (``torchrun --nnodes 2 --rdzv-backend c10d``), both
    "hosts" on this machine: two launchers of one process each, 6 nodes in blocks of 3."""
    port = free_port()
    argv = ["marina", "--compressor", "randk:k=3", *COMMON, "--nodes", "6"]
    out = tmp_path / "two-hosts"
    env = dict(os.environ, OMP_NUM_THREADS="1")
    launchers = [
        subprocess.Popen(
            [
                TORCHRUN,
                "--nnodes",
                "2",
                "--nproc-per-node",
                "1",
                "--node-rank",
                str(h),
                "--rdzv-backend",
                "c10d",
                "--rdzv-endpoint",
                f"127.0.0.1:{port}",
                "--rdzv-id",
                "compzoo-test",
                "-m",
                "algorithms.run",
                *argv,
                "--out",
                str(out),
            ],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        for h in range(2)
    ]
    try:
        for p in launchers:
            _, err = p.communicate(timeout=240)
            assert p.returncode == 0, err[-2000:]
    finally:
        for p in launchers:
            if p.poll() is None:
                p.kill()
    assert json.loads((out / "config.json").read_text())["world_size"] == 2
    assert run([*argv, "--out", str(tmp_path / "sim")]) == 0
    assert_same_run(tmp_path / "sim", out)
    assert per_node_bits(out) == per_node_bits(tmp_path / "sim")
