"""Catalogue cases of the runner (``python -m algorithms.run``): options, run folders,
checkpoints and resumes."""

from __future__ import annotations

import json
import pickle
import random
import shutil
from pathlib import Path

from .harness import Case

RUN = "algorithms.run"
BASE = ["ef21", "--compressor", "topk:k=2", "--nodes", "4", "--iters", "3", "--quiet"]
OUT = ["--out", "{tmp}/r"]


def opt(case_id: str, extra: list[str], message: str, argv: list[str] = BASE, **kw) -> Case:
    """A bad option of a fresh run."""
    return Case(case_id, RUN, [*argv, *extra, *OUT], message=message, **kw)


def _run(tmp: Path, name: str, *extra: str) -> Path:
    from algorithms.run import run

    out = tmp / name
    rc = run([*BASE, "--iters", "6", "--log-every", "1", *extra, "--out", str(out)])
    assert rc == 0, rc
    return out


def checkpointed(tmp: Path) -> Path:
    return _run(tmp, "r", "--checkpoint-every", "3")


def broken(change) -> object:
    """A setup: a checkpointed run in ``{tmp}/r``, then ``change(folder)``."""

    def setup(tmp: Path) -> None:
        change(checkpointed(tmp))

    return setup


def resume(case_id: str, change, message: str, extra: list[str] = (), **kw) -> Case:
    return Case(case_id, RUN, ["--resume", "{tmp}/r", *extra], message=message,
                setup=broken(change), **kw)  # fmt: skip


def _write(rel: str, data: bytes):
    return lambda out: (out / rel).write_bytes(data)


