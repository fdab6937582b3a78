"""LightningModules and backbones.

Every class imported here is registered for short names on the command line: LightningCLI (through
jsonargparse) resolves ``--model=ImageClassifier`` among the imported subclasses of
``LightningModule``. Import a new task's module here to make its short name work.
"""

from .backbones import SimpleCNN, TorchvisionResNet
from .base import BaseModule
from .classifier import ImageClassifier
from .regressor import TabularRegressor

__all__ = ["BaseModule", "ImageClassifier", "SimpleCNN", "TabularRegressor", "TorchvisionResNet"]
