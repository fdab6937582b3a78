"""A PyTorch Lightning project template: LightningCLI, YAML configs and tested training practices."""

# Your classes, imported so that the command line knows them by their short names.
from . import data, models  # noqa: F401

__version__ = "0.1.0"
