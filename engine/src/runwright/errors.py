"""Errors the engine raises for bad input or unhealthy training.
``python -m <package>`` prints their message without a traceback and exits with ``exit_code``."""

from __future__ import annotations

import errno
from pathlib import Path


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


class FileSystemError(ProjectError):
    """A file or folder could not be written: exit code 2 when the path given is wrong (a file where a
    folder must be, or a folder missing), 1 for a fault of the disk (full, read-only, not permitted)."""

    def __init__(self, message: str, exit_code: int = 1) -> None:
        super().__init__(message)
        self.exit_code = exit_code


#: The ``errno`` of the file-system faults that :func:`file_system_error` reports: the exit code and the fix.
FILE_SYSTEM_FAULTS = {
    errno.ENOSPC: (1, "free some space or write elsewhere (--logs_dir, --output)"),
    errno.EDQUOT: (1, "free some space or write elsewhere (--logs_dir, --output)"),
    errno.EACCES: (1, "make it writable or write elsewhere (--logs_dir, --output)"),
    errno.EPERM: (1, "make it writable or write elsewhere (--logs_dir, --output)"),
    errno.EROFS: (1, "write elsewhere (--logs_dir, --output)"),
    errno.ENOTDIR: (2, "a file is in the way of a folder: choose another path"),
    errno.EEXIST: (2, "a file is in the way of a folder: choose another path"),
    errno.EISDIR: (2, "a folder is where a file must be: choose a file's path"),
    errno.ENOENT: (2, "check the path"),
    errno.ENAMETOOLONG: (2, "choose a shorter name"),
}


def file_system_error(error: OSError, folder: str | Path | None = None) -> FileSystemError | None:
    """The one-line :class:`FileSystemError` for ``error``, a fault of the file system
    (:data:`FILE_SYSTEM_FAULTS`): ``<path>: <the system's words>; <the fix>``, the path being the one
    ``error`` names or else (a failed ``write`` names none) ``folder``, where the command was writing;
    for a file in the way of a folder, the file. ``None`` for any other ``OSError`` (a network error)."""
    if error.errno not in FILE_SYSTEM_FAULTS:
        return None
    code, fix = FILE_SYSTEM_FAULTS[error.errno]
    path = error.filename if error.filename is not None else folder
    if error.errno in (errno.ENOTDIR, errno.EEXIST) and path is not None:
        target = Path(str(path))
        if blocker := next((p for p in (*reversed(target.parents), target) if p.is_file()), None):
            fix = f"{blocker} is a file where a folder must be: move it or choose another path"
    where = f"{path}: " if path is not None else ""
    return FileSystemError(f"{where}{error.strerror}; {fix}", code)
