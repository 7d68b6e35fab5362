"""Nodes over processes: the comm layer over ``torch.distributed`` (gloo on CPU, NCCL on CUDA).

The only module that touches ``torch.distributed``; it is imported lazily by the runner. With
``n`` nodes on ``W`` processes, rank ``r`` holds a contiguous block of them as rows
(:func:`block`: the first ``n mod W`` ranks one node more). Node ``i``'s streams and data are
the same wherever it lives, so a run equals the ``n``-node simulation up to the order of the
reductions' additions.

**Sharded** (``n > W``): a reduction is each rank's weighted sum of its decoded rows followed by
one all-reduce of ``d`` values per payload (the simulated nodes of a rank are pre-aggregated in
the process, as nodes behind one switch would be); the ledger charges every node its payload's
bits exactly as in simulation. **One node per rank** (``n = W``): each rank holds node ``rank``
as its single row (``m = 1``). A reduction is an all-reduce of the
rank's weighted row; the virtual server's update is then computed identically on every rank, so
the model never needs to be broadcast (its downlink is still charged, as for a real server).

Sparse payloads cross the wire compressed: a sparsifier's ``k`` values and indices are
all-gathered (private supports, e.g. Top-K) or its ``k`` values all-reduced (a support shared
by every node, e.g. Rand-K with a shared seed); a linear sketch under shared randomness (count
sketch) is all-reduced as its table. Other payloads still cross as decoded dense
rows (one all-reduce of ``d`` values). The ledger counts each payload's documented bits, as in
simulation, and ``ledger.extra["wire_bytes"]`` the bytes this rank handed to collectives.
"""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from comm.base import Comm, packet_bits
from compressors.timing import section

# What a failed collective raises: a peer that died closes its connections, a hung one lets
# the collective time out.
GROUP_ERRORS = (RuntimeError, dist.DistError)


def start_group(backend: str, timeout_s: float) -> None:
    """Join the default process group torchrun describes (``RANK``, ``WORLD_SIZE``, ...); every
    collective then fails after ``timeout_s`` seconds instead of waiting forever."""
    dist.init_process_group(backend, timeout=timedelta(seconds=timeout_s))


def stop_group() -> None:
    dist.destroy_process_group()


def block(n: int, world: int, rank: int) -> torch.Tensor:
    """The nodes rank ``rank`` of ``world`` holds: a contiguous block, the first ``n mod world``
    ranks holding one node more."""
    if not 1 <= world <= n:
        raise ValueError(f"{n} nodes on {world} processes: every process needs a node")
    size, extra = divmod(n, world)
    lo = rank * size + min(rank, extra)
    return torch.arange(lo, lo + size + (rank < extra))


