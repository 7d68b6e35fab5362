"""Any compzoo compressor as a DDP comm hook: ``comp:SPEC[@EF]``.

``comp:topk:ratio=0.01`` (Top-K of each bucket with classical error feedback),
``comp:qsgd:levels=8@none``, ``comp:topk:ratio=0.01@ef21``. Everything after ``comp:`` is a
compressor spec of :mod:`compressors.registry` (``parse_spec``), optionally followed by the error
feedback: ``@ef14`` (the default), ``@ef21`` or ``@none``. ``comp`` alone is
``comp:topk:ratio=0.01@ef14``, a choice of this library (1% Top-K with error feedback is the
usual sparsification baseline, e.g. Stich, Cordonnier & Jaggi 2018, arXiv 1809.07599), not a
paper's default.

The work is :mod:`comm.ddp_hook`'s (its :class:`CompressionState` and
:func:`compression_hook`, tested against single-process references there); this class adds the
:class:`~systems.hooks.base.CommHook` interface around it. Per bucket, with ``x_i`` the worker's
flat gradient and ``C`` the compressor:

* ``@none``: ``avg = mean_i C(x_i)``;
* ``@ef14``: error feedback as in PyTorch's PowerSGD hook (Seide et al. 2014; Karimireddy et al.
  2019, arXiv 1901.09847): ``p_i = e_i + x_i``, ``c_i = C(p_i)``, ``e_i = p_i - c_i``,
  ``avg = mean_i c_i``;
* ``@ef21``: EF21 (Richtárik, Sokolov & Fatkhullin 2021, arXiv 2106.05203, Alg. 1) at gradient
  level: a first uncompressed round ``g_i = x_i``, then ``c_i = C(x_i - g_i)``, ``g_i += c_i``,
  ``g += mean_i c_i``, ``avg = g``.

Node ``i``'s randomness at step ``t`` of bucket ``b`` is the stream keyed by ``(seed, t, i)``
and the bucket's tag, so the hook draws exactly what :func:`comm.ddp_hook.register`
with the same spec and seed draws. The state follows the parameters across DDP's bucket rebuild
(see :mod:`comm.ddp_hook`).

Collective: the comm layer (:class:`~comm.torch_dist.TorchDistComm`) all-reduces a
payload only where the messages can be summed: a linear compressor sending dense values (the
identity) or a sparsifier with a support shared by every node (``randk:shared=true``); every
other payload is all-gathered in its bit-packed wire form and decoded by every rank.
``allreducible`` (an instance attribute) says which, read off one probe packet with the comm
layer's own rule; it is ``False`` for ``randk`` with private supports although Rand-K is linear.

Statistics: ``sent_bytes`` is what the comm layer's ledger counts as handed to collectives
(``wire_bytes``, plus the size/weight headers of variable-size payloads,
``wire_overhead_bytes``): ``ceil(nbits / 8)`` bytes per bit-packed message, ``4 d`` for a dense
float32 all-reduce. The exchange is synchronous, so the hook times itself: every collective the
comm layer issues is timed (CUDA synchronised at both ends), ``encode_s`` is the hook's local
time up to the last collective (compression, error feedback, packing, and the short local work
between two collectives of one bucket), ``decode_s`` the local time after it (unpacking,
decoding every sender, the average, the error update), and :attr:`comm_s` the time inside
collectives, so per bucket ``encode + comm + decode`` is the hook's wall time.
"""

from __future__ import annotations

import collections
import time

import torch
import torch.distributed as dist

from comm.ddp_hook import ERROR_FEEDBACK, CompressionState, compression_hook
from compressors import Compressor
from systems.hooks.base import CommHook
from systems.hooks.registry import register

__all__ = ["CompressorHook", "split_spec"]

DEFAULT_SPEC = "topk:ratio=0.01"
DEFAULT_EF = "ef14"
# torch.distributed functions the comm layer calls that move data between ranks
_COLLECTIVES = frozenset(
    {
        "all_reduce",
        "all_gather",
        "broadcast",
        "barrier",
        "all_gather_object",
        "broadcast_object_list",
    }
)


def split_spec(spec: str) -> tuple[str, str]:
    """``"topk:ratio=0.01@ef21"`` -> ``("topk:ratio=0.01", "ef21")``; no suffix means ef14."""
    if not isinstance(spec, str) or not spec.strip():
        raise ValueError(
            f"comp: expected a compressor spec such as 'topk:ratio=0.01', got {spec!r}"
        )
    head, at, tail = spec.strip().rpartition("@")
    if not at:
        return spec.strip(), DEFAULT_EF
    if tail not in ERROR_FEEDBACK:
        allowed = ", ".join(f"@{e}" for e in ERROR_FEEDBACK)
        raise ValueError(f"comp: error feedback suffix must be one of {allowed}, got @{tail}")
    if not head:
        raise ValueError(f"comp: no compressor spec before @{tail} in {spec!r}")
    return head, tail


def sums_by_allreduce(compressor: Compressor, packet) -> bool:
    """Whether :meth:`TorchDistComm.reduce` (one node per rank) all-reduces ``packet``."""
    if compressor.sparsifier and compressor.shared_randomness and "indices" not in packet.wire:
        return True
    values = packet.fields.get("values")
    return bool(
        compressor.linear
        and packet.wire == {"values"}
        and values is not None
        and values.shape[-1] == packet.d
    )


