"""What the count-sketch methods share: the nodes' tables summed by the comm layer, the server's
median unsketch, and the sparse downlink of the recovered update.

The sketch is :class:`compressors.count_sketch.CountSketch` itself (its hashes and its tables):
every node encodes its rows with the same shared stream, held fixed over the rounds (keyed by
``t = 0`` and the method's tag), so that the tables of every round live in one sketch space and
a server can keep momentum and error there (FetchSGD). The comm layer averages the nodes'
tables (``reduce_rows``: one all-reduce of ``rows * cols`` values under torch.distributed) and
charges each node its payload's bits, ``rows * cols * float_bits``.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import ClassVar

import torch

from comm import Comm
from compressors.base import resolve_k
from compressors.count_sketch import CountSketch
from compressors.top_k import TopK
from streams import Streams

__all__ = [
    "DEFAULT_COLS_PER_K",
    "HeldSketch",
    "DEFAULT_K_RATIO",
    "cols_of",
    "count_sketch",
    "downlink",
    "k_of",
    "node_tables",
    "server_table",
    "sketch_streams",
    "unsketch",
]

#: ``k`` when none is given: ``max(1, round(0.01 d))``, Top-K's default ratio.
DEFAULT_K_RATIO = 0.01
#: Buckets per row when none are given: ``10 k`` (the FetchSGD code's defaults, ``num_cols =
#: 500000`` for ``k = 50000``).
DEFAULT_COLS_PER_K = 10


@dataclass(frozen=True)
class HeldSketch(CountSketch):
    """:class:`~compressors.count_sketch.CountSketch` with the hashes of a shared key drawn once
    and kept (they are the same every round: the methods hold their sketch space fixed), so a
    round does not redraw ``2 rows d`` numbers for each table it makes or reads. Encoding,
    decoding, bits and wire form are the count sketch's."""

    in_registry: ClassVar[bool] = False

    def _hashes(self, rng: Streams, m: int, d: int) -> tuple[torch.Tensor, torch.Tensor]:
        if not bool((rng.keys == rng.keys[0]).all()):
            return super()._hashes(rng, m, d)
        buckets, signs = _held_hashes(self, int(rng.keys[0]), d, str(rng.device))
        return buckets.expand(m, -1, -1), signs.expand(m, -1, -1)


@functools.lru_cache(maxsize=2)
def _held_hashes(sketch: HeldSketch, key: int, d: int, device: str):
    zero = torch.zeros(1, dtype=torch.int64, device=device)
    one = Streams(torch.tensor([key], device=device), zero)
    return CountSketch._hashes(sketch, one, 1, d)


def k_of(k: int | None, d: int, ratio: float = DEFAULT_K_RATIO) -> int:
    """The update's coordinates per round: ``k``, or ``max(1, round(ratio d))``; ``k <= d``."""
    return resolve_k(k, None, d, ratio)


def cols_of(cols: int | None, k: int) -> int:
    """Buckets per hash row: ``cols``, or ``10 k``."""
    return DEFAULT_COLS_PER_K * k if cols is None else cols


def count_sketch(rows: int, cols: int, comm: Comm) -> HeldSketch:
    """The sketch, its entries at the comm layer's wire width."""
    return HeldSketch(rows=rows, cols=cols, float_bits=comm.float_bits)


def sketch_streams(comm: Comm, tag: int) -> Streams:
    """The shared stream of the hashes, one row per held node: the same key on every node and
    in every round (``t = 0``), so that all tables share one sketch space."""
    return comm.rng(0, shared=True, tag=tag)


def node_tables(
    sketch: CountSketch, rows_i: torch.Tensor | list[torch.Tensor], comm: Comm, tag: int
):
    """``mean_i S(rows_i)`` over all nodes, flat ``(rows * cols,)``: each held node encodes its
    row, the comm layer averages the tables and charges each node its payload's bits. Given a
    list of ``(m, d)`` blocks, the tables of each are sent as one message (their bits added)
    and a list of averaged tables comes back."""
    blocks = rows_i if isinstance(rows_i, list) else [rows_i]
    streams = sketch_streams(comm, tag)
    packets = [sketch.encode(block, streams) for block in blocks]
    values = torch.cat([p.fields["values"] for p in packets], dim=1)
    nbits = sum(p.nbits for p in packets)
    mean = comm.reduce_rows(values, nbits)
    parts = list(mean.split(packets[0].fields["values"].shape[1]))
    return parts if isinstance(rows_i, list) else parts[0]


def server_table(sketch: CountSketch, vec: torch.Tensor, comm: Comm, tag: int) -> torch.Tensor:
    """``S(vec)`` of one server vector ``(d,)`` in the nodes' sketch space (no message)."""
    packet = sketch.encode(vec[None], sketch_streams(comm, tag)[:1])
    return packet.fields["values"][0]


def unsketch(sketch: CountSketch, table: torch.Tensor, d: int, comm: Comm, tag: int):
    """The median estimate of every coordinate from a flat table, ``(d,)``:
    ``xhat_j = median_r s_r(j) S_r[h_r(j)]`` (the lower median for an even number of rows, as
    ``torch.median`` and the FetchSGD authors' ``CSVec._findAllValues`` take it)."""
    buckets, signs = sketch._hashes(sketch_streams(comm, tag)[:1], 1, d)
    c = sketch.width(d)
    est = torch.gather(table.reshape(sketch.rows, c), 1, buckets[0].to(table.device))
    est = est * signs[0].to(table.device, table.dtype)
    return est.median(dim=0).values


def downlink(values: torch.Tensor, k: int, comm: Comm, t: int):
    """Top-``k`` of ``values`` ``(d,)`` (ties to the lower index), sent to every node as ``k``
    values and ``k`` indices (``k (float_bits + ceil(log2 d))`` bits, charged downlink).
    Returns the sparse vector ``(d,)`` every node rebuilds and its support, a bool ``(d,)``."""
    topk = TopK(k=k, float_bits=comm.float_bits)
    packet = topk.encode(values[None], comm.server_rng(t))  # TopK draws nothing
    support = torch.zeros(values.shape[0], dtype=torch.bool, device=values.device)
    support[packet.fields["indices"][0].to(values.device)] = True
    return comm.broadcast(packet, topk), support
