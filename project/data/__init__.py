"""Your LightningDataModules. A class imported here gets a short name on the command line and in YAML
(``--data=DigitsDataModule``): import a new DataModule here."""

from .diabetes import DiabetesDataModule
from .digits import DigitsDataModule
from .synthetic import SyntheticDataModule
from .vision import CIFAR10DataModule, FashionMNISTDataModule, MNISTDataModule, TorchvisionDataModule

__all__ = [
    "CIFAR10DataModule",
    "DiabetesDataModule",
    "DigitsDataModule",
    "FashionMNISTDataModule",
    "MNISTDataModule",
    "SyntheticDataModule",
    "TorchvisionDataModule",
]
