"""Generalised linear models on split data, batched over nodes.

``f_i(x) = (1/m_i) sum_{j in node i} phi(a_j^T x, b_j) + R(x)``, ``f = (1/n) sum_i f_i``.

Rows are stored sorted by node. On the CPU, in float32 and float64, every gradient, margin and
minibatch gradient runs through the compiled kernels of :mod:`problems.glm_kernels`: one pass
over each held node's rows (dense, or CSR with work proportional to the non-zeros), nodes in
parallel, for any number of nodes and any (unequal) ``m_i``. Elsewhere (CUDA, other dtypes, no
numba) torch does the same maths: the held rows form one block-sparse CSR matrix ``B`` of shape
``(N_held, m d)`` whose row ``j`` holds ``a_j`` in the column block of its node, so that with
``X`` the ``(m, d)`` points, ``B @ vec(X)`` gives every margin ``a_j^T x_{node(j)}`` and
``B^T @ u`` every node's gradient (dense data: gemv and batched gemv instead); minibatches gather
their rows from the CSR arrays and reduce with ``index_add_``.
"""

from __future__ import annotations

import copy
import functools
import logging
import math
import warnings
from typing import Any, ClassVar

import numpy as np
import scipy.sparse as sp
import torch

from problems import (
    cache,
    glm_bits,
    glm_consts,
    glm_engine,
    glm_kernels,
    glm_lanes,
    glm_reg,
    solver,
)
from problems.base import Batch, Consts, Problem, _Lazy, parse_x0
from problems.data import MAX_DIM, load_tabular
from problems.linalg import single_threaded
from problems.splits import split as split_rows
from streams import Streams, tags

__all__ = ["GLM", "DATA_KNOBS"]

# Above this fraction of non-zeros the data is also kept dense: dense BLAS kernels beat the
# sparse ones (index overhead of several times) well before the data is full.
DENSE_ABOVE = 0.25

log = logging.getLogger(__name__)

DATA_KNOBS: dict[str, tuple[Any, str]] = {
    "samples": (1000, "rows of the synthetic data set"),
    "features": (50, "columns of the synthetic data set"),
    "density": (0.2, "fraction of nonzero entries of the synthetic data set"),
    "label_noise": (0.05, "probability of flipping a synthetic label"),
    "scale": ("none", "feature scaling: none, standard, maxabs, rownorm"),
    "index_base": (1, "first feature index of a LIBSVM file: 1 (LIBSVM) or 0 (zero-based)"),
    "max_dense_gib": (4.0, "refuse a LIBSVM file whose dense N x d float64 design exceeds this"),
    "max_dim": (MAX_DIM, "refuse a LIBSVM file whose d exceeds both this and its stored entries"),
    "storage": ("auto", "gradients' engine: auto (the fastest, measured on this machine and data "
                "and memoised; small data: dense above 1/4 non-zeros), dense, csr (compiled "
                "kernels; dense rows whose non-zeros share one value read as bytes, and up to "
                "8 MB by columns too for full gradients), dense-torch, csr-torch (torch's "
                "products), csr-scipy, csc-scipy "
                "(SciPy's sparse products), dense-numpy (NumPy's BLAS on a padded stack), csc "
                "(compiled kernel on each node's rows by columns), dense-bits (rows whose "
                "non-zeros share one value as bit masks, full gradients by masked additions)"),
    "threads": ("auto", "threads of the gradients: auto (measured with the engine: 1 or torch's "
                "count) or a positive integer"),
    "server_rows": (0, "rows drawn at random (seeded) for the server's own data, held out of the "
                    "nodes' (CAFe-S); 0: the server holds none"),
}  # fmt: skip
STORAGES = glm_engine.STORAGES
#: Data with fewer stored entries take the rule (``DENSE_ABOVE``) on torch's threads, unmeasured:
#: their gradient costs microseconds, and a measurement would cost more than it saves.
MEASURE_ABOVE = 50_000
# The largest point (entries) whose regulariser gradient NumPy computes (GLM._reg_grad_rows).
REG_NUMPY_MAX = 1 << 16
# Largest ``m d^2`` that :meth:`GLM.smoothness_matrices` builds (float64: 2 GiB).
_MAX_SMOOTHNESS_ENTRIES = 2**28


def _numpy_sized(X: torch.Tensor) -> bool:
    """Whether ``X`` is a small float32/float64 CPU tensor, which NumPy serves faster."""
    return (
        X.device.type == "cpu" and X.dtype in (torch.float32, torch.float64)
        and X.numel() <= REG_NUMPY_MAX
    )  # fmt: skip


def _on_device(data: dict[str, Any], dtype: torch.dtype, device: torch.device) -> dict[str, Any]:
    """The SciPy CSR matrices of :meth:`GLM._points_data` as torch's sparse CSR on ``device``
    (their products run there: cuSPARSE on a GPU)."""
    return {k: _torch_csr(v, dtype, device) if sp.issparse(v) else v for k, v in data.items()}


