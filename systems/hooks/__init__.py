"""Gradient compressors as PyTorch DDP communication hooks.

Each hook is a :class:`~comm.hooks.CommHook`: constructed with its parameters, attached
with :meth:`~comm.hooks.CommHook.register` to a ``DistributedDataParallel`` model, it
reduces each gradient bucket across the process group and returns the averaged gradient. It
declares whether its payload is summed by all-reduce (``allreducible``) or must be all-gathered,
counts the bytes it hands to collectives and times its local encode/decode work
(:class:`~comm.hooks.HookStats`). Hooks are made by name from
:func:`systems.hooks.registry.make_hook` (``python -m systems.hooks --list``).
"""

from comm.hooks import CommHook, HookStats
from systems.hooks.registry import HOOKS, hook_names, make_hook

__all__ = ["HOOKS", "CommHook", "HookStats", "hook_names", "make_hook"]
