"""All nodes in one process: the node axis is axis 0 of every per-node tensor."""

from __future__ import annotations

import torch

from comm.base import Comm
from compressors.timing import section

# Gossip multiplies by W as a sparse (CSR) matrix above this many nodes when at most this
# fraction of its entries is non-zero (a ring, a torus, a sparse random graph); dense below.
SPARSE_FROM = 64
SPARSE_FILL = 0.1


class SimulatedComm(Comm):
    """Holds all ``n`` nodes as rows; a reduction is a weighted sum over axis 0."""

    def __init__(self, n: int, seed: int, float_bits: int = 32) -> None:
        super().__init__(n, torch.arange(n), seed, float_bits)

    def reduce_rows(
        self, rows: torch.Tensor, nbits: torch.Tensor | int, weight: torch.Tensor | None = None
    ) -> torch.Tensor:
        if rows.shape[0] != self.m:
            raise ValueError(f"expected {self.m} rows (one per node), got {rows.shape[0]}")
        self._charge_up(nbits, weight)
        with section("communicate"):
            if weight is None:
                return rows.mean(dim=0)
            return weight.to(rows.device, rows.dtype) @ rows

    def gather_rows(self, rows: torch.Tensor, nbits: torch.Tensor) -> torch.Tensor:
        if rows.shape[0] != self.m:
            raise ValueError(f"expected {self.m} rows (one per node), got {rows.shape[0]}")
        self._charge_up(nbits, None)
        return rows

    def monitor_mean(self, v_i: torch.Tensor) -> float:
        return float((v_i if v_i.dtype == torch.float64 else v_i.double()).mean())

    def monitor_average(self, rows: torch.Tensor) -> torch.Tensor:
        return rows.mean(dim=0)

    def gather_all_nbits(self, nbits: torch.Tensor) -> torch.Tensor:
        return nbits

    def _mix(self, rows, packet, compressor, topology) -> torch.Tensor:
        """``W @ rows``: a sparse (CSR) product when the graph is sparse, else dense."""
        if rows.shape[0] != self.m:
            raise ValueError(f"expected {self.m} rows (one per node), got {rows.shape[0]}")
        plan = self._gossip_plan(topology)
        key = ("W", rows.dtype, rows.device)
        if key not in plan:
            W = plan["W"].to(rows.device, rows.dtype)
            sparse = topology.n > SPARSE_FROM and (W != 0).sum() < SPARSE_FILL * W.numel()
            plan[key] = W.to_sparse_csr() if sparse else W
        with section("communicate"):
            return plan[key] @ rows

    def bits_totals(self) -> dict[str, float]:
        up, down = self.ledger.up.double(), self.ledger.down.double()
        return {
            "bits_up": float(up.mean()),
            "bits_up_max": float(up.max()),
            "bits_down": float(down.mean()),
            "bits_down_max": float(down.max()),
            "per_node": {"bits_up": up.tolist(), "bits_down": down.tolist()},
        }
