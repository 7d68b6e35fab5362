"""The vector width numba compiles the project's kernels for: 256 or 512 bits, per machine.

On CPUs with AVX-512, LLVM's tuning for most Intel server models (``prefer-256-bit``) keeps
vectorised loops at 256 bits, where some CPUs run the wider vectors at lower clocks. Whether the
512-bit form is faster depends on the CPU and the kernel, so it is measured, on the project's
own kernels, by ``python -m benchmarks.vector_width`` (a set-up step), which records the
winner per machine in ``~/.cache/compzoo/vector-width.json`` (:func:`record_path`). Every
process of the project then compiles, or loads from numba's cache, the recorded form:
:func:`apply` runs when :mod:`streams` is imported, before numba is, and for 512 bits sets
``NUMBA_CPU_FEATURES`` to the host's features with ``-prefer-256-bit`` (numba keys its cache by
the feature string, so both forms can sit in the cache). Measured on a 2-core Intel Xeon
(Emerald Rapids): the batched GLM kernel of w8a (12 points, one thread) 4.0-4.3 ms at 512 bits
against 4.8-6.3 ms at 256, FastSGD on 2.5 * 10^7 entries 36 ms against 48.

The project's bit-for-bit contracts (a kernel against its torch form, a batch of runs against
each run alone) hold in either form: the test suite passes in both. Between the two forms,
sums the compiler may reassociate (the dense GLM kernel's dot products) can differ in the last
bits, as between two CPUs.

Left alone: a process in which numba was imported before :mod:`streams` (its code generator
may already be set up), and a user's own ``NUMBA_CPU_FEATURES`` or ``NUMBA_CPU_NAME``.
``COMPZOO_VECTOR_BITS=256`` or ``512`` overrides the record (the calibration's probes use it);
a record from another machine, or one that cannot be read, counts as none (256).
``COMPZOO_VECTOR_RECORD`` names another record file. The record is JSON data only: reading it
runs no code.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import sys
from pathlib import Path

__all__ = ["APPLIED", "BITS", "ENV", "RECORD_ENV", "apply", "cpu", "machine_key", "read",
           "record_path", "write"]  # fmt: skip

BITS = (256, 512)
ENV = "COMPZOO_VECTOR_BITS"
RECORD_ENV = "COMPZOO_VECTOR_RECORD"
_VERSION = 1
_NUMBA_ENV = ("NUMBA_CPU_FEATURES", "NUMBA_CPU_NAME")
#: What 512 bits adds to the host's feature string.
WIDE = "-prefer-256-bit"
#: The feature string :func:`apply` set in this process, if it set one.
APPLIED: list[str] = []


def record_path() -> Path:
    """``$COMPZOO_VECTOR_RECORD``, or ``~/.cache/compzoo/vector-width.json``: a machine's
    setting, kept apart from the memo of :mod:`problems.cache` (whose ``COMPZOO_CACHE`` a test
    session or a user may point elsewhere without changing how the kernels were compiled)."""
    env = os.environ.get(RECORD_ENV)
    return Path(env) if env else Path.home() / ".cache" / "compzoo" / "vector-width.json"


def cpu() -> tuple[str, str]:
    """The CPU's model name (``/proc/cpuinfo``'s, else ``platform.processor()``) and its feature
    flags (``/proc/cpuinfo``'s first list, else empty)."""
    model, flags = "", ""
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                key, _, value = line.partition(":")
                key = key.strip()
                if key == "model name" and not model:
                    model = value.strip()
                elif key in ("flags", "Features") and not flags:
                    flags = value.strip()
                if model and flags:
                    break
    except OSError:
        pass
    return model or platform.processor() or "", flags


def machine_key() -> str:
    """What a record is valid for: the CPU's model and feature flags, the platform, and the
    numba and llvmlite versions (which compile the kernels)."""
    model, flags = cpu()
    try:
        from importlib.metadata import version

        tools = f"numba {version('numba')}, llvmlite {version('llvmlite')}"
    except Exception:  # noqa: BLE001 - no metadata: the key still names the CPU
        tools = ""
    digest = hashlib.sha256(flags.encode()).hexdigest()[:16]
    return f"{model}|{digest}|{platform.machine()}|{platform.system()}|{tools}"


def read(path: Path | None = None) -> int | None:
    """The recorded width for this machine, or None (no record, another machine's, or one
    that cannot be read)."""
    path = record_path() if path is None else path
    try:
        rec = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(rec, dict) or rec.get("version") != _VERSION:
        return None
    if rec.get("machine") != machine_key() or rec.get("bits") not in BITS:
        return None
    return int(rec["bits"])


def write(bits: int, timings: dict, path: Path | None = None) -> Path:
    """Record ``bits`` for this machine, with the ``timings`` that chose it; the file is
    written whole and renamed into place."""
    if bits not in BITS:
        raise ValueError(f"bits must be one of {BITS}, got {bits!r}")
    path = record_path() if path is None else path
    path.parent.mkdir(parents=True, exist_ok=True)
    rec = {"version": _VERSION, "machine": machine_key(), "bits": bits, "timings": timings}
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.write_text(json.dumps(rec, indent=1, sort_keys=True) + "\n")
    os.replace(tmp, path)
    return path


def wide_features() -> str | None:
    """The host's feature string with :data:`WIDE`, or None on a CPU without AVX-512 (where
    there is no wider form to choose)."""
    import llvmlite.binding as ll

    ll.initialize_native_target()
    features = ll.get_host_cpu_features().flatten()
    if "+avx512f" not in features.split(","):
        return None
    return f"{features},{WIDE}"


def wanted() -> int | None:
    """The width asked for: ``COMPZOO_VECTOR_BITS`` or the record (None: LLVM's own choice).
    A value of ``COMPZOO_VECTOR_BITS`` other than 256 or 512 is named on stderr and ignored."""
    env = os.environ.get(ENV)
    if env:
        if env.strip() in ("256", "512"):
            return int(env)
        print(f"warning: {ENV}={env!r} ignored; allowed: 256 or 512", file=sys.stderr)
    return read()


def apply() -> int | None:
    """Set numba's feature string for the width :func:`wanted` asks for, before numba is
    imported; the width set (512), or None where nothing was changed."""
    if any(name in os.environ for name in _NUMBA_ENV) or "numba" in sys.modules:
        return None
    if wanted() != 512:
        return None
    try:
        features = wide_features()
    except Exception:  # noqa: BLE001 - no llvmlite: numba is absent too, nothing to set
        return None
    if features is None:
        return None
    os.environ["NUMBA_CPU_FEATURES"] = features
    APPLIED.append(features)
    return 512
