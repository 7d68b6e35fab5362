"""The regulariser's gradient at a small CPU point in one compiled call (:mod:`problems.glm_reg`)
gives the bits of each GLM's own ``reg_grad`` (torch's, and NumPy's), overflows, infinities and
NaN included; a GLM that writes its own ``reg_grad`` without naming it keeps its own."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from problems import glm_reg
from problems.glm import GLM
from problems.registry import PROBLEMS

pytestmark = pytest.mark.skipif(not glm_reg.available("l2"), reason="numba is not installed")

GLMS = sorted(name for name, cls in PROBLEMS.items() if isinstance(cls, type)
              and issubclass(cls, GLM))  # fmt: skip
SPECIAL = [0.0, -0.0, 1.0, -1.0, 1e-20, 1e19, -1e19, 3e38, 1e154, 1e300, -1e300, float("inf"),
           float("-inf"), float("nan")]  # fmt: skip


@pytest.mark.parametrize("name", GLMS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("lam", [0.1, 1e-3, 7.3])
def test_the_compiled_regulariser_has_the_bits_of_reg_grad(name, dtype, lam):
    cls = PROBLEMS[name]
    assert cls.KERNEL_REG in glm_reg.REGS  # every GLM of the registry names its regulariser
    gen = torch.Generator().manual_seed(5)
    x = torch.cat([torch.randn(300, generator=gen, dtype=torch.float64) * s
                   for s in (1e-3, 1.0, 30.0, 1e10)])  # fmt: skip
    x = torch.cat([x, torch.tensor(SPECIAL, dtype=torch.float64)]).to(dtype).reshape(2, -1)
    want = cls.reg_grad(x, lam)
    got = torch.from_numpy(glm_reg.reg_grad(cls.KERNEL_REG, x.numpy(), lam))
    bits = {torch.float32: torch.int32, torch.float64: torch.int64}[dtype]
    assert got.dtype == dtype and got.shape == x.shape
    assert torch.equal(got.view(bits), want.view(bits))
    with np.errstate(all="ignore"):  # and NumPy's, which the GLMs used before
        numpy_form = torch.from_numpy(cls.reg_grad(x.numpy(), lam))
    assert torch.equal(got.view(bits), numpy_form.view(bits))
    column = x.T.numpy()[:, :1]  # not contiguous: read as it is, written fresh
    assert np.array_equal(glm_reg.reg_grad(cls.KERNEL_REG, column, lam), want.T[:, :1].numpy(),
                          equal_nan=True)  # fmt: skip


def test_a_glm_with_its_own_regulariser_is_not_given_the_inherited_one():
    class Own(PROBLEMS["logreg"]):
        @staticmethod
        def reg_grad(X, lam):
            return lam * X * X

    class Named(PROBLEMS["logreg"]):
        KERNEL_REG = "nonconvex"

        @staticmethod
        def reg_grad(X, lam):
            return 2.0 * lam * X / (1.0 + X * X) ** 2

    assert PROBLEMS["logreg"].KERNEL_REG == "l2" and Own.KERNEL_REG is None
    assert Named.KERNEL_REG == "nonconvex"
    assert not glm_reg.available(Own.KERNEL_REG)


def test_a_problem_takes_the_compiled_form_and_its_gradient_is_unchanged(monkeypatch):
    from problems.registry import make_problem

    p = make_problem("logreg-nonconvex", nodes=4, dtype="float32", storage="dense")
    x = torch.linspace(-2, 3, p.d, dtype=torch.float32)
    calls = []
    real = glm_reg.reg_grad
    monkeypatch.setattr(glm_reg, "reg_grad", lambda *a: calls.append(a[0]) or real(*a))
    g = p.grad(x)
    assert calls == ["nonconvex"]
    monkeypatch.setattr(glm_reg, "available", lambda name: False)
    assert torch.equal(p.grad(x).view(torch.int32), g.view(torch.int32))


@pytest.mark.parametrize("layout", ["contiguous", "expanded", "transposed"])
def test_the_points_kernel_takes_the_compiled_form_with_the_same_bits(monkeypatch, layout):
    """A batch's gradients at R points (the lanes kernel) add the regulariser's gradient by
    one compiled call, for every layout of the points (a broadcast point gives R rows, not
    one): bit for bit the sums with torch's ``reg_grad``."""
    from problems import glm_lanes
    from problems.registry import make_problem

    p = make_problem("logreg-nonconvex", nodes=4, dtype="float64")
    if not glm_lanes.available(6, p.dtype, p.device):
        pytest.skip("numba is not installed")
    p.points_engine, p.points_threads = "lanes", None
    gen = torch.Generator().manual_seed(2)
    P = {
        "contiguous": torch.randn(6, p.d, generator=gen, dtype=p.dtype) * 3,
        "expanded": (torch.randn(p.d, generator=gen, dtype=p.dtype) * 3)[None].expand(6, -1),
        "transposed": (torch.randn(p.d, 6, generator=gen, dtype=p.dtype) * 3).T,
    }[layout]
    calls = []
    real = glm_reg.reg_grad
    monkeypatch.setattr(glm_reg, "reg_grad", lambda *a: calls.append(a[1].shape) or real(*a))
    G = p.grad_points(P)
    assert calls == [(6, p.d)]
    monkeypatch.setattr(glm_reg, "available", lambda name: False)
    want = p.grad_points(P.contiguous())
    assert len(calls) == 1  # torch's form this time
    assert torch.equal(G.view(torch.int64), want.view(torch.int64))
    assert not torch.equal(G[0], G[1]) or layout == "expanded"
