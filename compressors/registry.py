"""The compressor registry and the command-line spec language.

A spec is ``name`` or ``name:key=value,key=value`` (``topk:ratio=0.01``, ``randk:k=10``,
``qsgd:levels=8,norm=inf``, ``rank:r=4``). Two compressors take compressors:
``scaled:SPEC`` (``scaled:randk:k=10``) and ``compose:SPEC+SPEC[+...]`` (parts in the order
they apply: ``compose:topk:k=10+qsgd:levels=4`` is Top-K, then QSGD).
"""

from __future__ import annotations

import dataclasses
import math
import typing

from compressors.base import Compressor
from compressors.bernoulli import Bernoulli
from compressors.compose import Compose
from compressors.count_sketch import CountSketch
from compressors.dithering import QSGD
from compressors.fastsgd import FastSGD
from compressors.fosgd import FOSGD
from compressors.gennorm import GenNorm
from compressors.grid_round import GridRound
from compressors.identity import Identity
from compressors.mlmc import MLMCBits, MLMCTopK
from compressors.natural import Natural
from compressors.natural_dithering import NaturalDithering
from compressors.perm_k import PermK
from compressors.rand_k import RandK
from compressors.rank_r import RankR
from compressors.scaled import Scaled
from compressors.scaled_sign import ScaledSign
from compressors.shared_scale import MSQ, SSQ
from compressors.sidco import SIDCo
from compressors.sign import Sign
from compressors.sparse_dithering import SparseDithering
from compressors.spherical import Spherical
from compressors.symrank import SymRank
from compressors.terngrad import TernGrad
from compressors.thc import THC
from compressors.threelc import ThreeLC
from compressors.threshold import Threshold
from compressors.top_k import TopK
from streams import plugins
from streams.suggest import did_you_mean

COMPRESSORS: dict[str, type[Compressor]] = {
    "identity": Identity,
    "randk": RandK,
    "topk": TopK,
    "permk": PermK,
    "natural": Natural,
    "qsgd": QSGD,
    "natural-dithering": NaturalDithering,
    "terngrad": TernGrad,
    "scaled-sign": ScaledSign,
    "sign": Sign,
    "rank": RankR,
    "bernoulli": Bernoulli,
    "scaled": Scaled,
    "compose": Compose,
    "threshold": Threshold,
    "round": GridRound,
    "3lc": ThreeLC,
    "countsketch": CountSketch,
    "sidco": SIDCo,
    "mlmc": MLMCTopK,
    "mlmc-bits": MLMCBits,
    "fo-sgd": FOSGD,
    "ssq": SSQ,
    "msq": MSQ,
    "thc": THC,
    "spherical": Spherical,
    "sparse-dithering": SparseDithering,
    "fastsgd": FastSGD,
    "gennorm": GenNorm,
}
# Installed packages' classes under the entry-point group 'compzoo.compressors', added on first use
# (streams.plugins).
COMPRESSORS = plugins.Registry("compzoo.compressors", Compressor, COMPRESSORS)

# Compressors whose rows have a structure, so that not every length is a valid row: ``symrank``
# reads a row of d(d+1)/2 entries as a symmetric d x d matrix (second-order methods' Hessian
# rows). Parsed like the others; kept apart from COMPRESSORS, which the property suites run at
# every length, and tested on their own domain (tests/compressors/test_symrank.py).
STRUCTURED: dict[str, type[Compressor]] = {"symrank": SymRank}

ALIASES: dict[str, str] = {"dithering": "qsgd", "ef-sign": "scaled-sign", "ranks": "rank"}


def _names() -> str:
    return ", ".join([*COMPRESSORS, *STRUCTURED])


def _convert(cls: type[Compressor], key: str, raw: str):
    hints = typing.get_type_hints(cls)
    hint = hints[key]
    args = typing.get_args(hint) or (hint,)
    if raw.lower() == "none" and type(None) in args:
        return None
    for typ in args:
        if typ is bool:
            if raw.lower() in ("true", "1", "yes"):
                return True
            if raw.lower() in ("false", "0", "no"):
                return False
        elif typ is int:
            try:
                return int(raw)
            except ValueError:
                pass
        elif typ is float:
            try:
                return float(raw)
            except ValueError:
                pass
        elif typ is str:
            return raw
    allowed = " or ".join("none" if t is type(None) else t.__name__ for t in args)
    raise ValueError(f"{key}={raw!r} is not a valid {allowed} (compressor {cls.__name__})")


