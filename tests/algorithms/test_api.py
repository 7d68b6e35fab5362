"""``algorithms.api.run``: the same history as the command line, nothing written without
``out=``, bad arguments as ValueError; a compressor and a method defined here (as in a
notebook) run through the API as objects, and through an entry point of an installed package
by name on the command line, in ``--list`` and in the registries."""

from __future__ import annotations

import csv
import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import ClassVar

import pytest
import torch

from algorithms.base import Algorithm, State
from compressors.base import Compressor, Packet
from streams import Streams

# The runner is imported inside the tests: an entry point names this module, which the
# registries then import while they load plugins.

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
TIMES = {"wall_s", "t_compute", "t_encode", "t_communicate", "t_decode"}


@dataclasses.dataclass(frozen=True)
class Halve(Compressor):
    """``C(x) = x / 2``: contractive with ``delta = 3/4``; ``float_bits * d`` bits."""

    contractive: ClassVar[bool] = True
    deterministic: ClassVar[bool] = True

    float_bits: int = 32

    def delta(self, d: int) -> float:
        return 0.75

    def bits(self, d: int) -> int:
        return self.float_bits * d

    def _encode(self, x_i: torch.Tensor, rng: Streams) -> Packet:
        return self._packet(x_i, self.bits(x_i.shape[1]), {"values"}, values=x_i / 2)

    def _decode(self, packet: Packet) -> torch.Tensor:
        return packet.fields["values"]


@dataclasses.dataclass(frozen=True)
class PlainCGD(Algorithm):
    """``x <- x - gamma mean_i C(grad f_i(x))`` (no theory step: give ``step``)."""

    needs: ClassVar[str] = "any"

    def init(self, x0, problem, comm) -> State:
        return State(x=x0.clone(), t=0)

    def _step(self, state: State, problem, comm):
        C, t = self.compressor, state.t
        comm.broadcast_full(problem.d)
        g = comm.reduce(C.encode(problem.grad(state.x), comm.rng_for(C, t)), C)
        return dataclasses.replace(state, x=state.x - self.gamma * g, t=t + 1), {}


def rows(path: Path) -> list[dict]:
    with open(path, newline="") as fh:
        return [{k: v for k, v in r.items() if k not in TIMES} for r in csv.DictReader(fh)]


def test_the_api_gives_the_command_lines_history(tmp_path):
    from algorithms.api import run
    from algorithms.run import run as cli

    argv = ["marina", "--compressor", "randk:k=3", "--nodes", "5", "--iters", "30",
            "--seed", "3", "--step-mult", "2", "--log-every", "3"]  # fmt: skip
    assert cli([*argv, "--quiet", "--out", str(tmp_path / "cli")]) == 0
    res = run("marina", compressor="randk:k=3", nodes=5, iters=30, seed=3, step_mult=2,
              log_every=3)  # fmt: skip
    assert res.status == 0 and res.summary["reason"] == "completed" and res.out is None
    want = rows(tmp_path / "cli" / "history.csv")
    assert set(want[0]) | TIMES == set(res.history.columns)
    assert len(res.history) == len(want) == 11
    for a, b in zip(res.history.to_dict("records"), want, strict=True):
        for key in ("iter", "bits_up", "bits_down", "f", "grad_norm_sq"):
            assert float(a[key]) == float(b[key]), key
    cfg = json.loads((tmp_path / "cli" / "config.json").read_text())
    assert res.config["step"]["gamma"] == cfg["step"]["gamma"]
    assert res.final["f"] == float(want[-1]["f"])


def test_nothing_is_written_without_out(tmp_path, monkeypatch, capsys):
    from algorithms.api import run

    monkeypatch.chdir(tmp_path)
    res = run("ef21", compressor="topk:k=2", nodes=4, iters=20)
    assert list(tmp_path.iterdir()) == []
    assert capsys.readouterr().out == ""
    assert len(res.history) == 21 and res.summary["out"] is None


