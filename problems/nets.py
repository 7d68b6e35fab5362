"""Networks of the deep-net problems, built on the meta device (no storage, no global RNG).

Parameters live in one flat vector owned by the problem (:mod:`problems.torch_model`), which
initialises it with PyTorch's default scheme from a seeded stream.

Normalisation is GroupNorm (Wu & He 2018, arXiv 1803.08494), not BatchNorm: BatchNorm makes a
sample's loss depend on the other samples of its batch, so a minibatch gradient is no longer an
unbiased estimate of the local gradient (which every stochastic method's theory assumes), and
its running statistics are state that a functional, vmapped call cannot update. GroupNorm has
neither problem and is the usual choice under non-i.i.d. splits (Hsieh et al. 2020, arXiv
1910.00189).
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

__all__ = ["mlp", "cnn", "resnet18", "BasicBlock", "ResNet18"]

_META = torch.device("meta")


def mlp(in_features: int, hidden: int, classes: int) -> nn.Module:
    """Flatten, ``Linear(in, hidden)``, ReLU, ``Linear(hidden, classes)``."""
    return nn.Sequential(
        nn.Flatten(),
        nn.Linear(in_features, hidden, device=_META),
        nn.ReLU(),
        nn.Linear(hidden, classes, device=_META),
    )


def cnn(in_channels: int, classes: int, side: int = 8) -> nn.Module:
    """Two 3x3 conv (16, 32 channels) + ReLU + 2x2 max-pool blocks, then a linear layer."""
    return nn.Sequential(
        nn.Conv2d(in_channels, 16, 3, padding=1, device=_META),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1, device=_META),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(32 * (side // 4) ** 2, classes, device=_META),
    )


class BasicBlock(nn.Module):
    """Two 3x3 convolutions with a residual connection (He et al. 2016, arXiv 1512.03385)."""

    def __init__(self, cin: int, cout: int, stride: int, groups: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False, device=_META)
        self.gn1 = nn.GroupNorm(groups, cout, device=_META)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False, device=_META)
        self.gn2 = nn.GroupNorm(groups, cout, device=_META)
        self.shortcut = nn.Sequential()
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(
                nn.Conv2d(cin, cout, 1, stride, bias=False, device=_META),
                nn.GroupNorm(groups, cout, device=_META),
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.gn1(self.conv1(x)))
        out = self.gn2(self.conv2(out))
        return F.relu(out + self.shortcut(x))


class ResNet18(nn.Module):
    """ResNet-18 for 32x32 inputs, the variant of the EF21, DASHA and PowerSGD experiments.

    A 3x3 stem convolution without max-pooling, BasicBlocks ``[2, 2, 2, 2]`` with 64, 128,
    256, 512 channels and strides 1, 2, 2, 2, 4x4 average pooling and a linear classifier
    (K. Liu's ``pytorch-cifar`` layout), with GroupNorm in place of BatchNorm.
    """

    def __init__(self, classes: int = 10, groups: int = 32, in_channels: int = 3) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, 64, 3, 1, 1, bias=False, device=_META)
        self.gn1 = nn.GroupNorm(groups, 64, device=_META)
        layers, cin = [], 64
        for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
            layers.append(
                nn.Sequential(
                    BasicBlock(cin, cout, stride, groups), BasicBlock(cout, cout, 1, groups)
                )
            )
            cin = cout
        self.layers = nn.Sequential(*layers)
        self.linear = nn.Linear(512, classes, device=_META)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.layers(F.relu(self.gn1(self.conv1(x))))
        return self.linear(torch.flatten(F.avg_pool2d(out, 4), 1))


def resnet18(classes: int = 10, groups: int = 32) -> nn.Module:
    if 64 % groups:
        raise ValueError(f"groups must divide 64, got {groups}")
    return ResNet18(classes, groups)
