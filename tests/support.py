"""What this project's tests share: the package's name, where its configs are, the engine's fast
settings, and the command line run in-process."""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from pathlib import Path

import pytest
from runwright import cli
from runwright.testing import FAST

import project

PACKAGE = project.__name__
REPO_ROOT = Path(__file__).resolve().parents[1]
CONFIGS = REPO_ROOT / "configs"
__all__ = ["CONFIGS", "FAST", "PACKAGE", "REPO_ROOT", "main", "run_dirs", "run_main"]


def main(args: Sequence[str]) -> None:
    """``python -m <package> ARGS`` in-process (exits only on an error)."""
    cli.main(list(args), package=PACKAGE)


def run_main(args: Sequence[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """Run ``python -m <package> ARGS`` in-process (the warning filters it sets for its process undone);
    returns ``(exit code, stdout, stderr)``."""
    capsys.readouterr()
    code: int | str | None = 0
    with warnings.catch_warnings():
        try:
            main(args)
        except SystemExit as exit:
            code = exit.code
    out, err = capsys.readouterr()
    return (code if isinstance(code, int) else int(code is not None)), out, err


def run_dirs(logs: Path) -> list[Path]:
    """The run folders under ``logs``, oldest first."""
    return sorted(p for p in logs.iterdir() if p.is_dir())
