"""Shared fixtures: fast CLI runs in a temporary working directory, and tiny datasets on disk."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from project.cli import ProjectCLI, main
from project.runs import RUN_DIR_ENV

REPO_ROOT = Path(__file__).resolve().parents[1]
CONFIGS = REPO_ROOT / "configs"

#: Overrides that make a fit take a second: two train batches, one val batch, no progress bar.
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

RunCLI = Callable[..., ProjectCLI]


@pytest.fixture(autouse=True)
def wandb_disabled(monkeypatch: pytest.MonkeyPatch) -> None:
    """W&B off in every test (``WANDB_MODE=disabled``; it costs seconds per run otherwise); the tests of
    the W&B logger itself unset it."""
    monkeypatch.setenv("WANDB_MODE", "disabled")


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty working directory (the CLI writes ``./logs`` there)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(RUN_DIR_ENV, raising=False)
    return tmp_path


@pytest.fixture
def run_cli(workdir: Path) -> RunCLI:
    """Run ``python -m project SUBCOMMAND [FAST] ARGS`` in-process; returns the finished CLI."""

    def run(subcommand: str, *args: str, fast: bool = True) -> ProjectCLI:
        # FAST first, so that the test's own arguments override it
        return ProjectCLI(args=[subcommand, *(FAST if fast else []), *args])

    return run


def run_module(
    args: Sequence[str],
    cwd: Path,
    timeout: float = 600,
    check: bool = True,
    env: dict[str, str] | None = None,
    base_env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run ``python -m project ARGS`` in a subprocess in ``cwd``; returns the result.

    The environment is ``base_env`` (default: this process's) updated with ``env``.
    """
    base = dict(os.environ if base_env is None else base_env)
    full_env = {**base, "PYTHONUNBUFFERED": "1", **(env or {})}
    # a PYTHONPATH in env is added in front, never replacing the repo root (the package may not be
    # pip-installed, e.g. in a freshly generated repo)
    paths = [(env or {}).get("PYTHONPATH", ""), str(REPO_ROOT), base.get("PYTHONPATH", "")]
    full_env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
    full_env.pop(RUN_DIR_ENV, None)
    result = subprocess.run(
        [sys.executable, "-m", "project", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=full_env,
    )
    if check and result.returncode != 0:
        raise AssertionError(f"exit {result.returncode}\nSTDOUT:\n{result.stdout}\nSTDERR:\n{result.stderr}")
    return result


def run_dirs(logs: Path) -> list[Path]:
    """The run folders under ``logs``, oldest first."""
    return sorted(p for p in logs.iterdir() if p.is_dir())


def fit_with_batch_size_1(logs: Path, *args: str) -> Path:
    """A fast fit with ``--data.batch_size=1`` (8 training steps, 4 validation batches: an R2 needs 2+
    samples) and no logger, after ``args`` (e.g. an experiment's ``--config``); returns the run folder."""
    common = [f"--logs_dir={logs}", "--trainer.logger=false", *FAST, "--data.batch_size=1"]
    common += ["--trainer.limit_train_batches=8", "--trainer.limit_val_batches=4"]
    return ProjectCLI(args=["fit", *args, *common]).run_dir


def rerun_suggestion(out: str) -> ProjectCLI:
    """Run the ``Use it: python -m project fit ...`` command that a tuner printed in
    ``out``, in-process (with FAST overrides, no logger); returns the finished CLI."""
    (line,) = [line for line in out.splitlines() if line.startswith("Use it: ")]
    words = shlex.split(line.removeprefix("Use it: "))
    assert words[:4] == ["python", "-m", "project", "fit"], line
    return ProjectCLI(args=["fit", *FAST, "--trainer.logger=false", *words[4:]], run=True)


def quantized_export_line(ckpt: Path, output: Path, capsys: pytest.CaptureFixture[str]) -> str:
    """Run ``export --format=torchscript --quantize=dynamic`` on ``ckpt`` and return the ``Test ...``
    line it prints (fp32 vs int8 on the test split)."""
    capsys.readouterr()
    options = ["--format=torchscript", "--quantize=dynamic", f"--output={output}"]
    main(["export", f"--ckpt_path={ckpt}", *options])
    return next(line for line in capsys.readouterr().out.splitlines() if line.startswith("Test "))
