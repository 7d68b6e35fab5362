"""A shipped task on which communication is a real share of a training step: a wide MLP learning
a fixed random teacher network's labels.

Nothing is downloaded: the data are generated from a seed. Inputs are standard normal vectors in
``DIM`` = 32 dimensions; the teacher is a random two-layer network, ``x -> tanh(x W1 / sqrt(DIM))
W2`` with ``TEACHER_HIDDEN`` = 16 hidden units and ``CLASSES`` = 10 outputs (``W1``, ``W2``
standard normal), and a sample's label is the teacher's largest output. The student
(:func:`wide_mlp`) is ``DIM -> WIDTH -> WIDTH -> CLASSES`` with ReLU, ``WIDTH`` = 2048: 4.28 M
parameters (17 MB in float32), so that a gradient all-reduce at 1 Gbit/s takes longer than the
step's own compute on one CPU thread, while the task is learnt to about 75 % test accuracy in a
few hundred SGD steps (the teacher's labels are not linearly separable in the inputs; 10 % is
chance). ``N_TRAIN`` = 16384 training and ``N_TEST`` = 2048 held-out samples come from the same
generator, the test set after the training set.
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn

__all__ = ["CLASSES", "DIM", "N_TEST", "N_TRAIN", "WIDTH", "teacher_data", "wide_mlp"]

DIM, TEACHER_HIDDEN, CLASSES, WIDTH = 32, 16, 10, 2048
N_TRAIN, N_TEST = 16384, 2048
_META = torch.device("meta")


def teacher_data(
    seed: int = 0, n_train: int = N_TRAIN, n_test: int = N_TEST
) -> tuple[tuple[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]:
    """``((X_train, y_train), (X_test, y_test))``, float32 inputs of ``DIM`` features and int64
    labels in ``[0, CLASSES)``, the same for the same arguments on every machine."""
    if n_train < 1 or n_test < 1:
        raise ValueError(f"n_train and n_test must be >= 1, got {n_train}, {n_test}")
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(n_train + n_test, DIM, generator=g)
    W1 = torch.randn(DIM, TEACHER_HIDDEN, generator=g)
    W2 = torch.randn(TEACHER_HIDDEN, CLASSES, generator=g)
    y = (torch.tanh(X @ W1 / math.sqrt(DIM)) @ W2).argmax(1)
    return (X[:n_train], y[:n_train]), (X[n_train:], y[n_train:])


def wide_mlp(width: int = WIDTH) -> nn.Module:
    """The student: ``Linear(DIM, width)``, ReLU, ``Linear(width, width)``, ReLU,
    ``Linear(width, CLASSES)``, on the meta device (the caller materialises and initialises)."""
    if width < 1:
        raise ValueError(f"width must be >= 1, got {width}")
    return nn.Sequential(
        nn.Linear(DIM, width, device=_META),
        nn.ReLU(),
        nn.Linear(width, width, device=_META),
        nn.ReLU(),
        nn.Linear(width, CLASSES, device=_META),
    )
