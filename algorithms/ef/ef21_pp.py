"""EF21-PP: EF21 with partial participation (Fatkhullin et al., "EF21 with Bells & Whistles")."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import torch

from algorithms import provenance as pv
from algorithms import stepsizes
from algorithms.base import Theory, check_choice, check_unit, option, regime_option
from algorithms.ef.ef21 import EF21Base, EF21State, ef21_update
from algorithms.provenance import Provenance
from comm.base import Comm
from streams import tags

SAMPLINGS = ("poisson", "nice")
REGIMES = ("auto", "nonconvex", "pl")
PL_PROVENANCE = pv.derived(
    "algorithms.stepsizes.ef21_variants:ef21_pp_pl",
    "EF21's Theorem 2 argument (arXiv 2106.05203) on the estimator recursion behind Theorem 7 "
    "of Fatkhullin et al. 2021, arXiv 2110.03294; that paper's PL theorem for EF21-PP was not "
    "available",
)


def participation_mask(comm: Comm, t: int, p: float, sampling: str) -> torch.Tensor:
    """Bool ``(m,)``: which held nodes take part in round ``t``.

    ``poisson``: node ``i`` flips its own Bernoulli(p) coin from its own stream (FL_PyTorch).
    ``nice``: a uniform subset of ``max(1, floor(p n))`` nodes, drawn from a stream shared by
    all nodes (the authors' code samples without replacement).
    """
    if sampling == "poisson":
        return comm.rng(t, tag=tags.EF21_PP_PARTICIPATE).uniform(1)[:, 0] < p
    s = nice_size(p, comm.n)
    perm = comm.rng(t, shared=True, tag=tags.EF21_PP_PARTICIPATE).permutation(comm.n)
    rank = torch.argsort(perm, dim=1)  # rank[j, i] = position of node i in row j's order
    return rank.gather(1, comm.nodes.to(rank.device)[:, None])[:, 0] < s


def nice_size(p: float, n: int) -> int:
    return max(1, math.floor(p * n))


@dataclass(frozen=True)
class EF21PP(EF21Base):
    """EF21-PP: EF21 with partial participation (arXiv 2110.03294, Algorithm 4).

    Fatkhullin, Sokolov, Gorbunov, Li & Richtárik 2021, "EF21 with Bells & Whistles".

    Update: ``x^{t+1} = x^t - gamma g^t``; a random set ``S^t`` of nodes takes part; node
    ``i`` in ``S^t`` sends ``c_i = C(grad f_i(x^{t+1}) - g_i^t)`` and sets
    ``g_i^{t+1} = g_i^t + c_i``; the others send nothing (and are charged nothing uplink) and
    keep ``g_i^{t+1} = g_i^t``; ``g^{t+1} = g^t + (1/n) sum_{i in S^t} c_i``. Invariant:
    ``g = mean_i g_i``. ``participation = 1`` is EF21 exactly.

    Sampling (``sampling``): ``poisson`` (default; each node independently with probability
    ``participation``, from its own stream, as FL_PyTorch) or ``nice`` (``floor(p n)`` nodes
    uniformly without replacement, as the authors' code; then ``p`` in the theory is
    ``floor(p n)/n``). The downlink charges every node the model each round (the server
    broadcasts ``x^{t+1}``; a conservative count, since only participants need it).

    Theory: Theorem 7 (p. 47) with all ``p_i = p``: ``gamma = 1/(L + sqrt(B~/theta_p))``,
    ``theta_p = theta p/2``, ``B~ = (beta p + (1 + 1/rho)(1-p)) L_tilde^2``,
    ``rho = theta p/(2(1-p))`` (:func:`stepsizes.ef21_pp`). Under PL (``regime``: ``auto`` picks
    it when the problem knows ``mu``) the step is ``min(1/(L + sqrt(2 B~/theta_p)),
    theta_p/(2 mu))`` (:func:`stepsizes.ef21_pp_pl`): derived here as EF21's Theorem 2 step with
    Theorem 7's ``theta_p`` and ``B~`` (B&W's own PL theorem for EF21-PP was not available);
    ``p = 1`` gives EF21's PL step. Reports ``G = mean_i ||g_i - grad f_i(x)||^2`` over all
    nodes.
    """

    participation: float = option(
        0.5, "probability p in (0, 1] that a node takes part", check=check_unit, required=True
    )
    sampling: str = option("poisson", "participation: poisson | nice", choices=SAMPLINGS)
    regime: str = regime_option()

    batchable: ClassVar[bool] = True
    needs: ClassVar[str] = "contractive"
    reports: ClassVar[tuple[str, ...]] = ("G", "participants")
    provenance: ClassVar[Provenance] = pv.theorem(
        "Fatkhullin, Sokolov, Gorbunov, Li & Richtárik 2021, arXiv 2110.03294, Theorem 7 "
        "(p. 47; EF21-PP, nonconvex) with every p_i = p and rho = theta p/(2(1 - p)); under PL "
        "the step is derived here (see the run's record)"
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.sampling not in SAMPLINGS:
            raise ValueError(f"sampling must be poisson or nice, got {self.sampling!r}")

    @classmethod
    def theory(cls, problem, compressor, opts) -> Theory:
        c, d = problem.consts, problem.d
        p = float(opts.get("participation", 0.5))
        if opts.get("sampling") == "nice":
            p = nice_size(p, problem.n) / problem.n
        alpha = compressor.delta(d)
        regime = opts.get("regime", "auto")
        check_choice("regime", regime, REGIMES)
        if regime == "pl" or (regime == "auto" and c.mu is not None):
            if c.mu is None:
                raise ValueError("the PL step needs mu, which this problem does not know")
            return Theory(
                gamma=stepsizes.ef21_pp_pl(c.L, c.L_tilde, alpha, p, c.mu),
                formula="min(1 / (L + sqrt(2 B~ / theta_p)), theta_p / (2 mu)), "
                "theta_p = theta p / 2, B~ = (beta p + (1 + 1/rho)(1 - p)) L_tilde^2, "
                "rho = theta p / (2 (1 - p))",
                inputs={"L": c.L, "L_tilde": c.L_tilde, "alpha": alpha, "p": p, "mu": c.mu},
                source="derived: EF21's Theorem 2 (arXiv 2106.05203) with theta_p, B~ of "
                "Fatkhullin et al. 2021, arXiv 2110.03294, Theorem 7 (EF21-PP)",
                provenance=PL_PROVENANCE,
            )
        return Theory(
            gamma=stepsizes.ef21_pp(c.L, c.L_tilde, alpha, p),
            formula="1 / (L + sqrt(B~ / theta_p)), theta_p = theta p / 2, "
            "B~ = (beta p + (1 + 1/rho)(1 - p)) L_tilde^2, rho = theta p / (2 (1 - p))",
            inputs={"L": c.L, "L_tilde": c.L_tilde, "alpha": alpha, "p": p},
            source="Fatkhullin et al. 2021, arXiv 2110.03294, Theorem 7 (EF21-PP)",
        )

    def _step(self, state: EF21State, problem, comm: Comm):
        C, t = self.compressor, state.t
        x = self._descend(state, problem, comm)
        grad_i = problem.grad(x)
        mask = participation_mask(comm, t, self.participation, self.sampling).to(grad_i.device)
        # full participation sums as EF21 does (bit-identical iterates)
        full = self.participation == 1
        g_i, g, G = ef21_update(C, grad_i, state.g_i, state.g, comm, t, mask=None if full else mask)
        share = comm.monitor_mean(mask.to(torch.float64))
        return EF21State(x=x, t=t + 1, g_i=g_i, g=g), {"G": G, "participants": share}