def _truncate(rel: str):
    def change(out: Path) -> None:
        data = (out / rel).read_bytes()
        (out / rel).write_bytes(data[: len(data) // 2])

    return change


class _Payload:
    def __init__(self, marker: str) -> None:
        self.code = f"open({marker!r}, 'w').write('ran')"

    def __reduce__(self):
        return (exec, (self.code,))


def _payload(out: Path) -> None:
    import torch

    path = out / "checkpoint" / "rank0.pt"
    blob = torch.load(path, weights_only=True)
    blob["last"] = _Payload(str(out.parent / "marker"))
    torch.save(blob, path)


def _no_marker(tmp: Path) -> None:
    assert not (tmp / "marker").exists(), "the crafted checkpoint ran code"


def _old_format(out: Path) -> None:
    (out / "checkpoint" / "meta.json").write_text(json.dumps({"iter": 6, "n": 4, "files": 1}))


def _other_config(out: Path) -> None:
    cfg = json.loads((out / "config.json").read_text())
    cfg["run_id"] = "0" * 32
    (out / "config.json").write_text(json.dumps(cfg))


def _no_run_id(out: Path) -> None:
    cfg = json.loads((out / "config.json").read_text())
    del cfg["run_id"]
    (out / "config.json").write_text(json.dumps(cfg))


def _foreign_history(out: Path) -> None:
    other = _run(out.parent, "other", "--seed", "5")
    shutil.copy(other / "history.csv", out / "history.csv")


def _overwritten(tmp: Path) -> None:
    from algorithms.run import run

    out = checkpointed(tmp)
    assert run(["diana", "--compressor", "randk:k=2", "--nodes", "4", "--iters", "4",
                "--quiet", "--out", str(out), "--overwrite"]) == 0  # fmt: skip


def _unchanged(tmp: Path) -> None:
    rows = (tmp / "r" / "history.csv").read_text().splitlines()
    assert len(rows) == 8, "a refused resume must leave the history as it was"


def _file(tmp: Path) -> None:
    (tmp / "f").write_text("not a folder")


def _nonempty(tmp: Path) -> None:
    (tmp / "r").mkdir()
    (tmp / "r" / "keep.txt").write_text("mine")


def _kept(tmp: Path) -> None:
    assert (tmp / "r" / "keep.txt").read_text() == "mine"


CASES: list[Case] = [
    Case(
        "run-unknown-compressor",
        RUN,
        ["ef21", "--compressor", "nope", "--iters", "5", *OUT],
        message=r"nope",
    ),  # fmt: skip
    opt("run-no-algorithm", [], r"give an ALGORITHM \(see --list\)", argv=["--iters", "3"]),
    # compressor classes the methods' theories assume
    opt(
        "run-absolute-needs-absolute",
        [],
        r"needs an absolute compressor.*got randk.*threshold",
        argv=["ec-sgd", "--compressor", "randk", "--iters", "3", "--quiet"],
    ),
    # a flag two methods share takes each method's own values, and only those
    opt(
        "run-shared-flag-other-methods-value",
        [],
        r"mechanism must be one of ef21, lag, clag.*got 'cbag'",
        argv=["3pc", "--compressor", "topk", "--mechanism", "cbag", "--iters", "3", "--quiet"],
    ),
    opt(
        "run-shared-flag-init-hessian-not-ef21",
        [],
        r"init must be one of .*got 'hessian'",
        argv=["ef21", "--compressor", "topk", "--init", "hessian", "--iters", "3", "--quiet"],
    ),
    opt(
        "run-mask-method-takes-no-compressor",
        [],
        r"takes no compressor, got topk.*identity",
        argv=["compressed-scaffnew", "--compressor", "topk", "--iters", "3", "--quiet"],
    ),
    opt("run-unknown-algorithm", [], r"unknown algorithm.*'nosuch'", argv=["nosuch"]),
    # the wire width of a float
    opt("run-float-bits-7", ["--float-bits", "7"], r"--float-bits must be 16, 32 or 64.*got 7"),
    opt("run-float-bits-0", ["--float-bits", "0"], r"--float-bits must be 16, 32 or 64.*got 0"),
    # devices
    opt("run-device-tpu", ["--device", "tpu"], r"--device 'tpu': allowed are cpu, cuda"),
    opt("run-device-gpu", ["--device", "gpu"], r"--device 'gpu': allowed are cpu, cuda"),
    opt(
        "run-device-cuda-99",
        ["--device", "cuda:99"],
        r"--device 'cuda:99': (CUDA is not available|this machine has \d+ GPU)",
    ),  # fmt: skip
    opt(
        "run-device-cuda-none",
        ["--device", "cuda"],
        r"--device 'cuda': CUDA is not available here; use cpu",
        env={"CUDA_VISIBLE_DEVICES": ""},
        subprocess=True,
    ),  # fmt: skip
    # run folders
    Case(
        "run-out-proc",
        RUN,
        [*BASE, "--out", "/proc/compzoo-x"],
        message=r"--out '/proc/compzoo-x': cannot write a run folder there",
    ),  # fmt: skip
    Case(
        "run-out-sys",
        RUN,
        [*BASE, "--out", "/sys/compzoo-x"],
        message=r"--out '/sys/compzoo-x': cannot write a run folder there",
    ),  # fmt: skip
    Case(
        "run-out-under-a-file",
        RUN,
        [*BASE, "--out", "/etc/hostname/sub"],
        message=r"--out '/etc/hostname/sub': cannot write a run folder there \(Not a directory",
    ),
    Case(
        "run-out-is-a-file",
        RUN,
        [*BASE, "--out", "{tmp}/f"],
        setup=_file,
        message=r"--out '.*/f' exists and is not a folder",
    ),  # fmt: skip
    Case(
        "run-out-not-empty",
        RUN,
        [*BASE, *OUT],
        setup=_nonempty,
        check=_kept,
        message=r"--out '.*/r' exists and is not empty; pass --overwrite",
    ),  # fmt: skip
    # numbers
    opt("run-timeout-negative", ["--timeout", "-1"], r"--timeout must be a positive.*got -1"),
    opt("run-timeout-nan", ["--timeout", "nan"], r"--timeout must be a positive.*got nan"),
    opt("run-timeout-inf", ["--timeout", "inf"], r"--timeout must be a positive.*got inf"),
    opt("run-tol-nan", ["--tol", "nan"], r"--tol must be a finite number >= 0, got nan"),
    opt("run-tol-negative", ["--tol=-1e-3"], r"--tol must be a finite number >= 0, got -0.001"),
    opt("run-max-bits-negative", ["--max-bits", "-1"], r"--max-bits must be a positive.*got -1"),
    opt("run-max-bits-inf", ["--max-bits", "inf"], r"--max-bits must be a positive.*got inf"),
    opt("run-iters-zero", ["--iters", "0"], r"--iters must be >= 1, got 0"),
    opt("run-iters-nan", ["--iters", "nan"], r"--iters: invalid int value: 'nan'"),
    opt("run-iters-huge", ["--iters", str(10**30)], r"--iters must be below 2\*\*62, got 1000"),
    opt("run-nodes-negative", ["--nodes", "-3"], r"--nodes must be >= 1, got -3"),
    opt("run-log-every-zero", ["--log-every", "0"], r"--log-every must be >= 1, got 0"),
    opt(
        "run-checkpoint-every-negative",
        ["--checkpoint-every", "-2"],
        r"--checkpoint-every must be >= 1, got -2",
    ),  # fmt: skip
    opt("run-step-negative", ["--step", "-0.1"], r"--step must be 'theory' or a positive float"),
    opt(
        "run-step-nan", ["--step", "nan"], r"--step must be 'theory' or a positive float, got 'nan"
    ),
    opt("run-step-word", ["--step", "fast"], r"--step must be 'theory' or a positive.*'fast'"),
    opt("run-step-mult-zero", ["--step-mult", "0"], r"--step-mult must be a positive number"),
    opt("run-step-mult-inf", ["--step-mult", "inf"], r"--step-mult must be a positive.*got inf"),
    opt(
        "run-seed-negative",
        ["--seed", "-1"],
        r"--seed must be an integer in \[0, 2\*\*63\), got -1",
    ),
    opt("run-seed-huge", ["--seed", str(2**64)], r"--seed must be an integer in \[0, 2\*\*63\)"),
    opt("run-dtype-float16", ["--dtype", "float16"], r"--dtype: invalid choice: 'float16'"),
    opt(
        "run-count-init-bits-maybe",
        ["--count-init-bits", "maybe"],
        r"--count-init-bits: expected yes\|no\|true\|false\|1\|0, got 'maybe'",
    ),  # fmt: skip
    opt(
        "run-backend-without-torchrun",
        ["--backend", "nccl"],
        r"--backend nccl applies under torchrun only",
    ),  # fmt: skip
    # problems, splits, knobs
    opt("run-unknown-problem", ["--problem", "nosuch"], r"unknown problem.*nosuch"),
    opt("run-problem-opt-no-value", ["--problem-opt", "dim"], r"--problem-opt expects KEY=VALUE"),
    opt(
        "run-problem-opt-unknown",
        ["--problem-opt", "nope=1"],
        r"unknown --problem-opt 'nope' for quadratic; allowed: .*dim",
    ),  # fmt: skip
    opt(
        "run-problem-opt-not-int",
        ["--problem-opt", "dim=abc"],
        r"--problem-opt dim='abc': expected an integer",
    ),  # fmt: skip
    opt(
        "run-problem-opt-nan", ["--problem-opt", "L=nan"], r"L must be a finite number > 0, got nan"
    ),
    opt("run-split-unknown", ["--problem", "logreg", "--split", "nope"], r"nope"),
    opt(
        "run-split-dirichlet-negative",
        ["--problem", "logreg", "--split", "dirichlet:-1"],
        r"dirichlet alpha must be a positive number, got '-1'",
    ),  # fmt: skip
    opt("run-x0-unknown", ["--x0", "foo"], r"x0 must be one of default, zeros, ones, randn.*'foo'"),
    opt(
        "run-lambda-nan", ["--lambda", "nan"], r"lambda \(mu\) must be a finite number > 0, got nan"
    ),
    opt(
        "run-dataset-missing-file",
        ["--problem", "logreg", "--dataset", "libsvm:/nonexistent/x"],
        r"dataset file '/nonexistent/x' not found",
    ),  # fmt: skip
    opt(
        "run-tol-on-f-gap-without-f-star",
        ["--problem", "logreg-nonconvex", "--tol", "1e-3", "--tol-on", "f_gap"],
        r"--tol-on f_gap: f_star of logreg-nonconvex is unknown.*--tol-on grad_norm_sq",
    ),  # fmt: skip
    opt(
        "run-option-of-another-method",
        ["--participation", "0.5"],
        r"--participation does not apply to ef21",
    ),  # fmt: skip
    opt(
        "run-participation-zero",
        ["--participation", "0"],
        r"p must be in \(0, 1\], got 0.0",
        argv=["ef21-pp", *BASE[1:]],
    ),  # fmt: skip
    opt("run-layerwise-without-layers", ["--layerwise"], r"--layerwise .*problem 'quadratic' has"),
    # resumes: what is not a run, what does not belong together, what cannot be read safely
    Case(
        "resume-missing-folder",
        RUN,
        ["--resume", "{tmp}/none"],
        message=r"--resume '.*/none': no config.json there \(no folder\)",
    ),  # fmt: skip
    Case(
        "resume-a-file",
        RUN,
        ["--resume", "{tmp}/f"],
        setup=_file,
        message=r"--resume '.*/f': no config.json there \(a file\)",
    ),  # fmt: skip
    Case(
        "resume-not-a-run",
        RUN,
        ["--resume", "{tmp}/r"],
        setup=_nonempty,
        message=r"--resume '.*/r': no config.json there \(a folder\)",
    ),  # fmt: skip
    Case(
        "resume-without-checkpoint",
        RUN,
        ["--resume", "{tmp}/plain"],
        setup=lambda tmp: _run(tmp, "plain"),
        message=r"no checkpoint there \(run with --checkpoint-every\)",
    ),  # fmt: skip
    resume(
        "resume-changes-the-compressor",
        lambda out: None,
        r"it may change only --iters.*got --compressor",
        extra=["--compressor", "topk:k=1"],
    ),
    resume(
        "resume-below-the-checkpoint",
        lambda out: None,
        r"--iters 4 is below iteration 6 of the checkpoint.*give --iters >= 6",
        extra=["--iters", "4"],
    ),  # fmt: skip
    resume(
        "resume-checkpoint-truncated",
        _truncate("checkpoint/rank0.pt"),
        r"'.*/checkpoint/rank0.pt' is unreadable",
        check=_unchanged,
    ),  # fmt: skip
    resume(
        "resume-checkpoint-empty",
        _write("checkpoint/rank0.pt", b""),
        r"'.*/checkpoint/rank0.pt' is unreadable",
    ),  # fmt: skip
    resume(
        "resume-checkpoint-random-bytes",
        _write("checkpoint/rank0.pt", random.Random(0).randbytes(4096)),
        r"'.*/checkpoint/rank0.pt' is unreadable",
    ),  # fmt: skip
    resume(
        "resume-checkpoint-missing",
        lambda out: (out / "checkpoint/rank0.pt").unlink(),
        r"'.*/checkpoint/rank0.pt' is missing",
    ),  # fmt: skip
    resume(
        "resume-checkpoint-runs-code",
        _payload,
        r"refused to load '.*/rank0.pt': it asks for the Python object exec",
        check=_no_marker,
    ),
    resume(
        "resume-checkpoint-plain-pickle",
        _write("checkpoint/rank0.pt", pickle.dumps({"t": 6, "state": _Payload("/x")}, 2)),
        r"refused to load '.*/rank0.pt'",
    ),  # fmt: skip
    resume(
        "resume-checkpoint-old-format", _old_format, r"meta.json' was written by an older runner"
    ),  # fmt: skip
    resume(
        "resume-meta-not-json",
        _write("checkpoint/meta.json", b'{"iter": 6,'),
        r"'.*/checkpoint/meta.json' is unreadable",
    ),  # fmt: skip
    resume(
        "resume-meta-wrong-fields",
        _write("checkpoint/meta.json", b'{"format": 1}'),
        r"'.*/checkpoint/meta.json' is not a compzoo-checkpoint version 2 meta.json",
    ),
    resume(
        "resume-history-missing",
        lambda out: (out / "history.csv").unlink(),
        r"'.*/history.csv' is missing",
    ),  # fmt: skip
    resume(
        "resume-history-of-another-run",
        _foreign_history,
        r"'.*/history.csv' is not the history the checkpoint was taken with",
    ),  # fmt: skip
    resume(
        "resume-config-not-json",
        _write("config.json", b"{"),
        r"'.*/config.json' is not a run's config",
    ),  # fmt: skip
    resume(
        "resume-config-of-another-run",
        _other_config,
        r"meta.json' belongs to run [0-9a-f]{32}, config.json to run 0{32}",
        check=_unchanged,
    ),
    resume("resume-config-without-run-id", _no_run_id, r"config.json' has no run id"),
    Case(
        "resume-after-overwrite",
        RUN,
        ["--resume", "{tmp}/r", "--iters", "20"],
        setup=_overwritten,
        message=r"no checkpoint there",
    ),  # fmt: skip
]
