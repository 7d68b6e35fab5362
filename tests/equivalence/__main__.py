"""``python -m tests.equivalence record DIR`` / ``compare BEFORE AFTER``: prove a refactor
changed nothing.

``record`` runs a fixed set of command lines through ``python -m runner.main`` (and
``torchrun``, and one sweep) and keeps, per run, its exit status and its files normalised:
``history.csv`` without the timing columns, ``summary.json`` and ``config.json`` without what
differs between two identical runs (run id, clock, timings, library versions, the folder's own
path). ``compare`` lists every run whose files differ, with the first differing line, and exits
1 if any does. Record before the first move, then after each step on the same machine (the last
bits of a float may differ between machines, never between two runs here).

The runs, for every registered method with a compressor of the class its theory assumes
(:func:`algorithms.registry.usual_compressor`), on the default quadratic with 4 nodes:

- ``theory``: 30 iterations at the theory step (or the message when a method has none here);
- ``resume``: 11 iterations at a fixed step with a checkpoint every 5, then ``--resume`` to 24;
- ``gloo``: 12 iterations as two torch.distributed processes (gloo), two nodes each;

and a few settings of the papers: EF21, DIANA, MARINA and DASHA on mushrooms (when the LIBSVM
sets are found), a deep net, and ``examples/sweep.toml`` (its ``summary.csv`` and ``best.csv``).
"""

from __future__ import annotations

import argparse
import csv
import difflib
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TIME_COLUMNS = {"wall_s", "t_compute", "t_encode", "t_communicate", "t_decode"}
VOLATILE = {"run_id", "started", "versions", "seconds_per_iter", "at", *TIME_COLUMNS}
BASE = ["--problem", "quadratic", "--nodes", "4", "--seed", "5", "--log-every", "1", "--quiet"]


def runs() -> dict[str, list[list[str]]]:
    """Every recorded run: key -> the command lines it takes (``{out}`` is its folder)."""
    from algorithms.registry import ALGORITHMS, usual_argv, usual_compressor
    from problems import datasets

    out: dict[str, list[list[str]]] = {}
    torchrun = shutil.which("torchrun") or str(Path(sys.executable).parent / "torchrun")
    py = [sys.executable, "-m", "runner.main"]
    for name in sorted(ALGORITHMS):
        args = [name, "--compressor", usual_compressor(name, 3), *BASE, *usual_argv(name)]
        out[f"{name}/theory"] = [[*py, *args, "--iters", "30", "--out", "{out}"]]
        fixed = [*args, "--step", "0.02"]
        out[f"{name}/resume"] = [
            [*py, *fixed, "--iters", "11", "--checkpoint-every", "5", "--out", "{out}"],
            [*py, "--resume", "{out}", "--iters", "24"],
        ]
        out[f"{name}/gloo"] = [
            [
                torchrun,
                "--standalone",
                "--nproc_per_node=2",
                "-m",
                "runner.main",
                *fixed,
                "--iters",
                "12",
                "--backend",
                "gloo",
                "--out",
                "{out}",
            ]  # fmt: skip
        ]
    if datasets.find("mushrooms") is not None:
        paper = ["--problem", "logreg-nonconvex", "--dataset", "mushrooms", "--nodes", "20",
                 "--split", "contiguous", "--x0", "zeros", "--lambda", "0.1", "--iters", "50",
                 "--log-every", "1", "--quiet"]  # fmt: skip
        for name, spec in (("ef21", "topk:k=1"), ("diana", "randk:k=10"),
                           ("marina", "randk:k=10"), ("dasha", "randk:k=10")):  # fmt: skip
            out[f"paper/{name}-mushrooms"] = [
                [*py, name, "--compressor", spec, *paper, "--out", "{out}"]
            ]
    out["deep/ef21-mlp-digits"] = [
        [
            *py,
            "ef21",
            "--compressor",
            "topk:ratio=0.05",
            "--problem",
            "mlp",
            "--dataset",
            "digits",
            "--nodes",
            "4",
            "--iters",
            "10",
            "--log-every",
            "1",
            "--quiet",
            "--out",
            "{out}",
        ]  # fmt: skip
    ]
    out["sweep/example"] = [
        [
            sys.executable,
            "-m",
            "experiments.sweep",
            str(REPO / "examples" / "sweep.toml"),
            "--out",
            "{out}",
            "--jobs",
            "1",
            "--quiet",
        ]  # fmt: skip
    ]
    return out


def _scrub(obj, root: str):
    """``obj`` without the volatile keys, the run's folder written ``{OUT}``."""
    if isinstance(obj, dict):
        return {k: _scrub(v, root) for k, v in obj.items() if k not in VOLATILE}
    if isinstance(obj, list):
        return [_scrub(v, root) for v in obj]
    if isinstance(obj, str):
        return obj.replace(root, "{OUT}")
    return obj


