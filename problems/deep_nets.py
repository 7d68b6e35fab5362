"""The deep-net problems of the registry: ``mlp``, ``cnn`` and ``resnet18``."""

from __future__ import annotations

from typing import Any, ClassVar

import torch
import torch.nn as nn

from problems import nets
from problems.images import load_images
from problems.splits import split as split_rows
from problems.torch_model import TorchModel

__all__ = ["MLPProblem", "CNNProblem", "ResNet18Problem"]

NET_KNOBS: dict[str, tuple[Any, str]] = {
    "batched": (True, "one vmapped pass over nodes (False: node by node, same numbers)"),
    "chunk": (256, "samples per node per pass for full gradients and losses"),
    "samples": (0, "training rows: the first SAMPLES (0: all; synthetic: how many, 0 = 1000)"),
    "test_samples": (200, "held-out rows of synthetic data"),
    "holdout": (0.2, "held-out fraction of the bundled sets"),
}


class _Net(TorchModel):
    synthetic_shape: ClassVar[tuple[int, ...]] = (1, 8, 8)

    @classmethod
    def make_model(cls, shape: tuple[int, ...], classes: int, **knobs: Any) -> nn.Module:
        raise NotImplementedError

    @classmethod
    def build(
        cls,
        *,
        dataset: str | None,
        split: str,
        nodes: int,
        lam: float | None,
        dtype: torch.dtype,
        device: torch.device | str,
        seed: int,
        x0: str,
        batched: bool = True,
        chunk: int = 256,
        samples: int = 0,
        test_samples: int = 200,
        holdout: float = 0.2,
        **model_knobs: Any,
    ) -> TorchModel:
        """Load the data, split it among ``nodes`` and build the network problem."""
        if isinstance(samples, bool) or not isinstance(samples, int) or samples < 0:
            raise ValueError(f"{cls.name}: samples must be an integer >= 0, got {samples!r}")
        ds = load_images(
            dataset or cls.default_dataset,
            cls.name,
            shape=cls.synthetic_shape,
            seed=seed,
            samples=samples or None,
            test_samples=test_samples,
            holdout=holdout,
        )
        order, counts = split_rows(split, ds.y, nodes, seed=seed, problem=cls.name)
        model = cls.make_model(tuple(ds.X.shape[1:]), ds.num_classes, **model_knobs)
        return cls(
            model,
            ds,
            order,
            counts,
            lam=0.0 if lam is None else lam,
            dtype=dtype,
            device=device,
            seed=seed,
            x0=x0,
            batched=batched,
            chunk=chunk,
        )


class MLPProblem(_Net):
    """One-hidden-layer ReLU network (cross-entropy) on ``digits`` or a bundled tabular set."""

    name = "mlp"
    description = "one-hidden-layer MLP, cross-entropy (default: sklearn digits)"
    knobs = {**NET_KNOBS, "hidden": (64, "hidden units")}

    @classmethod
    def make_model(cls, shape: tuple[int, ...], classes: int, hidden: int = 64) -> nn.Module:
        if isinstance(hidden, bool) or not isinstance(hidden, int) or hidden < 1:
            raise ValueError(f"mlp: hidden must be a positive integer, got {hidden!r}")
        features = 1
        for s in shape:
            features *= s
        return nets.mlp(features, hidden, classes)


class CNNProblem(_Net):
    """Two conv blocks and a linear layer (cross-entropy) on 8x8 ``digits``."""

    name = "cnn"
    description = "small CNN, cross-entropy (default: sklearn digits 8x8)"
    knobs = NET_KNOBS

    @classmethod
    def make_model(cls, shape: tuple[int, ...], classes: int) -> nn.Module:
        if len(shape) != 3 or shape[1] != shape[2] or shape[1] % 4:
            raise ValueError(f"cnn: needs square images with side divisible by 4, got {shape}")
        return nets.cnn(shape[0], classes, shape[1])


class ResNet18Problem(_Net):
    """ResNet-18 (CIFAR variant, GroupNorm) on ``cifar10:PATH`` or synthetic 3x32x32 images."""

    name = "resnet18"
    description = "ResNet-18 CIFAR variant with GroupNorm (cifar10:PATH or synthetic images)"
    default_dataset = "synthetic"
    synthetic_shape = (3, 32, 32)
    knobs = {**NET_KNOBS, "groups": (32, "GroupNorm groups")}

    @classmethod
    def make_model(cls, shape: tuple[int, ...], classes: int, groups: int = 32) -> nn.Module:
        if tuple(shape) != (3, 32, 32):
            raise ValueError(f"resnet18: needs 3x32x32 images, got {shape}")
        return nets.resnet18(classes, groups)
