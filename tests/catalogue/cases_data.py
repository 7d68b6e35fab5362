"""Catalogue cases of compressor specs (through the runner), ``python -m compressors`` and data
files (LIBSVM files, CIFAR-10 batches and the named sets, through the runner and
``python -m problems``)."""

from __future__ import annotations

import os
from pathlib import Path

from tests.problems.fake_data import batches, write_bin, write_crafted_cifar

from .harness import Case

RUN = "algorithms.run"
PROBLEMS = "problems"
COMPRESSORS = "compressors"


def spec_case(id: str, spec: str, message: str) -> Case:
    """The runner refusing a malformed ``--compressor`` spec."""
    return Case(
        f"spec-{id}",
        RUN,
        ["ef21", "--compressor", spec, "--iters", "5", "--out", "{tmp}/r"],
        message=message,
    )


def file_with(text: str | bytes, name: str = "d.txt"):
    """A setup writing ``text`` to ``{tmp}/name``."""

    def setup(tmp: Path) -> None:
        path = tmp / name
        path.write_bytes(text if isinstance(text, bytes) else text.encode())

    return setup


def libsvm_case(id: str, text: str | bytes | None, message: str, *opts: str) -> Case:
    """The runner refusing ``{tmp}/d.txt`` (written from ``text``; ``None``: not written) as
    the data of binary logistic regression."""
    return Case(
        f"libsvm-{id}",
        RUN,
        ["ef21", "--problem", "logreg", "--dataset", "libsvm:{tmp}/d.txt", "--nodes", "2"]
        + [a for o in opts for a in ("--problem-opt", o)]
        + ["--iters", "5", "--out", "{tmp}/r"],
        message=message,
        setup=None if text is None else file_with(text),
    )


GOOD = "1 1:0.5 3:1\n-1 2:1\n1 1:-1 2:2\n-1 3:4\n"
# Two samples, one index of 99999999: d = 10^8 from 3 stored entries.
HUGE = "1 1:1 99999999:1\n-1 2:1\n"
# 64 samples, one of them with feature index 99999999: a 64 x 99999999 dense design, 47.7 GiB
STRAY = "".join(f"{1 if i % 2 else -1} 1:1 3:0.5\n" for i in range(63)) + "1 2:1 99999999:1\n"


def _absent(*paths: Path) -> None:
    for path in paths:
        assert not path.exists(), path


def _completed(out: Path) -> None:
    import json

    assert json.loads((out / "summary.json").read_text())["reason"] == "completed"


