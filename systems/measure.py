"""Encode and decode time of compressors on this machine, at real model sizes, cached.

One worker's gradient (a Gaussian row of ``d`` float32 entries, or the model's parameter tensors
compressed one by one with :class:`compressors.blockwise.Blockwise`) is encoded and decoded on
the local device; the median of the repeats is kept. On CUDA every timed section is bracketed by
``torch.cuda.synchronize`` and preceded by a warm-up call. Full-size encodes take seconds on a
small CPU, so repeats stop once a time budget is spent (at least one timed call after the
warm-up, which is skipped when one call alone exceeds the budget), and results are cached in a
JSON file keyed by device, threads, size, layout and spec. Each cache entry records when, on
which host and by which process it was measured (``measured``), so that a reader can say how old
the numbers it reuses are (:func:`lookup`). Other measurements (a model's backward profile, a
hook's codec per bucket, :mod:`systems.pays`) are kept in the same file by the same rules
(:func:`lookup_record`, :func:`store_record`).

A payload that is all-gathered crosses the wire in its packed form
(``Compressor.to_bytes``), as in the torch.distributed executor, so for those compressors the
encode time includes packing and the decode time unpacking (``from_bytes``); summable payloads
are all-reduced as tensors and pay neither.

The per-method extra work (error-feedback buffers, DIANA's shifts) is measured as the time of one
length-``d`` vector update (``y += a x``) times the number of such updates a method does per
step beyond computing and compressing its gradient (:data:`VECTOR_UPDATES`).
"""

from __future__ import annotations

import datetime
import json
import logging
import os
import platform
import statistics
import time
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import torch

from compressors.blockwise import Blockwise
from compressors.registry import parse_spec
from streams import Streams

__all__ = [
    "VECTOR_UPDATES",
    "Measurement",
    "cache_path",
    "collective_of",
    "device_key",
    "lookup",
    "lookup_record",
    "measure",
    "measure_cached",
    "store_record",
]

log = logging.getLogger(__name__)

# Length-d vector updates per worker per step beyond encode/decode: EF-SGD adds the error to the
# gradient and stores the new error (Karimireddy et al. 2019, arXiv 1901.09847, Alg. 2); EF21
# forms g - h and updates h (Richtarik et al. 2021, arXiv 2106.05203, Alg. 1); DIANA forms g - h
# and moves the shift h (Mishchenko et al. 2019, arXiv 1901.09269, Alg. 1).
VECTOR_UPDATES = {"dcgd": 0, "ef-sgd": 2, "ef21": 2, "diana": 2}


@dataclass(frozen=True)
class Measurement:
    """Median seconds of one worker's encode and decode, the bits it sent, the time of one
    length-``d`` vector update, and the collective its payload needs."""

    spec: str
    d: int
    layout: str
    bits: int
    encode_s: float
    decode_s: float
    axpy_s: float
    repeats: int
    device: str
    collective: str


def collective_of(c) -> str:
    """``allreduce`` when payloads can be summed (a linear compressor whose randomness, if any,
    is shared, so every worker's message lives in the same coordinates), else ``allgather``:
    the rule the torch.distributed executor follows."""
    return "allreduce" if c.linear and (c.deterministic or c.shared_randomness) else "allgather"


def device_key(device: torch.device) -> str:
    """What the cache keys timings by: the device model and, on CPU, the thread count."""
    if device.type == "cuda":
        return f"cuda:{torch.cuda.get_device_name(device)}"
    return f"cpu:{platform.machine()}:{platform.processor() or 'cpu'}:{torch.get_num_threads()}t"


def cache_path() -> Path:
    """``$COMPZOO_CACHE/systems_measurements.json`` (default ``~/.cache/compzoo``)."""
    root = os.environ.get("COMPZOO_CACHE") or Path.home() / ".cache" / "compzoo"
    return Path(root) / "systems_measurements.json"


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _timed(fn, device: torch.device):
    _sync(device)
    t0 = time.perf_counter()
    out = fn()
    _sync(device)
    return out, time.perf_counter() - t0


def measure(
    spec: str,
    sizes: tuple[int, ...],
    device: torch.device | str = "cpu",
    repeats: int = 3,
    budget_s: float = 2.0,
    workers: int = 1,
    seed: int = 0,
) -> Measurement:
    """Time one worker's encode and decode of ``spec`` at ``sum(sizes)`` entries.

    Args:
        spec: a compressor spec (``topk:ratio=0.01``).
        sizes: one entry for a flat vector, else the model's parameter-tensor sizes (each
            tensor compressed separately).
        device: where to run.
        repeats: at most this many timed calls after the warm-up.
        budget_s: stop repeating once this much time is spent.
        workers: ``n`` for compressors that need the node count.
        seed: seed of the data and of the compressor's streams.
    """
    device = torch.device(device)
    c = parse_spec(spec).bind(workers)
    sizes = tuple(int(s) for s in sizes)
    if len(sizes) > 1:
        c = Blockwise(c, sizes)
    d = sum(sizes)
    gen = torch.Generator(device=device).manual_seed(seed)
    x = torch.randn(1, d, generator=gen, device=device)
    wire = collective_of(c) == "allgather"
    nodes = torch.zeros(1, dtype=torch.int64)

    def encode(rng):
        packet = c.encode(x, rng)
        return packet, (c.to_bytes(packet) if wire else None)

    def decode(packet, data):
        if wire:
            packet = c.from_bytes(data[0], data[1], packet, nodes)
        return c.decode(packet)

    enc, dec = [], []
    spent = 0.0
    for rep in range(repeats + 1):
        rng = Streams.for_nodes(seed, torch.arange(1), rep, device=device)
        (packet, data), te = _timed(lambda rng=rng: encode(rng), device)
        _, td = _timed(lambda packet=packet, data=data: decode(packet, data), device)
        spent += te + td
        if rep > 0 or te + td > budget_s:  # the first call warms up unless it is already slow
            enc.append(te)
            dec.append(td)
        if enc and spent > budget_s:
            break
    y = torch.zeros_like(x)
    _, axpy = _timed(lambda: y.add_(x, alpha=0.5), device)
    return Measurement(
        spec=spec,
        d=d,
        layout="flat" if len(sizes) == 1 else f"layers{len(sizes)}",
        bits=int(packet.nbits[0]),
        encode_s=statistics.median(enc),
        decode_s=statistics.median(dec),
        axpy_s=axpy,
        repeats=len(enc),
        device=device_key(device),
        collective=collective_of(c),
    )


