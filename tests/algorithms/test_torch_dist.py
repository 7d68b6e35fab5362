"""Simulated nodes vs real process groups (gloo, one node per process): same trajectory."""

from __future__ import annotations

import csv
import os
import shutil
import subprocess
import sys

import pytest

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
        ["marina", "--compressor", "randk:k=3"],  # per-node streams, a shared coin, all-gather
        ["marina", "--compressor", "randk:k=3,shared=true"],  # one support: all-reduce of k
    ],
)
def test_gloo_two_processes_match_the_simulation(tmp_path, argv):
    parity(tmp_path, 2, argv)


@pytest.mark.dist
@pytest.mark.parametrize(
    "argv",
    [
        ["dcgd", "--compressor", "natural"],
        ["dcgd", "--compressor", "topk:k=2", "--step", "0.05"],
        ["diana", "--compressor", "randk:k=3"],
        ["dasha", "--compressor", "randk:k=3"],
        ["ef21-pp", "--compressor", "topk:k=2", "--participation", "0.5"],
        ["3pc", "--compressor", "topk:k=2", "--mechanism", "clag"],
        ["marina", "--compressor", "permk"],
    ],
)
@pytest.mark.parametrize("nproc", [2, 4])
def test_gloo_matches_the_simulation_for_more_methods(tmp_path, argv, nproc):
    parity(tmp_path, nproc, argv)


def test_nodes_must_equal_the_world_size(tmp_path):
    proc, _ = dist_run(tmp_path, 2, ["ef21", "--compressor", "topk", "--nodes", "3", *COMMON])
    assert proc.returncode != 0
    assert "--nodes 3 differs from the world size 2" in proc.stderr