CASES: list[Case] = [
    # ---------------------------------------------------------------- compressor specs
    spec_case("compose-no-parts", "compose:", r"'compose:' names no parts.*two or more specs"),
    spec_case("scaled-no-inner", "scaled:", r"'scaled:' names no parts.*unbiased compressor"),
    spec_case(
        "compose-one-part", "compose:topk:k=1,", r"compose needs two or more specs.*'topk:k=1,'"
    ),
    spec_case("compose-empty-part", "compose:topk:k=1+", r"part 2 of 2 in 'compose:topk:k=1\+'"),
    spec_case("topk-k-zero", "topk:k=0", r"k must be a positive integer .*got k=0"),
    spec_case("topk-k-negative", "topk:k=-1", r"k must be a positive integer .*got k=-1"),
    spec_case("randk-k-text", "randk:k=abc", r"k='abc' is not a valid int"),
    spec_case("topk-ratio-above-one", "topk:ratio=2", r"ratio must be in \(0, 1\], got ratio=2"),
    spec_case(
        "qsgd-unknown-key", "qsgd:s=0", r"unknown parameter 's' for qsgd; allowed: coding, float"
    ),
    spec_case("qsgd-zero-levels", "qsgd:levels=0", r"levels must be an integer >= 1, got levels=0"),
    spec_case("trailing-comma", "topk:k=1,", r"empty parameter in compressor spec 'topk:k=1,'"),
    spec_case("key-twice", "topk:k=1,k=2", r"parameter 'k' is given twice"),
    spec_case("no-value", "topk:k", r"expected key=value in compressor spec 'topk:k'"),
    spec_case("empty-spec", "", r"compressor spec must be a non-empty string"),
    spec_case("scaled-biased", "scaled:topk", r"scaled needs an unbiased compressor, got topk"),
    spec_case("k-above-d", "topk:k=100000", r"k must be <= d, got k=100000 with d=20"),
    spec_case("float-bits", "natural:float_bits=8", r"float_bits must be 16, 32 or 64, got.*8"),
    # ---------------------------------------------------------------- python -m compressors
    Case("compressors-dim-zero", COMPRESSORS, ["--dim", "0"], message=r"--dim must be >= 1, got 0"),
    Case("compressors-dim-negative", COMPRESSORS, ["--dim", "-1"], message=r"got -1"),
    Case(
        "compressors-dim-huge",
        COMPRESSORS,
        ["--dim", "1000000000000", "--quiet"],
        message=r"--dim 1000000000000: measuring the bits would need about .* GiB of memory; "
        r"allowed: 8 GiB",
    ),
    Case("compressors-dim-text", COMPRESSORS, ["--dim", "abc"], message=r"invalid int value"),
    Case(
        "compressors-max-memory",
        COMPRESSORS,
        ["--max-memory-gib", "0"],
        message=r"--max-memory-gib must be > 0, got 0",
    ),
    Case(
        "compressors-bad-spec",
        COMPRESSORS,
        ["--spec", "compose:", "--quiet"],
        message=r"'compose:' names no parts",
    ),
    # ---------------------------------------------------------------- LIBSVM files
    Case(
        "libsvm-no-path",
        RUN,
        ["ef21", "--problem", "logreg", "--dataset", "libsvm:", "--iters", "5", "--out", "{tmp}/r"],
        message=r"libsvm: needs a file path",
    ),
    libsvm_case("missing", None, r"dataset file '.*d\.txt' not found"),
    Case(
        "libsvm-directory",
        RUN,
        ["ef21", "--problem", "logreg", "--dataset", "libsvm:{tmp}", "--iters", "5"]
        + ["--out", "{tmp}/r"],
        message=r"LIBSVM file '.*' is a directory; libsvm:PATH needs a file",
    ),
    libsvm_case("empty", "", r"'.*d\.txt' has no samples"),
    libsvm_case("comments-only", "# nothing\n\n", r"has no samples"),
    libsvm_case("labels-only", "1\n-1\n", r"has no features"),
    libsvm_case("binary", b"\x7fELF\x02\x01\x00\x00" * 64, r"d\.txt' is a binary file"),
    libsvm_case(
        "index-zero",
        "1 1:1\n-1 0:2 3:1\n",
        r"d\.txt', line 2: feature index 0, but LIBSVM indices start at 1.*index_base=0",
    ),
    libsvm_case(
        "stray-index",
        STRAY,
        r"line 64: feature index 99999999 makes d = 99999999 columns, more than max_dim = "
        r"1048576 and more than the file's 128 stored entries",
    ),
    libsvm_case(
        "stray-index-dense",
        STRAY,
        r"line 64: feature index 99999999 makes d = 99999999.*64 x 99999999 float64 design "
        r"would need 47\.7 GiB; allowed: 4 GiB",
        "max_dim=100000000",
    ),
    Case(
        "libsvm-huge-index",
        RUN,
        ["ef21", "--compressor", "topk:k=2", "--problem", "logreg", "--dataset"]
        + ["libsvm:{tmp}/h.svm", "--nodes", "2", "--out", "{tmp}/r"],
        message=r"logreg: LIBSVM file '.*h\.svm', line 1: feature index 99999999 makes "
        r"d = 99999999 columns, more than max_dim = 1048576 and more than the file's 3 stored "
        r"entries .*--problem-opt max_dim=99999999 \(runner\) or --max-dim 99999999",
        setup=file_with(HUGE, "h.svm"),
        check=lambda tmp: _absent(tmp / "r"),
    ),
    libsvm_case(
        "max-dim-option",
        "1 1:1\n-1 5:1\n",
        r"line 2: feature index 5 makes d = 5 columns, more than max_dim = 4 and more than the "
        r"file's 2 stored entries",
        "max_dim=4",
    ),
    libsvm_case("max-dim-zero", GOOD, r"max_dim must be a positive integer, got 0", "max_dim=0"),
    libsvm_case(
        "max-dim-text", GOOD, r"--problem-opt max_dim='x': expected an integer", "max_dim=x"
    ),
    Case(
        "problems-max-dim",
        PROBLEMS,
        ["--problem", "logreg", "--dataset", "libsvm:{tmp}/h.svm", "--nodes", "2"]
        + ["--max-dim", "1000"],
        message=r"h\.svm', line 1: feature index 99999999 makes d = 99999999 columns, more than "
        r"max_dim = 1000",
        setup=file_with(HUGE, "h.svm"),
    ),
    Case(
        "libsvm-fifo",
        RUN,
        ["ef21", "--problem", "logreg", "--dataset", "libsvm:{tmp}/pipe.txt", "--nodes", "2"]
        + ["--iters", "5", "--out", "{tmp}/r"],
        message=r"LIBSVM file '.*pipe\.txt' is a FIFO/named pipe, not a regular file",
        setup=lambda tmp: os.mkfifo(tmp / "pipe.txt"),
    ),
    Case(
        "libsvm-bom-accepted",
        RUN,
        ["ef21", "--problem", "logreg", "--dataset", "libsvm:{tmp}/d.txt", "--nodes", "2"]
        + ["--iters", "5", "--quiet", "--out", "{tmp}/r"],
        code=0,
        setup=file_with("\ufeff" + GOOD),
        check=lambda tmp: _completed(tmp / "r"),
    ),
    libsvm_case(
        "stray-index-limit",
        GOOD,
        r"line 1: feature index 3 .*allowed: 1e-08 GiB",
        "max_dense_gib=1e-8",
    ),
    libsvm_case("index-base", GOOD, r"index_base must be 1 \(LIBSVM\) or 0, got 2", "index_base=2"),
    libsvm_case(
        "value-text", "1 1:1\n-1 2:abc\n", r"line 2: value 'abc' in '2:abc' is not a number"
    ),
    libsvm_case("no-colon", "1 1:1\n-1 2 3:1\n", r"line 2: '2' is not INDEX:VALUE"),
    libsvm_case(
        "index-text", "1 1:1\n\n-1 x:1\n", r"line 3: feature index 'x' in 'x:1' is not an integer"
    ),
    libsvm_case(
        "index-order",
        "1 1:1\n-1 3:1 2:1\n",
        r"line 2: feature index 2 in '2:1' after index 3; indices must increase",
    ),
    libsvm_case("index-repeated", "1 1:1 1:2\n-1 2:1\n", r"line 1: feature index 1 in '1:2'"),
    libsvm_case("label-text", "1 1:1\nspam 2:1\n", r"line 2: label 'spam' is not a number"),
    libsvm_case("value-nan", "1 1:1\n# c\n-1 2:nan\n", r"line 3: value nan of feature 2"),
    libsvm_case("label-inf", "1 1:1\ninf 2:1\n", r"line 2: label inf is not finite"),
    libsvm_case(
        "three-labels",
        "1 1:1\n2 2:1\n3 1:2\n",
        r"logreg: needs binary labels, but dataset 'libsvm:.*d\.txt' has 3 distinct labels",
    ),
    libsvm_case("one-label", "1 1:1\n1 2:1\n", r"has 1 distinct labels \[1\.0\]"),
    Case(
        "data-compzoo-nowhere",
        RUN,
        ["ef21", "--problem", "logreg", "--dataset", "a9a", "--iters", "5", "--out", "{tmp}/r"],
        message=r"dataset 'a9a' not found; looked for /nonexistent/compzoo-data/a9a\.txt "
        r"\(\$COMPZOO_DATA: no such folder\); .*; set COMPZOO_DATA to the folder holding NAME\.txt",
        env={"COMPZOO_DATA": "/nonexistent/compzoo-data", "COMPZOO_LIBSVM_DIR": ""},
    ),
    Case(
        "data-compzoo-no-file",
        RUN,
        ["ef21", "--problem", "logreg", "--dataset", "mushrooms", "--iters", "5"]
        + ["--out", "{tmp}/r"],
        message=r"dataset 'mushrooms' not found; looked for /mushrooms\.txt \(\$COMPZOO_DATA\); "
        r"/libsvm/mushrooms\.txt \(\$COMPZOO_DATA/libsvm",
        env={"COMPZOO_DATA": "/", "COMPZOO_LIBSVM_DIR": ""},
    ),
    Case(
        "data-libsvm-dir-alias",
        RUN,
        ["ef21", "--problem", "logreg", "--dataset", "w8a", "--iters", "5", "--out", "{tmp}/r"],
        message=r"dataset 'w8a' not found; looked for /nonexistent/libsvm/w8a\.txt "
        r"\(\$COMPZOO_LIBSVM_DIR: no such folder\)",
        env={"COMPZOO_DATA": "", "COMPZOO_LIBSVM_DIR": "/nonexistent/libsvm"},
    ),
    *[
        Case(
            f"data-did-you-mean-{name}",
            RUN,
            ["ef21", "--problem", "logreg", "--dataset", name, "--iters", "5", "--out", "{tmp}/r"],
            message=rf"unknown dataset '{name}' \(did you mean '{known}'\?\); allowed: .*, "
            r"libsvm:PATH",
        )
        for name, known in (
            ("mushroom", "mushrooms"),
            ("a9", "a9a"),
            ("phising", "phishing"),
            ("breast_cancer", "breast-cancer"),
        )
    ],  # fmt: skip
    Case(
        "cifar-crafted-batch",
        RUN,
        ["ef21", "--problem", "cnn", "--dataset", "cifar10:{tmp}/cifar", "--nodes", "2"]
        + ["--iters", "1", "--out", "{tmp}/r"],
        message=r"cnn: CIFAR-10 batch '.*cifar/data_batch_3' refused: it asks for the global "
        r"__builtin__\.exec, which a genuine batch never holds, and nothing of it was run",
        setup=lambda tmp: write_crafted_cifar(tmp / "cifar", tmp / "marker"),
        check=lambda tmp: _absent(tmp / "marker", tmp / "r"),
    ),
    Case(
        "cifar-binary-short-record",
        RUN,
        ["ef21", "--problem", "cnn", "--dataset", "cifar10:{tmp}", "--nodes", "2"]
        + ["--iters", "1", "--out", "{tmp}/r"],
        message=r"CIFAR-10 batch '.*test_batch\.bin': 3000 bytes, not a whole number of "
        r"3073-byte records",
        setup=lambda tmp: (
            write_bin(tmp, batches(per_batch=2)),
            (tmp / "test_batch.bin").write_bytes(bytes(3000)),
        ),
    ),
    Case(
        "cifar-missing",
        RUN,
        ["ef21", "--problem", "cnn", "--dataset", "cifar10:{tmp}", "--nodes", "2"]
        + ["--iters", "1", "--out", "{tmp}/r"],
        message=r"CIFAR-10 batches not found under '.*': .*data_batch_1 is missing \(expected",
    ),
    Case(
        "problems-index-zero",
        PROBLEMS,
        ["--problem", "logreg", "--dataset", "libsvm:{tmp}/d.txt", "--nodes", "2"],
        message=r"d\.txt', line 1: feature index 0",
        setup=file_with("1 0:1\n-1 2:1\n"),
    ),
    Case(
        "problems-missing-file",
        PROBLEMS,
        ["--problem", "logreg", "--dataset", "libsvm:{tmp}/none.txt"],
        message=r"dataset file '.*none\.txt' not found",
    ),
]
