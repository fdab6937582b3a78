"""What the engine's tests share: fast settings, subprocess runs of the fixture CLI, file helpers."""

from __future__ import annotations

import contextlib
import csv
import hashlib
import os
import shlex
import signal
import subprocess
import sys
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

# first imports that change process-wide state, here before any test's leak check: scikit-learn sets KMP_*
# variables (report), requests/urllib3 add warning filters (W&B)
import requests  # noqa: F401
import sklearn  # noqa: F401
import torch
from lightning.pytorch import LightningModule

from runwright import cli
from runwright.cli import ProjectCLI
from runwright.commands.rebuild import RebuildCLI
from runwright.project import config_files
from runwright.runs import RUN_DIR_ENV
from runwright.testing import FAST

#: The engine's distribution folder (pyproject.toml, src/, tests/).
ENGINE_ROOT = Path(__file__).resolve().parents[1]
ENGINE_TESTS = Path(__file__).resolve().parent
#: The package the engine's tests hand to the engine, as a user's ``__main__.py`` hands theirs.
PACKAGE = "fixture_task"
#: Its default config files: the engine's defaults, then the fixture experiment.
CONFIG_FILES = config_files(PACKAGE)
#: Loggers as a user's logger preset sets them (``--trainer.logger`` overrides).
LOGGERS = {
    "wandb": ["--trainer.logger=lightning.pytorch.loggers.WandbLogger", "--trainer.logger.offline=true"],
    "tensorboard": [
        "--trainer.logger=lightning.pytorch.loggers.TensorBoardLogger",
        "--trainer.logger.default_hp_metric=false",
    ],
    "csv": ["--trainer.logger=lightning.pytorch.loggers.CSVLogger"],
}
#: The fixture task's classes by their class_path.
TINY, PLAIN_MODEL, PLAIN_DATA = (
    "fixture_task.TinyClassifier",
    "fixture_task.PlainClassifier",
    "fixture_task.PlainData",
)

#: The ``run_cli`` fixture's type (conftest.py): ``run_cli(subcommand, *args, fast=True)``.
RunCLI = Callable[..., ProjectCLI]


def main(args: Sequence[str] | None = None) -> None:
    """``python -m fixture_task ARGS`` in-process (:func:`runwright.cli.main` for the fixture task)."""
    cli.main(None if args is None else list(args), package=PACKAGE)


def project_cli(args: Sequence[str], **kwargs: Any) -> ProjectCLI:
    """``ProjectCLI(args=..., package="fixture_task", **kwargs)``."""
    return ProjectCLI(args=list(args), package=PACKAGE, **kwargs)


def rebuilt(ckpt: str | Path, *args: str) -> RebuildCLI:
    """The run of ``ckpt`` as ``export`` and ``report`` rebuild it (the model with its weights, in eval
    mode; the test data set up), in-process."""
    with RebuildCLI(args=["--ckpt_path", str(ckpt), *args], run=False, package=PACKAGE) as cli:
        return cli


def checkpoint_model(ckpt: str | Path) -> LightningModule:
    """The model of ``ckpt``, as every command that reads a run rebuilds it (:func:`rebuilt`)."""
    return rebuilt(ckpt).model


