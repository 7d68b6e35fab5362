"""``R`` simulated runs in one comm layer: ``R`` copies of the ``n`` nodes as ``R n`` rows.

Row ``r n + i`` is node ``i`` of run ``r``. The runs of a batch share their seed, so node
``i``'s stream is the same in every run (the keys of a single run's node ``i``), and a shared
coin falls the same way in all of them. A reduction averages each run's ``n`` rows on its own
and returns ``(R, d)``, one server vector per run; the monitors return one value per run; the
ledger charges every row as a single run charges its node, and :meth:`run_comm` gives run
``r``'s own comm layer (its ledger), for its bits and its checkpoint.
"""

from __future__ import annotations

import copy
import dataclasses

import torch

from comm.base import Comm, Ledger, packet_bits
from comm.simulated import SimulatedComm
from compressors import Compressor, Packet
from compressors.timing import section


class BatchedSimulatedComm(SimulatedComm):
    """``runs`` simulated runs of ``n`` nodes each (see the module docstring)."""

    def __init__(
        self, n: int, runs: int, seed: int, float_bits: int = 32, exact: bool = False
    ) -> None:
        if runs < 1:
            raise ValueError(f"runs must be >= 1, got {runs}")
        Comm.__init__(self, n, torch.arange(n).repeat(runs), seed, float_bits)
        self.runs = int(runs)
        self.exact = bool(exact)

    # ------------------------------------------------------------------ reductions per run
    def reduce(
        self,
        packet: Packet,
        compressor: Compressor,
        weight: torch.Tensor | None = None,
        decoded: torch.Tensor | None = None,
    ) -> torch.Tensor:
        if decoded is None and self.exact:
            # each run's payload reduced as a single run reduces it (the same sums)
            self._charge_up(packet_bits(packet), weight)
            return torch.stack([
                compressor.decode_sum(self._packet_of(packet, r), None if weight is None
                                      else weight[self.rows_of(r)])
                for r in range(self.runs)
            ])  # fmt: skip
        if decoded is None:
            decoded = compressor.decode(packet)
        return self.reduce_rows(decoded, packet_bits(packet), weight)

    def _packet_of(self, packet: Packet, r: int) -> Packet:
        """Run ``r``'s rows of a payload (every field has the rows as its leading axis)."""
        rows = self.rows_of(r)
        fields = {k: v[rows] if v.dim() and v.shape[0] == self.m else v
                  for k, v in packet.fields.items()}  # fmt: skip
        return dataclasses.replace(packet, fields=fields, nbits=packet.nbits[rows])

    def reduce_rows(
        self, rows: torch.Tensor, nbits: torch.Tensor | int, weight: torch.Tensor | None = None
    ) -> torch.Tensor:
        if rows.shape[0] != self.m:
            raise ValueError(f"expected {self.m} rows ({self.runs} runs of {self.n}), got "
                             f"{rows.shape[0]}")  # fmt: skip
        self._charge_up(nbits, weight)
        with section("communicate"):
            per_run = rows.view(self.runs, self.n, *rows.shape[1:])
            if weight is None and not self.exact:
                return per_run.mean(dim=1)
            if weight is None:  # each run's mean as a single run takes it
                return torch.stack([r.mean(dim=0) for r in per_run])
            w = weight.to(rows.device, rows.dtype).view(self.runs, self.n)
            return torch.stack([wr @ r for wr, r in zip(w, per_run, strict=True)])

    def gather_rows(self, rows: torch.Tensor, nbits: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError("a batch of runs gathers no rows (robust aggregation)")

    def monitor_mean(self, v_i: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        """Each run's mean of a per-node statistic, ``(R,)`` float64."""
        per_run = v_i.double().view(self.runs, self.n)
        if not self.exact:
            return per_run.mean(dim=1)
        return torch.stack([v.mean() for v in per_run])

    def monitor_average(self, rows: torch.Tensor) -> torch.Tensor:
        return rows.view(self.runs, self.n, *rows.shape[1:]).mean(dim=1)

    def _mix(self, rows, packet, compressor, topology) -> torch.Tensor:
        raise NotImplementedError("a batch of runs does not gossip")

    def broadcast(self, packet: Packet, compressor: Compressor) -> torch.Tensor:
        raise NotImplementedError("a batch of runs does not compress its downlink")

    def gather_all_nbits(self, nbits: torch.Tensor) -> torch.Tensor:
        return nbits

    # ------------------------------------------------------------------ each run's share
    def rows_of(self, r: int) -> slice:
        return slice(r * self.n, (r + 1) * self.n)

    def bits_up_per_run(self) -> torch.Tensor:
        """Each run's uplink bits per node so far (the mean over its nodes), ``(R,)`` float64:
        what a stop rule on bits reads after every step, for all runs at once."""
        return self.ledger.up.double().view(self.runs, self.n).mean(dim=1)

    def bits_totals_of(self, which: list[int]) -> list[dict[str, float]]:
        """The bit totals a history row reads (``bits_up``, ``bits_up_max``, ``bits_down``,
        ``bits_down_max``) of the runs at positions ``which``, for all of them at once: the
        numbers ``run_comm(r).bits_totals()`` gives (whole bit counts: their sums are exact,
        so the means are the same in any order)."""
        idx = torch.tensor(which, dtype=torch.long)
        up = self.ledger.up.double().view(self.runs, self.n)[idx]
        down = self.ledger.down.double().view(self.runs, self.n)[idx]
        cols = [t.tolist() for t in (up.mean(1), up.amax(1), down.mean(1), down.amax(1))]
        keys = ("bits_up", "bits_up_max", "bits_down", "bits_down_max")
        return [dict(zip(keys, vals, strict=True)) for vals in zip(*cols, strict=True)]

    def run_comm(self, r: int) -> SimulatedComm:
        """Run ``r``'s own comm layer: its nodes' ledger (a copy), as a single run holds it."""
        one = SimulatedComm(self.n, seed=self.seed, float_bits=self.float_bits)
        led, rows = self.ledger, self.rows_of(r)
        extra = copy.deepcopy(led.extra)
        dropped = extra.get("uncounted")
        if isinstance(dropped, dict):
            extra["uncounted"] = {k: v[rows] for k, v in dropped.items()}
        one.ledger = Ledger(
            led.up[rows].clone(), led.down[rows].clone(), led.rounds, led.full_vectors_up, extra
        )
        return one

    def take(self, keep: list[int]) -> BatchedSimulatedComm:
        """The comm layer of the runs at positions ``keep`` (their ledgers)."""
        out = BatchedSimulatedComm(self.n, len(keep), self.seed, self.float_bits, self.exact)
        idx = torch.cat([torch.arange(r * self.n, (r + 1) * self.n) for r in keep])
        led = self.ledger
        extra = copy.deepcopy(led.extra)
        dropped = extra.get("uncounted")
        if isinstance(dropped, dict):
            extra["uncounted"] = {k: [v[i] for i in idx.tolist()] for k, v in dropped.items()}
        out.ledger = Ledger(led.up[idx], led.down[idx], led.rounds, led.full_vectors_up, extra)
        return out

    def bits_totals(self) -> dict:
        raise NotImplementedError("a batch's bits are each run's: use run_comm(r).bits_totals()")
