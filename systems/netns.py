"""A throttled star network of Linux network namespaces, for real multi-process runs.

:class:`Testbed` builds ``W`` worker namespaces and one switch namespace holding a bridge. Each
worker is joined to the bridge by a veth pair: ``eth0`` inside the worker (address
``10.213.NET.(i+1)/24``), its peer enslaved to the bridge. Bandwidth is limited by a token
bucket (``tc qdisc ... tbf``) on **both** ends of every pair: the worker's end shapes what it
sends (its uplink), the switch's end what it receives (its downlink), so every worker has a
full-duplex link of the given rate to a non-blocking switch, the usual model of a cluster
network. Latency is added with ``netem`` where the kernel has it (``sch_netem``); where it does
not, :attr:`Testbed.latency_applied` is False and the links keep their natural latency (tens of
microseconds on veth), which the caller must report (:func:`netem_available` says beforehand;
:mod:`systems.netstudy` then adds the delay inside the workers instead, and says so). The bridge
itself has the address ``10.213.NET.254`` (:attr:`Testbed.switch_address`), the endpoint of
:mod:`systems.linkprobe`'s per-link measurements; the workers' own traffic never goes to it.

Everything is named ``cz<TAG>...`` with a tag unique to the process (namespaces ``cz<TAG>-w0``
.., ``cz<TAG>-sw``), and removed by :meth:`Testbed.teardown`: on leaving the ``with`` block, on
an exception, at interpreter exit and on SIGINT/SIGTERM (the handler tears down, then re-raises
the signal's default action). :func:`cleanup_stale` removes what a killed process (SIGKILL) left
behind. Needs root (``CAP_NET_ADMIN``) and the ``ip`` and ``tc`` tools; :func:`available` says
whether they work here, with the reason when they do not.
"""

from __future__ import annotations

import atexit
import os
import shutil
import signal
import subprocess
from dataclasses import dataclass, field

__all__ = [
    "LinkError",
    "Testbed",
    "available",
    "cleanup_stale",
    "namespaces",
    "netem_available",
]

PREFIX = "cz"


class LinkError(RuntimeError):
    """A namespace, link or queueing discipline could not be made (the message says which)."""


