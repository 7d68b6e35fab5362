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

    path = out / "checkpoint" / "rank0-iter6.pt"
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


def _tamper(field: str, make) -> object:
    """A change: the checkpointed state's ``field`` replaced by ``make(old value)``."""

    def change(out: Path) -> None:
        import torch

        path = next((out / "checkpoint").glob("rank0-iter*.pt"))
        blob = torch.load(path, weights_only=True)
        fields = blob["state"]["fields"]
        fields[field] = make(fields[field])
        torch.save(blob, path)

    return change


def _meta(**changes) -> object:
    def change(out: Path) -> None:
        path = out / "checkpoint" / "meta.json"
        meta = json.loads(path.read_text())
        meta.update(changes)
        path.write_text(json.dumps(meta))

    return change


def _versions(out: Path) -> None:
    cfg = json.loads((out / "config.json").read_text())
    cfg["versions"]["compzoo"] = "0.0.1"
    cfg["versions"]["torch"] = "1.0"
    (out / "config.json").write_text(json.dumps(cfg))


def _last_row_whole(tmp: Path) -> None:
    """After a failed write, history.csv ends with a complete row and no temporary file is
    left beside the run's files."""
    out = tmp / "r"
    data = (out / "history.csv").read_bytes()
    assert data.endswith(b"\r\n"), data[-80:]
    width = len(data.splitlines()[0].split(b","))
    assert all(len(line.split(b",")) == width for line in data.splitlines()), "a cut row"
    left = [p.name for p in out.rglob("*") if p.name.startswith(".") or p.suffix == ".tmp"]
    assert not left, left


