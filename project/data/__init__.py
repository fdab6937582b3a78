"""LightningDataModules."""

from project.data.base import BaseDataModule, TensorDataset, channel_mean_std, seeded_split
from project.data.digits import DigitsDataModule
from project.data.synthetic import SyntheticDataModule
from project.data.vision import (
    CIFAR10DataModule,
    FashionMNISTDataModule,
    MNISTDataModule,
    TorchvisionDataModule,
)

__all__ = [
    "BaseDataModule",
    "CIFAR10DataModule",
    "DigitsDataModule",
    "FashionMNISTDataModule",
    "MNISTDataModule",
    "SyntheticDataModule",
    "TensorDataset",
    "TorchvisionDataModule",
    "channel_mean_std",
    "seeded_split",
]