def _cache_key(spec: str, sizes: tuple[int, ...], device: torch.device, workers: int) -> str:
    c = parse_spec(spec)
    n = workers if c.needs_node_count else 1
    layout = "flat" if len(sizes) == 1 else f"layers{len(sizes)}"
    return f"{device_key(device)}|d={sum(sizes)}|{layout}|n={n}|wire|{c.spec()}"


def _read_cache(path: Path) -> dict:
    if not path.exists():
        return {}
    try:
        cache = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        log.warning("ignoring unreadable measurement cache %s", path)
        return {}
    return cache if isinstance(cache, dict) else {}


def lookup(
    spec: str,
    sizes: tuple[int, ...],
    device: torch.device | str = "cpu",
    workers: int = 1,
    path: Path | None = None,
) -> tuple[Measurement, dict] | None:
    """The cached measurement of ``spec`` and where it came from, or ``None`` if not cached.

    Returns:
        ``(measurement, provenance)``; ``provenance`` has ``path`` (the cache file),
        ``measured`` (UTC time, ``None`` for an entry written before times were recorded),
        ``host`` and ``pid`` (``None`` when unknown) and ``file_mtime`` (the cache file's last
        change, UTC).
    """
    device = torch.device(device)
    path = cache_path() if path is None else Path(path)
    entry = _read_cache(path).get(_cache_key(spec, tuple(sizes), device, workers))
    names = {f.name for f in fields(Measurement)}
    if not isinstance(entry, dict) or not names <= set(entry):
        return None
    provenance = _provenance(path, entry)
    return Measurement(**{k: entry[k] for k in names}), provenance


def measure_cached(
    spec: str,
    sizes: tuple[int, ...],
    device: torch.device | str = "cpu",
    remeasure: bool = False,
    workers: int = 1,
    path: Path | None = None,
) -> Measurement:
    """:func:`measure`, read from and written to the cache unless ``remeasure``."""
    device = torch.device(device)
    path = cache_path() if path is None else Path(path)
    if not remeasure:
        hit = lookup(spec, sizes, device, workers, path)
        if hit is not None:
            return hit[0]
    c = parse_spec(spec)
    n = workers if c.needs_node_count else 1
    layout = "flat" if len(sizes) == 1 else f"layers{len(sizes)}"
    log.info("measuring %s at d=%d (%s) on %s", spec, sum(sizes), layout, device)
    m = measure(spec, sizes, device, workers=n)
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    cache = _read_cache(path)
    cache[_cache_key(spec, tuple(sizes), device, workers)] = {
        **asdict(m),
        "measured": {"at": now, "host": platform.node() or None, "pid": os.getpid()},
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(cache, indent=1, sort_keys=True))
    tmp.replace(path)
    return m


def _provenance(path: Path, entry: dict) -> dict:
    """Where a cached entry came from: the file, when, on which host and by which process."""
    meta = entry.get("measured") if isinstance(entry.get("measured"), dict) else {}
    mtime = datetime.datetime.fromtimestamp(path.stat().st_mtime, datetime.timezone.utc)
    return {
        "path": str(path),
        "measured": meta.get("at"),
        "host": meta.get("host"),
        "pid": meta.get("pid"),
        "file_mtime": mtime.strftime("%Y-%m-%d %H:%M UTC"),
    }


def lookup_record(key: str, path: Path | None = None) -> tuple[dict, dict] | None:
    """A cached record stored by :func:`store_record` under ``key`` and where it came from
    (the provenance of :func:`lookup`), or ``None``. Keys name the device (:func:`device_key`)
    and everything the record depends on."""
    path = cache_path() if path is None else Path(path)
    entry = _read_cache(path).get(key)
    if not isinstance(entry, dict) or "value" not in entry:
        return None
    provenance = _provenance(path, entry)
    return entry["value"], provenance


def store_record(key: str, value: dict, path: Path | None = None) -> None:
    """Write ``value`` (JSON-able) to the cache under ``key`` with when, where and by which
    process it was measured (the file replaced whole, by rename)."""
    path = cache_path() if path is None else Path(path)
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    cache = _read_cache(path)
    cache[key] = {
        "value": value,
        "measured": {"at": now, "host": platform.node() or None, "pid": os.getpid()},
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(cache, indent=1, sort_keys=True))
    tmp.replace(path)
