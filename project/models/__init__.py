"""LightningModules and backbones."""

from project.models.backbones import SimpleCNN, TorchvisionResNet
from project.models.base import BaseModule
from project.models.classifier import ImageClassifier

__all__ = ["BaseModule", "ImageClassifier", "SimpleCNN", "TorchvisionResNet"]
