"""MergeComp-style layer fusion: the gradient in a chosen number of DDP buckets.

MergeComp (Wang, Wu & Ng 2021, arXiv 2103.15195; code: Crystal-wxy/mergeComp, option
``--fusion-num``) observes that compressing every layer's tensor on its own pays each
compressor's fixed cost (kernel launches, a top-k selection, a norm) once per tensor, and that
merging the tensors into a few groups amortises it while keeping some overlap of communication
with the backward pass. ``--fusion-num Y`` partitions the model into ``Y`` groups; ``0`` is
layer-wise compression. MergeComp's scheduler then searches the partition points; that search
was not read, and is not reproduced here: the groups below are DDP buckets of about equal bytes
(a reconstruction of the fixed-``Y`` setting).

Under DDP a hook sees one bucket at a time, so a fusion group is a bucket, and the number of
buckets is set through ``bucket_cap_mb``. DDP (torch 2.13) builds its buckets with
``torch.distributed._compute_bucket_assignment_by_size``: the tensors in order, a bucket closed
as soon as its bytes reach the cap (so a bucket may exceed it by its last tensor), one bucket per
dtype and device at a time. Until the first backward pass all parameters share one bucket; DDP
then rebuilds them in the order the gradients became ready, which for a feed-forward model is
the reverse parameter order. :func:`fusion_bucket_cap_mb` runs that same assignment on the
reversed parameters and returns a cap giving at most ``groups`` buckets, ``groups`` itself
whenever a cap can give it, split as evenly as a cap allows. With an explicit cap DDP also uses
it for the first bucket, so no separate small first bucket appears.
"""

from __future__ import annotations

import itertools

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from comm.hooks import CommHook

__all__ = ["bucket_count", "fusion_bucket_cap_mb", "wrap_ddp"]

_MB = 1024 * 1024


def _grad_params(model: torch.nn.Module) -> list[torch.Tensor]:
    return [p for p in model.parameters() if p.requires_grad]


def _buckets(params: list[torch.Tensor], cap_bytes: int) -> list[list[int]]:
    buckets, _ = dist._compute_bucket_assignment_by_size(params, [int(cap_bytes)])
    return buckets


def bucket_count(model: torch.nn.Module, cap_bytes: int) -> int:
    """How many buckets DDP's rebuild forms from ``model``'s parameters (taken in reverse
    order) under a cap of ``cap_bytes`` bytes."""
    return len(_buckets(list(reversed(_grad_params(model))), cap_bytes))


def fusion_bucket_cap_mb(model: torch.nn.Module, groups: int) -> float:
    """The ``bucket_cap_mb`` that splits ``model``'s gradient into about ``groups`` buckets.

    Among the caps, the one whose rebuilt assignment has the most buckets not above
    ``groups``, and among those the most even split (the smallest largest bucket, in bytes),
    and then the smallest cap. The count falls as the cap grows, so the search starts at the
    smallest cap giving at most ``groups`` buckets (a bisection) and walks up through the caps
    at which the assignment can change (one byte above the sum of a run of consecutive
    tensors), until the count drops or the cap exceeds the best largest bucket (a closed bucket
    holds at least the cap).

    Args:
        model: the module DDP will wrap (its parameters that require a gradient count).
        groups: the number of fusion groups, at least 1 and at most the number of tensors;
            ``0`` means one bucket per tensor (MergeComp's layer-wise ``--fusion-num 0``).

    Returns:
        The cap in MiB, a whole number of bytes (DDP multiplies it by ``2**20``).
    """
    params = _grad_params(model)
    if not params:
        raise ValueError("fusion: the model has no parameter that requires a gradient")
    if not isinstance(groups, int) or isinstance(groups, bool) or not 0 <= groups <= len(params):
        raise ValueError(
            f"fusion: groups must be an integer in [0, {len(params)}] (0: one bucket per "
            f"tensor; the model has {len(params)} tensors), got {groups!r}"
        )
    if groups == 0:
        return 1 / _MB  # one byte: every tensor closes its own bucket
    order = list(reversed(params))
    sizes = [p.numel() * p.element_size() for p in order]
    lo, hi = 1, sum(sizes)
    while lo < hi:
        mid = (lo + hi) // 2
        if len(_buckets(order, mid)) <= groups:
            hi = mid
        else:
            lo = mid + 1
    target = len(_buckets(order, lo))
    pre = [0, *itertools.accumulate(sizes)]
    runs = {pre[j] - pre[i] for i in range(len(sizes)) for j in range(i + 1, len(sizes) + 1)}
    best_cap, best_max = lo, None
    for cap in [lo, *sorted(r + 1 for r in runs if r + 1 > lo)]:
        if best_max is not None and cap > best_max:
            break
        buckets = _buckets(order, cap)
        if len(buckets) < target:
            break
        largest = max(sum(sizes[i] for i in b) for b in buckets)
        if best_max is None or largest < best_max:
            best_cap, best_max = cap, largest
    return best_cap / _MB


def wrap_ddp(
    model: torch.nn.Module,
    hook_spec: str | CommHook | None,
    groups: int | None = None,
    **ddp_kwargs,
) -> tuple[DDP, CommHook | None]:
    """``model`` in ``DistributedDataParallel`` with a hook, in ``groups`` fusion buckets.

    Args:
        model: the module (already on its device).
        hook_spec: a hook spec for :func:`systems.hooks.registry.make_hook`, a hook instance, or
            ``None`` for DDP's own all-reduce.
        groups: the number of fusion groups (see :func:`fusion_bucket_cap_mb`); ``None`` keeps
            DDP's bucketing (``bucket_cap_mb`` from ``ddp_kwargs``, else its 25 MiB default).
        ddp_kwargs: passed to ``DistributedDataParallel``.

    Returns:
        ``(ddp_model, hook)``; ``hook`` is ``None`` when ``hook_spec`` is.
    """
    if groups is not None:
        if "bucket_cap_mb" in ddp_kwargs:
            raise ValueError("fusion: give groups or bucket_cap_mb, not both")
        ddp_kwargs["bucket_cap_mb"] = fusion_bucket_cap_mb(model, groups)
    ddp_model = DDP(model, **ddp_kwargs)
    if hook_spec is None:
        return ddp_model, None
    if isinstance(hook_spec, CommHook):
        hook = hook_spec
    else:
        from systems.hooks.registry import make_hook

        hook = make_hook(hook_spec, ddp_kwargs.get("process_group"))
    return ddp_model, hook.register(ddp_model)
