"""The models of :mod:`systems.layers` as runnable modules, a user's module, and what
:mod:`systems.pays` measures on them: the backward profile and the compute time.

The modules are built so that their parameters are, in order, exactly the shapes of
:func:`systems.layers.model_shapes` (a test holds them to it): ResNet-18/50/101 in the
torchvision layout (basic or bottleneck blocks, stride on the first 3x3 convolution of a basic
block and on the 3x3 of a bottleneck, the projection shortcut's convolution and batch norm after
the block's own), VGG-16 as torchvision's ``vgg16`` (dropout left out: it has no parameters and
next to no cost), BERT-base as the reference ``BertModel`` (embeddings, 12 post-norm encoder
layers, the tanh pooler). No model library is needed. :func:`load_module` builds any module a
user names as ``package.module:factory`` (a callable returning an ``nn.Module``).

:func:`profile_module` runs one forward and backward pass of a module on this machine's CPU and
records, by a hook on every parameter (``register_post_accumulate_grad_hook``), when its
gradient is ready, as a fraction of the backward pass; with the forward's share of the
iteration. Only the shape of the profile is used by :mod:`systems.pays` (scaled to the target
device's compute time), because where a layer's gradient falls in the backward pass depends on
the layers' relative costs more than on the device; on a GPU at a large batch the relative
costs are not the CPU's at a small one, which is an assumption the report states.
:func:`time_compute` times whole forward+backward passes at a given batch on a given device
(CUDA synchronised at both ends), the loss being the mean square of the output.
"""

from __future__ import annotations

import importlib
import statistics
import time
from collections.abc import Callable

import torch
from torch import nn

from systems.layers import MODELS, VGG16_CONFIG, model_shapes

__all__ = [
    "PROFILE_BATCH",
    "InputSpec",
    "backward_profile",
    "build",
    "example_input",
    "load_module",
    "profile_module",
    "time_compute",
]

# What one profiled pass feeds each model: ResNets a batch of 2 images of 224x224 (batch norm
# needs more than one value per channel), VGG-16 one image (no batch norm; it is the heaviest),
# BERT one sequence of 128 tokens.
PROFILE_BATCH = {"resnet18": 2, "resnet50": 2, "resnet101": 2, "vgg16": 1, "bert-base": 1}


class InputSpec:
    """One sample's input: float ``shape`` (standard normal), or token ids below ``vocab``."""

    def __init__(self, shape: tuple[int, ...], vocab: int | None = None) -> None:
        self.shape, self.vocab = tuple(shape), vocab

    def make(self, batch: int, gen: torch.Generator) -> torch.Tensor:
        if self.vocab is not None:
            return torch.randint(0, self.vocab, (batch, *self.shape), generator=gen)
        return torch.randn(batch, *self.shape, generator=gen)

    def describe(self, batch: int) -> str:
        dims = "x".join(map(str, self.shape))
        return f"batch {batch}, " + (f"{dims} token ids < {self.vocab}" if self.vocab else dims)


INPUTS = {
    "resnet18": InputSpec((3, 224, 224)),
    "resnet50": InputSpec((3, 224, 224)),
    "resnet101": InputSpec((3, 224, 224)),
    "vgg16": InputSpec((3, 224, 224)),
    "bert-base": InputSpec((128,), vocab=30522),
}