def _csv(path: Path, drop: set[str]) -> str:
    with open(path, newline="") as fh:
        rows = list(csv.reader(fh))
    if not rows:
        return ""
    keep = [i for i, c in enumerate(rows[0]) if c not in drop]
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    for r in rows:
        w.writerow([r[i] if i < len(r) else "" for i in keep])
    return buf.getvalue()


def normalise(folder: Path, code: int, stderr: str) -> dict[str, str]:
    """The files of one run, as the text ``compare`` checks."""
    root = str(folder)
    files = {"exit": f"{code}\n"}
    if code not in (0, 3):
        last = [ln for ln in stderr.strip().splitlines() if ln.strip()]
        files["exit"] += (last[-1].replace(root, "{OUT}") if last else "") + "\n"
    for name in ("history.csv", "summary.csv", "best.csv"):
        if (folder / name).is_file():
            drop = TIME_COLUMNS | ({"wall_s"} if name != "history.csv" else set())
            files[name] = _csv(folder / name, drop).replace(root, "{OUT}")
    for name in ("summary.json", "config.json"):
        if (folder / name).is_file():
            data = _scrub(json.loads((folder / name).read_text()), root)
            files[name] = json.dumps(data, indent=1, sort_keys=True) + "\n"
    return files


def _record_one(key: str, cmds: list[list[str]], work: Path) -> tuple[str, dict[str, str]]:
    folder = work / key.replace("/", "__")
    env = dict(os.environ, OMP_NUM_THREADS="1")
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")])
    code, stderr = 0, ""
    for cmd in cmds:
        p = subprocess.run([c.replace("{out}", str(folder)) for c in cmd], env=env, cwd=work,
                           capture_output=True, text=True, timeout=900)  # fmt: skip
        code, stderr = p.returncode, p.stderr
        if code not in (0, 3):
            break
    return key, normalise(folder, code, stderr)


def record(dest: Path, jobs: int, only: str | None) -> int:
    todo = {k: v for k, v in runs().items() if only is None or only in k}
    dest.mkdir(parents=True, exist_ok=False)
    manifest: dict[str, dict[str, str]] = {}
    with tempfile.TemporaryDirectory(prefix="compzoo-equiv-") as tmp:
        with ThreadPoolExecutor(max_workers=jobs) as pool:
            futures = [pool.submit(_record_one, k, v, Path(tmp)) for k, v in todo.items()]
            for i, fut in enumerate(futures, 1):
                key, files = fut.result()
                where = dest / key
                where.mkdir(parents=True, exist_ok=True)
                for name, text in files.items():
                    (where / name).write_text(text)
                manifest[key] = {n: hashlib.sha256(t.encode()).hexdigest()[:16]
                                 for n, t in files.items()}  # fmt: skip
                print(f"[{i}/{len(todo)}] {key}: exit {files['exit'].split()[0]}", file=sys.stderr)
    (dest / "manifest.json").write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    print(f"{len(manifest)} runs recorded in {dest}")
    return 0


def compare(before: Path, after: Path) -> int:
    a = json.loads((before / "manifest.json").read_text())
    b = json.loads((after / "manifest.json").read_text())
    bad = 0
    for key in sorted(set(a) | set(b)):
        if key not in a or key not in b:
            print(f"{key}: only in {'after' if key not in a else 'before'}")
            bad += 1
            continue
        for name in sorted(set(a[key]) | set(b[key])):
            if a[key].get(name) == b[key].get(name):
                continue
            bad += 1
            old = (before / key / name).read_text().splitlines() if name in a[key] else []
            new = (after / key / name).read_text().splitlines() if name in b[key] else []
            diff = list(difflib.unified_diff(old, new, lineterm="", n=0))[2:6]
            print(f"{key}/{name} differs:\n  " + "\n  ".join(diff))
    same = len(set(a) & set(b))
    print(f"{same} runs in both; {bad} differing file(s)" if bad else
          f"all {same} runs identical")  # fmt: skip
    return 1 if bad else 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.equivalence", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("record", help="run the fixed set and record it in DIR (a new folder)")
    r.add_argument("dir")
    r.add_argument("--jobs", type=int, default=2)
    r.add_argument("--only", default=None, help="only the runs whose key contains this text")
    c = sub.add_parser("compare", help="compare two records")
    c.add_argument("before")
    c.add_argument("after")
    sub.add_parser("list", help="print the runs' keys")
    args = ap.parse_args(argv)
    if args.cmd == "record":
        return record(Path(args.dir), args.jobs, args.only)
    if args.cmd == "compare":
        return compare(Path(args.before), Path(args.after))
    print("\n".join(runs()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
