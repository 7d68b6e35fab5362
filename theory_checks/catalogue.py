"""The catalogue: every module's checks, in the order they print."""

from __future__ import annotations

from theory_checks.base import Check


def all_checks() -> list[Check]:
    from theory_checks import (
        absolute,
        accelerated,
        adacgd,
        bidirectional,
        byzantine,
        cafe,
        compressor_checks,
        contrasts_ef,
        contrasts_vr,
        ef_checks,
        gossip,
        local_training,
        matrix_smoothness,
        momentum_ec,
        neolithic,
        newton,
        scaling,
        stepsize_table,
        vr_checks,
    )

    modules = (compressor_checks, stepsize_table, ef_checks, vr_checks, contrasts_ef, contrasts_vr)
    modules += (scaling,)
    modules += (accelerated,)
    modules += (bidirectional,)
    modules += (cafe,)
    modules += (absolute,)
    modules += (momentum_ec,)
    modules += (byzantine,)
    modules += (matrix_smoothness,)
    modules += (adacgd,)
    modules += (local_training,)
    modules += (newton,)
    modules += (neolithic,)
    modules += (gossip,)
    checks = [c for m in modules for c in m.CHECKS]
    names = [c.name for c in checks]
    dup = {n for n in names if names.count(n) > 1}
    if dup:
        raise ValueError(f"duplicate check names: {sorted(dup)}")
    return checks
