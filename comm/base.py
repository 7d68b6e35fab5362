"""The comm interface (``Comm``) and its bit ledger (``Ledger``).

Algorithms never count bits and never loop over nodes: they hand payloads to a ``Comm``, which
averages over all nodes (the rows held here and, under torch.distributed, on other ranks) and
charges each node for the bits of the payload it actually produced.

The server is virtual: every process computes the server's update from the same reduced
quantities, so the model is identical everywhere. A broadcast therefore moves no data; it only
charges the downlink cost of what a real server would send.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

import torch

from comm.topology import Topology
from compressors import Compressor, Packet
from streams import NodeKeys, Streams, shared_uniform
from streams.tags import DEFAULT
from streams.tags import NODE as TAG_NODE
from streams.tags import SERVER as TAG_SERVER
from streams.tags import SHARED as TAG_SHARED

# The flag that tells the server which of two messages a node sent (EF21+).
CHOICE_FLAG_BITS = 1


def packet_bits(packet: Packet) -> torch.Tensor | int:
    """What a payload charges: its rows' common size where every row has the same
    (:attr:`compressors.base.Packet.row_bits`), else its ``nbits``."""
    return packet.nbits if packet.row_bits is None else packet.row_bits


@dataclass
class Ledger:
    """Cumulative bits per held node, uplink (node to server) and downlink (server to node).

    While a round is recorded (:meth:`open_round`, as :meth:`Algorithm.step` does), every
    charge also adds its total over the held nodes to the record, so the round's bits are known
    without summing the whole ledger before and after it."""

    up: torch.Tensor
    down: torch.Tensor
    rounds: int = 0
    full_vectors_up: int = 0
    extra: dict = field(default_factory=dict)
    # the open records, innermost last: [uplink, downlink] totals over the held nodes
    _open: list = field(default_factory=list, repr=False, compare=False)

    @classmethod
    def zeros(cls, m: int) -> Ledger:
        return cls(torch.zeros(m, dtype=torch.int64), torch.zeros(m, dtype=torch.int64))

    def charge_up(self, nbits: torch.Tensor | int) -> None:
        """Add ``nbits`` (per held node, or an int: the same for every node) to the uplink
        totals."""
        if isinstance(nbits, int) and not isinstance(nbits, bool):  # as charge_down takes it
            self.up += nbits
            if self._open:
                self._record(0, nbits * self.up.numel())
            return
        nb = nbits.to(self.up.device, torch.int64)
        self.up += nb
        if self._open:
            self._record(0, int(nb.sum()) * (self.up.numel() // max(1, nb.numel())))

    def charge_down(self, nbits: torch.Tensor | int) -> None:
        if isinstance(nbits, int) and not isinstance(nbits, bool):  # the same for every node
            self.down += nbits
            if self._open:
                self._record(1, nbits * self.down.numel())
            return
        nb = torch.as_tensor(nbits, dtype=torch.int64)
        self.down += nb
        if self._open:
            self._record(1, int(nb.sum()) * (self.down.numel() // max(1, nb.numel())))

    def _record(self, side: int, total: int) -> None:
        for rec in self._open:
            rec[side] += total

    def open_round(self) -> None:
        """Start recording the bits charged from here on (records nest)."""
        self._open.append([0, 0])

    def close_round(self) -> tuple[int, int]:
        """Stop the innermost record: the bits charged since it opened, summed over the held
        nodes, ``(uplink, downlink)``."""
        up, down = self._open.pop()
        return up, down

    def uncount(self) -> dict[str, list[int]]:
        """Zero the bit totals, keeping what they held in ``extra["uncounted"]`` (per held node,
        up and down): the runner's ``--count-init-bits no`` drops the bits of a method's
        initialisation (e.g. EF21's uncompressed ``grad f_i(x^0)``), as the EF21 authors' code
        counts only the rounds. Returns the dropped totals."""
        dropped = {"bits_up": self.up.tolist(), "bits_down": self.down.tolist()}
        self.extra["uncounted"] = dropped
        self.up.zero_()
        self.down.zero_()
        return dropped


class Comm:
    """Averages rows over all nodes and charges their payloads (see module docstring).

    Attributes:
        n: total number of nodes.
        nodes: int64 ``(m,)``, the nodes held by this process.
        rank, world: this process and the number of processes (0 and 1 in a simulation).
        seed: the run's seed; node ``i``'s stream at step ``t`` is keyed by ``(seed, t, i)``.
        float_bits: wire width of an uncompressed value (32, as the papers count).
        ledger: the bits charged so far.
    """

    def __init__(self, n: int, nodes: torch.Tensor, seed: int, float_bits: int = 32) -> None:
        if n < 1:
            raise ValueError(f"n must be >= 1, got {n}")
        if float_bits not in (16, 32, 64):
            raise ValueError(f"float_bits must be 16, 32 or 64, got {float_bits}")
        self.n = int(n)
        self.nodes = torch.as_tensor(nodes, dtype=torch.int64).reshape(-1)
        self.seed = int(seed)
        self.float_bits = int(float_bits)
        self.ledger = Ledger.zeros(self.m)
        self._fixed: Streams | None = None
        self._node_keys: dict[int, NodeKeys] = {}  # by tag (see rng)
        # this process among the processes of the run (0 of 1 for a simulation)
        self.rank, self.world = 0, 1

    @property
    def m(self) -> int:
        return self.nodes.numel()

    def scratch(self) -> Comm:
        """A copy sharing everything but the bit ledger, for calls whose bits must not count
        (the runner's untimed warm-up of compiled kernels): what it charges is dropped."""
        other = copy.copy(self)
        other.ledger = Ledger.zeros(self.m)
        return other

    # ------------------------------------------------------------ randomness
    def rng(self, t: int, shared: bool = False, tag: int = DEFAULT) -> Streams:
        """Streams for the held rows at step ``t``: private, keyed by ``(seed, t, node)``, or
        shared by all nodes, keyed by ``(seed, t)`` (``tag`` separates independent uses)."""
        if shared:
            return Streams.shared(self.seed, self.m, TAG_SHARED, tag, t, nodes=self.nodes)
        keys = self._node_keys.get(tag)
        if keys is None:  # Streams.for_nodes(seed, nodes, TAG_NODE, tag, t), its t-free part once
            keys = self._node_keys[tag] = NodeKeys(self.seed, self.nodes, TAG_NODE, tag)
        return keys.at(t)

    def rng_for(self, compressor: Compressor, t: int, tag: int = DEFAULT) -> Streams:
        """The streams ``compressor`` needs: shared when it declares shared randomness; for a
        deterministic compressor, which draws nothing, fixed keys (no key derivation per step)."""
        if compressor.deterministic:
            if self._fixed is None:
                self._fixed = Streams(torch.zeros_like(self.nodes), self.nodes)
            return self._fixed
        return self.rng(t, shared=compressor.shared_randomness, tag=tag)

    def coin(self, t: int, p: float, tag: int = DEFAULT) -> bool:
        """A Bernoulli(p) coin shared by every node and the server (MARINA's ``c_k``)."""
        if p >= 1.0:
            return True
        return shared_uniform(self.seed, TAG_SERVER, tag, t) < p

    def server_rng(self, t: int, tag: int = DEFAULT) -> Streams:
        """One stream for the server's own draws (e.g. downlink compression), the same on every
        process."""
        return Streams.shared(self.seed, 1, TAG_SERVER, tag, t, nodes=[0])

    # ------------------------------------------------------------ reductions
    def reduce(
        self,
        packet: Packet,
        compressor: Compressor,
        weight: torch.Tensor | None = None,
        decoded: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """``sum_i w_i decode(packet)_i`` over all nodes, ``w_i = 1/n`` by default; each row
        with ``w_i != 0`` is charged its payload's bits uplink. ``decoded`` may pass the rows
        already decoded (a method that keeps them); a backend that moves the payload itself
        (torch.distributed) ignores it. Without ``decoded`` the payload is reduced by
        ``compressor.decode_sum``, which for sparse payloads makes no dense rows."""
        if decoded is not None:
            return self.reduce_rows(decoded, packet_bits(packet), weight)
        self._charge_up(packet_bits(packet), weight)
        return compressor.decode_sum(packet, weight)

    def reduce_full(self, x_i: torch.Tensor, weight: torch.Tensor | None = None) -> torch.Tensor:
        """The same for uncompressed rows, charged ``float_bits * d`` each."""
        return self.reduce_rows(x_i, self.float_bits * x_i.shape[1], weight)

    def reduce_rows(
        self, rows: torch.Tensor, nbits: torch.Tensor | int, weight: torch.Tensor | None = None
    ) -> torch.Tensor:
        """``sum_i w_i rows_i`` over all nodes, charging ``nbits_i`` to the rows that send
        (an int: the same for every row)."""
        raise NotImplementedError

    def reduce_choice(
        self, rows: torch.Tensor, first: Packet, second: Packet, pick_second: torch.Tensor
    ) -> torch.Tensor:
        """``mean_i rows_i`` over all nodes, where node ``i`` sent one of two payloads,
        ``second`` where ``pick_second[i]`` else ``first``, plus a flag naming which: each node
        is charged its chosen payload's bits and ``CHOICE_FLAG_BITS``. ``rows`` are what the
        server rebuilds from the chosen messages (EF21+: the change of ``g_i``)."""
        pick = pick_second.to(first.nbits.device)
        nbits = torch.where(pick, second.nbits, first.nbits) + CHOICE_FLAG_BITS
        return self.reduce_rows(rows, nbits.to(torch.int64))

    def gather_rows(self, rows: torch.Tensor, nbits: torch.Tensor) -> torch.Tensor:
        """Every node's row, ``(n, d)`` in node order, as the server holds it: robust
        aggregation (coordinate median, Krum, ...) needs each message, not their mean. ``rows``
        are what the server rebuilds from each held node's message and ``nbits_i`` that
        message's bits, charged uplink as :meth:`reduce_rows` does."""
        raise NotImplementedError

    def _charge_up(self, nbits: torch.Tensor | int, weight: torch.Tensor | None) -> None:
        """Charge ``nbits_i`` (an int: the same for every row) uplink to each held row that
        sends (``w_i != 0``)."""
        if weight is None:
            self.ledger.charge_up(nbits)
        else:
            if isinstance(nbits, torch.Tensor):
                nbits = nbits.cpu()
            self.ledger.charge_up(torch.where(weight.cpu() != 0, nbits, 0))

    def monitor_mean(self, v_i: torch.Tensor) -> float:
        """The mean over all nodes of a per-node statistic ``(m,)``, for logging only: not a
        message of the method, so nothing is charged."""
        raise NotImplementedError

    def monitor_average(self, rows: torch.Tensor) -> torch.Tensor:
        """``(1/n) sum_i rows_i`` over all nodes, ``(d,)``, for logging only (a decentralized
        method's averaged iterate, where the loss is measured): nothing is charged."""
        raise NotImplementedError

    # ------------------------------------------------------------ gossip (peer to peer)
    def gossip(self, packet: Packet, compressor: Compressor, topology: Topology) -> torch.Tensor:
        """``sum_j W_ij decode(packet)_j`` for each held node ``i``, ``(m, d)``: one gossip round
        over ``topology``'s mixing matrix ``W`` (the diagonal term is the node's own message).
        Node ``i`` sends its message to each of its ``deg_i`` neighbours, point to point, and is
        charged ``deg_i`` times its bits uplink; it is charged the bits of the messages it
        receives from its neighbours downlink. Nothing goes through a server."""
        self._charge_gossip(packet.nbits, topology, uniform=compressor.fixed_size)
        return self._mix(compressor.decode(packet), packet, compressor, topology)

    def gossip_full(self, rows: torch.Tensor, topology: Topology) -> torch.Tensor:
        """The same for uncompressed rows (``float_bits * d`` bits per message): one round of
        plain gossip averaging, ``(W X)_i`` for each held node."""
        nbits = torch.full((self.m,), self.float_bits * rows.shape[1], dtype=torch.int64)
        self._charge_gossip(nbits, topology, uniform=True)
        return self._mix(rows, None, None, topology)

    def _mix(
        self,
        rows: torch.Tensor,
        packet: Packet | None,
        compressor: Compressor | None,
        topology: Topology,
    ) -> torch.Tensor:
        """``(W Q)_held`` from the held nodes' decoded messages ``rows``; a backend that moves
        payloads (torch.distributed) sends ``packet`` in its wire form to the neighbours."""
        raise NotImplementedError

    def _charge_gossip(self, nbits: torch.Tensor, topology: Topology, uniform: bool) -> None:
        """Uplink: ``deg_i`` copies of each held node's message; downlink: what its neighbours
        send it. With ``uniform`` (every message the same size: a fixed-size compressor, or
        uncompressed rows) that is ``deg_i`` times the held nodes' own size, with no exchange
        of sizes; otherwise every node's size is gathered and summed over the held nodes'
        edges."""
        if topology.n != self.n:
            raise ValueError(f"topology has {topology.n} nodes, the run {self.n}")
        plan = self._gossip_plan(topology)
        nbits = nbits.cpu().to(torch.int64)
        self.ledger.charge_up(nbits * plan["deg"])
        if uniform and nbits.numel():
            self.ledger.charge_down(plan["deg"] * nbits[0])
            return
        received = self.gather_all_nbits(nbits)
        down = torch.zeros(self.m, dtype=torch.int64)
        down.index_add_(0, plan["edge_to"], received[plan["edge_from"]])
        self.ledger.charge_down(down)

    def _gossip_plan(self, topology: Topology) -> dict[str, Any]:
        """What gossip over ``topology`` needs for the held nodes, built once per topology: the
        held nodes' degrees, their incoming edges as two index lists (``edge_to``: the held
        row, ``edge_from``: the neighbour's node id), and their rows of ``W``."""
        cache = self.__dict__.setdefault("_plans", {})
        key = id(topology)  # the plan holds the topology, so its id is not reused meanwhile
        if key not in cache:
            held = self.nodes
            rows = topology.W[held]
            adjacent = rows > 0
            adjacent[torch.arange(self.m), held] = False
            edge_to, edge_from = adjacent.nonzero(as_tuple=True)
            cache[key] = {
                "topology": topology,
                "deg": torch.bincount(edge_to, minlength=self.m).to(torch.int64),
                "edge_to": edge_to,
                "edge_from": edge_from,
                "W": rows,
            }
        return cache[key]

    def gather_all_nbits(self, nbits: torch.Tensor) -> torch.Tensor:
        """Every node's message size, ``(n,)`` in node order (for the downlink charge of
        gossip: what each node receives). Bookkeeping, not a message: nothing is charged."""
        raise NotImplementedError

    # ------------------------------------------------------------ downlink
    def broadcast_full(self, d: int) -> None:
        """Charge every node the downlink of an uncompressed ``d``-vector."""
        self.ledger.charge_down(self.float_bits * d)

    def broadcast(self, packet: Packet, compressor: Compressor) -> torch.Tensor:
        """Decode a server payload (one row) and charge every node its bits downlink."""
        self.ledger.charge_down(int(packet.nbits[0]))
        return compressor.decode(packet)[0]

    def charge_down(self, nbits: int) -> None:
        """Charge every node ``nbits`` downlink (a shared coin, a skip flag)."""
        self.ledger.charge_down(nbits)

    def barrier(self) -> None:
        """Wait until every process gets here (a no-op with one process)."""

    def end_round(self) -> None:
        self.ledger.rounds += 1

    # ------------------------------------------------------------ totals over all nodes
    def bits_totals(self) -> dict[str, Any]:
        """Cumulative bits per node over all ``n`` nodes: mean and max, up and down, and under
        ``"per_node"`` each node's own totals (gathered from every rank under torchrun)."""
        raise NotImplementedError
