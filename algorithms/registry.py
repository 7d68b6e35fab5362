"""The method registry: command-line name -> class (a plain dict literal)."""

from __future__ import annotations

from algorithms.adacgd import AdaCGD
from algorithms.adiana import ADIANA
from algorithms.artemis import Artemis
from algorithms.base import Algorithm
from algorithms.byz_dasha_page import ByzDASHAPAGE
from algorithms.byz_ef21 import ByzEF21
from algorithms.byz_vr_marina import ByzVRMARINA
from algorithms.cafe import CAFe, CAFeS
from algorithms.canita import CANITA
from algorithms.comp_ams import CompAMS
from algorithms.compressed_scaffnew import CompressedScaffnew
from algorithms.dasha import DASHA
from algorithms.dasha_mvr import DASHAMVR
from algorithms.dasha_page import DASHAPAGE
from algorithms.dasha_sync_mvr import DASHASYNCMVR
from algorithms.dcgd import DCGD
from algorithms.dcgd_plus import DCGDPlus
from algorithms.diana import DIANA
from algorithms.diana_plus import DIANAPlus
from algorithms.dore import DORE
from algorithms.ec_lsvrg import ECLSVRG
from algorithms.ec_sgd import ECSGD
from algorithms.ef14 import EF14
from algorithms.ef21 import EF21
from algorithms.ef21_bc import EF21BC
from algorithms.ef21_hb import EF21HB
from algorithms.ef21_page import EF21PAGE
from algorithms.ef21_plus import EF21Plus
from algorithms.ef21_pp import EF21PP
from algorithms.ef21_sgd import EF21SGD
from algorithms.ef_bv import EFBV
from algorithms.fednl import FedNL
from algorithms.gmc import GMC
from algorithms.liec_sgd import LIECSGD
from algorithms.marina import MARINA
from algorithms.mcm import MCM
from algorithms.neolithic import NEOLITHIC
from algorithms.neolithic_acc import NEOLITHICAcc
from algorithms.newton_3pc import Newton3PC
from algorithms.pp_marina import PPMARINA
from algorithms.rosdhb import RoSDHB
from algorithms.three_pc import ThreePC
from algorithms.vr_marina import VRMARINA
from streams import plugins
from streams.suggest import did_you_mean

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
    "adacgd": AdaCGD,
    "ef-bv": EFBV,
    "diana": DIANA,
    "adiana": ADIANA,
    "canita": CANITA,
    "dcgd-plus": DCGDPlus,
    "diana-plus": DIANAPlus,
    "marina": MARINA,
    "vr-marina": VRMARINA,
    "byz-vr-marina": ByzVRMARINA,
    "byz-ef21": ByzEF21,
    "byz-dasha-page": ByzDASHAPAGE,
    "rosdhb": RoSDHB,
    "pp-marina": PPMARINA,
    "dasha": DASHA,
    "dasha-page": DASHAPAGE,
    "dasha-mvr": DASHAMVR,
    "dasha-sync-mvr": DASHASYNCMVR,
    "comp-ams": CompAMS,
    "ec-sgd": ECSGD,
    "ec-lsvrg": ECLSVRG,
    "cafe": CAFe,
    "cafe-s": CAFeS,
    "dore": DORE,
    "artemis": Artemis,
    "mcm": MCM,
    "gmc": GMC,
    "liec-sgd": LIECSGD,
    "compressed-scaffnew": CompressedScaffnew,
    "fednl": FedNL,
    "newton-3pc": Newton3PC,
    "neolithic": NEOLITHIC,
    "neolithic-acc": NEOLITHICAcc,
}
# Installed packages' classes under the entry-point group 'compzoo.algorithms', added on first use
# (streams.plugins).
ALGORITHMS = plugins.Registry("compzoo.algorithms", Algorithm, ALGORITHMS)

ALIASES: dict[str, str] = {"ef14": "ef-sgd"}


def usual_compressor(name: str, k: int = 3) -> str:
    """A compressor spec of the class ``name``'s theory assumes (its ``needs``), for tests and
    benchmarks that run every method: Top-K for contractive methods, the random grid rounding
    for absolute ones, the identity for methods with a compression mechanism of their own, and
    Rand-K (random, so the per-node streams are exercised) for the rest."""
    needs = get_algorithm(name).needs
    if needs == "contractive":
        return f"topk:k={k}"
    if needs == "absolute":
        return "round:h=0.01,rounding=random"
    if needs == "none":
        return "identity"
    return f"randk:k={k}"


def get_algorithm(name: str) -> type[Algorithm]:
    """The class registered as ``name`` (or an alias); ``ValueError`` lists the valid names."""
    key = ALIASES.get(name, name)
    if key not in ALGORITHMS:
        hint = did_you_mean(name, [*ALGORITHMS, *ALIASES])
        raise ValueError(f"unknown algorithm {name!r}{hint}; allowed: {', '.join(ALGORITHMS)}")
    return ALGORITHMS[key]
