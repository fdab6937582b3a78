"""Your LightningModules and backbones. A class imported here gets a short name on the command line
and in YAML (``--model=ImageClassifier``, ``backbone: {class_path: SimpleCNN}``): import a new one here."""

from .backbones import SimpleCNN, TorchvisionResNet
from .classifier import ImageClassifier
from .regressor import TabularRegressor

__all__ = ["ImageClassifier", "SimpleCNN", "TabularRegressor", "TorchvisionResNet"]
