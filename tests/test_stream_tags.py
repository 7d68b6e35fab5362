"""The stream tags: one module holds them all, each value once, within the width of a key."""

from __future__ import annotations

import ast
import io
import re
import tokenize
from collections import defaultdict
from pathlib import Path

import pytest

import streams
from streams import tags

REPO = Path(__file__).resolve().parents[1]
PACKAGES = (
    "algorithms",
    "compressors",
    "problems",
    "streams",
    "experiments",
    "systems",
    "benchmarks",
    "theory_checks",
)
TAGS_MODULE = Path("streams/tags.py")

# Hex literals of the packages that are not stream tags, with why.
NOT_TAGS = {
    # SplitMix64's increment and finaliser multipliers (Steele, Lea & Flood 2014).
    ("streams/__init__.py", 0x9E3779B97F4A7C15): "SplitMix64 increment",
    ("streams/__init__.py", 0xBF58476D1CE4E5B9): "SplitMix64 multiplier",
    ("streams/__init__.py", 0x94D049BB133111EB): "SplitMix64 multiplier",
    ("streams/compiled.py", 0x9E3779B97F4A7C15): "SplitMix64 increment",
    ("streams/compiled.py", 0xBF58476D1CE4E5B9): "SplitMix64 multiplier",
    ("streams/compiled.py", 0x94D049BB133111EB): "SplitMix64 multiplier",
    # An odd multiplier that mixes node ids into the dither keys (distinct nodes, distinct keys).
    ("compressors/fosgd.py", 0x9E3779B97F4A7C15): "odd multiplier of node ids",
}
# A name that holds a tag: TAG_X, X_TAG, _TAG, LAYER_TAG_BASE.
TAG_NAME = re.compile(r"(?:^|_)TAG(?:_|$)")

# The values as the modules held them before they moved here: they key every run's streams, so
# changing one changes the numbers of every run that draws from it.
PINNED = {
    "NORMAL_RADIUS": 0x6E01, "NORMAL_ANGLE": 0x6E02,
    "DEFAULT": 0, "NODE": 0x4E0D, "SHARED": 0x5A4D, "SERVER": 0x5E2F, "DDP_LAYER": 1 << 40,
    "PERMK_SHIFT": 0x5EED, "BLOCK": 0xB10C0000, "FOSGD_SIGNS": 0x5157, "FOSGD_DITHER": 0xD17E,
    "MONTECARLO": 0x3C, "DEMO_INPUT": 0xDA7A,
    "X0": 0x7830, "TORCH_INIT": 0x1417, "SERVER_DATA": 0x5E5D, "HOLDOUT": 0x40D0,
    "IMAGES_SYNTHETIC": 0x1A6E, "TABULAR_SYNTHETIC": 0x5D17, "QUADRATIC_RANDOM": 0x9A0D,
    "SPLIT_IID": 0x5011, "SPLIT_DIRICHLET": 0xD112,
    "BATCH": 0xBA7C, "COIN": 0xC014, "MEGA": 0x3E6A, "PP_NODES": 0x5A3F,
    "ADIANA_AT_X": 0xAD1A, "ADIANA_AT_W": 0xAD1B, "ADIANA_ANCHOR": 0xAD1C, "ADACGD_LEVEL": 0xADA0,
    "THREE_PC_SECOND": 1, "THREE_PC_COIN": 0x3C5, "NEWTON_3PC_CBAG": 0x3CBA,
    "NEWTON_3PC_HESS": 0x3CB1, "FEDNL_HESS": 0xFED1, "SMOOTHNESS_SAMPLE": 0xD1A9,
    "EF14_BATCH": 0xEF14, "EF21_SGD_BATCH": 0xE5D1, "EF21_PLUS_FRESH": 0xF2E5,
    "EF21_PP_PARTICIPATE": 0x9A27, "EF21_BC_DOWN": 0xD0C1, "EC_SGD_BATCH": 0xEC5D,
    "EC_LSVRG_BATCH": 0xEC1B, "EC_LSVRG_COIN": 0xEC1C, "GMC_BATCH": 0x6C3B,
    "LIEC_BATCH": 0x11EC, "LIEC_DOWN": 0x11ED, "NEOLITHIC_BATCH": 0x7D0B,
    "NEOLITHIC_MSC": 0x7E000000, "NEOLITHIC_DOWN": 0x7F000000, "DORE_DOWN": 0xD03E,
    "ARTEMIS_DOWN": 0xA27E, "MCM_DOWN": 0x3C30, "MCM_DOWN_I": 0x3C31, "BIDIR_PART": 0xB1D0,
    "SCAFFNEW_MASK": 0x5CAF, "SCAFFNEW_COIN": 0x5CA0, "BYZ_BUCKET": 0xB2C7,
    "BYZ_VR_MARINA_COIN": 0xB1C0, "BYZ_VR_MARINA_BATCH": 0xB1BA, "BYZ_DASHA_PAGE_COIN": 0xB1DC,
    "BYZ_DASHA_PAGE_BATCH": 0xB1DB, "ROSDHB_BATCH": 0xB1DE,
    "MATRIX_SMOOTHNESS": 0x5A17,
}  # fmt: skip


