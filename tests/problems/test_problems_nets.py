"""Deep nets: batched (vmap) gradients against a plain autograd reference, FD and the fallback."""

from __future__ import annotations

import copy
import pickle

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from problems import make_problem
from streams import Streams


def reference(p, x):
    """A real module (not functional_call, not vmap) holding the flat parameters ``x``."""
    model = copy.deepcopy(p.model).to_empty(device="cpu").to(x.dtype)
    torch.nn.utils.vector_to_parameters(x, model.parameters())
    return model


def ref_grad(p, x, X, y, lam=0.0):
    model = reference(p, x.detach())
    loss = F.cross_entropy(model(X), y) + 0.5 * lam * sum((q**2).sum() for q in model.parameters())
    grads = torch.autograd.grad(loss, list(model.parameters()))
    return torch.cat([g.reshape(-1) for g in grads]), loss.detach()


def node_rows(p, j):
    start, cnt = int(p.offsets[j]), int(p.counts[j])
    return p._X[start : start + cnt], p._y[start : start + cnt]


@pytest.mark.parametrize("name", ["mlp", "cnn"])
def test_grads_match_autograd_and_fd_float64(name):
    p = make_problem(name, nodes=3, samples=91, chunk=16, dtype="float64", lam=0.01, seed=1)
    assert p.counts.tolist() == [30, 30, 31]
    gen = torch.Generator().manual_seed(0)
    X = p.x0 + 0.05 * torch.randn(3, p.d, dtype=torch.float64, generator=gen)
    batch = p.sample(Streams.for_nodes(2, range(3)), 5)
    G_b, G = p.grad(X, batch), p.grad(X)
    losses = p.node_loss(X)
    for j in range(3):
        g, _ = ref_grad(p, X[j], p._X[batch.idx[j]], p._y[batch.idx[j]], lam=0.01)
        torch.testing.assert_close(G_b[j], g, rtol=1e-10, atol=1e-12)
        g, loss = ref_grad(p, X[j], *node_rows(p, j), lam=0.01)
        torch.testing.assert_close(G[j], g, rtol=1e-10, atol=1e-12)
        torch.testing.assert_close(losses[j], loss, rtol=1e-12, atol=1e-13)
    V = torch.randn(3, p.d, dtype=torch.float64, generator=gen)
    h = 1e-6
    fd = (p.node_loss(X + h * V) - p.node_loss(X - h * V)) / (2 * h)
    torch.testing.assert_close((G * V).sum(1), fd, rtol=1e-6, atol=1e-8)
    x = X[0]
    torch.testing.assert_close(p.loss(x), p.node_loss(x).mean(), rtol=1e-12, atol=1e-13)
    torch.testing.assert_close(p.full_grad(x), p.grad(x).mean(0), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("name", ["mlp", "cnn"])
def test_batched_equals_sequential_float32(name):
    p = make_problem(name, nodes=4, split="dirichlet:1.0", samples=120, chunk=32, seed=3)
    assert p.dtype == torch.float32 and len(set(p.counts.tolist())) > 1
    gen = torch.Generator().manual_seed(1)
    X = p.x0 + 0.1 * torch.randn(4, p.d, generator=gen)
    batch = p.sample(7, 8)
    seq = make_problem(
        name, nodes=4, split="dirichlet:1.0", samples=120, chunk=32, seed=3, batched=False
    )
    torch.testing.assert_close(p.grad(X, batch), seq.grad(X, batch), rtol=0, atol=1e-5)
    torch.testing.assert_close(p.grad(X), seq.grad(X), rtol=0, atol=1e-5)
    torch.testing.assert_close(p.node_loss(X), seq.node_loss(X), rtol=0, atol=1e-5)


def test_resnet18_shapes_and_batched_vs_sequential_float32():
    p = make_problem("resnet18", nodes=2, samples=8, test_samples=4, seed=0)
    assert p.d == 11_173_962  # the CIFAR ResNet-18 with 10 classes
    batch = p.sample(0, 1)
    X = p.x0.expand(2, -1)
    G = p.grad(X, batch)
    assert G.shape == (2, p.d) and G.dtype == torch.float32 and torch.isfinite(G).all()
    p.batched = False
    S = p.grad(X, batch)
    # float32 rounding differs between the grouped (vmapped) and plain convolutions, and a
    # ReLU input within ~1e-7 of zero can flip; the float64 test below checks exactness.
    close = (G - S).abs() <= 1e-5 + 1e-5 * S.abs()
    assert close.float().mean() > 0.999
    assert float((G - S).norm() / S.norm()) < 1e-2


@pytest.mark.slow
def test_resnet18_batched_equals_sequential_float64_and_autograd():
    p = make_problem("resnet18", nodes=2, samples=8, test_samples=4, seed=0, dtype="float64")
    batch = p.sample(0, 2)
    X = p.x0.expand(2, -1)
    G = p.grad(X, batch)
    p.batched = False
    torch.testing.assert_close(G, p.grad(X, batch), rtol=1e-10, atol=1e-12)
    g, _ = ref_grad(p, X[1], p._X[batch.idx[1]], p._y[batch.idx[1]])
    torch.testing.assert_close(G[1], g, rtol=1e-10, atol=1e-12)
    V = torch.randn(2, p.d, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    V /= V.norm(dim=1, keepdim=True)
    h = 1e-7  # small: with ~1e7 ReLU inputs, a larger step crosses kinks
    fd = (p.node_loss(X + h * V) - p.node_loss(X - h * V)) / (2 * h)
    torch.testing.assert_close((p.grad(X) * V).sum(1), fd, rtol=1e-5, atol=1e-8)


def test_evaluate_reports_held_out_metrics():
    p = make_problem("mlp", nodes=2, dtype="float64", seed=0)
    out = p.evaluate(p.x0)
    assert set(out) == {"loss", "acc", "grad_norm_sq"} and 0 <= out["acc"] <= 1
    g, loss = ref_grad(p, p.x0, p._X_test, p._y_test)
    assert out["loss"] == pytest.approx(float(loss), rel=1e-12)
    assert out["grad_norm_sq"] == pytest.approx(float(g @ g), rel=1e-10)
    model = reference(p, p.x0)
    acc = float((model(p._X_test).argmax(1) == p._y_test).double().mean())
    assert out["acc"] == pytest.approx(acc)
    assert p._X_test.shape[0] == round(0.2 * 1797)


def test_init_is_seeded_and_pytorch_like():
    a = make_problem("cnn", nodes=2, seed=4).x0
    assert torch.equal(a, make_problem("cnn", nodes=2, seed=4).x0)
    assert not torch.equal(a, make_problem("cnn", nodes=2, seed=5).x0)
    w = a[: 16 * 9]  # first conv weight: U(-1/3, 1/3), fan_in = 9
    assert w.abs().max() <= 1 / 3 and w.abs().max() > 0.3


def test_local_and_sampling():
    p = make_problem("mlp", nodes=4, samples=80, seed=0)
    X = p.x0.expand(4, -1).contiguous()
    q = p.local([2])
    batch = p.sample(Streams.for_nodes(9, range(4)), 3)
    qb = q.sample(Streams.for_nodes(9, [2]), 3)
    assert torch.equal(qb.idx[0], batch.idx[2])
    torch.testing.assert_close(q.grad(X[[2]], qb), p.grad(X, batch)[[2]], rtol=0, atol=1e-6)
    torch.testing.assert_close(q.grad(X[[2]]), p.grad(X)[[2]], rtol=0, atol=1e-6)


def write_cifar(root, per_batch=4):
    rng = np.random.default_rng(0)
    for name in [f"data_batch_{k}" for k in range(1, 6)] + ["test_batch"]:
        data = rng.integers(0, 256, (per_batch, 3072), dtype=np.uint8)
        with open(root / name, "wb") as fh:
            pickle.dump({b"data": data, b"labels": list(rng.integers(0, 10, per_batch))}, fh)


def test_cifar10_path(tmp_path):
    write_cifar(tmp_path)
    p = make_problem("cnn", dataset=f"cifar10:{tmp_path}", nodes=4, seed=0)  # cheap net
    assert p.counts.tolist() == [5, 5, 5, 5] and p._X.shape == (20, 3, 32, 32)
    assert p._X_test.shape == (4, 3, 32, 32) and p.classes == 10
    with open(tmp_path / "data_batch_1", "rb") as fh:
        first = pickle.load(fh)[b"data"][0].reshape(3, 32, 32) / 255.0
    mean, std = np.array([0.4914, 0.4822, 0.4465]), np.array([0.2470, 0.2435, 0.2616])
    expect = (first - mean[:, None, None]) / std[:, None, None]
    np.testing.assert_allclose(p._X[0].numpy(), expect, rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="resnet18: CIFAR-10 batches not found under"):
        make_problem("resnet18", dataset=f"cifar10:{tmp_path / 'none'}")
    (tmp_path / "data_batch_3").write_bytes(b"not a pickle")
    with pytest.raises(ValueError, match="malformed CIFAR-10 batch '.*data_batch_3'"):
        make_problem("resnet18", dataset=f"cifar10:{tmp_path}")


@pytest.mark.parametrize(
    ("name", "knobs", "match"),
    [
        ("cnn", {"dataset": "wine"}, "cnn: needs square images"),
        ("resnet18", {"dataset": "digits"}, r"resnet18: needs 3x32x32 images, got \(1, 8, 8\)"),
        ("mlp", {"hidden": 0}, "hidden must be a positive integer, got 0"),
        ("mlp", {"chunk": 0}, "chunk must be a positive integer, got 0"),
        ("mlp", {"holdout": 1.5}, "holdout must be in"),
        ("mlp", {"samples": -1}, "samples must be an integer >= 0, got -1"),
        ("mlp", {"dataset": "cifar100"}, "unknown dataset 'cifar100'"),
        ("mlp", {"lam": -0.1}, "lambda must be a finite number >= 0, got -0.1"),
        ("mlp", {"nodes": 2000}, "mlp: 2000 nodes but the data has only 1438 samples"),
    ],
)
def test_net_bad_inputs(name, knobs, match):
    with pytest.raises(ValueError, match=match):
        make_problem(name, **knobs)
