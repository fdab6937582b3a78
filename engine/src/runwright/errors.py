"""Errors the engine raises for bad input or unhealthy training.
``python -m <package>`` prints their message without a traceback and exits with ``exit_code``."""

from __future__ import annotations


def first_line(error: BaseException) -> str:
    """The first line of an exception's message (libraries' messages can run over many lines)."""
    return (str(error).strip().splitlines() or [""])[0]


class ProjectError(Exception):
    """Base class: a problem the user can fix; the message says what and how."""

    exit_code = 1


class ConfigError(ProjectError, ValueError):
    """A value in the config or on the command line cannot work (exit code 2, like a parse error)."""

    exit_code = 2


class RunExistsError(ProjectError, FileExistsError):
    """An explicit ``--run_name`` names a run folder that already exists (exit code 2)."""

    exit_code = 2


class CheckpointError(ProjectError):
    """A checkpoint file is missing, corrupt, untrusted or does not fit the model (exit code 2)."""

    exit_code = 2


class DataError(ProjectError, FileNotFoundError):
    """A dataset is missing, empty or unreadable (bad input: exit code 2)."""

    exit_code = 2


class HealthCheckError(ProjectError, RuntimeError):
    """A health check found a silent training bug (:class:`runwright.callbacks.HealthCheck`)."""


class TrainingInterrupted(ProjectError):
    """Training was stopped by SIGINT (Ctrl-C); a resumable checkpoint was saved. Exit code 130."""

    exit_code = 130
