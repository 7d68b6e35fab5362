"""``python -m problems.warm``: it asks for every kind of gradient on every compiled engine, in
both dtypes, so that the kernels a run calls are compiled (or loaded from numba's cache) before
the run; and it says so."""

from __future__ import annotations

import numba
import pytest
import torch

from problems import glm_kernels, glm_lanes, glm_lanes_kernels, warm
from problems.logreg_nonconvex import LogRegNonconvex


def _dtypes(dispatcher) -> set:
    """The float dtypes of the arrays among each compiled signature's arguments."""
    out = set()
    for sig in dispatcher.overloads:
        out |= {a.dtype for a in sig if isinstance(a, numba.types.Array)
                and isinstance(a.dtype, numba.types.Float)}  # fmt: skip
    return out


def test_every_case_runs_every_kind_of_call(monkeypatch, capsys):
    calls = []
    for name in ("grad", "grad_diff", "loss", "node_loss", "grad_points", "loss_grad_points"):
        original = getattr(LogRegNonconvex, name)

        def spy(self, *args, _name=name, _f=original, **kw):
            calls.append((self.engine.split("/")[0], self.dtype, _name))
            return _f(self, *args, **kw)

        monkeypatch.setattr(LogRegNonconvex, name, spy)
    assert warm.main(["--quiet"]) == 0
    assert "compiled the GLM kernels of 12 cases" in capsys.readouterr().out
    kinds = {"grad", "grad_diff", "loss", "node_loss", "grad_points", "loss_grad_points"}
    for engine in ("dense", "csr", "csc"):
        for dt in glm_kernels.DTYPES:
            assert {k for e, d, k in calls if (e, d) == (engine, dt)} == kinds
    # every width of the batched kernels, and the compiled gradients, in both dtypes
    both = {numba.float32, numba.float64}
    for W in glm_lanes.WIDTHS:
        assert _dtypes(getattr(glm_lanes_kernels, f"points_{W}")) == both
    for kernel in ("_dense_grad", "_sparse_grad", "_csc_grad", "_dense_points", "_sparse_points",
                   "_dense_margins", "_sparse_margins"):  # fmt: skip
        assert _dtypes(getattr(glm_kernels, kernel)) == both, kernel
    # the dense kernel on binary rows as bytes (glm_kernels.pack_binary), in both dtypes
    on_bytes = {sig[-1].dtype for sig in glm_kernels._dense_grad.overloads
                if sig[0].dtype == numba.uint8}  # fmt: skip
    assert on_bytes == both


def test_without_numba_it_says_there_is_nothing_to_compile(monkeypatch, capsys):
    monkeypatch.setattr(glm_kernels, "numba", None)
    assert warm.main(["--quiet"]) == 0
    assert "numba is not installed" in capsys.readouterr().out


@pytest.mark.parametrize("layout", ["dense", "binary", "valued"])
def test_the_problems_have_the_layout_they_name(layout):
    p = warm._problem(layout, "dense" if layout == "dense" else "csr", torch.float32)
    stored = p._A64.data
    if layout == "dense":
        assert p._A64.nnz == p._A64.shape[0] * p._A64.shape[1]
    else:
        assert p._A64.nnz < p._A64.shape[0] * p._A64.shape[1]
        assert ((stored == 1.0).all()) == (layout == "binary")