class _Basic(nn.Module):
    def __init__(self, inplanes: int, planes: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.down = None
        if stride != 1 or inplanes != planes:
            self.down = nn.Sequential(nn.Conv2d(inplanes, planes, 1, stride, bias=False),
                                      nn.BatchNorm2d(planes))  # fmt: skip

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return torch.relu(y + (x if self.down is None else self.down(x)))


class _Bottleneck(nn.Module):
    def __init__(self, inplanes: int, planes: int, stride: int) -> None:
        super().__init__()
        out = 4 * planes
        self.conv1 = nn.Conv2d(inplanes, planes, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = nn.Conv2d(planes, out, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(out)
        self.down = None
        if stride != 1 or inplanes != out:
            self.down = nn.Sequential(nn.Conv2d(inplanes, out, 1, stride, bias=False),
                                      nn.BatchNorm2d(out))  # fmt: skip

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.bn1(self.conv1(x)))
        y = torch.relu(self.bn2(self.conv2(y)))
        y = self.bn3(self.conv3(y))
        return torch.relu(y + (x if self.down is None else self.down(x)))


class _ResNet(nn.Module):
    def __init__(self, blocks: tuple[int, int, int, int], classes: int = 1000,
                 bottleneck: bool = True) -> None:  # fmt: skip
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        block, expansion = (_Bottleneck, 4) if bottleneck else (_Basic, 1)
        layers, inplanes = [], 64
        for stage, count in enumerate(blocks):
            planes = 64 * 2**stage
            for b in range(count):
                layers.append(block(inplanes, planes, 2 if b == 0 and stage > 0 else 1))
                inplanes = expansion * planes
        self.layers = nn.Sequential(*layers)
        self.fc = nn.Linear(inplanes, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = nn.functional.max_pool2d(torch.relu(self.bn1(self.conv1(x))), 3, 2, 1)
        x = self.layers(x)
        return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1))


class _VGG16(nn.Module):
    def __init__(self, classes: int = 1000) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        cin = 3
        for c in VGG16_CONFIG:
            if c == "M":
                layers.append(nn.MaxPool2d(2, 2))
            else:
                layers += [nn.Conv2d(cin, c, 3, padding=1), nn.ReLU(inplace=True)]
                cin = c
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Sequential(
            nn.Linear(cin * 7 * 7, 4096), nn.ReLU(inplace=True),
            nn.Linear(4096, 4096), nn.ReLU(inplace=True),
            nn.Linear(4096, classes),
        )  # fmt: skip

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = nn.functional.adaptive_avg_pool2d(self.features(x), 7)
        return self.classifier(torch.flatten(x, 1))


class _BertLayer(nn.Module):
    def __init__(self, hidden: int, heads: int, ff: int) -> None:
        super().__init__()
        self.heads = heads
        self.q, self.k, self.v = (nn.Linear(hidden, hidden) for _ in range(3))
        self.o = nn.Linear(hidden, hidden)
        self.ln1 = nn.LayerNorm(hidden)
        self.ff1 = nn.Linear(hidden, ff)
        self.ff2 = nn.Linear(ff, hidden)
        self.ln2 = nn.LayerNorm(hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, h = x.shape

        def split(y: torch.Tensor) -> torch.Tensor:
            return y.view(b, t, self.heads, h // self.heads).transpose(1, 2)

        att = nn.functional.scaled_dot_product_attention(
            split(self.q(x)), split(self.k(x)), split(self.v(x))
        )
        x = self.ln1(x + self.o(att.transpose(1, 2).reshape(b, t, h)))
        return self.ln2(x + self.ff2(nn.functional.gelu(self.ff1(x))))


class _Bert(nn.Module):
    def __init__(self, layers: int = 12, hidden: int = 768, ff: int = 3072,
                 vocab: int = 30522) -> None:  # fmt: skip
        super().__init__()
        self.word = nn.Embedding(vocab, hidden)
        self.position = nn.Embedding(512, hidden)
        self.segment = nn.Embedding(2, hidden)
        self.ln = nn.LayerNorm(hidden)
        self.layers = nn.Sequential(*[_BertLayer(hidden, hidden // 64, ff) for _ in range(layers)])
        self.pool = nn.Linear(hidden, hidden)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(ids.shape[1], device=ids.device)
        x = self.word(ids) + self.position(pos) + self.segment(torch.zeros_like(ids))
        x = self.layers(self.ln(x))
        return torch.tanh(self.pool(x[:, 0]))


def build(model: str) -> nn.Module:
    """The module of ``model`` (a name of :data:`systems.layers.MODELS`), default-initialised.

    Raises:
        ValueError: an unknown ``model``.
    """
    makers: dict[str, Callable[[], nn.Module]] = {
        "resnet18": lambda: _ResNet((2, 2, 2, 2), bottleneck=False),
        "resnet50": lambda: _ResNet((3, 4, 6, 3)),
        "resnet101": lambda: _ResNet((3, 4, 23, 3)),
        "vgg16": _VGG16,
        "bert-base": _Bert,
    }
    if model not in makers:
        raise ValueError(f"unknown model {model!r}; allowed: {', '.join(MODELS)}")
    return makers[model]()


def example_input(model: str, batch: int, gen: torch.Generator) -> torch.Tensor:
    """A random input batch for the built-in ``model``: images 3x224x224, or 128 token ids."""
    return INPUTS[model].make(batch, gen)


def load_module(spec: str) -> nn.Module:
    """The module ``factory()`` returns, for ``spec`` = ``"package.module:factory"``.

    The module is imported as Python imports any (``sys.path``, the working directory first
    under ``python -m``): this runs the user's code, as asked on the command line.

    Raises:
        ValueError: a malformed ``spec``, a module that cannot be imported, no such callable,
            or a factory that fails or returns something other than an ``nn.Module`` with
            parameters that need gradients.
    """
    path, colon, attr = spec.partition(":")
    if not colon or not path or not attr:
        raise ValueError(f"{spec!r} is not of the form package.module:factory")
    try:
        mod = importlib.import_module(path)
    except Exception as e:  # the user's module: any error on import is theirs to see
        raise ValueError(f"cannot import {path!r}: {type(e).__name__}: {e}") from None
    obj = mod
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise ValueError(f"module {path!r} has no attribute {attr!r}")
        obj = getattr(obj, part)
    if not callable(obj):
        raise ValueError(f"{spec!r} is not callable (a factory returning an nn.Module)")
    try:
        net = obj()
    except Exception as e:
        raise ValueError(f"{spec}() failed: {type(e).__name__}: {e}") from None
    if not isinstance(net, nn.Module):
        raise ValueError(f"{spec}() returned a {type(net).__name__}, not a torch.nn.Module")
    if not any(p.requires_grad for p in net.parameters()):
        raise ValueError(f"{spec}() returned a module without trainable parameters")
    return net


def _loss(out) -> torch.Tensor:
    """The mean square of every floating tensor the module returned (a tensor, tuple or dict)."""
    if isinstance(out, torch.Tensor):
        return out.float().square().mean()
    items = out.values() if isinstance(out, dict) else out
    parts = [o.float().square().mean() for o in items
             if isinstance(o, torch.Tensor) and o.is_floating_point()]  # fmt: skip
    if not parts:
        raise ValueError(f"the module returned {type(out).__name__} with no floating tensor")
    return torch.stack(parts).sum()


def profile_module(net: nn.Module, x: torch.Tensor, repeats: int = 2) -> dict:
    """When each trainable parameter's gradient is ready in a backward pass of ``net`` on ``x``.

    One warm-up pass, then ``repeats`` timed ones; per parameter the median over them. A
    parameter that gets no gradient counts as ready at the start of the backward pass.

    Returns:
        ``{"ready": [fraction of the backward pass per trainable tensor, definition order],
        "forward_s", "backward_s", "backward_fraction": backward / (forward + backward)}``.
    """
    params = [p for p in net.parameters() if p.requires_grad]
    stamps = [0.0] * len(params)

    def stamp(i: int):
        def hook(_p: torch.Tensor) -> None:
            stamps[i] = time.perf_counter()

        return hook

    handles = [p.register_post_accumulate_grad_hook(stamp(i)) for i, p in enumerate(params)]
    net.train()
    fracs, fwd, bwd = [], [], []
    try:
        for rep in range(repeats + 1):
            net.zero_grad(set_to_none=True)
            stamps[:] = [0.0] * len(params)
            t0 = time.perf_counter()
            loss = _loss(net(x))
            t1 = time.perf_counter()
            loss.backward()
            t2 = time.perf_counter()
            if rep == 0:
                continue
            fwd.append(t1 - t0)
            bwd.append(t2 - t1)
            fracs.append([min(1.0, max(0.0, (s - t1) / (t2 - t1))) for s in stamps])
    finally:
        for h in handles:
            h.remove()
    ready = [statistics.median(col) for col in zip(*fracs, strict=True)]
    f, b = statistics.median(fwd), statistics.median(bwd)
    return {"ready": ready, "forward_s": f, "backward_s": b, "backward_fraction": b / (f + b)}


def backward_profile(model: str, repeats: int = 2, seed: int = 0) -> dict:
    """:func:`profile_module` of the built-in ``model`` on this CPU at :data:`PROFILE_BATCH`,
    with ``"inputs"``: what one pass was fed."""
    torch.manual_seed(seed)
    net = build(model)
    shapes = [tuple(p.shape) for p in net.parameters()]
    if shapes != [tuple(s) for s in model_shapes(model)]:  # pragma: no cover - a build bug
        raise RuntimeError(f"{model}: the module's parameters differ from systems.layers")
    gen = torch.Generator().manual_seed(seed)
    batch = PROFILE_BATCH[model]
    out = profile_module(net, example_input(model, batch, gen), repeats)
    return {**out, "inputs": INPUTS[model].describe(batch)}


def time_compute(
    net: nn.Module, x: torch.Tensor, device: torch.device | str = "cpu", repeats: int = 3
) -> dict:
    """Seconds of one forward+backward pass of ``net`` on ``x`` on ``device``: one warm-up
    pass, then the median of ``repeats`` (CUDA synchronised before and after each).

    Returns:
        ``{"compute_s": median, "all_s": [each timed pass], "device": str(device)}``.
    """
    dev = torch.device(device)
    net = net.to(dev).train()
    x = x.to(dev)

    def sync() -> None:
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)

    times = []
    for rep in range(repeats + 1):
        net.zero_grad(set_to_none=True)
        sync()
        t0 = time.perf_counter()
        _loss(net(x)).backward()
        sync()
        if rep:
            times.append(time.perf_counter() - t0)
    return {"compute_s": statistics.median(times), "all_s": times, "device": str(dev)}
