"""The method registry: command-line name -> "module:Class" (a plain dict literal: one line per
method; a class is imported when it is first looked up, :class:`streams.plugins.Registry`)."""

from __future__ import annotations

from algorithms.base import Algorithm
from streams import plugins
from streams.suggest import did_you_mean

ALGORITHMS: dict[str, type[Algorithm] | str] = {
    "dcgd": "algorithms.shifts.dcgd:DCGD",
    "ef-sgd": "algorithms.ef.ef14:EF14",
    "ef21": "algorithms.ef.ef21:EF21",
    "ef21-sgd": "algorithms.ef.ef21_sgd:EF21SGD",
    "ef21-pp": "algorithms.ef.ef21_pp:EF21PP",
    "ef21-bc": "algorithms.bidirectional.ef21_bc:EF21BC",
    "ef21-hb": "algorithms.ef.ef21_hb:EF21HB",
    "ef21-page": "algorithms.ef.ef21_page:EF21PAGE",
    "ef21-plus": "algorithms.ef.ef21_plus:EF21Plus",
    "3pc": "algorithms.ef.three_pc:ThreePC",
    "adacgd": "algorithms.ef.adacgd:AdaCGD",
    "ef-bv": "algorithms.ef.ef_bv:EFBV",
    "diana": "algorithms.shifts.diana:DIANA",
    "adiana": "algorithms.shifts.adiana:ADIANA",
    "canita": "algorithms.shifts.canita:CANITA",
    "dcgd-plus": "algorithms.shifts.dcgd_plus:DCGDPlus",
    "diana-plus": "algorithms.shifts.diana_plus:DIANAPlus",
    "marina": "algorithms.vr.marina:MARINA",
    "vr-marina": "algorithms.vr.vr_marina:VRMARINA",
    "byz-vr-marina": "algorithms.byzantine.byz_vr_marina:ByzVRMARINA",
    "byz-ef21": "algorithms.byzantine.byz_ef21:ByzEF21",
    "byz-dasha-page": "algorithms.byzantine.byz_dasha_page:ByzDASHAPAGE",
    "rosdhb": "algorithms.byzantine.rosdhb:RoSDHB",
    "pp-marina": "algorithms.vr.pp_marina:PPMARINA",
    "dasha": "algorithms.vr.dasha:DASHA",
    "dasha-page": "algorithms.vr.dasha_page:DASHAPAGE",
    "dasha-mvr": "algorithms.vr.dasha_mvr:DASHAMVR",
    "dasha-sync-mvr": "algorithms.vr.dasha_sync_mvr:DASHASYNCMVR",
    "comp-ams": "algorithms.momentum.comp_ams:CompAMS",
    "ec-sgd": "algorithms.absolute.ec_sgd:ECSGD",
    "ec-lsvrg": "algorithms.absolute.ec_lsvrg:ECLSVRG",
    "cafe": "algorithms.shifts.cafe:CAFe",
    "cafe-s": "algorithms.shifts.cafe:CAFeS",
    "dore": "algorithms.bidirectional.dore:DORE",
    "artemis": "algorithms.bidirectional.artemis:Artemis",
    "mcm": "algorithms.bidirectional.mcm:MCM",
    "gmc": "algorithms.momentum.gmc:GMC",
    "liec-sgd": "algorithms.momentum.liec_sgd:LIECSGD",
    "compressed-scaffnew": "algorithms.local.compressed_scaffnew:CompressedScaffnew",
    "fednl": "algorithms.second_order.fednl:FedNL",
    "newton-3pc": "algorithms.second_order.newton_3pc:Newton3PC",
    "neolithic": "algorithms.multistage.neolithic:NEOLITHIC",
    "neolithic-acc": "algorithms.multistage.neolithic_acc:NEOLITHICAcc",
    "ef21-sgdm": "algorithms.ef.ef21_sgdm:EF21SGDM",
    "ef21-sgd2m": "algorithms.ef.ef21_sgdm:EF21SGD2M",
    "econtrol": "algorithms.ef.econtrol:EControl",
    "signsgd-mv": "algorithms.sign.majority_vote:SignSGDMV",
    "signum-mv": "algorithms.sign.majority_vote:SignumMV",
    "onebit-adam": "algorithms.sign.onebit_adam:OneBitAdam",
    "zero-one-adam": "algorithms.sign.onebit_adam:ZeroOneAdam",
    "ef21-p-diana": "algorithms.bidirectional.ef21_p:EF21PDIANA",
    "ef21-p-dcgd": "algorithms.bidirectional.ef21_p:EF21PDCGD",
    "marina-p": "algorithms.bidirectional.marina_p:MARINAP",
    "m3": "algorithms.bidirectional.marina_p:M3",
    "powersgd-plus": "algorithms.lowrank.powersgd_plus:PowerSGDPlus",
    "laser": "algorithms.lowrank.laser:LASER",
    "fetchsgd": "algorithms.sketch.fetchsgd:FetchSGD",
    "sketched-amsgrad": "algorithms.sketch.sketched_amsgrad:SketchedAMSGrad",
    "tamuna": "algorithms.local.tamuna:TAMUNA",
    "locodl": "algorithms.local.locodl:LoCoDL",
    "byteps-adam": "algorithms.momentum.adaptive_bidirectional:BytePSAdam",
    "2direction": "algorithms.bidirectional.two_direction:TwoDirection",
    "masha1": "algorithms.vi.masha1:MASHA1",
    "masha-sim": "algorithms.vi.masha_sim:MASHASim",
    "d-sgd": "algorithms.decentralized.d_sgd:DSGD",
    "choco-sgd": "algorithms.decentralized.choco_sgd:ChocoSGD",
    "gt": "algorithms.decentralized.tracking:GradientTracking",
    "beer": "algorithms.decentralized.tracking:BEER",
    "motef": "algorithms.decentralized.tracking:MoTEF",
    "cold": "algorithms.decentralized.cold:COLD",
    "dyna-cold": "algorithms.decentralized.cold:DynaCOLD",
}
# Installed packages' classes under the entry-point group 'compzoo.algorithms', added on first use
# (streams.plugins).
ALGORITHMS = plugins.Registry("compzoo.algorithms", Algorithm, ALGORITHMS)