def test_two_names_never_share_a_value():
    names = defaultdict(list)
    for name, value in tags.ALL.items():
        names[value].append(name)
    shared = {hex(v): n for v, n in names.items() if len(n) > 1}
    assert not shared, f"one purpose, one name: {shared}"


def test_the_values_are_those_the_runs_were_keyed_by():
    assert {k: tags.ALL.get(k) for k in PINNED} == PINNED


def test_all_holds_every_constant_of_the_module():
    assert "BATCH" in tags.ALL and "ALL" not in tags.ALL and "SPANS" not in tags.ALL
    assert all(type(v) is int for v in tags.ALL.values())


@pytest.mark.parametrize("name", sorted(tags.ALL))
def test_a_tag_fits_the_width_of_a_key(name):
    """Streams reduces a tag modulo 2**64 (``_as_int64``) and NumPy's seed sequences take
    non-negative integers: a tag in [0, 2**63) is kept as is by both."""
    last = tags.ALL[name] + tags.SPANS.get(name, 1) - 1
    assert 0 <= tags.ALL[name] <= last < 2**63
    assert streams._as_int64(last) == last


def test_a_family_keeps_clear_of_the_other_tags():
    assert set(tags.SPANS) <= set(tags.ALL)
    ranges = {n: range(tags.ALL[n], tags.ALL[n] + s) for n, s in tags.SPANS.items()}
    for name, r in ranges.items():
        inside = [k for k, v in tags.ALL.items() if k != name and v in r]
        assert not inside, f"{', '.join(inside)} fall in {name}'s family"
        for other, q in ranges.items():
            if other != name:
                assert r.stop <= q.start or q.stop <= r.start, (name, other)


def _sources():
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            rel = path.relative_to(REPO)
            if rel != TAGS_MODULE and "__pycache__" not in rel.parts:
                yield rel.as_posix(), path.read_text(encoding="utf-8")


def _is_literal(node) -> bool:
    """An integer written in the source: ``0x5EED``, ``1 << 40``, ``-3``, or a tuple of them."""
    if isinstance(node, ast.Constant):
        return type(node.value) is int
    if isinstance(node, ast.UnaryOp):
        return _is_literal(node.operand)
    if isinstance(node, ast.BinOp):
        return _is_literal(node.left) and _is_literal(node.right)
    if isinstance(node, ast.Tuple):
        return any(_is_literal(e) for e in node.elts)
    return False


def _literal_tags(tree: ast.AST):
    """Where a tag is written as a number: assigned to a tag's name, passed as ``tag=``, a
    ``tag`` parameter's default, or a key of ``np.random.default_rng([seed, ...])``."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names = [
                n.id
                for t in targets
                for n in ast.walk(t)
                if isinstance(n, ast.Name) and TAG_NAME.search(n.id)
            ]
            if names and node.value is not None and _is_literal(node.value):
                yield node.lineno, f"{', '.join(names)} = a number"
        elif isinstance(node, ast.Call):
            for kw in node.keywords:
                if kw.arg == "tag" and _is_literal(kw.value):
                    yield node.lineno, "tag=a number"
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name == "default_rng" and node.args and isinstance(node.args[0], ast.List):
                if any(_is_literal(e) for e in node.args[0].elts):
                    yield node.lineno, "default_rng([..., a number])"
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            a = node.args
            positional = a.posonlyargs + a.args
            pairs = [
                *zip(positional[len(positional) - len(a.defaults) :], a.defaults, strict=True),
                *zip(a.kwonlyargs, a.kw_defaults, strict=True),
            ]
            for arg, default in pairs:
                if arg.arg == "tag" and default is not None and _is_literal(default):
                    yield node.lineno, f"{node.name}(tag=a number)"


def test_no_tag_is_written_outside_the_tags_module():
    found = []
    for rel, text in _sources():
        for tok in tokenize.generate_tokens(io.StringIO(text).readline):
            if tok.type != tokenize.NUMBER or not tok.string.lower().startswith("0x"):
                continue
            value = int(tok.string, 16)
            mask = (value & (value + 1)) == 0  # all ones: a bit mask (0xFF, 0xFFFFFFFF)
            if not mask and (rel, value) not in NOT_TAGS:
                found.append(f"{rel}:{tok.start[0]}: {tok.string}")
        found += [f"{rel}:{line}: {what}" for line, what in _literal_tags(ast.parse(text, rel))]
    assert not found, "stream tags belong in streams/tags.py:\n" + "\n".join(found)


def test_the_scan_sees_a_tag_written_in_place():
    code = (
        "TAG_X = 0x1234\n_Y_TAG, Z = 7, 1\n"
        "def f(comm, t, tag=3):\n"
        "    comm.rng(t, tag=0x55)\n"
        "    np.random.default_rng([seed, 12])\n"
        "    comm.rng(t, tag=tags.BATCH)\n"
    )
    assert sorted(line for line, _ in _literal_tags(ast.parse(code))) == [1, 2, 3, 4, 5]
