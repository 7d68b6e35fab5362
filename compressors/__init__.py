"""Compressors: ``(m, d)`` rows to a payload with exact bits and back, with declared constants.

``parse_spec("topk:k=10")`` builds one from its command-line spec; ``COMPRESSORS`` is the
registry. ``python -m compressors --dim 1000`` prints every compressor's class, constant and
bits. Non-finite and extreme values follow one policy, stated in :mod:`compressors.nonfinite`:
finite rows decode to finite rows, rows with a NaN or inf entry to non-finite rows.
"""

import streams  # noqa: F401  (first: sets the OpenMP spin policy before torch loads)
from compressors.base import Compressor, Packet
from compressors.blockwise import Blockwise
from compressors.registry import COMPRESSORS, parse_spec, spec_of

__all__ = ["COMPRESSORS", "Blockwise", "Compressor", "Packet", "parse_spec", "spec_of"]
