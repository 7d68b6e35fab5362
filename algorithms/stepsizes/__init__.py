"""Theoretical step sizes and parameters, as pure functions of the constants.

Each function cites its theorem; ``theory_checks`` evaluates the same functions against the
papers' formulas by hand. Notation: ``L`` smoothness of f, ``L_tilde = sqrt(mean L_i^2)``,
``L_max = max L_i``, ``omega`` (unbiased), ``alpha``/``delta`` (contractive), ``n`` nodes.
One module per family: ``basic`` (DCGD), ``ef`` (EF14, EF21, 3PC, EF-BV), ``ef21_variants``
(EF21-HB, -BC, -SGD, -PP), ``vr`` (DIANA, MARINA, DASHA, COMP-AMS).
"""

from algorithms.stepsizes.absolute import ec_lsvrg, ec_sgd
from algorithms.stepsizes.basic import dcgd, dcgd_nonconvex
from algorithms.stepsizes.ef import (
    ef21,
    ef21_pl,
    ef21_theta_beta,
    ef_bv,
    ef_bv_authors,
    ef_bv_lambda_nu,
    ef_bv_pl,
    ef_bv_r,
    three_pc,
    three_pc_AB,
    three_pc_pl,
)
from algorithms.stepsizes.ef21_variants import (
    ef21_bc,
    ef21_bc_c1_c2,
    ef21_hb,
    ef21_pp,
    ef21_pp_constants,
    ef21_pp_pl,
    ef21_sgd,
    ef21_sgd_constants,
)
from algorithms.stepsizes.vr import (
    ab_constants,
    comp_ams,
    dasha,
    dasha_code,
    dasha_derived,
    dasha_momentum,
    dasha_mvr,
    dasha_page,
    dasha_sync_mvr,
    diana,
    diana_alpha,
    diana_nonconvex,
    marina,
    marina_ab,
    marina_ab_pl,
    marina_pl,
    pp_marina,
    vr_marina,
)

__all__ = [
    "dcgd",
    "dcgd_nonconvex",
    "ef21",
    "ef21_bc",
    "ef21_bc_c1_c2",
    "ef21_hb",
    "ef21_pl",
    "ef21_theta_beta",
]
__all__ += [
    "ef21_pp",
    "ef21_pp_constants",
    "ef21_pp_pl",
    "ef21_sgd",
    "ef21_sgd_constants",
    "ef_bv",
    "ef_bv_authors",
    "ef_bv_lambda_nu",
    "ef_bv_pl",
    "ef_bv_r",
]
__all__ += ["three_pc", "three_pc_AB", "three_pc_pl"]
__all__ += ["ab_constants", "comp_ams", "dasha", "dasha_code", "dasha_derived", "dasha_momentum"]
__all__ += ["dasha_mvr", "dasha_page", "dasha_sync_mvr", "diana", "diana_alpha"]
__all__ += ["diana_nonconvex", "marina", "marina_ab", "marina_ab_pl", "marina_pl", "pp_marina"]
__all__ += ["vr_marina"]
__all__ += ["ec_lsvrg", "ec_sgd"]
