"""How a command that fails ends: the one-line :class:`~runwright.errors.ProjectError` for an exception,
by its source (:func:`one_line`, :func:`build_problem`)."""

from __future__ import annotations

from typing import Any

from jsonargparse import Namespace
from lightning.pytorch.utilities.exceptions import MisconfigurationException

from .callbacks import compile_problem, raised_in
from .errors import ConfigError, ProjectError, file_system_error, first_line
from .runs import class_of


def one_line(error: Exception, compiling: bool, folder: Any = None) -> ProjectError | None:
    """The one-line error for an exception raised while a command runs, by its source: the engine's own
    (a ``ProjectError``, itself), a fault of the file system (:func:`~runwright.errors.file_system_error`,
    naming ``folder`` when the error names no file), ``torch.compile`` (only when ``compiling``), DDP's
    model wrapper (parameters without a gradient: Lightning's message names the strategy), Lightning's
    ``MisconfigurationException`` (a setting Lightning refuses, e.g. no ``test_step`` for ``test``), W&B's
    start (e.g. no API key); ``None`` for any other."""
    if isinstance(error, ProjectError):
        return error
    if isinstance(error, OSError):
        return file_system_error(error, folder)
    if compiling and (problem := compile_problem(error)) is not None:
        return ConfigError(problem)
    if raised_in(error, "torch.nn.parallel.distributed"):  # DDP's wrapper (e.g. unused parameters)
        return ConfigError(f"DDP: {first_line(error)}")
    if isinstance(error, MisconfigurationException):
        return ConfigError(" ".join(str(error).split()))
    if type(error).__module__.split(".")[0] == "wandb":
        return ConfigError(
            f"W&B could not start the run ({type(error).__name__}: {first_line(error)}); log in "
            "(`wandb login`) or log offline (WANDB_MODE=offline, the W&B preset's default)"
        )
    return None


def build_problem(error: BaseException, logger: Any) -> ConfigError:
    """The error of a run whose model, data or trainer could not be built: why a logger of the config
    (``trainer.logger``) cannot be built, found by building each one alone (e.g. its package is not
    installed: jsonargparse reports only that the value fits no type), else the innermost cause of
    ``error`` (jsonargparse wraps the constructor's own error)."""
    for item in logger if isinstance(logger, list) else [logger]:
        if isinstance(item, Namespace):
            cls = class_of(item.class_path)
            try:
                cls(**dict(item.get("init_args") or {}))
            except Exception as failed:
                problem = f"{type(failed).__name__}: {' '.join(str(failed).split())}"
                return ConfigError(f"building the run failed: trainer.logger {cls.__name__}: {problem}")
    while error.__cause__ is not None:
        error = error.__cause__
    return ConfigError(f"building the run failed: {type(error).__name__}: {' '.join(str(error).split())}")
