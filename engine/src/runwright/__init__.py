"""runwright, the engine of a Lightning project: the CLI, run folders, checkpoints, exact resume, the
callbacks and the extra commands (its README states the contract). A project's ``__main__.py`` hands
its package to :func:`runwright.cli.main`; its classes may use the optional helpers below."""

__version__ = "0.2.0"

from .base import BaseDataModule, BaseModule, Transformed, channel_mean_std, check_fractions, seeded_split
from .errors import ConfigError, DataError, ProjectError
from .inputs import InputTensors, PredictInputs, read_image_files
from .resume import resumable_train_loader
from .schedules import WarmupCosineLR, warmup_cosine_factor

__all__ = [
    "BaseDataModule",
    "BaseModule",
    "ConfigError",
    "DataError",
    "InputTensors",
    "PredictInputs",
    "ProjectError",
    "Transformed",
    "WarmupCosineLR",
    "channel_mean_std",
    "check_fractions",
    "read_image_files",
    "resumable_train_loader",
    "seeded_split",
    "warmup_cosine_factor",
]