def _no_partial_checkpoint(tmp: Path) -> None:
    """A checkpoint that could not be written leaves no file that looks like one."""
    _last_row_whole(tmp)
    ck = tmp / "r" / "checkpoint"
    assert not ck.exists() or not any(ck.iterdir()), sorted(p.name for p in ck.iterdir())


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
    # close names for typos, and flags (never field names) in messages
    opt(
        "run-algorithm-typo",
        [],
        r"unknown algorithm 'ef-21' \(did you mean 'ef21'\?\)",
        argv=["ef-21", "--iters", "3"],
    ),  # fmt: skip
    opt(
        "run-compressor-typo",
        [],
        r"unknown compressor 'top-k' \(did you mean 'topk'\?\)",
        argv=["ef21", "--compressor", "top-k:k=2", "--iters", "3"],
    ),  # fmt: skip
    opt(
        "run-problem-typo",
        ["--problem", "logres"],
        r"unknown problem 'logres' \(did you mean 'logreg'\?\)",
    ),  # fmt: skip
    opt(
        "run-flag-typo",
        ["--lamda", "0.1"],
        r"unrecognized arguments: --lamda 0.1 \(did you mean '--lambda'",
    ),  # fmt: skip
    opt(
        "run-problem-opt-typo",
        ["--problem-opt", "dmi=5"],
        r"unknown --problem-opt 'dmi' for quadratic \(did you mean 'dim'\?\)",
    ),  # fmt: skip
    opt(
        "run-option-names-flags",
        ["--alpha", "0.5"],
        r"--alpha does not apply to ef21; its options: --init, --regime;",
    ),  # fmt: skip
    opt(
        "run-problem-opt-twice",
        ["--problem-opt", "dim=5", "--problem-opt", "dim=6"],
        r"--problem-opt dim is given twice \(5, then '6'\); give each key once",
    ),  # fmt: skip
    Case(
        "run-out-empty", RUN, [*BASE, "--out", ""], message=r"--out is empty; give a folder path"
    ),  # fmt: skip
    Case(
        "resume-empty",
        RUN,
        ["--resume", ""],
        message=r"--resume is empty; give the folder of a run",
    ),  # fmt: skip
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
        r"argument --mechanism: invalid choice: 'cbag' \(choose from 'ef21', 'lag', 'clag'",
        argv=["3pc", "--compressor", "topk", "--mechanism", "cbag", "--iters", "3", "--quiet"],
    ),
    opt(
        "run-shared-flag-init-hessian-not-ef21",
        [],
        r"argument --init: invalid choice: 'hessian' \(choose from 'full', 'compressed', 'zero'\)",
        argv=["ef21", "--compressor", "topk", "--init", "hessian", "--iters", "3", "--quiet"],
    ),
    opt(
        "run-mask-method-takes-no-compressor",
        [],
        r"takes no compressor \(.*\), got topk.*identity",
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
    opt(
        "run-step-negative",
        ["--step", "-0.1"],
        r"--step must be 'default', 'theory' or a positive float",
    ),
    opt(
        "run-step-nan",
        ["--step", "nan"],
        r"--step must be 'default', 'theory' or a positive float, got 'nan",
    ),
    opt(
        "run-step-word",
        ["--step", "fast"],
        r"--step must be 'default', 'theory' or a positive.*'fast'",
    ),
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
        _truncate("checkpoint/rank0-iter6.pt"),
        r"'.*/checkpoint/rank0-iter6.pt' is unreadable",
        check=_unchanged,
    ),  # fmt: skip
    resume(
        "resume-checkpoint-empty",
        _write("checkpoint/rank0-iter6.pt", b""),
        r"'.*/checkpoint/rank0-iter6.pt' is unreadable",
    ),  # fmt: skip
    resume(
        "resume-checkpoint-random-bytes",
        _write("checkpoint/rank0-iter6.pt", random.Random(0).randbytes(4096)),
        r"'.*/checkpoint/rank0-iter6.pt' is unreadable",
    ),  # fmt: skip
    resume(
        "resume-checkpoint-missing",
        lambda out: (out / "checkpoint/rank0-iter6.pt").unlink(),
        r"'.*/checkpoint/rank0-iter6.pt' is missing",
    ),  # fmt: skip
    resume(
        "resume-checkpoint-runs-code",
        _payload,
        r"refused to load '.*/rank0-iter6.pt': it asks for the Python object exec",
        check=_no_marker,
    ),
    resume(
        "resume-checkpoint-plain-pickle",
        _write("checkpoint/rank0-iter6.pt", pickle.dumps({"t": 6, "state": _Payload("/x")}, 2)),
        r"refused to load '.*/rank0-iter6.pt'",
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
        r"'.*/checkpoint/meta.json' is not a compzoo-checkpoint version 3 meta.json",
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
    # every field of the state is checked against what the method builds (kind, shape, dtype)
    resume(
        "resume-tampered-field-shape",
        _tamper("g_i", lambda g: g.new_zeros(4, 19)),
        r"field 'g_i' of EF21State is a tensor of shape \(4, 19\) and dtype float64; the "
        r"method builds a tensor of shape \(4, 20\) and dtype float64",
    ),
    resume(
        "resume-tampered-field-dtype",
        _tamper("g", lambda g: g.float()),
        r"field 'g' of EF21State is a tensor of shape \(20,\) and dtype float32; the method "
        r"builds a tensor of shape \(20,\) and dtype float64",
    ),
    resume(
        "resume-tampered-iterate-dtype",
        _tamper("x", lambda x: x.float()),
        r"the iterate x is a tensor of shape \(20,\) and dtype float32; the problem needs a "
        r"tensor of shape \(20,\) and dtype float64",
    ),
    resume(
        "resume-tampered-field-kind",
        _tamper("g_i", lambda g: 3),
        r"field 'g_i' of EF21State is a int; the method builds a tensor of shape \(4, 20\)",
    ),
    resume(
        "resume-checkpoint-of-another-version",
        _meta(version=99),
        r"is of compzoo-checkpoint version 99, written by another version of compzoo; this one "
        r"reads versions 2, 3",
    ),
    Case(
        "resume-config-of-other-versions-warns",
        RUN,
        ["--resume", "{tmp}/r", "--iters", "9"],
        setup=broken(_versions),
        code=0,
        message=r"warning: this run was started with other library versions \(torch 1.0 -> "
        r".*compzoo 0.0.1 -> .*\); resuming with these",
    ),
    # a file the run cannot write (a full disk): one line, exit 5, no half-written file
    Case(
        "run-history-write-fails",
        RUN,
        [*BASE[:-3], "--iters", "3000", "--log-every", "1", "--quiet", *OUT],
        code=5,
        fsize_limit=12000,
        message=r"error: cannot write '.*/r/history.csv': File too large \(errno 27\); the run "
        r"stopped at iteration \d+ of 3000, history.csv ends with its last complete row and it "
        r"has no checkpoint \(exit 5\)",
        check=_last_row_whole,
    ),
    Case(
        "run-checkpoint-write-fails",
        RUN,
        [
            *BASE[:-3],
            "--iters",
            "3000",
            "--log-every",
            "1",
            "--checkpoint-every",
            "3",
            "--quiet",
            *OUT,
        ],
        code=5,
        fsize_limit=12000,
        message=r"error: cannot write '.*/r/(history.csv|checkpoint/\S+)': File too large.*its "
        r"checkpoint at iteration \d+ is intact; resume with: python -m algorithms.run "
        r"--resume",
        check=_last_row_whole,
    ),  # fmt: skip
    Case(
        "run-checkpoint-too-big-to-write",
        RUN,
        [
            *BASE[:-3],
            "--problem-opt",
            "dim=200",
            "--iters",
            "3000",
            "--log-every",
            "1000",
            "--checkpoint-every",
            "3",
            "--quiet",
            *OUT,
        ],
        code=5,
        fsize_limit=10000,
        message=r"error: cannot write '.*/r/checkpoint/rank0-iter3.pt': File too large \(errno "
        r"27\); the run stopped at iteration 3 of 3000.*it has no checkpoint \(exit 5\)",
        check=_no_partial_checkpoint,
    ),  # fmt: skip
    Case(
        "resume-after-overwrite",
        RUN,
        ["--resume", "{tmp}/r", "--iters", "20"],
        setup=_overwritten,
        message=r"no checkpoint there",
    ),  # fmt: skip
]

# A method's declared problem capabilities are checked before anything runs.
CASES += [
    opt(
        "run-hessians-missing",
        [],
        r"FedNL needs exact per-node Hessians \(hessians\), which problem 'mlp' does not give; "
        r"problems with them: quadratic, logreg",
        argv=[
            "fednl",
            "--compressor",
            "topk:k=3",
            "--problem",
            "mlp",
            "--dataset",
            "digits",
            "--iters",
            "3",
            "--quiet",
        ],  # fmt: skip
    ),
    opt(
        "run-server-data-missing",
        [],
        r"CAFeS needs data of the server's own \(server_data\), which problem 'logreg' does not "
        r"give; give it rows with --problem-opt server_rows=K",
        argv=[
            "cafe-s",
            "--compressor",
            "topk:k=3",
            "--problem",
            "logreg",
            "--iters",
            "3",
            "--quiet",
        ],  # fmt: skip
    ),
]
