"""What the decentralized methods share: the graph options, the per-node iterate state and the
consensus error they report."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import ClassVar

import torch

from algorithms.base import Algorithm, State, option
from comm import Comm
from comm.topology import MIXINGS, Topology, build, parse_topology


def check_topology(name: str, value: str | None, optional: bool = True) -> None:
    """A ``--topology`` spec's form (the graph itself is built with the run's ``n``)."""
    if value is None and optional:
        return
    parse_topology(value)


@functools.lru_cache(maxsize=32)
def graph(spec: str, n: int, mixing: str, seed: int) -> Topology:
    """The topology for a run, built once per (spec, n, mixing, seed)."""
    return build(spec, n, mixing, seed)


@dataclass(frozen=True)
class DecState(State):
    """``x``: the nodes' average (where the loss is measured, never sent); ``x_i``: each node's
    own iterate ``(m, d)``."""

    x_i: torch.Tensor


@dataclass(frozen=True)
class Decentralized(Algorithm):
    """A method over a communication graph: ``topology`` and ``mixing`` choose the graph and
    its mixing matrix ``W`` (:mod:`comm.topology`); an ``er:p=P`` graph is drawn from
    ``topology_seed`` (default: the run's seed)."""

    topology: str = option(
        "ring",
        "communication graph: ring | torus | complete | star | er:p=P | file:PATH",
        check=check_topology,
    )
    mixing: str = option("metropolis", "gossip weights W: metropolis | uniform", choices=MIXINGS)
    topology_seed: int | None = option(
        None, "seed of an er:p=P graph (default: --seed)", from_run="seed"
    )

    reports: ClassVar[tuple[str, ...]] = ("consensus",)

    @classmethod
    def graph_of(cls, n: int, opts: dict) -> Topology:
        """The graph that options ``opts`` describe on ``n`` nodes."""
        seed = opts.get("topology_seed")
        return graph(opts["topology"], n, opts["mixing"], 0 if seed is None else int(seed))

    def graph(self, n: int) -> Topology:
        return type(self).graph_of(n, {"topology": self.topology, "mixing": self.mixing,
                                       "topology_seed": self.topology_seed})  # fmt: skip

    @staticmethod
    def graph_inputs(top: Topology) -> dict:
        """The graph's constants as a theory record's inputs."""
        return {"rho": top.rho, "beta": top.beta, "lambda_n": top.eigenvalues[-1],
                "topology": top.spec, "mixing": top.mixing}  # fmt: skip


def averaged(comm: Comm, x_i: torch.Tensor) -> tuple[torch.Tensor, float]:
    """The nodes' average ``x_bar`` and the consensus error ``(1/n) sum_i ||x_i - x_bar||^2``,
    for logging (nothing is charged: no method reads them)."""
    x_bar = comm.monitor_average(x_i)
    return x_bar, comm.monitor_mean(((x_i - x_bar) ** 2).sum(dim=1))
