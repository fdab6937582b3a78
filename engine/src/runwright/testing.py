"""For a project's own tests of its task, a pytest plugin: name it in ``tests/conftest.py``
(``pytest_plugins = ["runwright.testing"]``) and the package in ``pyproject.toml``
(``[tool.pytest.ini_options] runwright_package = "acme"``). Its fixtures:

- ``package``: that package's name;
- ``workdir``: the test's own empty working directory (the commands write ``./logs`` there), W&B off;
- ``run_cli``: ``run_cli("fit", *args)`` runs a Trainer command (``fit``, ``validate``, ``test``,
  ``predict``) in-process with :data:`FAST` first and returns the finished :class:`~runwright.ProjectCLI`
  (``cli.run_dir``, ``cli.trainer``, ``cli.model``, ``cli.datamodule``; the best-checkpoint callback is
  ``cli.trainer.checkpoint_callback``);
- ``run_main``: ``run_main(*args)`` runs any command, the extra ones (``export``, ``lr_find``, ...)
  included, as the command line does and returns ``(exit code, stdout, stderr)`` (one ``error:`` line
  and exit code 2 for bad input);
- ``trained_logs``: a logs folder with one fast ``fit`` of the package's default experiment, made once per
  test process; ``logs``: this test's copy of it as ``./logs``.

:func:`rebuilt` gives a checkpoint's model and data as the commands that read a run rebuild them,
:func:`run_dirs` the run folders of a logs folder; :class:`RunCLI` and :class:`RunMain` are the types of
the two runner fixtures, for annotations.
"""

from __future__ import annotations

import shutil
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import pytest

if TYPE_CHECKING:  # (the CLI imports Lightning: not at pytest's start-up)
    from .cli import ProjectCLI
    from .commands.rebuild import RebuildCLI

#: Overrides that make a ``fit`` (and ``validate``, ``test``, ``predict``) of any task short: one epoch of
#: two training batches, one batch of every evaluation split, a metrics row every step, no progress bar
#: or model summary. Put a test's own arguments after them (later arguments win).
FAST = [
    "--trainer.max_epochs=1",
    "--trainer.limit_train_batches=2",
    "--trainer.limit_val_batches=1",
    "--trainer.limit_test_batches=1",
    "--trainer.limit_predict_batches=1",
    "--trainer.enable_progress_bar=false",
    "--trainer.enable_model_summary=false",
    "--trainer.log_every_n_steps=1",
]


class RunCLI(Protocol):
    """The type of the ``run_cli`` fixture (for a test's annotation)."""

    def __call__(self, command: str, *args: str, fast: bool = True) -> ProjectCLI: ...


class RunMain(Protocol):
    """The type of the ``run_main`` fixture (for a test's annotation)."""

    def __call__(self, *args: str) -> tuple[int, str, str]: ...


def rebuilt(ckpt_path: str | Path, package: str, *args: str) -> RebuildCLI:
    """The run of ``ckpt_path`` as ``export`` and ``report`` rebuild it (``test --ckpt_path``'s classes and
    arguments, ``args`` over them): ``.model`` with the checkpoint's weights in eval mode on the CPU,
    ``.datamodule`` (or ``None``) with its test data set up."""
    from .commands.rebuild import RebuildCLI

    with RebuildCLI(args=["--ckpt_path", str(ckpt_path), *args], run=False, package=package) as cli:
        return cli


def run_dirs(logs: Path) -> list[Path]:
    """The run folders under ``logs``, oldest first."""
    return sorted(path for path in logs.iterdir() if path.is_dir())


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addini("runwright_package", "The package whose commands runwright.testing's fixtures run.")


@pytest.fixture(scope="session")
def package(pytestconfig: pytest.Config) -> str:
    """The package ``runwright_package`` names in the pytest configuration."""
    if not (name := str(pytestconfig.getini("runwright_package"))):
        raise pytest.UsageError(
            'runwright.testing: set runwright_package = "<package>" in [tool.pytest.ini_options]'
        )
    return name


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The test's own empty working directory, W&B off (``WANDB_MODE=disabled``: an offline run costs
    seconds)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("WANDB_MODE", "disabled")
    return tmp_path


@pytest.fixture
def run_cli(workdir: Path, package: str) -> RunCLI:
    """``run_cli(command, *args, fast=True)``: the command, :data:`FAST` first (unless ``fast=False``) so
    that ``args`` override it, run in-process; returns the finished CLI."""
    from .cli import ProjectCLI

    def run(command: str, *args: str, fast: bool = True) -> ProjectCLI:
        return ProjectCLI(args=[command, *(FAST if fast else []), *args], package=package)

    return run


@pytest.fixture
def run_main(workdir: Path, package: str, capsys: pytest.CaptureFixture[str]) -> RunMain:
    """``run_main(*args)``: ``python -m <package> ARGS`` in-process (the warning filters it sets for its
    process undone); returns ``(exit code, stdout, stderr)``."""
    from .cli import main

    def run(*args: str) -> tuple[int, str, str]:
        capsys.readouterr()
        code: Any = 0
        with warnings.catch_warnings():
            try:
                main(list(args), package=package)
            except SystemExit as exit:
                code = exit.code
        out, err = capsys.readouterr()
        return (code if isinstance(code, int) else int(code is not None)), out, err

    return run


@pytest.fixture(scope="session")
def trained_logs(tmp_path_factory: pytest.TempPathFactory, package: str) -> Path:
    """A logs folder with one fast ``fit`` (:data:`FAST`, four training batches) of the package's default
    experiment, made once per test process; copy it (``logs``) before writing next to it."""
    from .cli import ProjectCLI

    logs = tmp_path_factory.mktemp("trained") / "logs"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("WANDB_MODE", "disabled")
        patch.chdir(logs.parent)
        args = ["fit", *FAST, "--trainer.limit_train_batches=4", f"--logs_dir={logs}"]
        ProjectCLI(args=args, package=package)
    return logs


@pytest.fixture
def logs(trained_logs: Path, workdir: Path) -> Path:
    """This test's copy of ``trained_logs``, as ``./logs`` of its working directory."""
    return Path(shutil.copytree(trained_logs, workdir / "logs"))


__all__ = ["FAST", "RunCLI", "RunMain", "rebuilt", "run_dirs"]
