"""Fixtures of this project's tests: W&B off, the CLI in-process in an empty working directory, and one
trained run of the default experiment for the tests that check what comes after a fit."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from runwright.cli import ProjectCLI
from runwright.runs import RUN_DIR_ENV
from support import FAST, PACKAGE


@pytest.fixture(autouse=True)
def wandb_disabled(monkeypatch: pytest.MonkeyPatch) -> None:
    """W&B off in every test (``WANDB_MODE=disabled``: an offline run costs seconds)."""
    monkeypatch.setenv("WANDB_MODE", "disabled")


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty working directory (the CLI writes ``./logs`` there)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(RUN_DIR_ENV, raising=False)
    return tmp_path


RunCLI = Callable[..., ProjectCLI]


@pytest.fixture
def run_cli(workdir: Path) -> RunCLI:
    """Run ``python -m <package> SUBCOMMAND [FAST] ARGS`` in-process; returns the finished CLI."""

    def run(subcommand: str, *args: str, fast: bool = True) -> ProjectCLI:
        # FAST first, so that the test's own arguments override it
        return ProjectCLI(args=[subcommand, *(FAST if fast else []), *args], package=PACKAGE)

    return run


@pytest.fixture(scope="session")
def trained_logs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A logs folder with one fast ``fit`` of the default experiment (four training batches), trained
    once per test process; copy it (:func:`logs`) before writing next to it."""
    logs = tmp_path_factory.mktemp("trained") / "logs"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("WANDB_MODE", "disabled")
        patch.delenv(RUN_DIR_ENV, raising=False)
        args = ["fit", *FAST, "--trainer.limit_train_batches=4", f"--logs_dir={logs}"]
        ProjectCLI(args=args, package=PACKAGE)
    return logs


@pytest.fixture
def logs(trained_logs: Path, workdir: Path) -> Path:
    """This test's copy of :func:`trained_logs`, as ``./logs`` of its working directory."""
    return Path(shutil.copytree(trained_logs, workdir / "logs"))
