"""One rank of the DDP comm-hook tests: ``torchrun --nproc_per_node=N ddp_worker.py OUT``.

Trains a small float64 MLP for ``STEPS`` SGD steps under several hook configurations (each
rank has its own data) and saves, per configuration, the final parameters, every call of the
hook (bucket index, the rank's gradient buffer, the returned average, the segment sizes) and
the state's counters to ``OUT/rank{r}.pt``. The test module checks them against references.
"""

from __future__ import annotations

import os
import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from comm.ddp_hook import CompressionState, compression_hook, register  # noqa: E402

STEPS = 5
LR = 0.1
BUCKET_CAP_MB = 0.001  # about 130 float64 values per bucket: several buckets
# name -> (compressor, error_feedback, seed, layerwise, via register(), gradient_as_bucket_view)
SCENARIOS = {
    "plain": None,
    "identity": ("identity", "none", 0, False, True, False),
    "none_topk": ("topk:k=3", "none", 0, False, False, False),
    "none_randk_shared": ("randk:k=5,shared=true", "none", 11, False, False, False),
    "ef21_topk": ("topk:k=3", "ef21", 0, False, False, False),
    "ef21_topk_layer": ("topk:ratio=0.1", "ef21", 0, True, False, False),
    "ef14_randk": ("randk:k=4", "ef14", 7, False, False, False),
    "ef14_randk_layer": ("randk:ratio=0.2", "ef14", 7, True, False, False),
    "ef21_randk_view": ("randk:k=6", "ef21", 3, False, False, True),
}


def make_model() -> torch.nn.Module:
    model = torch.nn.Sequential(
        torch.nn.Linear(6, 16), torch.nn.Tanh(), torch.nn.Linear(16, 8), torch.nn.Tanh(),
        torch.nn.Linear(8, 1),
    ).double()  # fmt: skip
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(0.5 * torch.randn(p.shape, generator=gen, dtype=torch.float64))
    return model


def run(name: str, rank: int) -> dict:
    spec = SCENARIOS[name]
    view = spec is not None and spec[5]
    model = DistributedDataParallel(
        make_model(), bucket_cap_mb=BUCKET_CAP_MB, gradient_as_bucket_view=view
    )
    calls: list[dict] = []
    pidx = {p.data_ptr(): j for j, p in enumerate(model.parameters())}
    state = None
    if spec is not None:
        comp, ef, seed, layerwise, via_register, _ = spec
        if via_register:
            state = register(model, comp, error_feedback=ef, seed=seed, layerwise=layerwise)
        else:
            state = CompressionState(comp, error_feedback=ef, seed=seed, layerwise=layerwise)

            def recorder(st, bucket):
                grad = bucket.buffer().clone()
                fut = compression_hook(st, bucket)
                calls.append({
                    "b": bucket.index(), "grad": grad, "out": fut.value().clone(),
                    "sizes": st.buckets[bucket.index()].sizes,
                    "params": [pidx[p.data_ptr()] for p in bucket.parameters()],
                })  # fmt: skip
                return fut

            model.register_comm_hook(state, recorder)
    gen = torch.Generator().manual_seed(1000 + rank)
    x = torch.randn(32, 6, generator=gen, dtype=torch.float64)
    y = torch.randn(32, 1, generator=gen, dtype=torch.float64)
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    for _ in range(STEPS):
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
    out = {"params": [p.detach().clone() for p in model.parameters()], "calls": calls}
    if state is not None:
        out.update(bits=state.bits_up(), wire=state.wire_bytes(), steps=state.steps(),
                   rebuilds=state.rebuilds)  # fmt: skip
    return out


def main() -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    names = sys.argv[2].split(",") if len(sys.argv) > 2 else list(SCENARIOS)
    results = {name: run(name, rank) for name in names}
    torch.save(results, os.path.join(sys.argv[1], f"rank{rank}.pt"))
    dist.barrier()
    dist.destroy_process_group()
    # With gloo, a process that has run any Python comm hook (PyTorch's own allreduce_hook
    # too) sometimes aborts in C++ teardown at interpreter exit ("terminate called without an
    # active exception"), after all work is done; leave without running that teardown.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
