"""The kernel modules' stamps (:mod:`streams.stamps`): current, and stale after a change to what a
kernel compiles in, directly or through another module."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
import textwrap

import pytest

from streams import stamps


@pytest.fixture
def copied(tmp_path, monkeypatch):
    """A copy of the project's packages, which :mod:`streams.stamps` reads and writes here."""
    for pkg in stamps.PACKAGES:
        shutil.copytree(
            stamps.ROOT / pkg, tmp_path / pkg, ignore=shutil.ignore_patterns("__pycache__")
        )
    monkeypatch.setattr(stamps, "ROOT", tmp_path)
    return tmp_path


def test_every_kernel_module_is_stamped_with_what_it_is_built_against():
    assert stamps.stale() == [], "kernel modules are stale: run python -m streams.stamps"


def test_the_kernel_modules_and_their_closure():
    deps = stamps.kernel_modules(stamps._sources())
    # the modules the compiled kernels live in, and no module without numba code
    assert {"streams/compiled.py", "problems/glm_kernels.py", "compressors/compiled_thc.py"} <= set(
        deps
    )
    assert "problems/glm_lanes_gen.py" not in deps  # its numba code is text it writes
    assert "streams/stamps.py" not in deps
    assert deps["streams/compiled.py"] == set()
    # THC compiles in the transform's _block and the streams' _mix
    assert {"compressors/compiled_fwht.py", "streams/compiled.py"} <= deps[
        "compressors/compiled_thc.py"
    ]
    # the lanes' kernels import glm_kernels alone, which imports the streams: followed through
    assert deps["problems/glm_lanes_kernels.py"] == {
        "problems/glm_kernels.py",
        "streams/compiled.py",
    }
    # compiled_dense and compiled_fastsgd import each other
    assert "compressors/compiled_fastsgd.py" in deps["compressors/compiled_dense.py"]
    assert "compressors/compiled_dense.py" in deps["compressors/compiled_fastsgd.py"]


@pytest.mark.parametrize(
    "changed", ["streams/compiled.py", "compressors/compiled_fwht.py", "problems/glm_kernels.py"]
)
def test_a_change_makes_exactly_the_modules_built_against_it_stale(changed):
    sources = stamps._sources()
    deps = stamps.kernel_modules(sources)
    edited = {**sources, changed: sources[changed] + "\n# a change\n"}
    late = stamps.stale(edited)
    assert late == sorted(path for path, d in deps.items() if changed in d)
    assert changed not in late and late
    # restamped once, nothing is stale, modules that import each other included
    fixed = {
        **edited,
        **{p: stamps.stamped(edited[p], stamps.stamps(deps[p], edited)) for p in late},
    }
    assert stamps.stale(fixed) == []


def test_a_change_to_the_stamps_alone_changes_no_digest():
    sources = stamps._sources()
    path = "compressors/compiled_fwht.py"
    assert stamps.PREFIX in sources[path]
    edited = {**sources, path: stamps.stamped(sources[path], [stamps.PREFIX + "x.py 0"])}
    assert stamps.stale(edited) == [path]


def test_stamped_and_unstamped_are_inverse():
    text = '"""Doc,\nover two lines."""\n\nfrom __future__ import annotations\n\nX = 1\n'
    lines = [stamps.PREFIX + "a.py 0123", stamps.PREFIX + "b.py 4567"]
    once = stamps.stamped(text, lines)
    assert once.split("\n")[2:5] == ["", *lines]
    assert stamps.unstamped(once) == text
    assert stamps.stamped(once, lines) == once
    assert stamps.stamped(once, []) == text
    with pytest.raises(ValueError, match="docstring"):
        stamps.stamped("X = 1\n", lines)


def test_numba_serves_a_stale_kernel_until_its_own_file_changes(tmp_path):
    """Why the stamps exist: a cached kernel keeps the code it called in another module."""
    pytest.importorskip("numba")
    pkg = tmp_path / "stamped_pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    helper = pkg / "helper.py"
    kernel = pkg / "kernel.py"
    helper.write_text("import numba\n\n\n@numba.njit(cache=True)\ndef f():\n    return 1\n")
    kernel.write_text(
        textwrap.dedent(
            '''\
            """A kernel that calls another module's function."""

            import numba

            from stamped_pkg.helper import f


            @numba.njit(cache=True)
            def g():
                return f()
            '''
        )
    )

    def run() -> int:
        code = "from stamped_pkg.kernel import g; print(g())"
        out = subprocess.run(
            [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, check=True
        )
        return int(out.stdout)

    assert run() == 1
    helper.write_text(helper.read_text().replace("return 1", "return 2"))
    assert run() == 1  # the helper's change is not seen: g is loaded from its cache
    kernel.write_text(stamps.stamped(kernel.read_text(), [stamps.PREFIX + "helper.py 2"]))
    assert run() == 2


def test_the_command_restamps_a_copy_after_a_change(copied, capsys):
    tmp_path = copied
    assert stamps.main(["--check"]) == 0
    helper = tmp_path / "streams" / "compiled.py"
    helper.write_text(helper.read_text() + "\n# a change\n")
    before = (tmp_path / "compressors" / "compiled_thc.py").read_text()
    assert stamps.main(["--check"]) == 1
    assert "stale: compressors/compiled_thc.py" in capsys.readouterr().err
    assert (
        tmp_path / "compressors" / "compiled_thc.py"
    ).read_text() == before  # --check writes nothing
    assert stamps.main([]) == 0
    assert "stamped compressors/compiled_thc.py" in capsys.readouterr().err
    after = (tmp_path / "compressors" / "compiled_thc.py").read_text()
    assert after != before and stamps.unstamped(after) == stamps.unstamped(before)
    assert stamps.main(["--check"]) == 0
    assert stamps.write() == []


def test_relative_imports_are_followed_as_absolute_ones():
    sources = stamps._sources()
    path = "compressors/compiled_thc.py"
    text = sources[path]
    for old, new in (
        ("from compressors.compiled_fwht import", "from .compiled_fwht import"),
        (
            "from compressors import compiled_dense, compiled_fwht",
            "from . import compiled_dense, compiled_fwht",
        ),
        ("from streams.compiled import", "from ..streams.compiled import"),
    ):
        assert old in text
        text = text.replace(old, new)
    direct = stamps._imports(ast.parse(text), path)
    assert direct == stamps._imports(ast.parse(sources[path]), path)
    assert "streams/compiled.py" in direct  # `..streams` from compressors/
    relative = stamps.kernel_modules({**sources, path: text})[path]
    assert relative == stamps.kernel_modules(sources)[path]
    assert {"compressors/compiled_fwht.py", "streams/compiled.py"} <= relative


def test_the_packages_are_pyprojects():
    tomllib = pytest.importorskip("tomllib")  # Python 3.11 on

    found = tomllib.loads((stamps.ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    include = found["packages"]["find"]["include"]
    assert sorted(p.rstrip("*") for p in include) == sorted(stamps.PACKAGES)


def test_stamp_lines_out_of_shape_exit_2_naming_the_file(copied, capsys):
    tmp_path = copied
    thc = tmp_path / "compressors" / "compiled_thc.py"
    lines = thc.read_text().split("\n")
    at = next(i for i, line in enumerate(lines) if line.startswith(stamps.PREFIX))
    lines.insert(at + 1, "# an edit in the block")
    thc.write_text("\n".join(lines))
    for argv in (["--check"], []):
        assert stamps.main(argv) == 2
        err = capsys.readouterr().err
        assert "compressors/compiled_thc.py: stamp lines must form one block" in err, err