def run_module(
    args: Sequence[str],
    cwd: Path,
    timeout: float = 600,
    check: bool = True,
    env: dict[str, str] | None = None,
    base_env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run ``python -m fixture_task ARGS`` in a subprocess in ``cwd``; returns the result. The
    environment is ``base_env`` (default: this process's) updated with ``env``; this folder is put in
    front of ``PYTHONPATH``."""
    base = dict(os.environ if base_env is None else base_env)
    full_env = {**base, "PYTHONUNBUFFERED": "1", **(env or {})}
    paths = [(env or {}).get("PYTHONPATH", ""), str(ENGINE_TESTS), base.get("PYTHONPATH", "")]
    full_env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
    full_env.pop(RUN_DIR_ENV, None)
    result = subprocess.run(
        [sys.executable, "-m", PACKAGE, *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=full_env,
    )
    if check and result.returncode != 0:
        raise AssertionError(f"exit {result.returncode}\nSTDOUT:\n{result.stdout}\nSTDERR:\n{result.stderr}")
    return result


def run_main(args: Sequence[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """Run ``main(args)`` in-process, as ``python -m <package> ARGS`` would (the warning filters it sets
    for its process undone); returns ``(exit code, stdout, stderr)``."""
    capsys.readouterr()
    code: int | str | None = 0
    with warnings.catch_warnings():
        try:
            main(list(args))
        except SystemExit as exit:
            code = exit.code
    out, err = capsys.readouterr()
    return (code if isinstance(code, int) else int(code is not None)), out, err


def start_module(
    args: Sequence[str], cwd: Path, env: dict[str, str] | None = None, new_session: bool = False
) -> subprocess.Popen[str]:
    """Start ``python -m fixture_task ARGS`` in ``cwd`` as :func:`run_module` does, without waiting
    (for a test that signals it); stdout and stderr are pipes. Wait for it with a timeout. With
    ``new_session`` it leads a process group of its own (its processes, as a scheduler's job): signal
    that group with ``os.killpg(process.pid, ...)``."""
    paths = [str(ENGINE_TESTS), os.environ.get("PYTHONPATH", "")]
    full_env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
    full_env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
    full_env.pop(RUN_DIR_ENV, None)
    command = [sys.executable, "-m", PACKAGE, *args]
    return subprocess.Popen(
        command,
        cwd=cwd,
        env=full_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=new_session,
    )


def kill(process: subprocess.Popen[str]) -> None:
    """SIGKILL ``process``, and its whole process group when it leads one (``new_session``)."""
    if process.poll() is None and os.getpgid(process.pid) == process.pid:
        os.killpg(process.pid, signal.SIGKILL)
    else:
        process.kill()


def finish(process: subprocess.Popen[str], timeout: float) -> tuple[str, str]:
    """Wait for ``process`` (started with ``new_session``) and return its stdout and stderr; when
    ``timeout`` passes first, kill its whole process group (a hung DDP run leaves none behind) and fail
    with its output."""
    try:
        return process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill(process)
        out, err = process.communicate(timeout=30)
        raise AssertionError(f"still running after {timeout} s\nSTDOUT:\n{out}\nSTDERR:\n{err}") from None


def wait_for_file(path: Path, process: subprocess.Popen[str], timeout: float = 120) -> None:
    """Wait until ``path`` exists; fail with the process's output if it ends or ``timeout`` passes first."""
    deadline = time.monotonic() + timeout
    while not path.exists() and time.monotonic() < deadline and process.poll() is None:
        time.sleep(0.05)
    if not path.exists():
        kill(process)
        out, err = process.communicate(timeout=30)
        raise AssertionError(
            f"{path} never appeared (exit {process.returncode})\nSTDOUT:\n{out}\nSTDERR:\n{err}"
        )


def every_step(dirpath: Path) -> list[str]:
    """Arguments for a second ModelCheckpoint that keeps a checkpoint of every training step in
    ``dirpath`` as ``step=N.ckpt`` (N optimizer steps done)."""
    return [
        "--trainer.callbacks+=lightning.pytorch.callbacks.ModelCheckpoint",
        f"--trainer.callbacks.dirpath={dirpath}",
        "--trainer.callbacks.every_n_train_steps=1",
        "--trainer.callbacks.save_top_k=-1",
        "--trainer.callbacks.filename={step}",
    ]


def weights(cli: ProjectCLI) -> dict[str, torch.Tensor]:
    """A copy of the model's state dict."""
    return {k: v.detach().clone() for k, v in cli.model.state_dict().items()}


def ckpt_weights(path: Path) -> dict[str, torch.Tensor]:
    """The ``state_dict`` of a checkpoint file."""
    return torch.load(path, weights_only=True, map_location="cpu")["state_dict"]


def assert_same_weights(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    """The same keys, and every tensor bit-identical."""
    assert a.keys() == b.keys()
    different = [k for k in a if not torch.equal(a[k], b[k])]
    assert not different, f"not bit-identical: {different[:5]}"


def step_losses(run_dir: Path) -> dict[int, str]:
    """``{step: train/loss}`` from a run's metrics.csv, as logged text (so equality is exact)."""
    with (run_dir / "metrics.csv").open(newline="") as handle:
        return {
            int(row["step"]): row["train/loss"] for row in csv.DictReader(handle) if row.get("train/loss")
        }


def run_dirs(logs: Path) -> list[Path]:
    """The run folders under ``logs``, oldest first."""
    return sorted(p for p in logs.iterdir() if p.is_dir())


def hashes(folder: Path) -> dict[str, str]:
    """SHA-256 of every file under ``folder`` (relative path -> digest)."""
    return {
        str(path.relative_to(folder)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(folder.rglob("*"))
        if path.is_file()
    }


def metric_rows(run_dir: Path, key: str) -> list[tuple[int, int, float]]:
    """``(epoch, step, value)`` of every row of ``metrics.csv`` that has ``key``."""
    with (run_dir / "metrics.csv").open(newline="") as handle:
        return [
            (int(row["epoch"]), int(row["step"]), float(row[key]))
            for row in csv.DictReader(handle)
            if row.get(key)
        ]


def fit_with_batch_size_1(logs: Path, *args: str) -> Path:
    """A fast fit with ``--data.batch_size=1`` (8 training steps, 4 validation batches: an R2 needs 2+
    samples) and no logger, after ``args`` (e.g. an experiment's ``--config``); returns the run folder."""
    common = [f"--logs_dir={logs}", "--trainer.logger=false", *FAST, "--data.batch_size=1"]
    common += ["--trainer.limit_train_batches=8", "--trainer.limit_val_batches=4"]
    return project_cli(["fit", *args, *common]).run_dir


def rerun_suggestion(out: str) -> ProjectCLI:
    """Run the ``Use it: python -m <package> fit ...`` command that a tuner printed in ``out``,
    in-process (with FAST overrides, no logger); returns the finished CLI."""
    (line,) = [line for line in out.splitlines() if line.startswith("Use it: ")]
    words = shlex.split(line.removeprefix("Use it: "))
    assert words[:3] == ["python", "-m", PACKAGE] and words[3] == "fit", line
    return project_cli(["fit", *FAST, "--trainer.logger=false", *words[4:]], run=True)


def quantized_export_line(ckpt: Path, output: Path, capsys: pytest.CaptureFixture[str]) -> str:
    """Run ``export --format=torchscript --quantize=dynamic`` on ``ckpt`` and return the ``Test ...``
    line it prints (fp32 vs int8 on the test split)."""
    capsys.readouterr()
    options = ["--format=torchscript", "--quantize=dynamic", f"--output={output}"]
    main(["export", f"--ckpt_path={ckpt}", *options])
    return next(line for line in capsys.readouterr().out.splitlines() if line.startswith("Test "))


@contextlib.contextmanager
def kept_environ() -> Iterator[None]:
    """Put ``os.environ`` back as it was when the block ends."""
    environ = dict(os.environ)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(environ)
