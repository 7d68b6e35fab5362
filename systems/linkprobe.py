"""What each link of a :class:`systems.netns.Testbed` delivers, measured before a study's runs.

The shaper's nominal rate is what was asked for, not what a run gets: on a small machine a veth
pair shaped to 10 Gbit/s delivers what the CPUs can push through the kernel and the bridge, and
less again when every link is loaded at once. This module measures, with plain TCP between the
namespaces (one stream, ``TCP_NODELAY``, 256 KiB writes; the receiver counts the bytes that
arrive after a warm-up of a fifth of the stream, which the token bucket's burst and TCP's slow
start fall into):

- per link ``i``, alone: **up** (worker ``i`` to the switch's own address on the bridge, so only
  worker ``i``'s sending end is crossed), **down** (switch to worker ``i``: only the switch's end
  of the pair) and the **round trip** of a 64-byte ping-pong between worker ``i`` and the switch
  (the median over ``pings`` exchanges);
- **ring**: every worker streaming to its successor ``(i + 1) mod W`` at the same time, the load
  pattern of ring all-reduce; the slowest receiver's rate is the bandwidth the study's
  prediction uses in its ``probed`` column (:func:`link_for_model`);
- **pair latency**: half the median round trip of a ping-pong between workers 0 and 1, the
  one-way time of one worker-to-worker message (the ``alpha`` of the collectives' cost
  models). It includes two Python socket calls per direction (a few tens of microseconds),
  as gloo's messages carry their own software overhead.

The endpoints are this file run as a script (``python linkprobe.py serve|client ...``, standard
library only, so a probe does not wait for torch to import) inside the namespaces with ``ip
netns exec``. :func:`probe` runs them and returns a JSON-ready dict.
"""

from __future__ import annotations

import argparse
import json
import socket
import socketserver
import statistics
import subprocess
import sys
import time
from pathlib import Path

__all__ = ["PORT", "link_for_model", "probe", "summarize"]

PORT = 5399
CHUNK = 256 * 1024
WARM = 0.2  # share of a stream's duration not counted (burst, slow start)


# --- the endpoints (run inside the namespaces) ----------------------------------------------
def _pour(sock: socket.socket, seconds: float) -> int:
    """Send for ``seconds``, then close the sending side; returns the bytes sent."""
    buf = b"\0" * CHUNK
    sent, end = 0, time.perf_counter() + seconds
    while time.perf_counter() < end:
        sock.sendall(buf)
        sent += CHUNK
    sock.shutdown(socket.SHUT_WR)
    return sent


def _drain(sock: socket.socket, seconds: float) -> dict:
    """Receive until EOF; the rate over the bytes after the first ``WARM * seconds``."""
    buf = bytearray(CHUNK)
    view = memoryview(buf)
    total, t_first, t_warm, warm_bytes, t_last = 0, None, None, 0, None
    while True:
        n = sock.recv_into(view)
        if n == 0:
            break
        now = time.perf_counter()
        if t_first is None:
            t_first = now
        total += n
        if t_warm is None and now - t_first >= WARM * seconds:
            t_warm, warm_bytes = now, total
        t_last = now
    if t_warm is None or t_last is None or t_last <= t_warm:
        return {"bytes": total, "seconds": 0.0, "gbps": float("nan")}
    counted, dt = total - warm_bytes, t_last - t_warm
    return {"bytes": counted, "seconds": dt, "gbps": 8e-9 * counted / dt}


def _read_line(sock: socket.socket) -> bytes:
    out = b""
    while not out.endswith(b"\n"):
        c = sock.recv(1)
        if not c:
            break
        out += c
    return out


def _echo(sock: socket.socket, size: int) -> None:
    buf = bytearray(size)
    while True:
        got = 0
        while got < size:
            n = sock.recv_into(memoryview(buf)[got:])
            if n == 0:
                return
            got += n
        sock.sendall(buf)


