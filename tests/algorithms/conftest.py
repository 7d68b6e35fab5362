"""Problems shared by the method tests (module-scoped in each test module that uses them)."""

from __future__ import annotations

import pytest

from problems.instances import heterogeneous_ridge
from problems.registry import make_problem


@pytest.fixture(scope="module")
def quad():
    """A strongly convex random quadratic (mu = 0.2, d = 10, 5 nodes)."""
    return make_problem("quadratic", nodes=5, lam=0.2, dim=10, seed=0)


@pytest.fixture(scope="module")
def nonconvex():
    """Logistic regression + the nonconvex regulariser, from a random start."""
    return make_problem(
        "logreg-nonconvex", nodes=5, lam=0.1, samples=200, features=10, seed=2, x0="randn"
    )


@pytest.fixture(scope="module")
def ridge():
    """The heterogeneous ridge of the theory sheet §3.6."""
    return heterogeneous_ridge()
