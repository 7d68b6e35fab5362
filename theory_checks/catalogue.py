"""The catalogue: every module's checks, in the order they print."""

from __future__ import annotations

from theory_checks.base import Check


def all_checks() -> list[Check]:
    from theory_checks import (
        absolute,
        accelerated,
        adacgd,
        adaptive_bidirectional,
        bidirectional,
        byzantine,
        cafe,
        compression_bounds,
        compressor_checks,
        contrasts_ef,
        contrasts_vr,
        ef_checks,
        ef_momentum,
        gossip,
        local_training,
        local_training_2,
        lowrank,
        matrix_smoothness,
        momentum_ec,
        neolithic,
        newton,
        primal_ef,
        scaling,
        sign_methods,
        sketching,
        stepsize_table,
        two_direction,
        vi,
        vi_similarity,
        vr_checks,
    )

    modules = (compressor_checks, stepsize_table, ef_checks, vr_checks, contrasts_ef, contrasts_vr)
    modules += (scaling,)
    modules += (accelerated,)
    modules += (bidirectional,)
    modules += (primal_ef,)
    modules += (cafe,)
    modules += (absolute,)
    modules += (momentum_ec,)
    modules += (byzantine,)
    modules += (matrix_smoothness,)
    modules += (adacgd,)
    modules += (local_training,)
    modules += (local_training_2,)
    modules += (newton,)
    modules += (neolithic,)
    modules += (gossip,)
    modules += (sketching,)
    modules += (sign_methods,)
    modules += (lowrank,)
    modules += (compression_bounds,)
    modules += (ef_momentum,)
    modules += (adaptive_bidirectional,)
    modules += (vi,)
    modules += (vi_similarity,)
    modules += (two_direction,)
    checks = [c for m in modules for c in m.CHECKS]
    names = [c.name for c in checks]
    dup = {n for n in names if names.count(n) > 1}
    if dup:
        raise ValueError(f"duplicate check names: {sorted(dup)}")
    return checks
