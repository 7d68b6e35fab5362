"""The vector width chosen per machine (streams.vector_width, benchmarks.vector_width): the
record's reading and writing, the choice from timings, and what a fresh process compiles for."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import vector_width as calib
from streams import vector_width as vw

REPO = Path(__file__).resolve().parents[1]


def test_the_wider_form_is_chosen_only_when_the_kernels_run_faster_in_it():
    narrow = {"a": 1.0, "b": 2.0, "c": 4.0}
    faster = {"a": 0.8, "b": 1.6, "c": 3.2}
    assert calib.choose({256: narrow, 512: faster}) == (512, pytest.approx(0.8))
    # a geometric mean: one kernel twice as slow outweighs two kernels 20% faster
    bits, mean = calib.choose({256: narrow, 512: {"a": 0.8, "b": 1.6, "c": 8.0}})
    assert bits == 256 and mean == pytest.approx((0.8 * 0.8 * 2.0) ** (1 / 3))
    # within the threshold of the narrower form: not worth leaving LLVM's own choice
    assert calib.choose({256: narrow, 512: {k: v * 0.97 for k, v in narrow.items()}})[0] == 256
    # only kernels timed at both widths count
    assert calib.choose({256: narrow, 512: {"a": 0.5, "z": 100.0}}) == (512, pytest.approx(0.5))
    with pytest.raises(ValueError, match="both widths"):
        calib.choose({256: {"a": 1.0}, 512: {"b": 1.0}})


def test_a_record_is_read_back_only_on_its_machine_and_in_its_form(tmp_path):
    path = tmp_path / "rec.json"
    assert vw.read(path) is None  # none yet
    vw.write(512, {"k": 1.0}, path)
    assert vw.read(path) == 512
    rec = json.loads(path.read_text())
    assert rec["machine"] == vw.machine_key() and rec["timings"] == {"k": 1.0}
    for change in ({"machine": "another CPU"}, {"bits": 384}, {"version": 0}):
        path.write_text(json.dumps(rec | change))
        assert vw.read(path) is None, change
    path.write_text("{not json")
    assert vw.read(path) is None
    path.write_text("[512]")
    assert vw.read(path) is None
    with pytest.raises(ValueError, match="256, 512"):
        vw.write(128, {}, path)


def _fresh(env: dict[str, str]) -> subprocess.CompletedProcess:
    """A fresh process that imports the project and prints numba's feature string."""
    code = "import streams, numba.core.config as c; print(repr(c.CPU_FEATURES))"
    keep = {k: v for k, v in os.environ.items() if not k.startswith(("NUMBA_CPU", "COMPZOO_V"))}
    return subprocess.run([sys.executable, "-c", code], env=keep | env, cwd=REPO,
                          capture_output=True, text=True, timeout=120, check=True)  # fmt: skip


def test_a_fresh_process_compiles_for_the_recorded_width_unless_told_otherwise(tmp_path):
    if vw.wide_features() is None:
        pytest.skip("no AVX-512 on this CPU: there is only one width")
    path = tmp_path / "rec.json"
    rec = {vw.RECORD_ENV: str(path)}
    assert _fresh(rec).stdout.strip() == "None"  # no record: LLVM's own choice
    vw.write(512, {}, path)
    wide = _fresh(rec).stdout.strip()
    assert wide.endswith(",-prefer-256-bit'") and "+avx512f" in wide
    assert _fresh(rec | {vw.ENV: "256"}).stdout.strip() == "None"  # the override wins
    # the user's own feature string is never replaced
    assert _fresh(rec | {"NUMBA_CPU_FEATURES": "+sse2"}).stdout.strip() == "'+sse2'"
    # a bad override is named, and the record stands
    done = _fresh(rec | {vw.ENV: "128"})
    assert "COMPZOO_VECTOR_BITS='128' ignored; allowed: 256 or 512" in done.stderr
    assert done.stdout.strip() == wide
    vw.write(256, {}, path)
    assert _fresh(rec).stdout.strip() == "None"
    assert _fresh(rec | {vw.ENV: "512"}).stdout.strip() == wide