ALIASES: dict[str, str] = {"ef14": "ef-sgd"}


def usual_compressor(name: str, k: int = 3) -> str:
    """A compressor spec of the class ``name``'s theory assumes (its ``needs``), for tests and
    benchmarks that run every method: the compressor a method declares it is built for
    (``example_compressor``), else Top-K for contractive methods, the random grid rounding for
    absolute ones, the identity for methods with a compression mechanism of their own, and
    Rand-K (random, so the per-node streams are exercised) for the rest."""
    cls = get_algorithm(name)
    if cls.example_compressor is not None:
        return cls.example_compressor
    needs = cls.needs
    if needs == "contractive":
        return f"topk:k={k}"
    if needs == "absolute":
        return "round:h=0.01,rounding=random"
    if needs == "none":
        return "identity"
    return f"randk:k={k}"


# Values for the options some methods require (no theory value could be read), for tests and
# benchmarks that run every method: BEER's and MoTEF's consensus step, MoTEF's momentum.
USUAL_REQUIRED = {"consensus": 0.5, "momentum": 0.5}


def usual_options(name: str) -> dict[str, float]:
    """Values for the options ``name`` requires (``option(required=True)``) that have a usual
    value here (:data:`USUAL_REQUIRED`); the others are left to the caller."""
    opts = get_algorithm(name).options
    return {k: v for k, v in USUAL_REQUIRED.items() if k in opts and opts[k].required}


def usual_argv(name: str) -> list[str]:
    """:func:`usual_options` as command-line flags."""
    return [a for k, v in usual_options(name).items() for a in (f"--{k}", str(v))]


def get_algorithm(name: str) -> type[Algorithm]:
    """The class registered as ``name`` (or an alias); ``ValueError`` lists the valid names."""
    key = ALIASES.get(name, name)
    if key not in ALGORITHMS:
        hint = did_you_mean(name, [*ALGORITHMS, *ALIASES])
        raise ValueError(f"unknown algorithm {name!r}{hint}; allowed: {', '.join(ALGORITHMS)}")
    return ALGORITHMS[key]
