"""The engine's tests run on their own fixture task (``fixture_task.py``, ``fixture.yaml``), never on
the package's example: a user who replaces the example keeps these proofs."""

from __future__ import annotations

from pathlib import Path

import pytest
from support import CONFIG_FILES, FAST

from project.engine.cli import ProjectCLI


@pytest.fixture(autouse=True)
def fixture_task_configs(monkeypatch: pytest.MonkeyPatch) -> None:
    """The CLI's default config files are the engine's defaults and the fixture experiment."""
    monkeypatch.setattr(ProjectCLI, "config_files", CONFIG_FILES)


@pytest.fixture
def run_cli(workdir: Path):  # type: ignore[no-untyped-def]
    """Run ``SUBCOMMAND [FAST] ARGS`` on the fixture task in-process; returns the finished CLI."""

    def run(subcommand: str, *args: str, fast: bool = True) -> ProjectCLI:
        return ProjectCLI(args=[subcommand, *(FAST if fast else []), *args])

    return run
