"""Backbones: ``nn.Module`` feature extractors that a task module puts a head on.

Every backbone maps images ``[B, C, H, W]`` (``float32``, or the autocast dtype) to features
``[B, out_features]`` and exposes ``out_features: int`` so the head can be sized without a dummy forward.
Select one in YAML with ``class_path`` (for example ``project.models.SimpleCNN``).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn


class SimpleCNN(nn.Module):
    """A small VGG-style CNN: ``len(channels)`` blocks of conv3x3-BatchNorm-ReLU, then 2x2 max-pool.

    Sized for small images (8x8 digits, 28x28 MNIST, 32x32 CIFAR-10); ends with global average
    pooling, so any input of at least ``2 ** (len(channels) - 1)`` pixels a side works.

    Args:
        in_channels: Channels of the input images (1 for greyscale, 3 for RGB).
        channels: Output channels of each block; the last one is ``out_features``.
        dropout: Dropout probability applied to the pooled features (0 disables it).
        batch_norm: Use ``BatchNorm2d`` after each conv (set ``trainer.sync_batchnorm`` under DDP).

    Shapes:
        input ``[B, in_channels, H, W]`` -> output ``[B, channels[-1]]``.
    """

    def __init__(
        self,
        in_channels: int = 1,
        channels: Sequence[int] = (32, 64, 128),
        dropout: float = 0.1,
        batch_norm: bool = True,
    ) -> None:
        super().__init__()
        if not channels or min(channels) < 1:
            raise ValueError(f"channels={list(channels)}: give one width of at least 1 per block, e.g. [32]")
        layers: list[nn.Module] = []
        previous = in_channels
        for index, width in enumerate(channels):
            layers.append(nn.Conv2d(previous, width, kernel_size=3, padding=1, bias=not batch_norm))
            if batch_norm:
                layers.append(nn.BatchNorm2d(width))
            layers.append(nn.ReLU(inplace=True))
            if index < len(channels) - 1:
                layers.append(nn.MaxPool2d(2))
            previous = width
        self.features = nn.Sequential(*layers)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.dropout = nn.Dropout(dropout)
        self.out_features = previous

    def forward(self, x: Tensor) -> Tensor:
        """Map ``[B, C, H, W]`` images to ``[B, out_features]`` features."""
        return self.dropout(torch.flatten(self.pool(self.features(x)), 1))


class TorchvisionResNet(nn.Module):
    """A torchvision ResNet (``resnet18``, ``resnet34``, ``resnet50``) as a feature extractor.

    Randomly initialised (no weights are downloaded). With ``small_input=True`` the stem is the
    CIFAR variant from He et al. 2016, section 4.2: a 3x3 stride-1 first conv and no max-pool, so
    32x32 inputs are not reduced to 1x1 before the last stage.

    Args:
        in_channels: Channels of the input images (first, so the classifier can pass it).
        arch: Name of the torchvision constructor.
        small_input: Use the 3x3 stem for inputs of about 32x32 pixels.

    Shapes:
        input ``[B, in_channels, H, W]`` -> output ``[B, 512]`` (resnet18/34) or ``[B, 2048]`` (resnet50).
    """

    def __init__(self, in_channels: int = 3, arch: str = "resnet18", small_input: bool = True) -> None:
        super().__init__()
        import torchvision

        constructors = {
            "resnet18": torchvision.models.resnet18,
            "resnet34": torchvision.models.resnet34,
            "resnet50": torchvision.models.resnet50,
        }
        if arch not in constructors:
            raise ValueError(f"arch={arch!r} is not supported; choose one of {sorted(constructors)}")
        net = constructors[arch](weights=None)
        if small_input or in_channels != 3:
            kernel, stride, padding = (3, 1, 1) if small_input else (7, 2, 3)
            net.conv1 = nn.Conv2d(
                in_channels, 64, kernel_size=kernel, stride=stride, padding=padding, bias=False
            )
        if small_input:
            net.maxpool = nn.Identity()
        self.out_features: int = net.fc.in_features
        net.fc = nn.Identity()
        self.net = net

    def forward(self, x: Tensor) -> Tensor:
        """Map ``[B, C, H, W]`` images to ``[B, out_features]`` features."""
        return self.net(x)
