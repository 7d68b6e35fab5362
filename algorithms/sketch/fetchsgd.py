"""FetchSGD: count-sketched gradients, momentum and error accumulation in the sketch (Rothchild
et al., ICML 2020)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from algorithms import provenance as pv
from algorithms.base import (
    Algorithm,
    State,
    Theory,
    check_count,
    minibatch,
    minibatch_option,
    option,
)
from algorithms.ef.ef21 import ef21_theory
from algorithms.provenance import Provenance
from algorithms.sketch import tables
from comm.base import Comm
from compressors.top_k import TopK
from streams import tags

SOURCE = (
    "Rothchild, Panda, Ullah, Ivkin, Stoica, Braverman, Gonzalez & Arora, FetchSGD: "
    "Communication-Efficient Federated Learning with Sketching, ICML 2020, arXiv 2007.07682; "
    "server update of the authors' code, kiddyboots216/CommEfficient, "
    "CommEfficient/fed_aggregator.py::_server_helper_sketched"
)
ERROR_UPDATES = ("zero", "subtract")


@dataclass(frozen=True)
class FetchSGDState(State):
    V: torch.Tensor  # (rows * cols,) momentum, in the sketch (server)
    E: torch.Tensor  # (rows * cols,) accumulated error, in the sketch (server)


@dataclass(frozen=True)
class FetchSGD(Algorithm):
    """FetchSGD: nodes send count sketches; momentum and error live in the sketch (arXiv
    2007.07682).

    Rothchild, Panda, Ullah, Ivkin, Stoica, Braverman, Gonzalez & Arora, "FetchSGD:
    Communication-Efficient Federated Learning with Sketching", ICML 2020, arXiv 2007.07682.
    Update as in the authors' code (kiddyboots216/CommEfficient,
    ``CommEfficient/fed_aggregator.py::_server_helper_sketched``, sketch class ``CSVec`` of
    nikitaivkin/csh), with virtual momentum and virtual error (``--error_type virtual``).

    Round ``t``: node ``i`` computes ``g_i`` at ``x^t`` (a minibatch gradient with
    ``batch_size``, else its full local gradient) and sends its count sketch ``S(g_i)``, a
    ``rows x cols`` table (:class:`compressors.count_sketch.CountSketch`, hashes from a shared
    stream fixed over the rounds, so every table lives in one sketch space). The sketch is
    linear: the comm layer's average of the tables is ``S(g)``, ``g = mean_i g_i``. The server
    keeps two tables, ``V^0 = E^0 = 0``:
    ``V <- rho V + S(g)`` (momentum in the sketch), ``E <- E + V`` (error accumulation in the
    sketch), ``Delta = TopK(U(E))`` with ``U`` the median estimate of every coordinate (heavy
    hitters by magnitude, the estimates as values: ``CSVec.unSketch(k)``); then, on the cells
    where ``S(Delta)`` is non-zero, ``E`` and ``V`` are set to zero (``--error-update zero``,
    the authors' code) or ``E <- E - S(Delta)`` and ``V`` zeroed there
    (``--error-update subtract``, the textbook error feedback, which the code's comment says
    "should work but doesn't (model diverges)"); ``x^{t+1} = x^t - gamma Delta``. The server
    sends ``Delta`` (``k`` values and indices) and every node applies it.

    Second round: none. The code's sketch mode has none (``unSketch`` returns the median
    estimates), and the error ``E`` exists only in the sketch, so there are no exact values of
    its heavy coordinates on the nodes to fetch.

    Bits: uplink ``rows cols float_bits`` per node (the table), independent of ``d``; downlink
    ``k (float_bits + ceil(log2 d))`` (Top-K's list code). Ties in ``U(E)`` go to the lower
    index (the code's ``torch.topk`` leaves them unspecified). Reports ``E = ||E||^2`` of the
    error table.

    What could be read: the paper's abstract and introduction (the algorithm box and the
    theorem could not be read here); the update above is the authors' code. Defaults: ``rows =
    5`` (the code's ``--num_rows``), ``cols = 10 k`` (the code's ratio of ``--num_cols`` to
    ``--k``), ``k = max(1, round(0.01 d))``, ``rho = 0.9`` (the code's default
    ``--virtual_momentum`` is 0, with local momentum 0.9 instead; 0.9 in the sketch is the
    paper's design). Theory: no step of the paper could be read; the default is EF-SGD's
    borrowed step (EF21's Theorem 1/2 step for Top-K's ``delta = k/d``, as ``ef-sgd`` takes it)
    times ``1 - rho``, the momentum's gain ``1/(1 - rho)`` taken out.
    """

    k: int | None = option(
        None, "coordinates of the update per round (default max(1, round(0.01 d)))",
        check=check_count,
    )  # fmt: skip
    rows: int = option(5, "count-sketch hash rows", check=check_count)
    cols: int | None = option(
        None, "count-sketch buckets per row (default 10 k)", check=check_count
    )
    rho: float = option(0.9, "momentum in the sketch, in [0, 1)")
    error_update: str = option(
        "zero", "after the update: zero | subtract S(Delta) from the error sketch",
        choices=ERROR_UPDATES,
    )  # fmt: skip
    batch_size: int | None = minibatch_option()

    needs: ClassVar[str] = "none"
    stochastic: ClassVar[bool] = True
    reports: ClassVar[tuple[str, ...]] = ("E",)
    provenance: ClassVar[Provenance] = pv.borrowed(
        "ef-sgd",
        "no step of the FetchSGD paper could be read; EF-SGD's (EF21's Theorem 1/2 step for "
        "Top-K's delta = k/d) times 1 - rho, the gain of the momentum in the sketch removed",
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if not 0 <= self.rho < 1:
            raise ValueError(f"--rho must be in [0, 1), got {self.rho}")

    @classmethod
    def theory(cls, problem, compressor, opts) -> Theory:
        k = tables.k_of(opts.get("k"), problem.d)
        rho = opts.get("rho", 0.9)
        th = ef21_theory(problem, TopK(k=k), "auto")
        return Theory(
            gamma=(1.0 - rho) * th.gamma,
            formula=f"(1 - rho) x [{th.formula}], alpha = k/d (EF-SGD's step, borrowed)",
            inputs={**th.inputs, "k": k, "rho": rho},
            source=th.source + "; EF-SGD's borrowed step with Top-K's delta, for FetchSGD "
            "(arXiv 2007.07682, whose step could not be read)",
        )

    def sizes(self, d: int) -> tuple[int, int]:
        """``(k, cols)`` at dimension ``d``."""
        k = tables.k_of(self.k, d)
        return k, tables.cols_of(self.cols, k)

    def init(self, x0, problem, comm: Comm) -> FetchSGDState:
        k, cols = self.sizes(problem.d)
        z = torch.zeros(self.rows * cols, dtype=problem.dtype, device=problem.device)
        return FetchSGDState(x=x0.clone(), t=0, V=z, E=z.clone())

    def _sent(self, g_i: torch.Tensor) -> torch.Tensor:
        """The rows the nodes sketch: their gradients (a hook for the theory checks' variants)."""
        return g_i

    def _step(self, state: FetchSGDState, problem, comm: Comm):
        d, t = problem.d, state.t
        k, cols = self.sizes(d)
        sketch = tables.count_sketch(self.rows, cols, comm)
        tag = tags.FETCHSGD_SKETCH
        batch = minibatch(problem, comm, t, tags.FETCHSGD_BATCH, self.batch_size)
        S = tables.node_tables(sketch, self._sent(problem.grad(state.x, batch)), comm, tag)
        V = self.rho * state.V + S
        E = state.E + V
        delta, _ = tables.downlink(tables.unsketch(sketch, E, d, comm, tag), k, comm, t)
        sd = tables.server_table(sketch, delta, comm, tag)
        hit = sd != 0
        E = E - sd if self.error_update == "subtract" else E
        E = torch.where(hit, torch.zeros_like(E), E) if self.error_update == "zero" else E
        V = torch.where(hit, torch.zeros_like(V), V)
        x = state.x - self.gamma * delta
        return FetchSGDState(x=x, t=t + 1, V=V, E=E), {"E": float(E.double().pow(2).sum())}
