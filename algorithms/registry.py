"""The method registry: command-line name -> class (a plain dict literal)."""

from __future__ import annotations

from algorithms.base import Algorithm
from algorithms.comp_ams import CompAMS
from algorithms.dasha import DASHA
from algorithms.dasha_mvr import DASHAMVR
from algorithms.dasha_page import DASHAPAGE
from algorithms.dasha_sync_mvr import DASHASYNCMVR
from algorithms.dcgd import DCGD
from algorithms.diana import DIANA
from algorithms.ef14 import EF14
from algorithms.ef21 import EF21
from algorithms.ef21_bc import EF21BC
from algorithms.ef21_hb import EF21HB
from algorithms.ef21_page import EF21PAGE
from algorithms.ef21_plus import EF21Plus
from algorithms.ef21_pp import EF21PP
from algorithms.ef21_sgd import EF21SGD
from algorithms.ef_bv import EFBV
from algorithms.marina import MARINA
from algorithms.pp_marina import PPMARINA
from algorithms.three_pc import ThreePC
from algorithms.vr_marina import VRMARINA
from streams import plugins

ALGORITHMS: dict[str, type[Algorithm]] = {
    "dcgd": DCGD,
    "ef-sgd": EF14,
    "ef21": EF21,
    "ef21-sgd": EF21SGD,
    "ef21-pp": EF21PP,
    "ef21-bc": EF21BC,
    "ef21-hb": EF21HB,
    "ef21-page": EF21PAGE,
    "ef21-plus": EF21Plus,
    "3pc": ThreePC,
    "ef-bv": EFBV,
    "diana": DIANA,
    "marina": MARINA,
    "vr-marina": VRMARINA,
    "pp-marina": PPMARINA,
    "dasha": DASHA,
    "dasha-page": DASHAPAGE,
    "dasha-mvr": DASHAMVR,
    "dasha-sync-mvr": DASHASYNCMVR,
    "comp-ams": CompAMS,
}
# Installed packages' classes under the entry-point group 'compzoo.algorithms', added on first use
# (streams.plugins).
ALGORITHMS = plugins.Registry("compzoo.algorithms", Algorithm, ALGORITHMS)

ALIASES: dict[str, str] = {"ef14": "ef-sgd"}


def get_algorithm(name: str) -> type[Algorithm]:
    """The class registered as ``name`` (or an alias); ``ValueError`` lists the valid names."""
    key = ALIASES.get(name, name)
    if key not in ALGORITHMS:
        raise ValueError(f"unknown algorithm {name!r}; allowed: {', '.join(ALGORITHMS)}")
    return ALGORITHMS[key]
