"""LightningModules and backbones.

Every class imported here is registered for short names on the command line: LightningCLI (through
jsonargparse) resolves ``--model=ImageClassifier`` among the imported subclasses of
``LightningModule``. Import a new task's module here to make its short name work.
"""

from project.models.backbones import SimpleCNN, TorchvisionResNet
from project.models.base import BaseModule
from project.models.classifier import ImageClassifier
from project.models.regressor import TabularRegressor

__all__ = ["BaseModule", "ImageClassifier", "SimpleCNN", "TabularRegressor", "TorchvisionResNet"]
