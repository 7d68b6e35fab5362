"""A fork server for a sweep's runs: one process imports the runner once, then forks a child
per run that starts with everything imported.

A run of ``python -m algorithms.run`` spends about 1.3 s of this machine's time importing torch,
numba, SciPy and the packages before it reads its first flag; on the LIBSVM sets a 2000-step run
of EF21 takes 0.5-4 s, so in a grid of short runs the imports would be a third of the time or
more. ``python -m experiments.zygote`` imports the runner, prints ``ready`` and then serves one
request at a time, as JSON lines on its stdin::

    {"argv": ["ef21", "--iters", "10", ...], "stderr": "/path/to/file"}

It forks and answers ``{"pid": P}`` (the child's process id, so that the sweep can pass a
signal on to it); the child points stdin and stdout at ``/dev/null`` and stderr at the given
file, runs ``algorithms.run.run(argv)`` exactly as ``python -m algorithms.run ARGV`` would (the
same logging set-up, the same exit status) and exits; the server waits for it and answers
``{"status": N}`` (N < 0: killed by signal -N). The child is a fresh copy of a process that has
only imported modules: it has no state from other runs, and the same seed gives the same history
as a run in its own process.

Fork safety: the server never runs a torch operation or a parallel kernel, so it has no threads
to lose in the fork (torch's OpenMP pool and numba's start at their first parallel call, in the
child). It is started with the runs' environment (``OMP_NUM_THREADS=1`` from the sweep), which
torch reads at import. The children stay in the sweep's process group, so signalling the group
stops them as it stops the sweep. The server itself ignores SIGINT and SIGTERM (a Ctrl-C or a
scheduler's SIGTERM reaches the whole group): it waits for its child, which stops after its
step with a checkpoint, and reports the child's exit status, and it ends when its stdin closes
(the sweep is done, or gone). Both signals are blocked across the fork, so the child, which
inherits the ignored handlers, loses none: it installs the start-up guard of a command being
started (a signal then exits 130 or 143 with one line, nothing run), then unblocks them.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import sys

from streams import interrupts

__all__ = ["serve"]

READY = "ready"


def _child(runner, req: dict) -> None:
    code = 70
    try:
        # The signals are blocked since the fork: one sent before the unblock below (the sweep
        # may pass its signal on as soon as it reads the pid) waits, and then stops the child
        # as the start-up guard of ``python -m algorithms.run`` would (exit 130 or 143).
        interrupts.hold()
        null = os.open(os.devnull, os.O_RDWR)
        err = os.open(req["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(null, 0)
        os.dup2(null, 1)
        os.dup2(err, 2)
        logging.basicConfig(level=logging.WARNING)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, interrupts.SIGNALS)
        try:
            code = runner.run(list(req["argv"]))
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except BaseException:  # noqa: BLE001 - reported like an uncaught error in a process
        import traceback

        traceback.print_exc()
        code = 1
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        os._exit(code)


def _preload() -> None:
    """What every run would load on its own: the modules the runner imports when it builds a
    run, and numba's compiler context (0.3 s on the first compiled call), started by one
    serial kernel on numpy arrays: no torch operation and no parallel kernel, so no thread."""
    import importlib

    for name in ("algorithms.registry", "compressors", "problems.registry", "problems.solver"):
        importlib.import_module(name)
    from streams import compiled

    if compiled.ENABLED:
        import numpy as np

        one = np.zeros(1, dtype=np.uint64)
        compiled._derive(one, one, np.empty_like(one))


def serve(inp=None, out=None) -> int:
    """Serve requests from ``inp`` (default stdin) until it ends; answers go to ``out``."""
    inp = sys.stdin if inp is None else inp
    out = sys.stdout if out is None else out
    # The child's status says what a signal did; the server ends with its stdin.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    import algorithms.run as runner

    _preload()
    out.write(READY + "\n")
    out.flush()
    for line in inp:
        if not line.strip():
            continue
        req = json.loads(line)
        # Blocked across the fork: the child inherits the ignored handlers above until it
        # installs its own, and a signal ignored then would be lost (the run would go on).
        signal.pthread_sigmask(signal.SIG_BLOCK, interrupts.SIGNALS)
        pid = os.fork()
        if pid == 0:
            _child(runner, req)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, interrupts.SIGNALS)
        out.write(json.dumps({"pid": pid}) + "\n")
        out.flush()
        _, status = os.waitpid(pid, 0)
        out.write(json.dumps({"status": os.waitstatus_to_exitcode(status)}) + "\n")
        out.flush()
    return 0


if __name__ == "__main__":
    status = serve()
    sys.stdout.flush()
    sys.stderr.flush()
    # no interpreter teardown: with torch and numba loaded it takes 0.5 s, and the sweep waits
    # for its servers to end; every child has been waited for and every answer flushed
    os._exit(status)
