"""runwright, the engine of a Lightning project: the CLI, run folders, checkpoints, exact resume, the
callbacks and the extra commands. The names in :data:`__all__` (and ``__version__``) are its public
surface, the table "The public surface" of its README; every other module and name is internal and may
change in any release. A project's ``__main__.py`` hands its package to :func:`main`; its classes may use
the optional helpers; its tests use :mod:`runwright.testing`, a pytest plugin."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.2.2"

from .base import BaseDataModule, BaseModule, Transformed, channel_mean_std, check_fractions, seeded_split
from .errors import ConfigError, DataError, ProjectError
from .inputs import InputTensors, PredictInputs, input_files, read_image_files
from .resume import resumable_train_loader
from .schedules import WarmupCosineLR, warmup_cosine_factor

if TYPE_CHECKING:
    from .cli import ProjectCLI, main
    from .project import config_files
else:
    #: Names imported on first use (their modules import the CLI's parts, which a model or a DataModule
    #: does not need): name -> module.
    _LAZY = {"ProjectCLI": ".cli", "main": ".cli", "config_files": ".project"}

    def __getattr__(name: str) -> Any:
        """The :data:`_LAZY` name ``name``, imported from its module (``sys.modules`` keeps it)."""
        if name not in _LAZY:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        return getattr(importlib.import_module(_LAZY[name], __name__), name)


__all__ = [
    "BaseDataModule",
    "BaseModule",
    "ConfigError",
    "DataError",
    "InputTensors",
    "PredictInputs",
    "ProjectCLI",
    "ProjectError",
    "Transformed",
    "WarmupCosineLR",
    "channel_mean_std",
    "check_fractions",
    "config_files",
    "input_files",
    "main",
    "read_image_files",
    "resumable_train_loader",
    "seeded_split",
    "warmup_cosine_factor",
]