def parse_spec(spec: str) -> Compressor:
    """Build a compressor from its spec; ``ValueError`` names what is wrong and what is allowed."""
    if not isinstance(spec, str) or not spec.strip():
        raise ValueError(f"a compressor spec must be a non-empty string, got {spec!r}")
    spec = spec.strip()
    name, sep, rest = spec.partition(":")
    name = ALIASES.get(name, name)
    if name not in COMPRESSORS and name not in STRUCTURED:
        hint = did_you_mean(name, [*COMPRESSORS, *STRUCTURED, *ALIASES])
        raise ValueError(f"unknown compressor {name!r}{hint}; allowed: {_names()}")
    cls = COMPRESSORS[name] if name in COMPRESSORS else STRUCTURED[name]
    if name in ("scaled", "compose") and sep and not rest.strip():
        example = "scaled:randk:k=10" if name == "scaled" else "compose:topk:k=10+qsgd:levels=4"
        what = "an unbiased compressor's spec" if name == "scaled" else "two or more specs"
        raise ValueError(f"{spec!r} names no parts: {name}: needs {what}, e.g. {example!r}")
    if name == "scaled":
        return Scaled(parse_spec(rest)) if rest else Scaled()
    if name == "compose":
        if not rest:
            return Compose()
        parts = rest.split("+")
        if len(parts) < 2:
            raise ValueError(f"compose needs two or more specs joined by '+', got {rest!r}")
        for i, part in enumerate(parts, start=1):
            if not part.strip():
                raise ValueError(
                    f"part {i} of {len(parts)} in {spec!r} is empty; compose needs two or more "
                    "non-empty specs joined by '+'"
                )
        return Compose(tuple(parse_spec(p) for p in parts))
    kwargs = {}
    fields = {f.name for f in dataclasses.fields(cls)}
    allowed = ", ".join(sorted(fields)) or "none"
    for item in rest.split(",") if sep else []:
        key, eq, raw = item.partition("=")
        key = key.strip()
        if not item.strip():
            raise ValueError(
                f"empty parameter in compressor spec {spec!r}; expected {name}:key=value[,...] "
                f"with key one of: {allowed}"
            )
        if not eq:
            raise ValueError(f"expected key=value in compressor spec {spec!r}, got {item!r}")
        if key not in fields:
            raise ValueError(f"unknown parameter {key!r} for {name}; allowed: {allowed}")
        if key in kwargs:
            raise ValueError(f"parameter {key!r} is given twice in compressor spec {spec!r}")
        kwargs[key] = _convert(cls, key, raw.strip())
    return cls(**kwargs)


def name_of(c: Compressor) -> str:
    for name, cls in [*COMPRESSORS.items(), *STRUCTURED.items()]:
        if type(c) is cls:
            return name
    raise ValueError(f"{type(c).__name__} is not in the registry")


def _fmt(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float) and math.isinf(v):
        return "inf"
    return str(v)


def spec_of(c: Compressor) -> str:
    """The spec that :func:`parse_spec` turns back into ``c`` (defaults omitted). A class that
    is not registered (one defined in a notebook and passed to ``algorithms.api.run``) is named
    by its class and fields instead, which no spec parser reads back."""
    try:
        name = name_of(c)
    except ValueError:
        return repr(c)
    if isinstance(c, Scaled):
        return f"scaled:{spec_of(c.inner)}"
    if isinstance(c, Compose):
        return "compose:" + "+".join(spec_of(p) for p in c.parts)
    defaults = type(c)()
    items = [
        f"{f.name}={_fmt(getattr(c, f.name))}"
        for f in dataclasses.fields(c)
        if getattr(c, f.name) != getattr(defaults, f.name)
    ]
    return name + (":" + ",".join(items) if items else "")
