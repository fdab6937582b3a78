"""Fixtures for every engine test: no test leaks process-wide state into the next, W&B stays off, and the
CLI runs in-process on the fixture task (``fixture_task/``, a package of its own, as a user's is) in an
empty working directory."""

from __future__ import annotations

import contextlib
import importlib
import logging
import os
import shutil
import signal
import sys
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

#: The session fixture ``slurm_cluster``: a real single-node SLURM cluster (slurm_cluster.py).
pytest_plugins = ["slurm_cluster"]

if TYPE_CHECKING:  # (imported by the fixtures: pytest-xdist's controller process runs no test)
    from runwright.cli import ProjectCLI


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The long tests (``slow``) first, each group in file order: with ``-n 2`` (xdist's default
    ``--dist load``: a chunk of the collection to each worker, then more to whichever runs short) the
    short ones fill the end, so that neither worker waits long for the other's last test (in file order
    the longest, test_slurm's and test_sweep's, came last)."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


@pytest.fixture(scope="session", autouse=True)
def first_imports() -> None:
    """Import the libraries that the CLI imports lazily and that set warning filters when first
    imported, once per session before the first test, so that the leak check below sees only what a
    test itself leaves behind."""
    for name in (
        "wandb",
        "requests",
        "tensorboard",
        "matplotlib.pyplot",
        "sklearn.metrics",
        "optuna",
        "onnxruntime",
    ):
        with contextlib.suppress(ImportError):
            importlib.import_module(name)


def _process_state() -> dict[str, object]:
    wandb = sys.modules.get("wandb")
    return {
        "environment variables": {k: v for k, v in os.environ.items() if k != "PYTEST_CURRENT_TEST"},
        "warning filters": list(warnings.filters),
        "an open W&B run": getattr(wandb, "run", None),
        "a DDP process group": "torch" in sys.modules and sys.modules["torch"].distributed.is_initialized(),
        "signal handlers": (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)),
        "logging levels": {
            name: logging.getLogger(name).level for name in ("lightning.pytorch", "lightning.fabric")
        },
    }


@pytest.fixture(autouse=True)
def no_leaked_state(first_imports: None) -> Iterator[None]:
    """Fail a test that leaves process-wide state behind (set up first, so it checks after every other
    fixture, ``monkeypatch`` included, has undone its own changes)."""
    before = _process_state()
    yield
    after = _process_state()
    leaked = [name for name in before if before[name] != after[name]]
    if "environment variables" in leaked:
        env_before, env_after = before["environment variables"], after["environment variables"]
        assert isinstance(env_before, dict) and isinstance(env_after, dict)
        changed = sorted(k for k in {*env_before, *env_after} if env_before.get(k) != env_after.get(k))
        leaked[leaked.index("environment variables")] = f"environment variables {changed}"
        for key in set(env_after) - set(env_before):
            del os.environ[key]
        os.environ.update(env_before)
    if "warning filters" in leaked:
        added = [f for f in after["warning filters"] if f not in before["warning filters"]]  # type: ignore[attr-defined]
        removed = [f for f in before["warning filters"] if f not in after["warning filters"]]  # type: ignore[attr-defined]
        leaked[leaked.index("warning filters")] = f"warning filters (added {added}, removed {removed})"
        warnings.filters[:] = before["warning filters"]  # type: ignore[index]
    if after["a DDP process group"]:
        sys.modules["torch"].distributed.destroy_process_group()
    if after["an open W&B run"] is not None:
        after["an open W&B run"].finish()  # type: ignore[attr-defined]
    if leaked:
        pytest.fail(f"the test left process-wide state behind: {', '.join(leaked)}")


@pytest.fixture(autouse=True)
def wandb_disabled(no_leaked_state: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """W&B off in every test (``WANDB_MODE=disabled``; it costs seconds per run otherwise); the tests of
    the W&B logger itself unset it."""
    monkeypatch.setenv("WANDB_MODE", "disabled")


@pytest.fixture(autouse=True)
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test's own empty working directory (the CLI writes ``./logs`` there)."""
    from runwright.runs import RUN_DIR_ENV

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(RUN_DIR_ENV, raising=False)
    return tmp_path


RunCLI = Callable[..., "ProjectCLI"]


@pytest.fixture(scope="session")
def trained_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The run folder of one ``fit`` of the fixture task with ``FAST``, trained once per session; tests
    take copies of it (:func:`fitted`)."""
    from support import FAST, kept_environ, project_cli

    folder = tmp_path_factory.mktemp("trained")
    cwd = os.getcwd()
    os.chdir(folder)
    try:
        with kept_environ(), warnings.catch_warnings():
            os.environ["WANDB_MODE"] = "disabled"
            return project_cli(["fit", *FAST, "--run_name=trained"]).run_dir
    finally:
        os.chdir(cwd)


@pytest.fixture
def fitted(workdir: Path, trained_run: Path) -> Callable[..., Path]:
    """``fitted(name="trained")``: a copy of :func:`trained_run` as ``logs/<name>`` in the test's working
    directory (a finished 1-epoch run with ``config.yaml``, ``metrics.csv``, ``best.ckpt`` and
    ``last.ckpt``), for a test of what comes after a fit; returns its folder."""

    def copy(name: str = "trained") -> Path:
        return Path(shutil.copytree(trained_run, workdir / "logs" / name))

    return copy


@pytest.fixture
def run_cli(workdir: Path) -> RunCLI:
    """Run ``python -m fixture_task SUBCOMMAND [FAST] ARGS`` in-process; returns the finished CLI."""

    from support import FAST, project_cli

    def run(subcommand: str, *args: str, fast: bool = True) -> ProjectCLI:
        # FAST first, so that the test's own arguments override it
        return project_cli([subcommand, *(FAST if fast else []), *args])

    return run