def test_out_writes_the_run_folder(tmp_path):
    from algorithms.api import run

    res = run("ef21", compressor="topk:k=2", nodes=4, iters=20, out=tmp_path / "r")
    assert res.out == tmp_path / "r"
    assert sorted(p.name for p in res.out.iterdir()) == [
        "config.json",
        "history.csv",
        "summary.json",
    ]
    assert json.loads((res.out / "summary.json").read_text())["run_id"] == res.summary["run_id"]
    assert len(rows(res.out / "history.csv")) == len(res.history)


def test_problem_options_and_method_options(tmp_path):
    from algorithms.api import run

    res = run("ef21-hb", compressor="topk:k=1", problem="quadratic", problem_opt={"dim": 7},
              nodes=3, iters=5, eta=0.5, lam=0.2)  # fmt: skip
    assert res.config["problem"]["d"] == 7 and res.config["method"]["eta"] == 0.5
    assert res.config["problem"]["lambda"] == 0.2


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"method": "nope"}, "unknown algorithm 'nope'"),
        ({"method": "ef21", "compressor": "nope"}, "unknown compressor 'nope'"),
        ({"method": "ef21", "iters": -1}, "--iters"),
        ({"method": "ef21", "bogus_flag": 1}, "unknown option 'bogus_flag' for ef21"),
        ({"method": "ef21", "checkpoint_every": 5}, "checkpoint_every needs out="),
        ({"method": 3}, "method must be a registered name"),
    ],
)
def test_bad_arguments_raise_value_error(kwargs, message):
    from algorithms.api import run

    with pytest.raises(ValueError, match=message):
        run(**kwargs)


def test_a_notebook_compressor_and_method_run_as_objects():
    """Neither class is registered: both run, through the same loop and comm layer."""
    from algorithms.api import run
    from problems.registry import make_problem

    res = run(PlainCGD, compressor=Halve(), nodes=4, iters=40, step=0.5, seed=1)
    assert res.status == 0 and res.summary["reason"] == "completed"
    f = res.history["f"].to_numpy()
    assert f[-1] < f[0]  # halved gradients, a step of 0.5: still descent on the quadratic
    assert res.history["bits_up"].iloc[-1] == 40 * 32 * 20  # float_bits * d per round
    assert "Halve" in res.config["compressor"]["spec"]
    problem = make_problem("quadratic", nodes=4, seed=1)  # what run() builds for seed 1
    again = run(PlainCGD, compressor=Halve(), problem=problem, iters=40, step=0.5, seed=1)
    assert again.history["f"].tolist() == res.history["f"].tolist()
    with pytest.raises(ValueError, match="dataset, split: set by the problem object itself"):
        run(PlainCGD, compressor=Halve(), problem=problem, step=0.5, dataset="x", split="iid")
    ef21 = run("ef21", compressor=Halve(), nodes=4, iters=10)  # a registered method, theory step
    assert ef21.config["step"]["gamma"] > 0 and ef21.config["compressor"]["delta"] == 0.75


def _plugin(tmp_path: Path) -> dict:
    """An installed package, as importlib.metadata sees one, whose entry points name the two
    classes of this file."""
    dist = tmp_path / "site" / "compzoo_test_plugin-0.1.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: compzoo-test-plugin\nVersion: 0.1\n"
    )
    (dist / "entry_points.txt").write_text(
        "[compzoo.algorithms]\nplain-cgd = test_api:PlainCGD\n\n"
        "[compzoo.compressors]\nhalve = test_api:Halve\n\n"
        "[compzoo.problems]\nnot-a-problem = test_api:Halve\n"
    )
    path = os.pathsep.join([str(tmp_path / "site"), str(HERE), str(ROOT)])
    return dict(os.environ, PYTHONPATH=path, OMP_NUM_THREADS="1")


