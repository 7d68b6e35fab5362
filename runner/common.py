"""What every part of the runner shares: exit statuses, history columns, the bad-input error."""

from __future__ import annotations

# A run stopped by a signal exits 128 + the signal's number, as a shell reports it.
from streams.interrupts import EXIT_SIGNAL  # noqa: F401  (re-exported)

EXIT_OK, EXIT_BAD_INPUT, EXIT_DIVERGED, EXIT_COMM = 0, 2, 3, 4
TIME_COLUMNS = ["wall_s", "t_compute", "t_encode", "t_communicate", "t_decode"]
HISTORY_COLUMNS = [
    "iter", "bits_up", "bits_down", "f", "f_gap", "grad_norm_sq", "wall_s",
    "bits_up_max", "bits_down_max", "wire_bytes_up", "test_loss", "test_acc",
    "t_compute", "t_encode", "t_communicate", "t_decode",
]  # fmt: skip
# What --resume lets a continued run change; everything else comes from the run's config.json.
RESUME_OVERRIDES = ("iters", "checkpoint_every", "quiet", "timeout", "backend", "max_bits", "tol")


class BadInput(ValueError):
    """A user error: reported on stderr with exit status 2."""


def fmt(v) -> str:
    """A history cell: empty for None, ``repr`` for floats (round-trips exactly)."""
    if v is None:
        return ""
    if isinstance(v, float):
        return repr(v)
    return str(v)