def _torch_csr(M: sp.csr_matrix, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "sparse CSR support is in beta"
        return torch.sparse_csr_tensor(
            torch.from_numpy(M.indptr.astype(np.int64)),
            torch.from_numpy(M.indices.astype(np.int64)),
            torch.from_numpy(M.data),
            size=M.shape,
            dtype=dtype,
            device=device,
        )


def _on_threads(fn):
    """Run a GLM's maths on its engine's thread count (:attr:`GLM.threads`)."""

    @functools.wraps(fn)
    def wrapper(self, *args, **kwargs):
        with glm_engine.threads_used(self.threads):
            return fn(self, *args, **kwargs)

    return wrapper


class GLM(Problem):
    """Base of ``logreg``, ``logreg-nonconvex``, ``least-squares`` and ``sigmoid-squared``.

    Subclasses define ``phi``, ``dphi``, ``d2phi`` (the loss and its derivatives in the margin),
    ``reg``, ``reg_grad``, ``reg_hess_diag``, and the curvature bounds ``PHI_CURV = sup phi''``
    and ``REG_CURV = sup R'' / lam``.
    """

    PHI_CURV: ClassVar[float]
    REG_CURV: ClassVar[float]
    # The loss's name in problems.glm_kernels.LOSSES (None: gradients use torch alone).
    KERNEL_LOSS: ClassVar[str | None] = None
    # Whether ``reg_grad`` is written with arithmetic operators alone, so that it serves NumPy
    # arrays as well, with the same IEEE operations in the same order (the same bits).
    REG_NUMPY: ClassVar[bool] = True
    # The regulariser's name in problems.glm_reg.REGS (its gradient at a small CPU point in one
    # compiled call), or None; a subclass that writes its own reg_grad and names none has none.
    KERNEL_REG: ClassVar[str | None] = "l2"
    autograd_free = True
    default_lam: ClassVar[float] = 0.1
    knobs = DATA_KNOBS

    def __init_subclass__(cls, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        if "reg_grad" in cls.__dict__ and "KERNEL_REG" not in cls.__dict__:
            cls.KERNEL_REG = None  # its own regulariser: not the one inherited by name

    def __init__(
        self,
        A: sp.spmatrix | np.ndarray,
        b: np.ndarray,
        counts: np.ndarray,
        *,
        lam: float,
        dtype: torch.dtype = torch.float64,
        device: torch.device | str = "cpu",
        x0: str = "default",
        seed: int = 0,
        storage: str = "auto",
        threads: int | str = "auto",
        server: tuple[sp.spmatrix | np.ndarray, np.ndarray] | None = None,
    ) -> None:
        """``A`` ``(N, d)`` and ``b`` ``(N,)`` hold the rows sorted by node; node ``i`` owns
        ``counts[i]`` consecutive rows. ``server``: ``(A_S, b_S)``, rows only the server holds,
        its objective ``f_S(x) = (1/K) sum_j phi(a_j^T x, b_j) + R(x)`` over its ``K`` rows
        (:meth:`server_grad`), or None. ``storage``: the gradients' engine
        (:mod:`problems.glm_engine`): ``auto`` times the candidates on this data and machine
        and keeps the fastest (memoised), or one of ``dense``, ``csr`` (compiled kernels),
        ``dense-torch``, ``csr-torch`` (torch's products), ``csr-scipy``, ``csc-scipy``
        (SciPy's), ``dense-numpy`` (NumPy's BLAS) or ``csc`` (the compiled kernel on each
        node's rows by columns); data with at most
        ``MEASURE_ABOVE`` stored entries take the rule, dense above ``DENSE_ABOVE`` non-zeros.
        ``threads``: the gradients' thread count, ``auto`` (measured with the engine, or
        torch's count by the rule) or a positive integer. The maths is the same, the rounding
        may differ."""
        if storage not in STORAGES:
            raise ValueError(
                f"{self.name}: storage must be one of {', '.join(STORAGES)}, got {storage!r}"
            )
        if threads != "auto" and (
            isinstance(threads, bool) or not isinstance(threads, int) or threads < 1
        ):
            raise ValueError(f"{self.name}: threads must be auto or a positive integer, got "
                             f"{threads!r}")  # fmt: skip
        if isinstance(lam, bool) or not isinstance(lam, int | float) or not math.isfinite(lam):
            raise ValueError(f"{self.name}: lambda must be a finite number, got {lam!r}")
        if lam < 0:
            raise ValueError(f"{self.name}: lambda must be >= 0, got {lam}")
        counts = np.asarray(counts, dtype=np.int64)
        if counts.ndim != 1 or counts.size == 0 or (counts <= 0).any():
            empty = np.flatnonzero(counts <= 0).tolist()
            raise ValueError(f"{self.name}: every node needs samples; empty nodes {empty}")
        self._A64 = sp.csr_matrix(A, dtype=np.float64)
        self._A64.sum_duplicates()
        self._b64 = np.asarray(b, dtype=np.float64).reshape(-1)
        N, d = self._A64.shape
        if self._b64.size != N or counts.sum() != N:
            raise ValueError(
                f"{self.name}: {N} rows, {self._b64.size} labels and {counts.sum()} "
                "samples in the split do not agree"
            )
        self.lam = float(lam)
        self._offsets64 = np.concatenate([[0], np.cumsum(counts)])
        self._w64 = 1.0 / (counts.size * np.repeat(counts, counts))
        self._solution = None
        if self.convex:
            self._solution = _Lazy(self._solve)
        super().__init__(
            counts.size,
            d,
            consts=self._compute_consts,
            x0=parse_x0(x0, d, lambda: torch.zeros(d), seed),
            dtype=dtype,
            device=device,
            x_star=self._x_star_fn if self.convex else None,
        )
        dev, dt = self.device, self.dtype
        self.counts = torch.from_numpy(counts).to(dev)
        self.offsets = torch.from_numpy(self._offsets64).to(dev)
        self._A = _torch_csr(self._A64, dt, dev)
        self._At = _torch_csr(self._A64.T.tocsr(), dt, dev)
        self._crow, self._col = self._A.crow_indices(), self._A.col_indices()
        self._val = self._A.values()
        self._b = torch.from_numpy(self._b64).to(dev, dt)
        self._w = torch.from_numpy(self._w64).to(dev, dt)
        # Compiled kernels (problems.glm_kernels) serve this loss, dtype and device, or torch's
        # (block-)sparse and dense products do; which engine runs is chosen below.
        self._compiled = glm_kernels.available(self.KERNEL_LOSS, dt, self.device)
        self._scipy_ok = self.device.type == "cpu" and dt in (torch.float32, torch.float64)
        self._Ad = self._kbin_memo = None
        self._server = None if server is None else self._server_data(*server)
        self._threads_opt = threads
        self._choose_engine(storage, threads)

    # ------------------------------------------------------------------ the engine
    def _choose_engine(self, storage: str, threads: int | str) -> None:
        """Take ``storage`` and ``threads`` as forced, or measure the candidates
        (:func:`problems.glm_engine.choose`); small data take the rule unmeasured."""
        N, d = self._A64.shape
        nnz = self._A64.nnz
        if storage == "auto" and nnz <= MEASURE_ABOVE:
            dense = nnz > DENSE_ABOVE * N * d
            engine = "dense" if dense else "csr"
            self._use_engine(engine, None if threads == "auto" else int(threads))
            return
        dense_ok = glm_engine.dense_allowed(N, d, nnz)
        csc_ok = glm_engine.csc_allowed(self.n, d, nnz)
        bits_ok = nnz > 0 and bool((self._A64.data == self._A64.data[0]).all())
        engines = glm_engine.candidates(
            storage, dense_ok, self._compiled, self._scipy_ok, csc_ok, bits_ok
        )  # fmt: skip
        options = [(e, t) for e in engines for t in glm_engine.thread_candidates(threads)]
        probe = torch.linspace(-0.1, 0.1, self.m * d, dtype=self.dtype).reshape(self.m, d)
        probe = probe.to(self.device)

        def apply(engine: str, t: int):
            self._use_engine(engine, t)
            return lambda: (self.grad(probe), self.grad(probe[0]))

        key = (type(self).__name__, str(self.dtype), str(self.device), self._offsets64,
               self._A64.indptr, self._A64.indices, self._A64.data)  # fmt: skip
        self._use_engine(*glm_engine.choose(key, options, apply))
        if not self.dense:
            self._Ad = self._kbin_memo = None  # dense copies made for the measurement

    def _use_engine(self, engine: str, threads: int | None) -> None:
        """Switch the gradients to ``engine`` on ``threads`` (None: torch's count)."""
        if not self._compiled and engine in ("dense", "csr", "csc", "dense-bits"):
            engine = ("dense" if engine.startswith("dense") else "csr") + "-torch"  # no kernels
            # for this loss, dtype or device: torch's products
        if engine.endswith("-scipy") and not self._scipy_ok:
            engine = "csr-torch"  # SciPy works on CPU float32/float64 arrays only
        if engine == "dense-numpy" and not self._scipy_ok:
            engine = "dense-torch"  # NumPy's BLAS: CPU float32/float64 arrays only
        self._numpy = engine == "dense-numpy"
        self.dense = engine in ("dense", "dense-torch", "dense-numpy", "dense-bits")
        self._points = self._points_k = self._points_t = self._points_l = None
        self._kernels = engine in ("dense", "csr", "csc", "dense-bits")
        self._bits = engine == "dense-bits"  # full gradients by bit masks, where rows allow
        self._csc = engine == "csc"  # full gradients by columns; minibatches by the CSR kernel
        self._scipy = {"csr-scipy": "csr", "csc-scipy": "csc"}.get(engine)
        if self.dense and self._Ad is None:
            self._Ad = torch.from_numpy(self._A64.toarray()).to(self.device, self.dtype)
        csr = (self._crow, self._col, self._val)
        self._kdata = None  # the kernels' view of the data (host arrays): where they serve
        self._kbin = None  # dense rows of one non-zero value as bytes (the full gradients')
        if self._compiled:
            self._kdata = glm_kernels.pack(self._Ad if self.dense else None, csr, self.d)
            if engine in ("dense", "dense-bits"):
                self._kbin = self._binary_rows()
        self.threads = threads
        shown = threads if threads is not None else torch.get_num_threads()
        self.engine = glm_engine.describe(engine, shown)
        self._select()

    def _binary_rows(self) -> tuple | None:
        """:func:`problems.glm_kernels.pack_binary` of the dense rows, made once (the rows
        and their dtype do not change; the engine's measurement switches to dense often)."""
        if self._kbin_memo is None:
            self._kbin_memo = (glm_kernels.pack_binary(self._kdata[0]),)
        return self._kbin_memo[0]

    def use_engine(self, choice: str) -> None:
        """Run the gradients on ``choice``, ``NAME/THREADS`` as :attr:`engine` names it (the
        runner gives every rank rank 0's choice)."""
        engine, threads = glm_engine.parse(choice)
        if choice != self.engine:
            self._use_engine(engine, threads)

    def _server_data(self, A_S, b_S) -> tuple[torch.Tensor, torch.Tensor]:
        """The server's rows as a dense ``(K, d)`` tensor and their labels (a few rows)."""
        A_S = np.asarray(A_S.toarray() if sp.issparse(A_S) else A_S, dtype=np.float64)
        b_S = np.asarray(b_S, dtype=np.float64).reshape(-1)
        if A_S.ndim != 2 or A_S.shape[1] != self.d or A_S.shape[0] != b_S.size or not b_S.size:
            raise ValueError(
                f"{self.name}: the server's data must be K >= 1 rows of d = {self.d} features "
                f"with K labels, got rows {A_S.shape} and {b_S.size} labels"
            )
        dev, dt = self.device, self.dtype
        return torch.from_numpy(A_S).to(dev, dt), torch.from_numpy(b_S).to(dev, dt)

    # ------------------------------------------------------------------ construction
    @classmethod
    def build(
        cls,
        *,
        dataset: str,
        split: str,
        nodes: int,
        lam: float | None,
        dtype: torch.dtype,
        device: torch.device | str,
        seed: int,
        x0: str,
        **knobs: Any,
    ) -> GLM:
        """Load ``dataset``, split it among ``nodes`` and build the problem."""
        scale = knobs.pop("scale", "none")
        storage = knobs.pop("storage", "auto")
        threads = knobs.pop("threads", "auto")
        if isinstance(threads, str) and threads.strip().isdigit():
            threads = int(threads)  # --problem-opt threads=N arrives as text (the default is auto)
        server_rows = knobs.pop("server_rows", 0)
        if storage not in STORAGES:
            raise ValueError(
                f"{cls.name}: storage must be one of {', '.join(STORAGES)}, got {storage!r}"
            )
        ds = load_tabular(dataset, cls.name, seed=seed, scale=scale, **knobs)
        b = cls.labels(ds)
        X, server = ds.X, None
        if server_rows:
            keep, held = cls._server_split(b.size, nodes, server_rows, seed)
            X, b, server = X[keep], b[keep], (X[held], b[held])
        order, counts = split_rows(split, b, nodes, seed=seed, problem=cls.name)
        lam = cls.default_lam if lam is None else lam
        return cls(
            X[order], b[order], counts, lam=lam, dtype=dtype, device=device, x0=x0,
            seed=seed, storage=storage, threads=threads, server=server,
        )  # fmt: skip

    @classmethod
    def _server_split(
        cls, N: int, nodes: int, K: object, seed: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """``server_rows = K``: ``K`` rows drawn uniformly without replacement from a stream
        keyed by ``seed`` (a sample of the whole data set, so representative of the nodes'
        union), held out of the nodes' data; returns ``(kept, held)`` row indices, each in file
        order."""
        if isinstance(K, bool) or not isinstance(K, int) or not 0 <= K <= N - nodes:
            raise ValueError(
                f"{cls.name}: server_rows must be an integer in [0, {N - nodes}] (the nodes "
                f"keep at least one row each), got {K!r}"
            )
        held = np.sort(np.random.default_rng([seed, tags.SERVER_DATA]).permutation(N)[:K])
        return np.setdiff1d(np.arange(N), held), held

    @classmethod
    def labels(cls, ds) -> np.ndarray:
        return ds.signed(cls.name)

    server_data_hint = "give it rows with --problem-opt server_rows=K"

    @property
    def has_server_data(self) -> bool:
        return self._server is not None

    def _server_grad(self, x: torch.Tensor) -> torch.Tensor:
        A_S, b_S = self._server
        u = self.dphi(A_S @ x, b_S) / b_S.numel()
        return u @ A_S + self.reg_grad(x[None], self.lam)[0]

    def label_flipped(self, nodes) -> GLM:
        ids = torch.as_tensor(nodes, dtype=torch.int64).reshape(-1).cpu().numpy()
        if ids.size and (ids.min() < 0 or ids.max() >= self.n):
            raise ValueError(f"{self.name}: nodes must lie in [0, {self.n}), got {ids.tolist()}")
        owner = np.repeat(np.arange(self.n), np.diff(self._offsets64))
        new = copy.copy(self)
        new._b64 = np.where(np.isin(owner, ids), -self._b64, self._b64)
        new._b = torch.from_numpy(new._b64).to(self.device, self.dtype)
        new._select()
        return new

    def _select(self) -> None:
        nodes = self.nodes.cpu().numpy()
        starts, counts = self._offsets64[nodes], np.diff(self._offsets64)[nodes]
        rows = np.concatenate([np.arange(s, s + c) for s, c in zip(starts, counts, strict=True)])
        local = np.repeat(np.arange(nodes.size), counts)
        dev, dt = self.device, self.dtype
        self._bh = torch.from_numpy(self._b64[rows]).to(dev, dt)
        self._local = torch.from_numpy(local).to(dev)
        self._inv_m = (1.0 / torch.from_numpy(counts).to(dev, dt))[self._local]
        self._B = self._Bt = self._Xh = self._X3 = self._XhT = self._S = None
        self._points = None  # the products with many right-hand sides (grad_points), built once
        self._np = None  # dense-numpy: the held rows as a padded (m, c, d) NumPy stack
        self._points_k = None  # the compiled kernels' data for grad_points on a library engine
        self._points_t = None  # _points' sparse matrices as torch's CSR (torch-sparse, on a CPU)
        self._points_l = None  # the CSR rows and their order as the lanes kernels read them
        self._kplan = None  # the compiled full gradient at one shared point (grad)
        self._krows = torch.from_numpy(rows.astype(np.int64))
        self._ptr = torch.from_numpy(np.concatenate([[0], np.cumsum(counts)]).astype(np.int64))
        if self._kernels:  # the kernels read the held rows in place: no copy of the data
            # the full gradient's arrays as the kernels take them (_kernel_grad)
            self._kfull = (self._b.numpy(), self._krows.numpy(), self._ptr.numpy(),
                           glm_kernels.LOSSES[self.KERNEL_LOSS])  # fmt: skip
            self._kcsc = self._kcols = self._kbits = None
            if self._bits and self._kbin is not None:  # full gradients on bit masks
                npdt = np.float32 if dt == torch.float32 else np.float64
                b, krows, kptr = self._kfull[:3]
                self._kbits = glm_bits.pack(self._kbin[0], b, krows, kptr, npdt)
            elif self.dense:  # the full gradients' margins read the rows by columns as well:
                # (the rows by columns, the rows, the value of every non-zero or 1)
                A, c = (self._kdata[0], 1.0) if self._kbin is None else self._kbin
                if A.nbytes <= glm_kernels.COLUMNS_MAX_BYTES:
                    self._kcols = (glm_kernels.pack_columns(A, *self._kfull[1:3]), A, c)
            if self._csc:  # the held rows by columns, node by node: the transposed design
                Bt = self._block_design(rows, local)[1].T.tocsr()
                b, krows, kptr = self._kfull[:3]
                self._kcsc = glm_kernels.pack_csc(Bt, self._kdata[3], b[krows], kptr)
            if type(self)._grad is GLM._grad:  # the full gradient at one point: one call
                b, krows, kptr, code = self._kfull
                data, scale, cols = self._full_data()
                npdt = np.float32 if dt == torch.float32 else np.float64
                if self._kbits is not None:
                    self._kplan = glm_bits.point_plan(self._kbits, code, npdt, self._kbin[1])
                else:
                    self._kplan = glm_kernels.point_grad_plan(
                        data, b, krows, kptr, code, npdt, scale, cols, self._kcsc
                    )  # fmt: skip
            return
        sub, B = self._block_design(rows, local)
        if self._scipy:  # SciPy's sparse products on the held rows, in the problem's dtype
            npdt = np.float32 if dt == torch.float32 else np.float64
            shared = sub.astype(npdt)
            self._S = {
                "B": B.astype(npdt),
                "Bt": B.T.tocsr().astype(npdt),
                "A": shared.tocsc() if self._scipy == "csc" else shared,
            }
            return
        if self._numpy:
            self._np = self._numpy_stack(counts)
        self._B = _torch_csr(B, dt, dev)
        self._Bt = _torch_csr(B.T.tocsr(), dt, dev)
        # Dense data: the held rows as an (N_held, d) matrix, and as (m, c, d) when every held
        # node has c rows, so margins and gradients are one gemv/bmm each.
        if self.dense:
            self._Xh = self._Ad[torch.from_numpy(rows).to(dev)]
            # Also transposed: x @ X^T runs several times faster than X @ x on tall matrices.
            self._XhT = self._Xh.T.contiguous()
            if (counts == counts[0]).all():
                self._X3 = self._Xh.view(nodes.size, int(counts[0]), self.d)

    # ------------------------------------------------------------------ maths
    @_on_threads
    def _loss(self, x: torch.Tensor) -> torch.Tensor:
        z = self._Ad @ x if self.dense else self._A @ x
        return (self.phi(z, self._b) * self._w).sum() + self.reg(x[None], self.lam)[0]

    @_on_threads
    def _full_grad(self, x: torch.Tensor) -> torch.Tensor:
        if self.dense:
            u = self.dphi(self._Ad @ x, self._b) * self._w
            return u @ self._Ad + self.reg_grad(x[None], self.lam)[0]
        u = self.dphi(self._A @ x, self._b) * self._w
        return self._At @ u + self.reg_grad(x[None], self.lam)[0]

    @staticmethod
    def _kernel_point(X: torch.Tensor) -> torch.Tensor:
        """``X`` for the kernels: ``(1, d)`` when every row is the same point, else contiguous."""
        if X.shape[0] == 1 or X.stride(0) == 0:
            return X[:1].contiguous()
        return X.contiguous()

    def _margins(self, X: torch.Tensor) -> torch.Tensor:
        """``a_j^T x_{node(j)}`` for every held row ``j``."""
        if self._kernels:
            return glm_kernels.margins(self._kdata, self._krows, self._ptr, self._kernel_point(X))
        if self._S is not None:
            if X.shape[0] == 1 or X.stride(0) == 0:  # one point for every node: one SpMV
                return torch.from_numpy(self._S["A"] @ X[0].detach().numpy())
            return torch.from_numpy(self._S["B"] @ X.detach().contiguous().numpy().reshape(-1))
        if self._Xh is None:
            return self._B @ X.reshape(-1)
        if X.shape[0] == 1 or X.stride(0) == 0:  # one point for every node: one gemv
            return X[0] @ self._XhT
        if self._X3 is not None:
            return torch.bmm(self._X3, X.unsqueeze(2)).reshape(-1)
        return (self._Xh * X[self._local]).sum(dim=1)

    @_on_threads
    def _node_loss(self, X: torch.Tensor) -> torch.Tensor:
        z = self._margins(X)
        per = self.phi(z, self._bh) * self._inv_m
        out = torch.zeros(self.m, dtype=self.dtype, device=self.device)
        return out.index_add_(0, self._local, per) + self.reg(X, self.lam)

    def _numpy_stack(self, counts: np.ndarray) -> dict[str, Any]:
        """The ``dense-numpy`` engine's data: the held rows as an ``(m, c, d)`` NumPy stack,
        each node padded to ``c = max m_i`` rows with zero rows whose labels and weights are
        zero (so they add nothing), what a researcher's vectorized script multiplies by BLAS."""
        m, c, d = counts.size, int(counts.max()), self.d
        P = torch.zeros(m, c, d, dtype=self.dtype)
        pad = torch.arange(c)[None, :] < torch.from_numpy(counts)[:, None]
        P[pad] = self._Ad[torch.from_numpy(self._krows.numpy())].cpu()
        bP = torch.zeros(m, c, dtype=self.dtype)
        wP = torch.zeros(m, c, dtype=self.dtype)
        bP[pad], wP[pad] = self._bh.cpu(), self._inv_m.cpu()
        Pn = P.numpy()
        S = {"P": Pn, "P2": Pn.reshape(m * c, d), "b": bP, "w": wP, "c": c}
        return S | {"dphi_times": self._dphi_times_numpy_of(bP, wP)}

    def _numpy_grad(self, X: torch.Tensor) -> torch.Tensor:
        """Every held node's gradient by NumPy's BLAS on the padded stack: margins by one
        GEMV (one point) or a batched GEMV (a point per node), sums by a batched GEMV; the
        weights in place on the margins (:meth:`_dphi_times_numpy_of`); the regulariser's
        gradient added in NumPy where it is computed there (the same IEEE sums as torch's
        ``add_``). The point is read once as a NumPy view: each torch call around the BLAS
        ones costs microseconds, and the whole of a float32 gradient on mushrooms 0.12 ms."""
        S = self._np
        m, c = self.m, S["c"]
        one = X.shape[0] == 1 or X.stride(0) == 0
        Xn = X.detach().numpy()
        x = Xn[0] if one else np.ascontiguousarray(Xn)
        before = glm_engine.blas_set(self.threads)
        try:
            with np.errstate(all="ignore"):  # as silent as torch (inf * 0, inf - inf, overflow)
                if one:
                    z = (S["P2"] @ x).reshape(m, c)
                else:
                    z = np.matmul(S["P"], x[:, :, None])[:, :, 0]
                u = S["dphi_times"](z)
                G = np.matmul(u[:, None, :], S["P"])[:, 0, :]
                r = self._reg_grad_of_array(x[None] if one else x)
                if r is not None:
                    return torch.from_numpy(np.add(G, r, out=G))
        finally:
            glm_engine.blas_restore(before)
        return torch.from_numpy(np.ascontiguousarray(G)).add_(self._reg_grad_rows(X))

    def grad(self, x_i: torch.Tensor, batch: Batch | None = None) -> torch.Tensor:
        """:meth:`problems.base.Problem.grad`; a full gradient at one point ``(d,)`` shared by
        the nodes (every step of EF21, DIANA, MARINA, DASHA) is one prepared kernel call
        (:func:`problems.glm_kernels.point_grad_plan`): the same call and bits as the general
        path, with less Python around it (mushrooms float32, two threads: 75 -> 70 us, the
        kernel alone 52)."""
        plan = self._kplan
        if (plan is None or batch is not None or x_i.shape != (self.d,)
                or x_i.dtype != self.dtype or x_i.device.type != "cpu"):  # fmt: skip
            return super().grad(x_i, batch)
        with glm_engine.threads_used(self.threads):
            Xn = np.ascontiguousarray(x_i.detach().numpy())[None]
            return torch.from_numpy(plan(Xn, self._reg_grad_kernel(x_i[None], Xn)))

    def _grad(self, X: torch.Tensor) -> torch.Tensor:
        if self._np is not None:  # on NumPy's threads; torch's count changes no elementwise op
            return self._numpy_grad(X)
        return self._torch_grad(X)

    @_on_threads
    def _torch_grad(self, X: torch.Tensor) -> torch.Tensor:
        if self._kernels:
            return self._kernel_grad(X)
        u = self.dphi(self._margins(X), self._bh) * self._inv_m
        if self._X3 is not None:
            G = torch.bmm(u.view(self.m, 1, -1), self._X3).squeeze(1)
        elif self._Xh is not None:
            G = torch.zeros(self.m, self.d, dtype=self.dtype, device=self.device)
            G.index_add_(0, self._local, self._Xh * u[:, None])
        else:
            G = self._sums(u)
        return G.add_(self._reg_grad_rows(X))

    def _sums(self, u: torch.Tensor) -> torch.Tensor:
        """``(m, d)``: node ``i``'s ``sum_j u_j a_j`` over its held rows (sparse layouts)."""
        if self._S is not None:
            return torch.from_numpy(self._S["Bt"] @ u.detach().numpy()).reshape(self.m, self.d)
        return (self._Bt @ u).reshape(self.m, self.d)

    def _reg_grad_rows(self, X: torch.Tensor) -> torch.Tensor:
        """The regulariser's gradient at every row of ``X``, computed once when every node is at
        the same point (a broadcast ``X``), so no ``(m, d)`` temporary is made for it. A small
        CPU point takes NumPy (:attr:`REG_NUMPY`): the same IEEE operations, so the same bits
        (overflows give the same infinities, silently, as in torch), in about 3 us where
        torch's five small kernels took 7-13 us (phishing, ``d = 68``)."""
        r = self._reg_grad_numpy(X)
        if r is not None:
            return torch.from_numpy(r)
        if X.shape[0] > 1 and X.stride(0) == 0:
            X = X[:1]
        return self.reg_grad(X, self.lam)

    def _reg_grad_numpy(self, X: torch.Tensor) -> np.ndarray | None:
        """:meth:`_reg_grad_rows` as a NumPy array, where NumPy computes it (else None)."""
        if X.shape[0] > 1 and X.stride(0) == 0:
            X = X[:1]
        if not _numpy_sized(X):
            return None
        return self._reg_grad_of_array(X.detach().numpy())

    def _reg_grad_of_array(self, X: np.ndarray) -> np.ndarray | None:
        """The regulariser's gradient at the rows of the NumPy array ``X`` where NumPy computes
        it (:attr:`REG_NUMPY`, at most ``REG_NUMPY_MAX`` entries), silently as torch does, in
        one compiled call where :mod:`problems.glm_reg` knows it (:attr:`KERNEL_REG`); else
        None."""
        if not (self.REG_NUMPY and X.size <= REG_NUMPY_MAX):
            return None
        if glm_reg.available(self.KERNEL_REG):  # one compiled call, the same bits
            return glm_reg.reg_grad(self.KERNEL_REG, X, self.lam)
        with np.errstate(all="ignore"):
            return self.reg_grad(X, self.lam)

    def _sample(self, streams: Streams, batch_size: int) -> Batch:
        nodes = self.nodes
        offs = streams.integers(self.counts[nodes][:, None], batch_size)
        return Batch(nodes=nodes, size=batch_size, idx=self.offsets[nodes][:, None] + offs)

    def _kernel_grad(
        self, X: torch.Tensor, rows: torch.Tensor | None = None, ptr: torch.Tensor | None = None,
        Y: torch.Tensor | None = None,
    ) -> torch.Tensor:  # fmt: skip
        """:func:`problems.glm_kernels.grad_arrays` for the rows ``rows`` (node pointers
        ``ptr``; None: every held row, whose arrays :meth:`_select` keeps as NumPy's), at ``X``
        or its difference with ``Y``, the regulariser's term added. The point and that term
        are made NumPy arrays once: each conversion or small torch call costs a microsecond or
        more once a gradient's data pass has cooled the caches, and torch's path to the kernel
        took about 40 us more than the kernel (csr/2 on mushrooms float64: 166 against 124 us;
        148 this way)."""
        Xt, X = X, self._kernel_array(X)  # each point read as NumPy's once
        R = self._reg_grad_kernel(Xt, X)
        Yn = None if Y is None else self._kernel_array(Y)
        if Y is not None:
            R = R - self._reg_grad_kernel(Y, Yn)
        b, krows, kptr, code = self._kfull
        if rows is None and self._kcsc is not None:
            G = glm_kernels.grad_csc_arrays(self._kcsc, X, R, code, Yn)
            return torch.from_numpy(G)
        if rows is None and self._kbits is not None:
            G = glm_bits.grad_arrays(self._kbits, X, R, code, Yn, self._kbin[1])
            return torch.from_numpy(G)
        if rows is not None:
            krows, kptr = rows.numpy(), ptr.numpy()
        data, scale, cols = self._full_data(rows is None)
        G = glm_kernels.grad_arrays(data, b, krows, kptr, X, R, code, Yn, scale, cols)
        return torch.from_numpy(G)

    def _full_data(self, full: bool = True) -> tuple:
        """``(data, scale, cols)`` of :func:`problems.glm_kernels.grad_arrays` for the dense or
        CSR kernels: the held rows (dense rows of one value as their bytes, a quarter the
        reads), and for every held row (``full``) the rows by columns as well."""
        data, scale, cols = self._kdata, 1.0, None
        if self._kbin is not None:
            data, scale = self._kbin[:1], self._kbin[1]
        if full and self._kcols is not None:
            cols, A, scale = self._kcols
            data = (A,)
        return data, scale, cols

    def _reg_grad_kernel(self, X: torch.Tensor, Xn: np.ndarray) -> np.ndarray:
        """:meth:`_reg_grad_rows` of ``X`` as a NumPy array, ``Xn`` being ``X``'s
        :meth:`_kernel_array` (the point is not converted twice: a conversion costs about
        2 us)."""
        R = self._reg_grad_of_array(Xn) if X.dtype in (torch.float32, torch.float64) else None
        return self._reg_grad_rows(X).contiguous().numpy() if R is None else R

    @staticmethod
    def _kernel_array(X: torch.Tensor) -> np.ndarray:
        """:meth:`_kernel_point` as a NumPy array: ``(1, d)`` when every row is the same
        point, else ``(m, d)``, contiguous."""
        Xn = X.detach().numpy()
        return np.ascontiguousarray(Xn[:1] if X.shape[0] == 1 or X.stride(0) == 0 else Xn)

    def _batch_rows(self, batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
        """The kernels' row list and node pointers for a minibatch."""
        ptr = torch.arange(self.m + 1, device=self.device) * batch.size
        return batch.idx.reshape(-1).contiguous(), ptr

    @_on_threads
    def _grad_diff(self, X: torch.Tensor, Y: torch.Tensor, batch: Batch | None) -> torch.Tensor:
        if not self._kernels:
            return super()._grad_diff(X, Y, batch)
        if batch is None:  # every held row
            return self._kernel_grad(X, Y=Y)
        return self._kernel_grad(X, *self._batch_rows(batch), Y)

    @_on_threads
    def _batch_grad(self, X: torch.Tensor, batch: Batch) -> torch.Tensor:
        if self._kernels:
            return self._kernel_grad(X, *self._batch_rows(batch))
        idx = batch.idx.reshape(-1)
        starts = self._crow[idx]
        lens = self._crow[idx + 1] - starts
        k = idx.numel()
        row = torch.repeat_interleave(torch.arange(k, device=self.device), lens)
        first = torch.cumsum(lens, 0) - lens
        pos = starts[row] + torch.arange(row.numel(), device=self.device) - first[row]
        flat = (row // batch.size) * self.d + self._col[pos]
        vals = self._val[pos]
        z = torch.zeros(k, dtype=self.dtype, device=self.device)
        z.index_add_(0, row, vals * X.reshape(-1)[flat])
        u = self.dphi(z, self._b[idx]) / batch.size
        G = torch.zeros(self.m * self.d, dtype=self.dtype, device=self.device)
        G.index_add_(0, flat, vals * u[row])
        return G.reshape(self.m, self.d).add_(self._reg_grad_rows(X))

    # ------------------------------------------------------------------ many points at once
    def _block_design(self, rows: np.ndarray, local: np.ndarray) -> tuple[sp.csr_matrix, Any]:
        """The held rows ``rows`` (node ``local[j]`` owns row ``j``) as a CSR matrix, and the
        block-diagonal design ``B`` (row ``j`` in node ``local[j]``'s column block), whose
        transpose sums each node's rows."""
        sub = self._A64[rows]
        nz_local = np.repeat(local, np.diff(sub.indptr))
        cols = sub.indices.astype(np.int64) + self.d * nz_local
        B = sp.csr_matrix((sub.data, cols, sub.indptr), shape=(rows.size, self.m * self.d))
        return sub, B

    def _stacked(self, counts: np.ndarray) -> dict[str, torch.Tensor]:
        """The held rows as ``X3`` ``(m, c, d)`` with ``c = max_i m_i``, their labels ``bh3`` and
        weights ``1/m_i`` as ``inv3`` ``(m, c, 1)``; a node with fewer rows is padded with zero
        rows of weight 0, which add exactly 0 to its gradient and loss."""
        m, c, dev = self.m, int(counts.max()), self.device
        held = self._Ad[self._krows.to(dev)]
        if (counts == c).all():
            return {"X3": held.view(m, c, self.d), "bh3": self._bh.view(m, c, 1),
                    "inv3": self._inv_m.view(m, c, 1)}  # fmt: skip
        local = self._local.to(dev)
        slot = torch.arange(local.numel(), device=dev) - self._ptr.to(dev)[local]
        X3 = torch.zeros(m, c, self.d, dtype=self.dtype, device=dev)
        X3[local, slot] = held
        bh3 = torch.zeros(m, c, 1, dtype=self.dtype, device=dev)
        bh3[local, slot, 0] = self._bh
        inv3 = torch.zeros(m, c, 1, dtype=self.dtype, device=dev)
        inv3[local, slot, 0] = self._inv_m
        return {"X3": X3, "bh3": bh3, "inv3": inv3}

    def _points_data(self) -> dict[str, Any]:
        """What :meth:`grad_points` and :meth:`loss_grad_points` multiply by, built once in the
        problem's dtype: SciPy's CSR of the held rows and the block-diagonal transpose (node
        ``j``'s rows in column block ``j``), and of all rows and their transpose; on dense
        data, the held rows as an ``(m, c, d)`` tensor instead (:meth:`_stacked`), so that
        each product is one batched GEMM."""
        if self._points is not None:
            return self._points
        rows, counts = self._krows.numpy(), np.diff(self._ptr.numpy())
        npdt = np.float32 if self.dtype == torch.float32 else np.float64
        out: dict[str, Any] = {"X3": None, "A": None, "Bt": None}
        # stacked where the padding at most doubles the rows (a skewed split, such as a
        # Dirichlet one, takes the block-diagonal products instead)
        if self.dense and self._Ad is not None and 0 < self.m * counts.max() <= 2 * counts.sum():
            out.update(self._stacked(counts))
        else:
            sub, B = self._block_design(rows, self._local.cpu().numpy())
            out["A"] = sub.astype(npdt)
            out["Bt"] = B.T.tocsr().astype(npdt)
        if not self.dense:
            out["full"] = self._A64.astype(npdt)
            out["fullT"] = self._A64.T.tocsr().astype(npdt)
        if self.device.type != "cpu":  # cuSPARSE products on the device instead of SciPy's
            out = _on_device(out, self.dtype, self.device)
        self._points = out
        return out

    #: how :meth:`grad_points` computes: ``compiled`` (one pass of a compiled kernel over each
    #: node's rows for all points, where the kernels serve this loss), ``lanes`` (the same pass
    #: over the CSR rows by a kernel compiled for the number of points: :mod:`problems.
    #: glm_lanes`; :data:`problems.glm_lanes.MAX_WIDTH` points a pass), ``library`` (BLAS or
    #: SciPy products with ``R`` right-hand sides), ``torch-sparse`` (the same sparse products
    #: by torch's CSR tensors, on the CPU as on a GPU; sparse layouts only) or ``auto`` (chosen
    #: on the first call)
    points_engine: str = "auto"
    #: the thread count of :meth:`grad_points` (chosen with :attr:`points_engine`: ``R``
    #: points are more work than one, and may want more threads than :attr:`threads`)
    points_threads: int | None = None
    #: :meth:`grad_points` also gives each node's loss (``with_loss``)
    points_with_loss: ClassVar[bool] = True

    def _points_kdata(self) -> tuple:
        """The compiled kernels' view of the data when the gradients run on a library engine:
        the dense rows where the engine is dense, else the CSR rows."""
        csr = (self._crow, self._col, self._val)
        return glm_kernels.pack(self._Ad if self.dense else None, csr, self.d)

    def _points_products(self) -> dict[str, Any]:
        """:meth:`_points_data`, its sparse matrices as torch's CSR where the engine is
        ``torch-sparse`` (built once)."""
        data = self._points_data()
        if self.points_engine != "torch-sparse" or self.device.type != "cpu":
            return data
        if self._points_t is None:
            self._points_t = _on_device(data, self.dtype, self.device)
        return self._points_t

    def _sparse_product(self, M: sp.csr_matrix, Y: torch.Tensor) -> torch.Tensor:
        """``M @ Y`` for a SciPy CSR ``M`` and a CPU tensor ``Y`` ``(k, R)`` (or torch's sparse
        CSR ``M`` and a tensor on its device): one pass over ``M``'s entries for all ``R``
        columns."""
        if isinstance(M, torch.Tensor):
            return M @ Y
        return torch.from_numpy(np.asarray(M @ Y.detach().numpy()))

    def _on_points_threads(self):
        """The thread count of :meth:`grad_points` and :meth:`loss_grad_points`, in force."""
        n = self.points_threads if self.points_threads is not None else self.threads
        return glm_engine.threads_used(n)

    def grad_points(self, P: torch.Tensor, with_loss: bool = False):
        """``(R, m, d)``: entry ``[r, j]`` is ``grad f_{nodes[j]}(P[r])``, every held node at
        each of ``R`` points ``P`` ``(R, d)``, in one pass over the held rows (the gradients of
        ``R`` runs that advance together), and with ``with_loss`` also ``(R, m)``, each held
        node's ``f_i`` at each point. Equal to :meth:`grad` at each point up to rounding (the
        sums run in another order). The pass is a compiled kernel's (the innermost loops over
        the points) or, on a library engine, a BLAS/SciPy product with ``R`` right-hand sides:
        :attr:`points_engine` with :attr:`points_threads`, chosen on the first call (``auto``:
        :meth:`_choose_points_engine`)."""
        P = P.to(self.device, self.dtype)
        if self.points_engine == "auto":
            self._choose_points_engine(P)
        with self._on_points_threads():
            return self._grad_points(P, with_loss)

    def prepare_points(self, R: int) -> None:
        """Choose :attr:`points_engine` for ``R`` points, if not yet chosen, timed at ``R``
        copies of the start ``x0`` (where a batch of runs takes its first gradients)."""
        if self.points_engine == "auto":
            self._choose_points_engine(self.x0.to(self.device, self.dtype).repeat(R, 1))

    def _lanes_data(self) -> tuple:
        """The CSR rows as :mod:`problems.glm_lanes` reads them (the kernels' own view where
        they already read CSR rows) and the order it takes them in (:func:`problems.glm_lanes.
        plan`), built once."""
        if self._points_l is None:
            if self._kdata is not None and len(self._kdata) > 1:
                csr = self._kdata
            else:
                csr = glm_kernels.pack(None, (self._crow, self._col, self._val), self.d)
            self._points_l = (csr, glm_lanes.plan(csr, self._krows, self._ptr))
        return self._points_l

    def _lanes_serve(self, R: int) -> bool:
        """Whether the lanes kernels serve ``R`` points of this problem."""
        return self._compiled and glm_lanes.available(R, self.dtype, self.device)

    def _grad_points(self, P: torch.Tensor, with_loss: bool):
        if self.points_engine == "lanes" and self._lanes_serve(P.shape[0]):
            code = glm_kernels.LOSSES[self.KERNEL_LOSS]
            # added as the kernel writes the sums out; one compiled call where it serves
            reg = self._reg_grad_of_array(P.detach().numpy()) if _numpy_sized(P) else None
            if reg is None:
                reg = self.reg_grad(P, self.lam)
            csr, order = self._lanes_data()
            out, Lm = glm_lanes.grad_points(
                csr, self._b, self._krows, self._ptr, P, code, with_loss, reg, order
            )
            if not with_loss:
                return out
            return out, Lm.T.contiguous().add_(self.reg(P, self.lam)[:, None])
        elif self._compiled and self.points_engine in ("compiled", "lanes"):
            if self._kernels:
                kdata = self._kdata
            else:
                if self._points_k is None:
                    self._points_k = self._points_kdata()
                kdata = self._points_k
            G, Lm = glm_kernels.grad_points(
                kdata, self._b, self._krows, self._ptr, P, self.KERNEL_LOSS, with_loss
            )
            G, Lm = G.permute(2, 0, 1), Lm.T
        else:
            G, Lm = self._library_points(P, with_loss)
        out = G.contiguous().add_(self.reg_grad(P, self.lam)[:, None, :])
        if not with_loss:
            return out
        return out, Lm.contiguous().add_(self.reg(P, self.lam)[:, None])

    def _library_points(
        self, P: torch.Tensor, with_loss: bool
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        R, m, d = P.shape[0], self.m, self.d
        data = self._points_products()
        if data["X3"] is not None:
            X3 = data["X3"]
            Z = torch.matmul(X3, P.T)  # (m, c, R)
            bh, inv = data["bh3"], data["inv3"]
            U = self._dphi_times(Z, bh, inv)
            G = torch.matmul(X3.transpose(1, 2), U)  # (m, d, R)
            Lm = (self.phi(Z, bh) * inv).sum(1) if with_loss else None  # (m, R)
        else:
            Z = self._sparse_product(data["A"], P.T.contiguous())  # (N_held, R)
            bh, inv = self._bh[:, None], self._inv_m[:, None]
            U = self._dphi_times(Z, bh, inv)
            G = self._sparse_product(data["Bt"], U).view(m, d, R)
            Lm = None
            if with_loss:
                Lm = torch.zeros(m, R, dtype=self.dtype, device=self.device)
                Lm.index_add_(0, self._local, self.phi(Z, bh) * inv)
        return G.permute(2, 0, 1), None if Lm is None else Lm.T

    def _dphi_times(self, Z: torch.Tensor, b: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        """``dphi(Z, b) * w`` for the ``(rows, R)`` margins of many points (``b`` and ``w``
        broadcast along the points); a loss may compute it in fewer passes, with the same
        numbers."""
        return self.dphi(Z, b) * w

    def _dphi_times_of(self, b: torch.Tensor, w: torch.Tensor):
        """``Z -> self._dphi_times(Z, b, w)`` for fixed ``b`` and ``w`` (a loss may compute
        what depends on them alone once, with the same numbers)."""
        return functools.partial(self._dphi_times, b=b, w=w)

    def _dphi_times_numpy_of(self, b: torch.Tensor, w: torch.Tensor):
        """:meth:`_dphi_times_of` on NumPy margins (a fresh array the function may overwrite),
        returning a NumPy array: the ``dense-numpy`` engine's weights. A loss may compute
        them in place, with the same numbers."""
        f = self._dphi_times_of(b, w)
        return lambda z: f(torch.from_numpy(z)).numpy()

    def _choose_points_engine(self, P: torch.Tensor) -> None:
        """The compiled kernels (generic, and compiled for ``R`` points where they serve),
        the library products or (sparse layouts on a CPU) torch's sparse products, each on one
        thread or on torch's count (unless ``threads`` was forced), for ``R = len(P)`` points:
        the fastest, chosen as the gradients' engine is (:func:`problems.glm_engine.choose`:
        timed in interleaved rounds, memoised per machine and input when the machine was
        quiet). A lanes kernel not yet compiled on this machine compiles before it is timed."""
        engines = ("compiled", "library") if self._compiled else ("library",)
        if self._lanes_serve(P.shape[0]):
            engines = ("lanes", *engines)
        if self.device.type == "cpu" and self._points_data()["X3"] is None:
            engines += ("torch-sparse",)  # sparse products: SciPy's or torch's, by measurement
        counts = [None]
        if self.device.type == "cpu":
            counts = glm_engine.thread_candidates(self._threads_opt)
        options = [(e, n) for e in engines for n in counts]

        def apply(engine: str, n: int | None):
            self.points_engine, self.points_threads = engine, n
            if engine == "lanes":
                self._grad_points(P, False)  # compiled here (seconds, once), not in the timing
            return lambda: self.grad_points(P)

        key = (type(self).__name__, "points", P.shape[0], self.engine, str(self.dtype),
               str(self.device), self._offsets64, self._A64.indptr, self._A64.indices,
               self._A64.data)  # fmt: skip
        self.points_engine, self.points_threads = glm_engine.choose(key, options, apply)

    def loss_grad_points(self, P: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``f`` ``(R,)`` and ``grad f`` ``(R, d)`` at each of ``R`` points ``(R, d)``, from one
        pass for the margins and one for the gradients (what the runner logs for ``R`` runs
        that advance together); equal to :meth:`loss` and :meth:`full_grad` up to rounding.
        On :attr:`points_threads` where chosen."""
        with self._on_points_threads():
            return self._loss_grad_points(P)

    def _loss_grad_points(self, P: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        P = P.to(self.device, self.dtype)
        data = self._points_products()
        b, w = self._b[:, None], self._w[:, None]
        if self.dense:
            Z = self._Ad @ P.T
        else:
            Z = self._sparse_product(data["full"], P.T.contiguous())
        f = (self.phi(Z, b) * w).sum(0) + self.reg(P, self.lam)
        U = self._dphi_times(Z, b, w)
        if self.dense:
            g = U.T @ self._Ad
        else:
            g = self._sparse_product(data["fullT"], U).T
        return f, g + self.reg_grad(P, self.lam)

    # ------------------------------------------------------------------ exact Hessians
    hessians = True
    # Largest ``m d^2`` that :meth:`hess` returns (float64: 2 GiB).
    MAX_HESSIAN_ENTRIES: ClassVar[int] = 2**28

    @_on_threads
    def _hess(self, X: torch.Tensor) -> torch.Tensor:
        """``(1/m_i) A_i^T diag(phi''(A_i x_i)) A_i + diag(R''(x_i))`` for every held node: the
        curvature weights come from one pass over the held rows (the margins of the gradients);
        dense data with equal ``m_i`` (torch path) is one batched product, any other layout one
        sparse product ``B^T diag(w) B`` of the block-diagonal design (node ``j``'s rows in
        column block ``j``; work proportional to ``sum_rows nnz^2``), no loop over nodes."""
        m, d = self.m, self.d
        if m * d * d > self.MAX_HESSIAN_ENTRIES:
            raise ValueError(
                f"{self.name}: the Hessians of {m} nodes would hold m d^2 = {m * d * d} entries "
                f"(> {self.MAX_HESSIAN_ENTRIES}); hold fewer nodes"
            )
        w = self.d2phi(self._margins(X), self._bh) * self._inv_m
        if self._X3 is not None:
            H = torch.bmm(self._X3.transpose(1, 2) * w.view(m, 1, -1), self._X3)
        else:
            w64 = w.detach().to("cpu", torch.float64).numpy()
            G = (self._hess_design().T @ sp.diags(w64) @ self._hess_design()).tocoo()
            out = np.zeros((m, d, d))
            out[G.row // d, G.row % d, G.col % d] = G.data
            H = torch.from_numpy(out).to(self.device, self.dtype)
        H.diagonal(dim1=1, dim2=2).add_(self.reg_hess_diag(X, self.lam))
        return H

    def _hess_design(self) -> sp.csr_matrix:
        """The held rows as a block-diagonal CSR ``(N_held, m d)``, built once per node set."""
        key = tuple(self.nodes.tolist())
        cached = getattr(self, "_hess_B", None)
        if cached is not None and cached[0] == key:
            return cached[1]
        sub = self._A64[self._krows.numpy()]
        local = self._local.cpu().numpy()
        cols = sub.indices.astype(np.int64) + self.d * np.repeat(local, np.diff(sub.indptr))
        B = sp.csr_matrix((sub.data, cols, sub.indptr), shape=(sub.shape[0], self.m * self.d))
        self._hess_B = (key, B)
        return B

    # ------------------------------------------------------------------ constants
    def _fun_grad64(self, x: np.ndarray) -> tuple[float, np.ndarray]:
        z = torch.from_numpy(self._A64 @ x)
        b = torch.from_numpy(self._b64)
        xt = torch.from_numpy(x)[None]
        f = float((self.phi(z, b).numpy() * self._w64).sum()) + float(self.reg(xt, self.lam)[0])
        g = self._A64.T @ (self.dphi(z, b).numpy() * self._w64)
        return f, g + self.reg_grad(xt, self.lam)[0].numpy()

    def _hess64(self, x: np.ndarray) -> np.ndarray:
        z = torch.from_numpy(self._A64 @ x)
        D = self.d2phi(z, torch.from_numpy(self._b64)).numpy() * self._w64
        H = np.asarray((self._A64.T @ sp.diags(D) @ self._A64).toarray())
        return H + np.diag(self.reg_hess_diag(torch.from_numpy(x), self.lam).numpy())

    def _solve(self) -> tuple[np.ndarray, float, float]:
        key = solver.cache_key(
            type(self).__name__,
            self.lam,
            self._offsets64,
            self._A64.indptr,
            self._A64.indices,
            self._A64.data,
            self._b64,
        )
        hess = self._hess64 if self.d <= 4096 else None

        def compute() -> tuple[np.ndarray, float, float]:
            with single_threaded():
                return solver.solve(self._fun_grad64, hess, np.zeros(self.d))

        return solver.cached_solve(key, compute)

    def _solved(self) -> tuple[np.ndarray, float] | None:
        """``(x*, f*)``, or None when no minimiser was found (e.g. separable data, ``lam = 0``)."""
        x, f, gn = self._solution.get()
        if not gn <= solver.ACCEPT_TOL:
            log.warning("%s: no minimiser found (||grad f|| = %.3g); f_star unknown", self.name, gn)
            return None
        return x, f

    def _x_star_fn(self) -> torch.Tensor | None:
        sol = self._solved()
        return None if sol is None else torch.from_numpy(sol[0])

    def _node_grads64(self, x: np.ndarray) -> np.ndarray:
        z = torch.from_numpy(self._A64 @ x)
        dz = self.dphi(z, torch.from_numpy(self._b64)).numpy()
        G = glm_consts.node_grads(self._A64, self._offsets64, dz)
        return G + self.reg_grad(torch.from_numpy(x)[None], self.lam).numpy()

    def _compute_consts(self) -> Consts:
        with single_threaded():
            return self._compute_consts_now()

    def _compute_consts_now(self) -> Consts:
        r = self.REG_CURV * self.lam
        L_i, L = self._smoothness(r)
        extra: dict[str, float | None] = self._extra_consts()
        sol = None if self._solution is None else self._solved()
        if sol is not None:
            x, extra["f_star"] = sol
            extra["zeta2"] = float(np.mean(np.sum(self._node_grads64(x) ** 2, axis=1)))
        return Consts.from_L_i(L_i, L=L, **extra)

    def _smoothness(self, r: float) -> tuple[np.ndarray, float]:
        """``(L_i, L)`` of :func:`problems.glm_consts.smoothness`, memoised on disk
        (:mod:`problems.cache`) under the data's bytes (rows in split order), the node offsets,
        the row weights and the curvatures: another file, split, node count or ``lam`` is
        another entry."""
        A, c = self._A64, self.PHI_CURV
        k = cache.key(
            "glm-smoothness-v1",
            A.data,
            A.indices,
            A.indptr,
            A.shape,
            self._offsets64,
            self._w64,
            c,
            r,
        )  # noqa: E501

        def compute() -> dict[str, np.ndarray]:
            L_i, L = glm_consts.smoothness(A, self._offsets64, self._w64, c, r)
            return {"L_i": L_i, "L": np.float64(L)}

        z = cache.memo("smoothness", k, {"L_i": "f", "L": "f"}, compute)
        if z["L_i"].shape != (self._offsets64.size - 1,):
            z = compute()
        return z["L_i"], float(z["L"])

    def _extra_consts(self) -> dict[str, float | None]:
        """``mu`` and ``L_pm`` where known (subclasses)."""
        return {}

    def smoothness_matrices(self) -> torch.Tensor:
        """``L_i = PHI_CURV (1/m_i) A_i^T A_i + REG_CURV lam I`` for the held nodes, float64
        ``(m, d, d)`` (the Hessian bound ``phi'' <= PHI_CURV``, ``R'' <= REG_CURV lam``; logistic
        regression: ``(1/(4 m_i)) A_i^T A_i + lam I``, least squares: ``(1/m_i) A_i^T A_i +
        lam I``). All held nodes' Gram matrices come from one sparse product of the
        block-diagonal design (node ``j``'s rows in column block ``j``), no loop over nodes."""
        nodes = self.nodes.cpu().numpy()
        m, d = nodes.size, self.d
        if m * d * d > _MAX_SMOOTHNESS_ENTRIES:
            raise ValueError(
                f"{self.name}: the smoothness matrices of {m} nodes would hold m d^2 = "
                f"{m * d * d} entries (> {_MAX_SMOOTHNESS_ENTRIES}); hold fewer nodes"
            )
        starts, counts = self._offsets64[nodes], np.diff(self._offsets64)[nodes]
        rows = np.concatenate([np.arange(s, s + c) for s, c in zip(starts, counts, strict=True)])
        local = np.repeat(np.arange(m), counts)
        sub = sp.csr_matrix(
            sp.diags(np.sqrt(self.PHI_CURV / counts[local])) @ self._A64[rows], dtype=np.float64
        )
        cols = sub.indices.astype(np.int64) + d * np.repeat(local, np.diff(sub.indptr))
        B = sp.csr_matrix((sub.data, cols, sub.indptr), shape=(rows.size, m * d))
        G = (B.T @ B).tocoo()
        out = np.zeros((m, d, d))
        out[G.row // d, G.row % d, G.col % d] = G.data
        out[:, np.arange(d), np.arange(d)] += self.REG_CURV * self.lam
        return torch.from_numpy(out)

    def sample_smoothness(self) -> float:
        """Mean-square per-sample smoothness ``calL = sqrt(mean_i calL_i^2)`` with
        ``calL_i^2 = (1/m_i) sum_j L_ij^2`` and ``L_ij = PHI_CURV ||a_j||^2 + REG_CURV lam``, the
        smoothness of the single-sample function ``f_ij`` (its Hessian is
        ``phi'' a_j a_j^T + grad^2 R``). Then ``(1/m_i) sum_j ||grad f_ij(x) - grad f_ij(y)||^2
        <= calL_i^2 ||x - y||^2``, the assumption of VR-MARINA (Gorbunov et al. 2021, arXiv
        2102.07845, Assumption 3.2) and of DASHA-PAGE (Tyurin & Richtárik 2022, arXiv
        2202.01268)."""
        row_sq = np.asarray(self._A64.multiply(self._A64).sum(axis=1)).reshape(-1)
        L_ij = self.PHI_CURV * row_sq + self.REG_CURV * self.lam
        per_node = np.add.reduceat(L_ij**2, self._offsets64[:-1]) / np.diff(self._offsets64)
        return float(np.sqrt(per_node.mean()))

    # ------------------------------------------------------------------ per-class maths
    @staticmethod
    def phi(z: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    @staticmethod
    def dphi(z: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    @staticmethod
    def d2phi(z: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    @staticmethod
    def reg(X: torch.Tensor, lam: float) -> torch.Tensor:
        """``(m,)`` regulariser of each row."""
        return 0.5 * lam * (X * X).sum(1)

    @staticmethod
    def reg_grad(X: torch.Tensor, lam: float) -> torch.Tensor:
        return lam * X

    @staticmethod
    def reg_hess_diag(x: torch.Tensor, lam: float) -> torch.Tensor:
        return torch.full_like(x, lam)