def _calibrate(env: dict[str, str], timeout: int) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "benchmarks.vector_width", "--quiet"]
    return subprocess.run(cmd, env=env, cwd=REPO, capture_output=True, text=True,
                          timeout=timeout, check=False)  # fmt: skip


def test_the_calibration_leaves_a_users_feature_string_alone(tmp_path):
    path = tmp_path / "rec.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NUMBA_CPU", "COMPZOO_V"))}
    env |= {"NUMBA_CPU_FEATURES": "+sse2", vw.RECORD_ENV: str(path)}
    done = _calibrate(env, 120)
    assert done.returncode == 0, done.stderr
    assert "not chosen, NUMBA_CPU_FEATURES is set" in done.stdout
    assert not path.exists()


def test_a_record_that_cannot_be_written_is_named_without_a_traceback(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NUMBA_CPU", "COMPZOO_V"))}
    env[vw.RECORD_ENV] = str(blocker / "rec.json")  # under a file: no folder can be made
    code = "import sys; from benchmarks import vector_width as c; sys.exit(c._record(256, {}, 'x'))"
    done = subprocess.run([sys.executable, "-c", code], env=env, cwd=REPO, capture_output=True,
                          text=True, timeout=120, check=False)  # fmt: skip
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert f"cannot write the vector-width record {blocker / 'rec.json'}" in done.stderr
    assert vw.RECORD_ENV in done.stderr


def test_a_failed_probe_keeps_the_default_width(tmp_path, monkeypatch, capsys):
    path = tmp_path / "rec.json"
    monkeypatch.setenv(vw.RECORD_ENV, str(path))
    monkeypatch.delenv("NUMBA_CPU_FEATURES", raising=False)
    monkeypatch.delenv("NUMBA_CPU_NAME", raising=False)
    monkeypatch.setattr(vw, "APPLIED", [])
    monkeypatch.setattr(vw, "wide_features", lambda: "+avx512f,-prefer-256-bit")

    def probe(bits):
        if bits == 512:
            raise RuntimeError("the 512-bit probe failed:\nIllegal instruction")
        return {"k": 1.0}

    monkeypatch.setattr(calib, "_run_probe", probe)
    assert calib.main(["--quiet"]) == 0
    assert vw.read(path) == 256
    assert "256 bits (the 512-bit probe failed" in capsys.readouterr().out

    def broken(bits):
        raise RuntimeError(f"the {bits}-bit probe failed:\nImportError")

    path.unlink()
    monkeypatch.setattr(calib, "_run_probe", broken)
    assert calib.main(["--quiet"]) == 1
    assert "error: the 256-bit probe failed" in capsys.readouterr().err and not path.exists()


@pytest.mark.heavy
def test_the_calibration_times_both_widths_and_records_its_choice(tmp_path):
    path = tmp_path / "rec.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NUMBA_CPU", "COMPZOO_V"))}
    env[vw.RECORD_ENV] = str(path)
    done = _calibrate(env, 600)
    assert done.returncode == 0, done.stderr
    rec = json.loads(path.read_text())
    assert rec["machine"] == vw.machine_key() and rec["bits"] in (256, 512)
    assert f"vector width: {rec['bits']} bits" in done.stdout and str(path) in done.stdout
    if vw.wide_features() is None:
        assert rec["timings"] == {}
        return
    times = {int(k): rec["timings"][k] for k in ("256", "512")}
    names = {"glm dense", "glm csc", "glm csc small float32", "glm lanes, 12 points", "qsgd",
             "natural-dithering", "fastsgd", "3lc"}  # fmt: skip
    assert set(times[256]) == set(times[512]) == names
    assert all(0 < s < 1 for t in times.values() for s in t.values())
    bits, mean = calib.choose(times)
    assert (bits, mean) == (rec["bits"], pytest.approx(rec["timings"]["mean_512_over_256"]))