def _run(*cmd: str, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run(list(cmd), capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise LinkError(f"{' '.join(cmd)}: {proc.stderr.strip() or proc.stdout.strip()}")
    return proc


def namespaces() -> list[str]:
    """Names of this machine's network namespaces."""
    proc = _run("ip", "netns", "list", check=False)
    return [line.split()[0] for line in proc.stdout.splitlines() if line.strip()]


def available() -> tuple[bool, str]:
    """Whether namespaces, veth pairs and tbf work here: ``(True, "")`` or ``(False, why)``."""
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            return False, f"the {tool!r} tool is not installed"

    def shape(probe: str) -> tuple[bool, str]:
        try:
            _run("ip", "netns", "exec", probe, "tc", "qdisc", "add", "dev", "pa", "root", "tbf",
                 "rate", "1gbit", "burst", "64kb", "latency", "50ms")  # fmt: skip
        except LinkError as exc:
            return False, f"cannot make a throttled veth link ({exc})"
        return True, ""

    return _on_scratch_veth("probe", shape)


def _on_scratch_veth(what: str, fn) -> tuple[bool, str]:
    """``fn(namespace)`` on a veth pair ``pa``/``pb`` made in a scratch namespace, removed
    afterwards; ``(False, why)`` where the namespace or the pair cannot be made."""
    probe = f"{PREFIX}{what}{os.getpid() % 100000}"
    try:
        _run("ip", "netns", "add", probe)
    except LinkError as exc:
        return False, f"cannot create a network namespace ({exc})"
    try:
        _run("ip", "netns", "exec", probe, "ip", "link", "add", "pa", "type", "veth", "peer",
             "name", "pb")  # fmt: skip
        return fn(probe)
    except LinkError as exc:
        return False, f"cannot make a veth link ({exc})"
    finally:
        _run("ip", "netns", "del", probe, check=False)


def netem_available() -> tuple[bool, str]:
    """Whether this kernel has the netem qdisc (link delay): ``(True, "")`` or ``(False, why)``,
    tried on a veth pair in a scratch namespace."""

    def delay(probe: str) -> tuple[bool, str]:
        proc = _run("ip", "netns", "exec", probe, "tc", "qdisc", "add", "dev", "pa", "root",
                    "netem", "delay", "1us", check=False)  # fmt: skip
        if proc.returncode != 0:
            why = proc.stderr.strip() or proc.stdout.strip()
            return False, f"tc qdisc add ... netem failed ({why}): the kernel lacks sch_netem"
        return True, ""

    return _on_scratch_veth("netem", delay)


def _netem_available(ns: str, dev: str) -> bool:
    ok = _run("ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", dev, "root", "netem",
              "delay", "1us", check=False).returncode == 0  # fmt: skip
    if ok:
        _run("ip", "netns", "exec", ns, "tc", "qdisc", "del", "dev", dev, "root", check=False)
    return ok


def cleanup_stale() -> list[str]:
    """Remove the namespaces of testbeds whose process no longer exists; returns their names."""
    removed = []
    for ns in namespaces():
        if not ns.startswith(PREFIX) or "-" not in ns:
            continue
        tag = ns[len(PREFIX) :].split("-")[0]
        if not tag.isdigit():
            continue
        pid = int(tag)
        try:
            os.kill(pid, 0)
            continue  # still running: not stale
        except ProcessLookupError:
            pass
        except PermissionError:
            continue
        _kill_inside(ns)
        _run("ip", "netns", "del", ns, check=False)
        removed.append(ns)
    return removed


def _kill_inside(ns: str) -> None:
    pids = _run("ip", "netns", "pids", ns, check=False).stdout.split()
    for pid in pids:
        try:
            os.kill(int(pid), signal.SIGKILL)
        except (ProcessLookupError, ValueError):
            pass


@dataclass
class Testbed:
    """``workers`` namespaces on a star of links of ``gbps`` Gbit/s (each direction) and
    ``latency_us`` added one-way delay per link end (so a worker-to-worker message crosses two
    link ends: ``2 * latency_us``).

    Use as a context manager; :meth:`set_links` changes the rate and delay in place between runs.
    """

    workers: int
    gbps: float = 1.0
    latency_us: float = 0.0
    tag: str = field(default_factory=lambda: str(os.getpid()))
    built: bool = field(default=False, init=False)
    latency_applied: bool = field(default=False, init=False)
    _old_handlers: dict = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        if (
            not isinstance(self.workers, int)
            or isinstance(self.workers, bool)
            or not (1 <= self.workers <= 64)
        ):
            raise ValueError(f"workers must be an integer in [1, 64], got {self.workers!r}")
        self._check_link(self.gbps, self.latency_us)
        self.net = int(self.tag) % 250 + 1 if self.tag.isdigit() else 1

    @staticmethod
    def _check_link(gbps: float, latency_us: float) -> None:
        if not (isinstance(gbps, (int, float)) and 0.001 <= gbps <= 100):
            raise ValueError(f"bandwidth must be in [0.001, 100] Gbit/s, got {gbps!r}")
        if not (isinstance(latency_us, (int, float)) and 0 <= latency_us <= 1e6):
            raise ValueError(f"latency must be in [0, 1e6] microseconds, got {latency_us!r}")

    # --- names ------------------------------------------------------------------------------
    def ns(self, i: int) -> str:
        """Worker ``i``'s namespace."""
        return f"{PREFIX}{self.tag}-w{i}"

    @property
    def switch(self) -> str:
        return f"{PREFIX}{self.tag}-sw"

    @property
    def switch_address(self) -> str:
        """The bridge's own address, the probes' endpoint in the switch namespace."""
        return f"10.213.{self.net}.254"

    def address(self, i: int) -> str:
        """Worker ``i``'s IPv4 address."""
        return f"10.213.{self.net}.{i + 1}"

    def all_namespaces(self) -> list[str]:
        return [self.switch] + [self.ns(i) for i in range(self.workers)]

    # --- building ---------------------------------------------------------------------------
    def build(self) -> Testbed:
        """Create the namespaces, the bridge and the links; on failure remove what was made."""
        if self.built:
            return self
        self._install_handlers()
        self.built = True
        try:
            sw = self.switch
            _run("ip", "netns", "add", sw)
            _run("ip", "netns", "exec", sw, "ip", "link", "set", "lo", "up")
            _run("ip", "netns", "exec", sw, "ip", "link", "add", "br0", "type", "bridge")
            _run("ip", "netns", "exec", sw, "ip", "addr", "add", f"{self.switch_address}/24",
                 "dev", "br0")  # fmt: skip
            _run("ip", "netns", "exec", sw, "ip", "link", "set", "br0", "up")
            for i in range(self.workers):
                ns = self.ns(i)
                _run("ip", "netns", "add", ns)
                _run("ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up")
                # create the pair inside the worker, then move the peer to the switch
                _run("ip", "netns", "exec", ns, "ip", "link", "add", "eth0", "type", "veth",
                     "peer", "name", f"p{i}")  # fmt: skip
                _run("ip", "netns", "exec", ns, "ip", "link", "set", f"p{i}", "netns", sw)
                _run("ip", "netns", "exec", ns, "ip", "addr", "add", f"{self.address(i)}/24",
                     "dev", "eth0")  # fmt: skip
                _run("ip", "netns", "exec", ns, "ip", "link", "set", "eth0", "up")
                _run("ip", "netns", "exec", sw, "ip", "link", "set", f"p{i}", "master", "br0")
                _run("ip", "netns", "exec", sw, "ip", "link", "set", f"p{i}", "up")
            self.latency_applied = self.latency_us == 0 or _netem_available(self.ns(0), "eth0")
            self.set_links(self.gbps, self.latency_us)
        except BaseException:
            self.teardown()
            raise
        return self

    def _ends(self) -> list[tuple[str, str]]:
        return [(self.ns(i), "eth0") for i in range(self.workers)] + [
            (self.switch, f"p{i}") for i in range(self.workers)
        ]

    def set_links(self, gbps: float, latency_us: float | None = None) -> None:
        """Set every link end to ``gbps`` (and ``latency_us`` where netem exists)."""
        latency_us = self.latency_us if latency_us is None else latency_us
        self._check_link(gbps, latency_us)
        self.gbps, self.latency_us = gbps, latency_us
        rate_bytes = gbps * 1e9 / 8
        # bucket: 1 ms of traffic (at least 64 KiB; tbf splits larger GSO packets), so a burst
        # at line rate is short against any message the study times; queue: 20 ms of traffic
        # (at least 4 MiB) so TCP sees delay rather than drops at low rates
        burst = max(64 * 1024, int(rate_bytes * 1e-3))
        limit = max(4 * 2**20, int(rate_bytes * 20e-3))
        for ns, dev in self._ends():
            _run("ip", "netns", "exec", ns, "tc", "qdisc", "del", "dev", dev, "root", check=False)
            if latency_us > 0 and self.latency_applied:
                _run("ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", dev, "root",
                     "handle", "1:", "netem", "delay", f"{latency_us}us")  # fmt: skip
                _run("ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", dev, "parent", "1:1",
                     "handle", "10:", "tbf", "rate", f"{rate_bytes * 8:.0f}bit", "burst",
                     str(burst), "limit", str(limit))  # fmt: skip
            else:
                _run("ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", dev, "root", "tbf",
                     "rate", f"{rate_bytes * 8:.0f}bit", "burst", str(burst), "limit",
                     str(limit))  # fmt: skip

    def qdiscs(self) -> dict[str, str]:
        """``tc qdisc show`` of every link end (for reports and tests)."""
        return {
            f"{ns}/{dev}": _run(
                "ip", "netns", "exec", ns, "tc", "qdisc", "show", "dev", dev, check=False
            ).stdout.strip()  # fmt: skip
            for ns, dev in self._ends()
        }

    def exec_prefix(self, i: int) -> list[str]:
        """The argv prefix that runs a command inside worker ``i``'s namespace."""
        return ["ip", "netns", "exec", self.ns(i)]

    # --- teardown ---------------------------------------------------------------------------
    def teardown(self) -> None:
        """Kill what runs inside the namespaces and delete them (idempotent)."""
        if not self.built:
            return
        for ns in self.all_namespaces():
            if ns in namespaces():
                _kill_inside(ns)
                _run("ip", "netns", "del", ns, check=False)
        self.built = False
        self._restore_handlers()

    def _install_handlers(self) -> None:
        atexit.register(self.teardown)
        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                self._old_handlers[sig] = signal.signal(sig, self._on_signal)
            except ValueError:  # not the main thread: rely on atexit and the with block
                pass

    def _restore_handlers(self) -> None:
        atexit.unregister(self.teardown)
        for sig, old in self._old_handlers.items():
            try:
                signal.signal(sig, old)
            except ValueError:
                pass
        self._old_handlers.clear()

    def _on_signal(self, signum, frame) -> None:
        old = self._old_handlers.get(signum)
        self.teardown()
        if callable(old):
            old(signum, frame)
        else:
            raise KeyboardInterrupt if signum == signal.SIGINT else SystemExit(128 + signum)

    def __enter__(self) -> Testbed:
        return self.build()

    def __exit__(self, *exc: object) -> None:
        self.teardown()
