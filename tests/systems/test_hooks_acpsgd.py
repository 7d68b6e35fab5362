"""ACP-SGD hook: on a real 2-process DDP run, the averaged gradients equal a single-process
re-computation of the alternating P/Q steps on the stacked per-rank gradients, the error carries
the residual, and the bytes are those of the factor sent each step."""

from __future__ import annotations

import pytest
import torch

from systems.hooks import make_hook
from systems.hooks.acpsgd import ACPSGD
from tests.systems.ddp_harness import run_ddp, tiny_model

STEPS = 6


def record_steps(rank, world, spec, steps, lr=0.1, bucket_cap_mb=25):
    """SGD steps of the tiny model in DDP with the hook ``spec``, recording per step this rank's
    own gradient (from a plain copy of the model at the same parameters), the averaged gradient
    DDP hands back, and, per bucket, the positions of its parameters in ``parameters()``."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    model = DDP(tiny_model(0), bucket_cap_mb=bucket_cap_mb)
    hook = make_hook(spec).register(model)
    params = list(model.module.parameters())
    layouts: list[list[tuple[int, list[int]]]] = []
    reduce = hook.reduce

    def spy(bucket):
        pos = [next(i for i, p in enumerate(params) if p is q) for q in bucket.parameters()]
        layouts[-1].append((bucket.index(), pos))
        return reduce(bucket)

    hook.reduce = spy
    plain = tiny_model(0)
    g = torch.Generator().manual_seed(1000 + rank)
    X, y = torch.randn(32, 12, generator=g), torch.randint(0, 4, (32,), generator=g)
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    local, mean, sent = [], [], []
    for _ in range(steps):
        plain.load_state_dict(model.module.state_dict())
        loss = torch.nn.functional.cross_entropy(plain(X), y)
        local.append([t.detach() for t in torch.autograd.grad(loss, list(plain.parameters()))])
        layouts.append([])
        before = hook.stats.sent_bytes
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(X), y).backward()
        mean.append([p.grad.clone() for p in params])
        sent.append(hook.stats.sent_bytes - before)
        opt.step()
    return {"local": local, "mean": mean, "sent": sent, "layouts": layouts}


def record_many(rank, world, runs, steps):
    """:func:`record_steps` for each ``(spec, bucket_cap_mb)`` of ``runs``, in one process group."""
    return [record_steps(rank, world, spec, steps, bucket_cap_mb=cap) for spec, cap in runs]


def _reference(local, layouts, rank, start_iter, seed, ef=True):
    """ACP-SGD on stacked gradients ``local[t][worker][param]``; one state per bucket index
    (``ef=False``: the error is dropped, to show the comparison sees it).

    Returns the averaged gradient per step (a list over params) and the bytes per step."""
    W = len(local[0])
    gen = torch.Generator().manual_seed(seed)
    state: dict[int, dict[int, list[torch.Tensor]]] = {}
    out, sent = [], []
    for t, grads in enumerate(local):
        mean = [torch.stack([grads[w][j] for w in range(W)]).mean(0) for j in range(len(grads[0]))]
        if t < start_iter:
            out.append(mean)
            sent.append(4 * sum(x.numel() for x in mean))
            continue
        compute_p = (t - start_iter) % 2 == 0
        nbytes = 0
        for b, pos in layouts[t]:
            for j in pos:
                if grads[0][j].dim() < 2:
                    nbytes += 4 * grads[0][j].numel()
                    continue
                M = torch.stack([grads[w][j].reshape(grads[w][j].shape[0], -1) for w in range(W)])
                n, m = M.shape[1:]
                r = min(rank, n, m)
                st = state.setdefault(b, {})
                if j not in st:
                    st[j] = [
                        torch.zeros_like(M),
                        None,
                        torch.randn(m, r, generator=gen).to(M.dtype),
                    ]
                E, P, Q = st[j]
                A = M + E
                if compute_p:
                    Q = torch.linalg.qr(Q).Q
                    P_i = A @ Q  # (W, n, r)
                    E = A - P_i @ Q.T
                    P = P_i.mean(0)
                    nbytes += 4 * n * r
                else:
                    P = torch.linalg.qr(P).Q
                    Q_i = A.transpose(1, 2) @ P  # (W, m, r)
                    E = A - P @ Q_i.transpose(1, 2)
                    Q = Q_i.mean(0)
                    nbytes += 4 * m * r
                st[j] = [E if ef else torch.zeros_like(E), P, Q]
                mean[j] = (P @ Q.T).view_as(mean[j])
        out.append(mean)
        sent.append(nbytes)
    return out, sent


@pytest.mark.dist
def test_acpsgd_equals_reference_and_counts_bytes():
    # one bucket, and one bucket per parameter (state and initial Q per bucket). Not rank 4:
    # the 4x16 last-layer gradient has rank <= 3 (softmax gradients sum to 0 over classes), so
    # a 4th column of Q would be QR's rounding noise and no two computations would agree.
    runs = [("acp-sgd:rank=2,start_iter=2,seed=3", 25), ("acp-sgd:rank=3,start_iter=3", 1e-5)]
    results = run_ddp(2, record_many, runs, STEPS)
    for c, (rank, start, seed) in enumerate(((2, 2, 3), (3, 3, 0))):
        res = [results[0][c], results[1][c]]
        local = [[res[w]["local"][t] for w in range(2)] for t in range(STEPS)]
        layouts = res[0]["layouts"]
        assert layouts == res[1]["layouts"]
        assert {len(lay) for lay in layouts[1:]} == {1 if c == 0 else 4}
        want, want_bytes = _reference(local, layouts, rank=rank, start_iter=start, seed=seed)
        for w in range(2):
            for t in range(STEPS):
                for a, b in zip(res[w]["mean"][t], want[t], strict=True):
                    assert torch.allclose(a, b, rtol=1e-4, atol=1e-6), (c, w, t)
            assert res[w]["sent"] == want_bytes
        # the comparison is sharp: dropping the error, or another initial Q, changes the result
        no_ef, _ = _reference(local, layouts, rank=rank, start_iter=start, seed=seed, ef=False)
        assert not torch.allclose(no_ef[start + 1][0], want[start + 1][0], atol=1e-4)
        other, _ = _reference(local, layouts, rank=rank, start_iter=start, seed=seed + 1)
        assert not torch.allclose(other[start][0], want[start][0], atol=1e-4)
    # rank 2: P-steps send 16*2 + 4*2 factor entries, Q-steps 12*2 + 16*2, the biases 20 each
    # step; rank 3: P 16*3 + 4*3, Q 12*3 + 16*3
    assert results[0][0]["sent"] == [4 * 276] * 2 + [4 * (40 + 20), 4 * (56 + 20)] * 2
    assert results[0][1]["sent"] == [4 * 276] * 3 + [4 * (60 + 20), 4 * (84 + 20), 4 * 80]


def test_acpsgd_defaults_and_refusals():
    hook = ACPSGD()
    assert (hook.rank_r, hook.start_iter) == (4, 2)
    assert make_hook("acp-sgd:rank=8").describe()["params"]["rank"] == 8
    with pytest.raises(ValueError, match="start_iter must be an integer >= 2"):
        ACPSGD(start_iter=1)
    with pytest.raises(ValueError, match="rank must be an integer >= 1"):
        ACPSGD(rank=0)
