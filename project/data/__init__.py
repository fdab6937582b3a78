"""LightningDataModules.

Every class imported here is registered for short names on the command line
(``--data=DigitsDataModule``); import a new DataModule here to make its short name work.
"""

from .base import BaseDataModule, Transformed, channel_mean_std, seeded_split
from .collate import pad_sequences
from .diabetes import DiabetesDataModule
from .digits import DigitsDataModule
from .synthetic import SyntheticDataModule
from .vision import CIFAR10DataModule, FashionMNISTDataModule, MNISTDataModule, TorchvisionDataModule

__all__ = [
    "BaseDataModule",
    "CIFAR10DataModule",
    "DiabetesDataModule",
    "DigitsDataModule",
    "FashionMNISTDataModule",
    "MNISTDataModule",
    "SyntheticDataModule",
    "TorchvisionDataModule",
    "Transformed",
    "channel_mean_std",
    "pad_sequences",
    "seeded_split",
]