class TorchDistComm(Comm):
    """The comm layer of an initialised default process group.

    Args:
        seed: the run's seed (node ``i``'s streams are keyed by ``(seed, t, i)``, as in a
            simulated run, so both draw identical numbers).
        float_bits: wire width of an uncompressed value, for the ledger.
        device: where collective buffers live (CUDA for NCCL, CPU for gloo).
        n: the number of nodes (default: one per process); at least the world size.
    """

    def __init__(
        self,
        seed: int,
        float_bits: int = 32,
        device: str | torch.device = "cpu",
        n: int | None = None,
    ):
        import torch.distributed as dist

        if not dist.is_initialized():
            raise ValueError("TorchDistComm needs an initialised process group")
        self._dist = dist
        rank, world = dist.get_rank(), dist.get_world_size()
        n = world if n is None else int(n)
        self.device = torch.device(device)
        super().__init__(n, block(n, world, rank), seed, float_bits)
        self.rank, self.world = rank, world
        self.sharded = n != world

    def _weights(self, weight: torch.Tensor | None, dtype: torch.dtype) -> torch.Tensor:
        """The held rows' weights: ``weight``, or ``1/n`` each (the mean over all nodes)."""
        if weight is None:
            return torch.full((self.m,), 1.0 / self.n, dtype=dtype)
        return weight

    def _weight(self, weight: torch.Tensor | None) -> float:
        return 1.0 / self.n if weight is None else float(weight.reshape(-1)[0])

    def _wire(self, *tensors: torch.Tensor) -> None:
        nbytes = sum(t.numel() * t.element_size() for t in tensors)
        self.ledger.extra["wire_bytes"] = self.ledger.extra.get("wire_bytes", 0) + nbytes

    def reduce(
        self, packet, compressor, weight: torch.Tensor | None = None, decoded=None
    ) -> torch.Tensor:
        """The weighted mean over ranks of the decoded payloads, moving the payloads themselves.

        A support shared by every node (Rand-K with a shared seed) is summed by one all-reduce
        of the ``k`` kept values; a dense payload (the identity) by an all-reduce of its ``d``
        values; anything else is all-gathered in its wire form (``Compressor.to_bytes``: bit
        packed indices, signs, levels, factors) and every rank decodes every sender's row.
        Variable-size payloads, and rounds where some nodes send nothing (partial
        participation), first all-gather each rank's size and weight.
        """
        if self.sharded:
            if decoded is not None:
                return self.reduce_rows(decoded, packet_bits(packet), weight)
            self._charge_up(packet_bits(packet), weight)
            local = compressor.decode_sum(packet, self._weights(weight, packet.dtype))
            return self._all_reduce(local.contiguous())
        w = self._weight(weight)
        sending = w != 0.0
        if sending:
            self.ledger.charge_up(packet_bits(packet))
        if compressor.sparsifier and compressor.shared_randomness and "indices" not in packet.wire:
            return self._reduce_shared_support(packet, w)
        values = packet.fields.get("values")
        if compressor.linear and packet.wire == {"values"} and values.shape[-1] == packet.d:
            return self._all_reduce((compressor.decode(packet)[0] * w).contiguous(), sending)
        if compressor.linear and compressor.shared_randomness and packet.wire == {"values"}:
            # A linear sketch under shared randomness (count sketch): the nodes' tables sum to
            # the table of their sum, so one all-reduce of the table, decoded once.
            table = self._all_reduce((values[0] * w).contiguous(), sending)
            summed = dataclasses.replace(packet, fields={**packet.fields, "values": table[None]})
            return compressor.decode(summed)[0]
        data, nbytes = compressor.to_bytes(packet)
        data, nbytes = data.to(self.device), nbytes.to(self.device)
        if compressor.fixed_size and weight is None:  # every rank sends the same size
            sizes = nbytes.expand(self.n)
            weights = None
        else:
            head = torch.stack([nbytes[0].double() * sending, torch.tensor(w, dtype=torch.float64)])
            heads = self._all_gather(head.to(self.device), overhead=True)
            sizes, weights = heads[:, 0].long(), heads[:, 1]
            width = int(sizes.max())
            data = torch.nn.functional.pad(data, (0, width - data.shape[1]))[:, :width]
        if not sending:
            data = torch.zeros_like(data)
        rows = self._all_gather(data[0].contiguous(), count=int(nbytes[0]) if sending else 0)
        nodes = torch.arange(self.n, device=self.device)
        keep = slice(None) if weights is None else weights != 0
        like = packet
        back = compressor.from_bytes(rows[keep], sizes[keep], like, nodes[keep])
        out = compressor.decode(back)
        with section("communicate"):  # the server's sum, as in a simulated reduction
            red = out.mean(dim=0) if weights is None else weights[keep].to(out.dtype) @ out
        return red.to(packet.nbits.device)

    def _reduce_shared_support(self, packet, w: float) -> torch.Tensor:
        idx = packet.fields["indices"][0]
        vals = packet.fields["values"][0] * (packet.meta["scale"] * w)
        summed = self._all_reduce(vals.contiguous(), w != 0.0)
        out = torch.zeros(packet.d, dtype=summed.dtype, device=summed.device)
        return out.index_add_(0, idx.to(summed.device), summed).to(vals.device)

    def _all_reduce(self, buf: torch.Tensor, counted: bool = True) -> torch.Tensor:
        home = buf.device
        buf = buf.to(self.device).clone()
        with section("communicate"):
            self._dist.all_reduce(buf, op=self._dist.ReduceOp.SUM)
        if counted:
            self._wire(buf)
        return buf.to(home)

    def _all_gather(self, buf: torch.Tensor, overhead: bool = False, count: int | None = None):
        """Every rank's ``buf`` stacked ``(n, ...)``; ``count`` bytes of it are this rank's
        message (the rest is padding to the longest), ``overhead`` marks sizes and weights."""
        parts = [torch.empty_like(buf) for _ in range(self.world)]
        with section("communicate"):
            self._dist.all_gather(parts, buf)
        nbytes = buf.numel() * buf.element_size() if count is None else count
        key = "wire_overhead_bytes" if overhead else "wire_bytes"
        self.ledger.extra[key] = self.ledger.extra.get(key, 0) + nbytes
        return torch.stack(parts)

    def reduce_rows(
        self, rows: torch.Tensor, nbits: torch.Tensor | int, weight: torch.Tensor | None = None
    ) -> torch.Tensor:
        if rows.shape[0] != self.m:
            raise ValueError(f"rank {self.rank} holds {self.m} nodes, got {rows.shape[0]} rows")
        if self.sharded:
            self._charge_up(nbits, weight)
            w = self._weights(weight, rows.dtype).to(rows.device, rows.dtype)
            return self._all_reduce((w @ rows).contiguous())
        w = self._weight(weight)
        if w != 0.0:
            self.ledger.charge_up(nbits)
        return self._all_reduce((rows[0] * w).contiguous(), counted=w != 0.0)

    def gather_rows(self, rows: torch.Tensor, nbits: torch.Tensor) -> torch.Tensor:
        """Every node's row in node order: one all-gather of each rank's block of decoded rows
        (padded to the largest block), ``d`` values per node on the wire; the ledger charges
        each node its message's documented bits, as in simulation."""
        if rows.shape[0] != self.m:
            raise ValueError(f"rank {self.rank} holds {self.m} nodes, got {rows.shape[0]} rows")
        self._charge_up(nbits, None)
        width = -(-self.n // self.world)
        buf = torch.zeros(width, rows.shape[1], dtype=rows.dtype, device=self.device)
        buf[: self.m] = rows.to(self.device)
        parts = [torch.empty_like(buf) for _ in range(self.world)]
        with section("communicate"):
            self._dist.all_gather(parts, buf)
        self._wire(rows)
        sizes = [block(self.n, self.world, r).numel() for r in range(self.world)]
        out = torch.cat([p[:k] for p, k in zip(parts, sizes, strict=True)])
        return out.to(rows.device)

    def barrier(self) -> None:
        self._dist.barrier()

    def any_rank(self, flag: bool) -> bool:
        """Whether ``flag`` holds on some rank (every rank learns the same answer)."""
        buf = torch.tensor([1.0 if flag else 0.0], device=self.device)
        self._dist.all_reduce(buf, op=self._dist.ReduceOp.MAX)
        return bool(buf.item() > 0)

    def from_rank0(self, obj):
        """Rank 0's ``obj`` (a small picklable value), on every rank."""
        box = [obj]
        self._dist.broadcast_object_list(box, src=0)
        return box[0]

    def monitor_average(self, rows: torch.Tensor) -> torch.Tensor:
        buf = rows.detach().to(self.device).sum(dim=0)
        self._dist.all_reduce(buf, op=self._dist.ReduceOp.SUM)
        return (buf / self.n).to(rows.device)

    def gather_all_nbits(self, nbits: torch.Tensor) -> torch.Tensor:
        width = -(-self.n // self.world)
        buf = torch.zeros(width, dtype=torch.int64, device=self.device)
        buf[: self.m] = nbits.to(self.device, torch.int64)
        parts = [torch.empty_like(buf) for _ in range(self.world)]
        self._dist.all_gather(parts, buf)
        sizes = [block(self.n, self.world, r).numel() for r in range(self.world)]
        return torch.cat([q[:k] for q, k in zip(parts, sizes, strict=True)]).cpu()

    def _halo(self, topology) -> dict[str, Any]:
        """Point-to-point plan of gossip over ``topology`` for this rank's block: per peer rank,
        the held rows its nodes neighbour (sent there) and its nodes that neighbour ours
        (received), both in node order; and the held rows' mixing weights on the held nodes
        followed by the received ones."""
        plan = self._gossip_plan(topology)
        if "halo" in plan:
            return plan["halo"]
        A = topology.W > 0
        A.fill_diagonal_(False)
        owner = torch.cat([torch.full((block(self.n, self.world, r).numel(),), r)
                           for r in range(self.world)])  # fmt: skip
        held = self.nodes
        lo = int(held[0])
        peers = []
        for r in range(self.world):
            if r == self.rank:
                continue
            theirs = (owner == r).nonzero().reshape(-1)
            sub = A[held][:, theirs]
            send = held[sub.any(dim=1)]
            recv = theirs[sub.any(dim=0)]
            if send.numel():
                peers.append({"rank": r, "send": send - lo, "recv": recv})
        cols = torch.cat([held, *[p["recv"] for p in peers]])
        plan["halo"] = {"peers": peers, "W": topology.W[held][:, cols]}
        return plan["halo"]

    def _exchange(self, peers: list[dict], send: list[torch.Tensor], recv: list[torch.Tensor],
                  overhead: bool = False) -> None:  # fmt: skip
        """Send ``send[k]`` to and receive ``recv[k]`` from ``peers[k]``, all at once."""
        ops = []
        for p, out, into in zip(peers, send, recv, strict=True):
            ops.append(self._dist.P2POp(self._dist.isend, out.contiguous(), p["rank"]))
            ops.append(self._dist.P2POp(self._dist.irecv, into, p["rank"]))
        if not ops:
            return
        with section("communicate"):
            for req in self._dist.batch_isend_irecv(ops):
                req.wait()
        key = "wire_overhead_bytes" if overhead else "wire_bytes"
        sent = sum(t.numel() * t.element_size() for t in send)
        self.ledger.extra[key] = self.ledger.extra.get(key, 0) + sent

    def _mix(self, rows, packet, compressor, topology) -> torch.Tensor:
        """``(W Q)_held``: the neighbours' messages arrive point to point from the ranks that
        hold them (compressed payloads in their wire form, uncompressed rows as values); no
        collective over all ranks."""
        if rows.shape[0] != self.m:
            raise ValueError(f"rank {self.rank} holds {self.m} nodes, got {rows.shape[0]} rows")
        halo = self._halo(topology)
        peers, got = halo["peers"], []
        if packet is None:
            out = [rows[p["send"]].to(self.device) for p in peers]
            into = [torch.empty(p["recv"].numel(), rows.shape[1], dtype=rows.dtype,
                                device=self.device) for p in peers]  # fmt: skip
            self._exchange(peers, out, into)
            got = [t.to(rows.device) for t in into]
        elif peers:
            data, nbytes = compressor.to_bytes(packet)
            data, nbytes = data.to(self.device), nbytes.to(self.device)
            sizes = [torch.empty(p["recv"].numel(), dtype=torch.int64, device=self.device)
                     for p in peers]  # fmt: skip
            self._exchange(peers, [nbytes[p["send"]] for p in peers], sizes, overhead=True)
            out, into = [], []
            for p, size in zip(peers, sizes, strict=True):
                width = max(int(nbytes[p["send"]].max()), 1)
                out.append(data[p["send"], :width].contiguous())
                into.append(torch.empty(p["recv"].numel(), max(int(size.max()), 1),
                                        dtype=torch.uint8, device=self.device))  # fmt: skip
            self._exchange(peers, out, into)
            for p, size, buf in zip(peers, sizes, into, strict=True):
                back = compressor.from_bytes(buf, size, packet, p["recv"].to(self.device))
                got.append(compressor.decode(back).to(rows.device, rows.dtype))
        allrows = torch.cat([rows, *got]) if got else rows
        key = ("W", rows.dtype, rows.device)
        if key not in halo:
            halo[key] = halo["W"].to(rows.device, rows.dtype)
        with section("communicate"):
            return halo[key] @ allrows

    def monitor_mean(self, v_i: torch.Tensor) -> float:
        buf = v_i.detach().to(self.device, torch.float64).sum().reshape(1)
        self._dist.all_reduce(buf, op=self._dist.ReduceOp.SUM)
        return float(buf[0]) / self.n

    def bits_totals(self) -> dict[str, float]:
        extra = self.ledger.extra
        mine = torch.tensor(
            [
                float(self.ledger.up.sum()),
                float(self.ledger.down.sum()),
                float(extra.get("wire_bytes", 0)),
                float(extra.get("wire_overhead_bytes", 0)),
            ],
            dtype=torch.float64,
            device=self.device,
        )
        if self.sharded:
            return self._sharded_totals(mine)
        parts = [torch.zeros_like(mine) for _ in range(self.n)]
        self._dist.all_gather(parts, mine)
        allb = torch.stack(parts).cpu()  # (n, 4)
        up, down = allb[:, 0], allb[:, 1]
        return {
            "bits_up": float(up.mean()),
            "bits_up_max": float(up.max()),
            "bits_down": float(down.mean()),
            "bits_down_max": float(down.max()),
            "wire_bytes_up": float(allb[:, 2].mean()),
            "wire_overhead_bytes_up": float(allb[:, 3].mean()),
            "per_node": {
                "bits_up": up.tolist(),
                "bits_down": down.tolist(),
                "wire_bytes_up": allb[:, 2].tolist(),
                "wire_overhead_bytes_up": allb[:, 3].tolist(),
            },
        }

    def _sharded_totals(self, mine: torch.Tensor) -> dict[str, Any]:
        """Every node's totals, gathered in node order from the ranks' blocks (padded to the
        largest block), and the wire bytes per process."""
        width = -(-self.n // self.world)
        led = torch.zeros(2, width, dtype=torch.float64)
        led[0, : self.m] = self.ledger.up.double().cpu()
        led[1, : self.m] = self.ledger.down.double().cpu()
        parts = [torch.zeros_like(led, device=self.device) for _ in range(self.world)]
        self._dist.all_gather(parts, led.to(self.device))
        wires = [torch.zeros_like(mine) for _ in range(self.world)]
        self._dist.all_gather(wires, mine)
        sizes = [block(self.n, self.world, r).numel() for r in range(self.world)]
        up = torch.cat([p[0, :k].cpu() for p, k in zip(parts, sizes, strict=True)])
        down = torch.cat([p[1, :k].cpu() for p, k in zip(parts, sizes, strict=True)])
        wire = torch.stack(wires).cpu()  # (world, 4)
        return {
            "bits_up": float(up.mean()),
            "bits_up_max": float(up.max()),
            "bits_down": float(down.mean()),
            "bits_down_max": float(down.max()),
            "wire_bytes_up": float(wire[:, 2].mean()),
            "wire_overhead_bytes_up": float(wire[:, 3].mean()),
            "per_node": {"bits_up": up.tolist(), "bits_down": down.tolist()},
            "per_process": {
                "wire_bytes_up": wire[:, 2].tolist(),
                "wire_overhead_bytes_up": wire[:, 3].tolist(),
            },
        }
