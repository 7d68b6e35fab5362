"""What the Byzantine-robust methods share: their run options, the robust round and the
honest-nodes objective they report.

Run options (method options, so the runner needs no change): ``--byzantine K`` (the last ``K``
node ids are Byzantine), ``--attack none|bf|lf|alie|ipm``, ``--aggregator mean|cm|gm|krum|cc``,
``--bucket S`` (bucketing before the aggregator; 1: none) and the parameters ``--ipm-eps``,
``--alie-z``, ``--gm-iters``, ``--gm-nu``, ``--krum-m``, ``--cc-tau``, ``--cc-iters``, and
``--agg-c`` (the aggregator's ``c`` in the theory step).

A robust round (:meth:`ByzantineAlgorithm.robust_aggregate`): every node's message reaches the
server (:meth:`comm.base.Comm.gather_rows`, each charged its payload's bits); the
server replaces the Byzantine rows by the attack (computed from the honest rows), draws the
bucketing permutation from its own stream and aggregates. Byzantine nodes are charged the bits of
the message an honest node sends (the attack changes the values, not the format).

Reported: the runner's ``f`` and ``grad_norm_sq`` are those of the whole problem (all ``n``
nodes' data, labels unflipped); the theorems bound the honest nodes' objective
``f_G = (1/G) sum_{i < G} f_i``, ``G = n - K``, which each step reports as ``f_honest`` and
``grad_norm_sq_honest`` (the problem restricted to the honest nodes, ``problem.local``;
evaluated on every process from its copy of the data, not a message, so nothing is charged).
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import ClassVar

import torch

from algorithms.base import Algorithm, option
from algorithms.robust.aggregators import AGGREGATORS, aggregate
from algorithms.robust.attacks import ATTACKS, attack
from streams.tags import BYZ_BUCKET as TAG_BUCKET

__all__ = [
    "AGG_C",
    "BYZ_REPORTS",
    "ByzantineAlgorithm",
    "TAG_BUCKET",
    "theory_counts",
]


#: The ``c`` of (delta, c)-robustness the theory steps use by default: the coauthors' notebook
#: (Nikosimus/CC-for-BR-Learning ``Experiments.ipynb``) writes ``8 c delta`` as
#: ``8 * (256/15) * K/n`` for bucketed CM/GM (s = 2).
AGG_C = 256.0 / 15.0

BYZ_REPORTS = ("f_honest", "grad_norm_sq_honest")


def theory_counts(problem, opts) -> tuple[int, int, float, float]:
    """``(K, G, delta, c)`` of a run's options for a theory step: ``G = n - K`` honest nodes,
    ``delta = K/n``, ``c = --agg-c``; ``ValueError`` unless ``0 <= K < n/2``."""
    K, n = opts.get("byzantine") or 0, problem.n
    if isinstance(K, bool) or not isinstance(K, int) or K < 0:
        raise ValueError(f"byzantine must be an integer >= 0, got {K!r}")
    if not 2 * K < n:
        raise ValueError(f"byzantine must be below n/2 = {n / 2:g} (an honest majority), got {K}")
    c = float(opts.get("agg_c") or AGG_C)
    return K, n - K, K / n, c


# Derived problems (honest restriction, label-flipped copy), built once per problem object.
_HONEST: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_FLIPPED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


@dataclass(frozen=True)
class ByzantineAlgorithm(Algorithm):
    """Base of the Byzantine-robust methods: the shared options (see module docstring)."""

    byzantine: int = option(0, "number K of Byzantine nodes (the last K node ids)")
    attack: str = option("none", "Byzantine attack", choices=ATTACKS)
    aggregator: str = option("cm", "robust aggregator of the nodes' messages", choices=AGGREGATORS)
    bucket: int = option(2, "bucket size s of the bucketing wrapper (1: no bucketing)")
    ipm_eps: float = option(0.1, "IPM attack: Byzantine nodes send -eps * honest mean")
    alie_z: float | None = option(
        None, "ALIE attack's z (default: z_max of Baruch et al. from n, K)"
    )
    gm_iters: int = option(8, "geometric median: smoothed Weiszfeld iterations")
    gm_nu: float = option(0.1, "geometric median: smoothing nu of the Weiszfeld weights")
    krum_m: int = option(1, "Krum: number of selected messages averaged")
    cc_tau: float = option(10.0, "centred clipping: radius tau")
    cc_iters: int = option(3, "centred clipping: iterations from the previous output")
    agg_c: float = option(AGG_C, "the aggregator's c of (delta, c)-robustness in the theory step")

    reports: ClassVar[tuple[str, ...]] = BYZ_REPORTS

    def __post_init__(self) -> None:
        super().__post_init__()
        k = self.byzantine
        if isinstance(k, bool) or not isinstance(k, int) or k < 0:
            raise ValueError(f"byzantine must be an integer >= 0, got {k!r}")
        for name in ("bucket", "gm_iters", "krum_m", "cc_iters"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be a positive integer, got {v!r}")
        for name in ("ipm_eps", "gm_nu", "cc_tau", "agg_c"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)!r}")
        if self.alie_z is not None and not self.alie_z >= 0:
            raise ValueError(f"alie_z must be >= 0, got {self.alie_z!r}")

    # ------------------------------------------------------------ shared pieces
    def check_nodes(self, problem) -> None:
        """At least one honest node, and more honest than Byzantine ones."""
        if not 2 * self.byzantine < problem.n:
            raise ValueError(
                f"byzantine must be below n/2 = {problem.n / 2:g} (an honest majority), "
                f"got {self.byzantine}"
            )

    def honest_count(self, problem) -> int:
        return problem.n - self.byzantine

    def robust_delta(self, n: int) -> float:
        """``delta = K/n``, the Byzantine fraction of the theory's (delta, c)-robustness."""
        return self.byzantine / n

    def data(self, problem):
        """The problem the nodes compute on: the Byzantine nodes' labels flipped under ``lf``."""
        if self.attack != "lf" or self.byzantine == 0:
            return problem
        flipped = _FLIPPED.get(problem)
        if flipped is None or flipped[0] != self.byzantine:
            bad = torch.arange(problem.n - self.byzantine, problem.n)
            flipped = (self.byzantine, problem.label_flipped(bad))
            _FLIPPED[problem] = flipped
        return flipped[1]

    def robust_aggregate(
        self, rows_i: torch.Tensor, nbits: torch.Tensor, comm, t: int, center=None
    ) -> torch.Tensor:
        """``ARAgg`` of every node's row after the attack (see module docstring), ``(d,)``."""
        rows = comm.gather_rows(rows_i, nbits)
        rows = attack(self.attack, rows, self.byzantine, ipm_eps=self.ipm_eps, alie=self.alie_z)
        perm = None
        if self.bucket > 1:
            perm = comm.server_rng(t, tag=TAG_BUCKET).permutation(comm.n)[0]
        return aggregate(
            self.aggregator,
            rows,
            f=self.byzantine,
            bucket=self.bucket,
            perm=perm,
            center=center,
            gm_iters=self.gm_iters,
            gm_nu=self.gm_nu,
            krum_m=self.krum_m,
            cc_tau=self.cc_tau,
            cc_iters=self.cc_iters,
        )

    def honest_report(self, x: torch.Tensor, problem) -> dict[str, float]:
        """``f_G(x)`` and ``||grad f_G(x)||^2`` of the honest nodes' objective."""
        G = problem.n - self.byzantine
        honest = _HONEST.get(problem)
        if honest is None or honest[0] != G:
            honest = (G, problem.local(torch.arange(G)))
            _HONEST[problem] = honest
        hp = honest[1]
        xs = x.expand(hp.m, -1)
        f = float(hp.node_loss(xs).mean())
        g = hp.grad(x).mean(dim=0)
        return {"f_honest": f, "grad_norm_sq_honest": float(g.square().sum())}
