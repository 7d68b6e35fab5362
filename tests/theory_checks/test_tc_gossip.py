"""The CHOCO-Gossip check (theory_checks.gossip): its instance and step are what the docstring
says. (The fast check and its power run in test_tc_power.py.)"""

from __future__ import annotations

import pytest

from algorithms.decentralized.base import graph
from algorithms.decentralized.choco_sgd import choco_consensus_step
from theory_checks import gossip as tc


def test_the_instance_and_its_step():
    top = graph("complete", tc.N, "metropolis", 0)
    assert top.rho == pytest.approx(1.0) and top.beta == pytest.approx(1.0)
    assert choco_consensus_step(top.rho, top.beta, tc.DELTA) == pytest.approx(0.25 / 21, rel=1e-12)
    # the torus the docstring leaves out: its step is about half the complete graph's
    torus = graph("torus", 9, "metropolis", 0)
    step = choco_consensus_step(torus.rho, torus.beta, tc.DELTA)
    assert step == pytest.approx(0.00554, rel=1e-2)