class _Handler(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        sock = self.request
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        req = json.loads(_read_line(sock))
        if req["op"] == "sink":
            res = _drain(sock, req["seconds"])
            sock.sendall(json.dumps(res).encode() + b"\n")
        elif req["op"] == "source":
            _pour(sock, req["seconds"])
        elif req["op"] == "echo":
            _echo(sock, req["size"])


class _Server(socketserver.ThreadingTCPServer):
    allow_reuse_address = True
    daemon_threads = True


def serve(port: int) -> None:
    """Answer ``sink``, ``source`` and ``echo`` requests on ``port`` until killed."""
    with _Server(("0.0.0.0", port), _Handler) as srv:
        sys.stdout.write("ready\n")
        sys.stdout.flush()
        srv.serve_forever()


def client(op: str, host: str, port: int, seconds: float, pings: int) -> dict:
    """``up`` (send, the server measures), ``down`` (receive and measure) or ``ping``."""
    sock = socket.create_connection((host, port), timeout=30)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        if op == "up":
            sock.sendall(json.dumps({"op": "sink", "seconds": seconds}).encode() + b"\n")
            _pour(sock, seconds)
            return json.loads(_read_line(sock))
        if op == "down":
            sock.sendall(json.dumps({"op": "source", "seconds": seconds}).encode() + b"\n")
            return _drain(sock, seconds)
        size = 64
        sock.sendall(json.dumps({"op": "echo", "size": size}).encode() + b"\n")
        msg, back, rtts = b"x" * size, bytearray(size), []
        for _ in range(pings + 5):  # the first few warm the path (ARP, caches)
            t0 = time.perf_counter()
            sock.sendall(msg)
            got = 0
            while got < size:
                got += sock.recv_into(memoryview(back)[got:])
            rtts.append(time.perf_counter() - t0)
        rtts = rtts[5:]
        return {"rtt_us": 1e6 * statistics.median(rtts), "rtt_min_us": 1e6 * min(rtts),
                "pings": len(rtts)}  # fmt: skip
    finally:
        sock.close()


# --- the orchestration (run by the study, as root) -------------------------------------------
def _start_server(prefix: list[str], port: int) -> subprocess.Popen:
    proc = subprocess.Popen(
        [*prefix, sys.executable, str(Path(__file__).resolve()), "serve", "--port", str(port)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    line = proc.stdout.readline()
    if line.strip() != "ready":
        proc.kill()
        raise RuntimeError(f"link probe server did not start: {proc.stderr.read()[-500:]}")
    return proc


def _client_cmd(prefix, op, host, port, seconds, pings) -> list[str]:
    return [*prefix, sys.executable, str(Path(__file__).resolve()), "client", "--op", op,
            "--host", host, "--port", str(port), "--seconds", str(seconds),
            "--pings", str(pings)]  # fmt: skip


def _client(prefix, op, host, port, seconds, pings) -> dict:
    proc = subprocess.run(_client_cmd(prefix, op, host, port, seconds, pings),
                          capture_output=True, text=True, timeout=60 + 2 * seconds)  # fmt: skip
    if proc.returncode != 0:
        raise RuntimeError(f"link probe {op} to {host} failed: {proc.stderr.strip()[-500:]}")
    return json.loads(proc.stdout)


def probe(tb, seconds: float = 0.5, pings: int = 200, port: int = PORT) -> dict:
    """Measure every link of the built testbed ``tb`` (see the module docstring)."""
    if not seconds > 0 or pings < 1:
        raise ValueError(f"seconds must be > 0 and pings >= 1, got {seconds}, {pings}")
    servers = [_start_server(["ip", "netns", "exec", tb.switch], port)]
    try:
        servers += [_start_server(tb.exec_prefix(i), port) for i in range(tb.workers)]
        links = []
        for i in range(tb.workers):
            pre = tb.exec_prefix(i)
            up = _client(pre, "up", tb.switch_address, port, seconds, pings)
            down = _client(pre, "down", tb.switch_address, port, seconds, pings)
            ping = _client(pre, "ping", tb.switch_address, port, seconds, pings)
            links.append({"worker": i, "up_gbps": up["gbps"], "down_gbps": down["gbps"],
                          "rtt_us": ping["rtt_us"], "rtt_min_us": ping["rtt_min_us"]})  # fmt: skip
        pair = None
        if tb.workers >= 2:
            pair = _client(tb.exec_prefix(0), "ping", tb.address(1), port, seconds, pings)
        ring = []
        if tb.workers >= 2:
            cmds = [_client_cmd(tb.exec_prefix(i), "up", tb.address((i + 1) % tb.workers), port,
                                seconds, pings) for i in range(tb.workers)]  # fmt: skip
            procs = [subprocess.Popen(c, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      text=True) for c in cmds]  # fmt: skip
            for i, p in enumerate(procs):
                out, err = p.communicate(timeout=60 + 2 * seconds)
                if p.returncode != 0:
                    raise RuntimeError(f"link probe ring stream from worker {i} failed: {err}")
                ring.append(json.loads(out)["gbps"])
    finally:
        for s in servers:
            s.kill()
            s.wait()
    return summarize(
        {
            "nominal_gbps": tb.gbps,
            "seconds": seconds,
            "pings": pings,
            "links": links,
            "pair_rtt_us": pair["rtt_us"] if pair else None,
            "ring_gbps": ring,
        }
    )


def summarize(res: dict) -> dict:
    """Add the summary numbers: slowest link alone, slowest ring receiver, one-way latency."""
    alone = [min(x["up_gbps"], x["down_gbps"]) for x in res["links"]]
    res["alone_min_gbps"] = min(alone) if alone else float("nan")
    res["ring_min_gbps"] = min(res["ring_gbps"]) if res["ring_gbps"] else res["alone_min_gbps"]
    rtt = res["pair_rtt_us"]
    if rtt is None:  # one worker: the link to the switch stands for a hop
        rtt = statistics.median(x["rtt_us"] for x in res["links"])
    res["latency_s"] = 0.5e-6 * rtt
    return res


def link_for_model(res: dict) -> tuple[float, float]:
    """``(gbps, alpha_s)`` for the performance model: the slowest ring receiver's rate (the
    all-reduce's bottleneck under its own load pattern) and the one-way pair latency."""
    return float(res["ring_min_gbps"]), float(res["latency_s"])


def _main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="linkprobe.py")
    ap.add_argument("role", choices=("serve", "client"))
    ap.add_argument("--op", choices=("up", "down", "ping"), default="ping")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=PORT)
    ap.add_argument("--seconds", type=float, default=0.5)
    ap.add_argument("--pings", type=int, default=200)
    args = ap.parse_args(argv)
    if args.role == "serve":
        serve(args.port)
        return 0
    res = client(args.op, args.host, args.port, args.seconds, args.pings)
    sys.stdout.write(json.dumps(res) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(_main())
