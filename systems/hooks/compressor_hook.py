"""Any compzoo compressor as a named DDP hook of the study: ``comp:SPEC[@EF]``.

``comp:topk:ratio=0.01`` (Top-K of each bucket with classical error feedback),
``comp:qsgd:levels=8@none``, ``comp:topk:ratio=0.01@ef21``. Everything after ``comp:`` is a
compressor spec of :mod:`compressors.registry` (``parse_spec``), optionally followed by the error
feedback: ``@ef14`` (the default), ``@ef21`` or ``@none``. ``comp`` alone is
``comp:topk:ratio=0.01@ef14``, a choice of this library (1% Top-K with error feedback is the
usual sparsification baseline, e.g. Stich, Cordonnier & Jaggi 2018, arXiv 1809.07599), not a
paper's default.

The hook is :class:`comm.ddp_hook.CompressorHook` (the comm layer's, on the one hook framework
of :mod:`comm.hooks`; its docstring describes the rounds, the collectives and the statistics);
this module registers it under its name.
"""

from comm.ddp_hook import CompressorHook, split_spec
from systems.hooks.registry import register

__all__ = ["CompressorHook", "split_spec"]

register(CompressorHook)
