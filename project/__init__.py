"""A PyTorch Lightning project template: LightningCLI, YAML configs and tested training practices."""

__version__ = "0.1.0"
