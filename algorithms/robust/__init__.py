"""Byzantine robustness: robust aggregators, attacks and the options the robust methods share."""

from algorithms.robust.aggregators import AGGREGATORS, aggregate
from algorithms.robust.attacks import ATTACKS, attack
from algorithms.robust.options import BYZ_REPORTS, ByzantineAlgorithm

__all__ = [
    "AGGREGATORS",
    "ATTACKS",
    "BYZ_REPORTS",
    "ByzantineAlgorithm",
    "aggregate",
    "attack",
]