def _probe(compressor: Compressor, n: int) -> bool:
    """:func:`sums_by_allreduce` on one packet of a 1024-value row."""
    C = compressor.bind(n)
    x = torch.linspace(-1.0, 1.0, 1024).reshape(1, -1)
    try:
        packet = C.encode(x, torch.Generator().manual_seed(0))
    except ValueError:  # a fixed k larger than the probe: decide from the declarations
        return bool(C.linear and C.sparsifier and C.shared_randomness)
    return sums_by_allreduce(C, packet)


class _TimedDist:
    """``torch.distributed`` as the comm layer sees it, its collectives timed by ``hook``."""

    def __init__(self, module, hook: CompressorHook) -> None:
        self._module = module
        self._hook = hook

    def __getattr__(self, name: str):
        attr = getattr(self._module, name)
        if name not in _COLLECTIVES:
            return attr
        hook = self._hook

        def timed(*args, **kwargs):
            hook._sync()
            t0 = time.perf_counter()
            try:
                return attr(*args, **kwargs)
            finally:
                hook._sync()
                hook._spans.append((t0, time.perf_counter()))
                hook.ops[name] += 1
                hook.stats.collectives += 1

        return timed


class CompressorHook(CommHook):
    """Any library compressor with optional error feedback, as a DDP hook (module docstring).

    Args:
        process_group: must be the default group (or ``None``): the comm layer communicates
            over it.
        spec: a compressor spec with an optional ``@none``/``@ef14``/``@ef21`` suffix.
        seed: the run's seed (node ``i``'s stream at step ``t`` is keyed by ``(seed, t, i)``).
        layerwise: compress each parameter's slice of a bucket on its own.
        float_bits: bits the ledger charges an uncompressed value (EF21's first round).

    Attributes:
        state: the :class:`~comm.ddp_hook.CompressionState` doing the work.
        compressor: the compressor (bound to the world size once the first bucket arrives).
        error_feedback: ``"none"``, ``"ef14"`` or ``"ef21"``.
        allreducible: whether the comm layer all-reduces this compressor's payloads.
        comm_s: seconds spent inside collectives since construction.
        ops: how many times each ``torch.distributed`` collective was called.
    """

    name = "comp"
    takes_spec = True
    allreducible = False  # the class default; each instance sets it from its compressor
    stateful = True

    def __init__(
        self,
        process_group: dist.ProcessGroup | None = None,
        *,
        spec: str = f"{DEFAULT_SPEC}@{DEFAULT_EF}",
        seed: int = 0,
        layerwise: bool = False,
        float_bits: int = 32,
    ) -> None:
        if process_group is not None and process_group is not dist.group.WORLD:
            raise ValueError(
                "comp: the compressor hook communicates over the default process group; "
                f"got another group ({process_group!r})"
            )
        super().__init__(process_group)
        self.spec, self.error_feedback = split_spec(spec)
        self.seed, self.layerwise, self.float_bits = seed, layerwise, float_bits
        self.state = CompressionState(self.spec, self.error_feedback, seed, layerwise, float_bits)
        self.compressor = self.state.compressor
        n = dist.get_world_size() if dist.is_initialized() else 2
        self.allreducible = _probe(self.compressor, n)
        self.comm_s = 0.0
        self.ops: collections.Counter[str] = collections.Counter()
        self._spans: list[tuple[float, float]] = []
        self._cuda: torch.device | None = None

    def register(self, ddp_model: torch.nn.parallel.DistributedDataParallel) -> CompressorHook:
        """Attach to ``ddp_model``, which must communicate over the default process group."""
        pg = getattr(ddp_model, "process_group", None)
        if pg is None or not hasattr(ddp_model, "register_comm_hook"):
            raise ValueError(f"comp: expected a DistributedDataParallel, got {type(ddp_model)}")
        if pg.size() != dist.get_world_size():
            raise ValueError(
                f"comp: the model's process group has {pg.size()} ranks, the default group "
                f"{dist.get_world_size()}; the hook communicates over the default group"
            )
        self._attach(next(ddp_model.parameters()).device)
        return super().register(ddp_model)

    def _attach(self, device: torch.device) -> None:
        comm = self.state.comm_for(device)
        if not isinstance(comm._dist, _TimedDist):
            comm._dist = _TimedDist(comm._dist, self)
        self.compressor = self.state.compressor
        self._cuda = device if device.type == "cuda" else None

    def _sync(self) -> None:
        if self._cuda is not None:
            torch.cuda.synchronize(self._cuda)

    def _bytes(self) -> int:
        extra = self.state.comm.ledger.extra
        return int(extra.get("wire_bytes", 0)) + int(extra.get("wire_overhead_bytes", 0))

    def bits_up(self) -> int:
        """Uplink bits the ledger has charged this rank (the payloads' documented bits)."""
        return self.state.bits_up()

    def reduce(self, bucket: dist.GradBucket) -> torch.futures.Future:
        if self.state.comm is None:
            self._attach(bucket.buffer().device)
        before = self._bytes()
        self._spans = []
        self._sync()
        t0 = time.perf_counter()
        fut = compression_hook(self.state, bucket)
        self._sync()
        t1 = time.perf_counter()
        inside = sum(b - a for a, b in self._spans)
        last = self._spans[-1][1] if self._spans else t1
        self.stats.encode_s += (last - t0) - inside
        self.stats.decode_s += t1 - last
        self.comm_s += inside
        self.stats.sent_bytes += self._bytes() - before
        return fut

    def describe(self) -> dict[str, object]:
        out = super().describe()
        out["params"].pop("comm_s", None)  # a measurement, not a parameter
        return out


register(CompressorHook)
