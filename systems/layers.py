"""Parameter-tensor shapes of the models the performance model is asked about.

The shapes are built from the architectures' published definitions, so no model library is
needed: ResNet-18/50/101 as in He et al. 2016 (arXiv 1512.03385, Table 1) in the torchvision
layout (ResNet-18: basic blocks of two 3x3 convolutions; ResNet-50/101: bottleneck blocks with
the stride on the 3x3 convolution; a 1x1 projection shortcut with its batch norm where the shape
changes, batch-norm weight and bias as parameters, a 1000-way classifier), VGG-16 as
configuration D of Simonyan & Zisserman 2015 (arXiv 1409.1556, Table 1: thirteen 3x3
convolutions with biases, then 4096-4096-1000 fully connected layers on the 7x7x512 map, as
torchvision's ``vgg16`` without batch norm), and BERT-base as in Devlin et al. 2019 (arXiv
1810.04805, Sec. 3: 12 layers, hidden 768, 12 heads, feed-forward 3072) with the uncased
WordPiece vocabulary of 30522 tokens, 512 positions, 2 segment types and the pooler, as in the
reference ``BertModel``. The totals are the commonly quoted parameter counts of those
implementations: ResNet-18 11,689,512, ResNet-50 25,557,032, ResNet-101 44,549,160, VGG-16
138,357,544, BERT-base 109,482,240 (a test holds the shapes to them).
"""

from __future__ import annotations

import math

__all__ = ["MODELS", "TOTALS", "VGG16_CONFIG", "model_shapes", "model_sizes"]

Shape = tuple[int, ...]

TOTALS = {
    "resnet18": 11_689_512,
    "resnet50": 25_557_032,
    "resnet101": 44_549_160,
    "vgg16": 138_357_544,
    "bert-base": 109_482_240,
}


def _bn(c: int) -> list[Shape]:
    return [(c,), (c,)]


def _resnet(blocks: tuple[int, int, int, int], classes: int = 1000) -> list[Shape]:
    shapes: list[Shape] = [(64, 3, 7, 7), *_bn(64)]
    inplanes = 64
    for stage, count in enumerate(blocks):
        planes = 64 * 2**stage
        for b in range(count):
            shapes += [(planes, inplanes, 1, 1), *_bn(planes)]
            shapes += [(planes, planes, 3, 3), *_bn(planes)]
            shapes += [(4 * planes, planes, 1, 1), *_bn(4 * planes)]
            if b == 0:
                shapes += [(4 * planes, inplanes, 1, 1), *_bn(4 * planes)]
            inplanes = 4 * planes
    return shapes + [(classes, inplanes), (classes,)]


def _resnet_basic(blocks: tuple[int, int, int, int], classes: int = 1000) -> list[Shape]:
    shapes: list[Shape] = [(64, 3, 7, 7), *_bn(64)]
    inplanes = 64
    for stage, count in enumerate(blocks):
        planes = 64 * 2**stage
        for b in range(count):
            shapes += [(planes, inplanes, 3, 3), *_bn(planes), (planes, planes, 3, 3), *_bn(planes)]
            if b == 0 and stage > 0:  # stride 2 and more channels: a projection shortcut
                shapes += [(planes, inplanes, 1, 1), *_bn(planes)]
            inplanes = planes
    return shapes + [(classes, inplanes), (classes,)]


# VGG configuration D: output channels of each 3x3 convolution, "M" a 2x2 max pool.
VGG16_CONFIG = (64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M",
                512, 512, 512, "M")  # fmt: skip


def _vgg16(classes: int = 1000) -> list[Shape]:
    shapes: list[Shape] = []
    cin = 3
    for c in VGG16_CONFIG:
        if c != "M":
            shapes += [(c, cin, 3, 3), (c,)]
            cin = c
    fc = [(4096, cin * 7 * 7), (4096,), (4096, 4096), (4096,), (classes, 4096), (classes,)]
    return shapes + fc


def _bert(layers: int = 12, hidden: int = 768, ff: int = 3072, vocab: int = 30522) -> list[Shape]:
    ln = [(hidden,), (hidden,)]
    shapes: list[Shape] = [(vocab, hidden), (512, hidden), (2, hidden), *ln]
    for _ in range(layers):
        for _ in range(4):  # query, key, value, attention output
            shapes += [(hidden, hidden), (hidden,)]
        shapes += ln
        shapes += [(ff, hidden), (ff,), (hidden, ff), (hidden,)]
        shapes += ln
    return shapes + [(hidden, hidden), (hidden,)]


MODELS = {
    "resnet18": lambda: _resnet_basic((2, 2, 2, 2)),
    "resnet50": lambda: _resnet((3, 4, 6, 3)),
    "resnet101": lambda: _resnet((3, 4, 23, 3)),
    "vgg16": _vgg16,
    "bert-base": _bert,
}


def model_shapes(model: str) -> list[Shape]:
    """The parameter tensors' shapes of ``model``, in definition (forward) order.

    Raises:
        ValueError: ``model`` is not one of :data:`MODELS`.
    """
    if model not in MODELS:
        raise ValueError(f"unknown model {model!r}; allowed: {', '.join(MODELS)}")
    return MODELS[model]()


def model_sizes(model: str) -> list[int]:
    """The parameter tensors' element counts of ``model``, in definition (forward) order."""
    return [math.prod(s) for s in model_shapes(model)]