@pytest.mark.heavy  # 12 s: a package installed (on 2 cores)
def test_entry_points_register_names_for_the_command_line(tmp_path):
    from algorithms.api import run

    env = _plugin(tmp_path)
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "algorithms.run", "plain-cgd", "--compressor",
           "halve:float_bits=64", "--nodes", "4", "--iters", "40", "--step", "0.5",
           "--seed", "1", "--quiet", "--out", str(out)]  # fmt: skip
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "not a Problem subclass; skipped" in proc.stderr  # a wrong entry point is reported
    hist = rows(out / "history.csv")
    assert float(hist[-1]["bits_up"]) == 40 * 64 * 20
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["compressor"]["spec"] == "halve:float_bits=64"
    listing = subprocess.run([sys.executable, "-m", "algorithms.run", "--list"], env=env,
                             capture_output=True, text=True, timeout=120)  # fmt: skip
    assert "plain-cgd" in listing.stdout and "halve" in listing.stdout
    api = subprocess.run(
        [sys.executable, "-c",
         "from algorithms.api import run; r = run('plain-cgd', compressor='halve', nodes=4, "
         "iters=40, step=0.5, seed=1); print(r.history['f'].iloc[-1])"],
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert api.returncode == 0, api.stderr
    res = run(PlainCGD, compressor=Halve(), nodes=4, iters=40, step=0.5, seed=1)
    assert float(api.stdout.split()[-1]) == pytest.approx(res.history["f"].iloc[-1], rel=1e-15)


@dataclasses.dataclass(frozen=True)
class ModeSpy(PlainCGD):
    """:class:`PlainCGD` noting whether each step runs in torch's inference mode."""

    seen: ClassVar[list] = []

    def _step(self, state: State, problem, comm):
        ModeSpy.seen.append(torch.is_inference_mode_enabled())
        return super()._step(state, problem, comm)


def _autograd_quadratic(autograd_free: bool):
    """A quadratic whose gradients come from autograd (as a subclass written for a model
    might), declaring ``autograd_free`` as given."""
    from problems.registry import make_problem

    p = make_problem("quadratic", nodes=4, seed=1)

    class AutogradQuadratic(type(p)):
        def _grad(self, X):
            with torch.enable_grad():
                Y = X.detach().clone().requires_grad_()
                (g,) = torch.autograd.grad(self._node_loss(Y).sum(), Y)
            return g

    AutogradQuadratic.autograd_free = autograd_free
    p.__class__ = AutogradQuadratic
    return p


def test_steps_run_in_inference_mode_where_the_problem_uses_no_autograd():
    """The runner steps a method in torch's inference mode on a problem that declares
    ``autograd_free`` (the quadratics, the GLMs), with the numbers of steps taken with
    autograd on; on a problem that does not declare it (here one whose gradients come from
    autograd) the steps keep autograd, which its gradients need: declared free, they fail."""
    from algorithms.api import run
    from algorithms.base import step_mode
    from problems.registry import make_problem

    assert make_problem("quadratic", nodes=4, seed=1).autograd_free
    assert make_problem("logreg-nonconvex", dataset="synthetic", nodes=4).autograd_free
    assert not _autograd_quadratic(False).autograd_free
    with step_mode(make_problem("quadratic", nodes=4, seed=1)):
        assert torch.is_inference_mode_enabled()
    ModeSpy.seen.clear()
    free = run(ModeSpy, compressor=Halve(), nodes=4, iters=30, step=0.5, seed=1)
    assert ModeSpy.seen and all(ModeSpy.seen)
    ModeSpy.seen.clear()
    kept = run(ModeSpy, compressor=Halve(), problem=_autograd_quadratic(False), iters=30,
               step=0.5, seed=1)  # fmt: skip
    assert ModeSpy.seen and not any(ModeSpy.seen)
    assert kept.status == 0
    f, g = free.history["f"].to_numpy(), kept.history["f"].to_numpy()
    assert f[-1] < f[0] and abs(g - f).max() <= 1e-12 * abs(f).max()
    with pytest.raises(RuntimeError, match="does not require grad"):
        run(ModeSpy, compressor=Halve(), problem=_autograd_quadratic(True), iters=3, step=0.5)
