"""Encoders and projection heads.

- ResNet-18/50 from torchvision with the CIFAR stem of Chuang et al. 2020 (DCL): a 3x3 stride-1 first
  convolution and no max-pool, for 32x32 inputs; the standard stem for larger images.
- ``small``: a four-layer conv net for the 16x16 embedded digits (CPU-sized).
- SimpleConvNet (Bahng et al. 2020): four 7x7 convolutions (16, 32, 64, 128 channels) with BatchNorm,
  global average pooling. Barbano et al. 2023 end it with tanh (features of either sign, on which the
  contrastive loss and FairKL act directly, without a projection head).
- Projection head ``d → hidden → out`` (Linear without bias, BatchNorm, ReLU, Linear): DCL's
  2048 → 512 → 128 for ResNet-50, 512 → 512 → 128 for ResNet-18; MoCo v2's has no BatchNorm.
  The biased track uses none on its small nets (Barbano et al.: the loss acts on the tanh features).
"""

from __future__ import annotations

from torch import Tensor, nn

from domains.base import require

FEATURE_DIM = {"small": 128, "simpleconvnet": 128, "resnet18": 512, "resnet50": 2048}
HEAD_HIDDEN = {"small": 128, "simpleconvnet": 128, "resnet18": 512, "resnet50": 512}


def _activation(name: str) -> nn.Module:
    return nn.Tanh() if name == "tanh" else nn.ReLU(inplace=True)


def _conv_bn(cin: int, cout: int, kernel: int, stride: int = 1) -> list[nn.Module]:
    return [nn.Conv2d(cin, cout, kernel, stride, kernel // 2, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True)]


class SmallConvNet(nn.Module):
    """16x16 → 128 features: conv 32, 64 (stride 2), 128 (stride 2), 128 (stride 2) with BatchNorm,
    ReLU between, ``final`` activation (relu, or tanh for the biased track), average pool."""

    def __init__(self, in_channels: int = 3, final: str = "relu"):
        super().__init__()
        layers = [*_conv_bn(in_channels, 32, 3), *_conv_bn(32, 64, 3, 2), *_conv_bn(64, 128, 3, 2),
                  *_conv_bn(128, 128, 3, 2)[:2], _activation(final), nn.AdaptiveAvgPool2d(1), nn.Flatten()]
        self.net = nn.Sequential(*layers)

    def forward(self, x: Tensor) -> Tensor:
        return self.net(x)


class SimpleConvNet(nn.Module):
    """Bahng et al.'s SimpleConvNet: four 7x7 conv + BN blocks, ReLU between, ``final`` activation
    (tanh as Barbano et al., or relu), global average pooling → 128 features."""

    def __init__(self, in_channels: int = 3, final: str = "tanh"):
        super().__init__()
        layers: list[nn.Module] = []
        for i, (cin, cout) in enumerate(zip((in_channels, 16, 32, 64), (16, 32, 64, 128))):
            layers += [nn.Conv2d(cin, cout, 7, padding=3), nn.BatchNorm2d(cout)]
            if i < 3:
                layers.append(nn.ReLU(inplace=True))
        layers += [_activation(final), nn.AdaptiveAvgPool2d(1), nn.Flatten()]
        self.net = nn.Sequential(*layers)

    def forward(self, x: Tensor) -> Tensor:
        return self.net(x)


def resnet(arch: str, in_channels: int = 3, cifar_stem: bool = True) -> nn.Module:
    """torchvision's ResNet-18/50 without its classifier (``fc`` is the identity), randomly initialised."""
    tvm = require("torchvision.models", "vision")
    net = getattr(tvm, arch)(weights=None)
    if cifar_stem:
        net.conv1 = nn.Conv2d(in_channels, 64, 3, 1, 1, bias=False)
        net.maxpool = nn.Identity()
    elif in_channels != 3:
        net.conv1 = nn.Conv2d(in_channels, 64, 7, 2, 3, bias=False)
    net.fc = nn.Identity()
    return net


def encoder(arch: str, in_channels: int = 3, image_size: int = 32, final: str = "relu") -> nn.Module:
    """The backbone ``arch`` mapping images to ``FEATURE_DIM[arch]`` features; ``final`` is the last
    activation of the small nets (ResNets end with ReLU)."""
    if arch == "small":
        return SmallConvNet(in_channels, final)
    if arch == "simpleconvnet":
        return SimpleConvNet(in_channels, final)
    if arch in ("resnet18", "resnet50"):
        return resnet(arch, in_channels, cifar_stem=image_size <= 64)
    raise ValueError(f"unknown arch {arch!r}")


def projection_head(arch: str, out_dim: int, batch_norm: bool = True) -> nn.Module:
    """``FEATURE_DIM → HEAD_HIDDEN → out_dim`` MLP."""
    dim, hidden = FEATURE_DIM[arch], HEAD_HIDDEN[arch]
    mid: list[nn.Module] = [nn.BatchNorm1d(hidden)] if batch_norm else []
    return nn.Sequential(nn.Linear(dim, hidden, bias=not batch_norm), *mid, nn.ReLU(inplace=True),
                         nn.Linear(hidden, out_dim))
