"""One node per process: the comm layer over ``torch.distributed`` (gloo on CPU, NCCL on CUDA).

The only module that touches ``torch.distributed``; it is imported lazily by the runner. Each
rank holds node ``rank`` as its single row (``m = 1``). A reduction is an all-reduce of the
rank's weighted row; the virtual server's update is then computed identically on every rank, so
the model never needs to be broadcast (its downlink is still charged, as for a real server).

Sparse payloads cross the wire compressed: a sparsifier's ``k`` values and indices are
all-gathered (private supports, e.g. Top-K) or its ``k`` values all-reduced (a support shared
by every node, e.g. Rand-K with a shared seed). Other payloads still cross as decoded dense
rows (one all-reduce of ``d`` values). The ledger counts each payload's documented bits, as in
simulation, and ``ledger.extra["wire_bytes"]`` the bytes this rank handed to collectives.
"""

from __future__ import annotations

import torch

from algorithms.comm.base import Comm


class TorchDistComm(Comm):
    """The comm layer of an initialised default process group (one node per rank).

    Args:
        seed: the run's seed (node ``rank``'s streams are keyed by ``(seed, t, rank)``, as in a
            simulated run, so both draw identical numbers).
        float_bits: wire width of an uncompressed value, for the ledger.
        device: where collective buffers live (CUDA for NCCL, CPU for gloo).
    """

    def __init__(self, seed: int, float_bits: int = 32, device: str | torch.device = "cpu"):
        import torch.distributed as dist

        if not dist.is_initialized():
            raise ValueError("TorchDistComm needs an initialised process group")
        self._dist = dist
        self.rank = dist.get_rank()
        self.device = torch.device(device)
        super().__init__(dist.get_world_size(), torch.tensor([self.rank]), seed, float_bits)

    def _weight(self, weight: torch.Tensor | None) -> float:
        return 1.0 / self.n if weight is None else float(weight.reshape(-1)[0])

    def _wire(self, *tensors: torch.Tensor) -> None:
        nbytes = sum(t.numel() * t.element_size() for t in tensors)
        self.ledger.extra["wire_bytes"] = self.ledger.extra.get("wire_bytes", 0) + nbytes

    def reduce(
        self, packet, compressor, weight: torch.Tensor | None = None, decoded=None
    ) -> torch.Tensor:
        if not compressor.sparsifier:
            return super().reduce(packet, compressor, weight, decoded)
        w = self._weight(weight)
        if w != 0.0:
            self.ledger.charge_up(packet.nbits)
        idx = packet.fields["indices"][0]
        vals = (packet.fields["values"][0] * (packet.meta["scale"] * w)).contiguous()
        dtype = vals.dtype
        out = torch.zeros(packet.d, dtype=dtype, device=self.device)
        if compressor.shared_randomness:  # one support for all nodes: sum the k values
            buf = vals.to(self.device)
            self._dist.all_reduce(buf, op=self._dist.ReduceOp.SUM)
            self._wire(buf)
            return out.index_add_(0, idx.to(self.device), buf).to(vals.device)
        v = vals.to(self.device)
        i = idx.to(self.device).contiguous()
        all_v = [torch.empty_like(v) for _ in range(self.n)]
        all_i = [torch.empty_like(i) for _ in range(self.n)]
        self._dist.all_gather(all_v, v)
        self._dist.all_gather(all_i, i)
        self._wire(v, i)
        return out.index_add_(0, torch.cat(all_i), torch.cat(all_v)).to(vals.device)

    def reduce_rows(
        self, rows: torch.Tensor, nbits: torch.Tensor, weight: torch.Tensor | None = None
    ) -> torch.Tensor:
        if rows.shape[0] != 1:
            raise ValueError(f"a rank holds one node: expected 1 row, got {rows.shape[0]}")
        w = self._weight(weight)
        if w != 0.0:
            self.ledger.charge_up(nbits)
        buf = (rows[0] * w).to(self.device).contiguous()
        self._dist.all_reduce(buf, op=self._dist.ReduceOp.SUM)
        self._wire(buf)
        return buf.to(rows.device)

    def monitor_mean(self, v_i: torch.Tensor) -> float:
        buf = v_i.detach().to(self.device, torch.float64).sum().reshape(1)
        self._dist.all_reduce(buf, op=self._dist.ReduceOp.SUM)
        return float(buf[0]) / self.n

    def bits_totals(self) -> dict[str, float]:
        mine = torch.stack([self.ledger.up.sum(), self.ledger.down.sum()]).to(self.device)
        parts = [torch.zeros_like(mine) for _ in range(self.n)]
        self._dist.all_gather(parts, mine)
        allb = torch.stack(parts).double().cpu()  # (n, 2)
        up, down = allb[:, 0], allb[:, 1]
        return {
            "bits_up": float(up.mean()),
            "bits_up_max": float(up.max()),
            "bits_down": float(down.mean()),
            "bits_down_max": float(down.max()),
        }
