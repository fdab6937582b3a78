"""Your experiment's defaults: ``python -m project fit`` with no arguments trains the
package's example (``project/configs/default.yaml`` and ``logger.yaml`` there). Replace
these tests with your own when you replace the example."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from runwright import config_files
from runwright.testing import RunMain
from support import PACKAGE

CONFIG_FILES = config_files(PACKAGE)


def run(run_main: RunMain, *args: str) -> str:
    """``python -m project ARGS`` in-process; returns its stdout (a non-zero exit fails)."""
    code, out, err = run_main(*args)
    assert code == 0, err
    return out


def test_the_defaults_are_the_packages_yaml_files(workdir: Path, run_main: RunMain) -> None:
    assert [path.name for path in CONFIG_FILES] == ["defaults.yaml", "default.yaml", "logger.yaml"]
    printed = yaml.safe_load(run(run_main, "fit", "--print_config"))
    engine, default, logger = (yaml.safe_load(Path(path).read_text()) for path in CONFIG_FILES)
    for key, value in {**engine["trainer"], **default["trainer"]}.items():
        assert printed["trainer"][key] == value, key
    assert printed["seed_everything"] == default["seed_everything"]
    assert printed["trainer"]["logger"]["class_path"] == logger["trainer"]["logger"]["class_path"]
    model, data = "project.models.ImageClassifier", "project.data.DigitsDataModule"
    assert printed["model"]["class_path"] == default["model"]["class_path"] == model
    assert printed["data"]["class_path"] == default["data"]["class_path"] == data
    assert printed["checkpoint"]["monitor"] == default["checkpoint"]["monitor"] == "val/acc"
    assert printed["checkpoint"]["mode"] == "max"
    assert not (workdir / "logs").exists()


@pytest.mark.slow
def test_the_default_fit_then_test_best_reaches_097(workdir: Path, run_main: RunMain) -> None:
    """The README's promise, as written: the default run, the best checkpoint's test, a prediction."""
    quiet = ["--trainer.enable_progress_bar=false"]
    assert "Best checkpoint (val/acc=" in run(run_main, "fit", *quiet)
    out = run(run_main, "test", "--ckpt_path", "best", *quiet)
    match = re.search(r"test/acc=([0-9.]+)", out)
    assert match, out
    assert float(match.group(1)) >= 0.97
    out = run(run_main, "predict", "--ckpt_path", "best", *quiet, "--trainer.limit_predict_batches=1")
    assert "predictions.csv" in out
    assert len(list((workdir / "logs").iterdir())) == 3


#: What the console must not show: Lightning's, W&B's and torch's messages that need no action here.
KNOWN_NOISE = [
    "Skipping setting a default `ModelSummary`",
    "litlogger",
    "Tip: For seamless cloud logging",
    "LeafSpec",
    "anonymous setting has no effect",
    "wandb: ",  # W&B's own lines (the CLI prints the one that matters, the sync command)
    "weights_only",
    "MulticlassAccuracy",  # metric objects as rows of the model summary
    "GPU available:",
    "TPU available:",
    "LOCAL_RANK",
    "`Trainer.fit` stopped",
    "does not have many workers",
    ".fit(ckpt_path",  # Lightning's notes on a checkpoint to resume from, for a fit that names none
    "set_vital",  # torch's deprecation, raised in torchdata's StatefulDataLoader
    "sync_dist",  # Lightning's advice on the engine's unsynced epoch metrics (DDP)
    "Traceback",
]


@pytest.mark.slow
def test_the_readme_commands_print_what_needs_attention_and_little_else(tmp_path: Path) -> None:
    """``fit`` (2 epochs) then ``test --ckpt_path best`` in a fresh interpreter, with the environment a
    user has (no ``PYTHONWARNINGS``, ``WANDB_SILENT`` or ``WANDB_MODE``): no known noise, one sync
    command per run, and besides one line per epoch at most 40 lines (the model summary, the run folder,
    the best checkpoint)."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONWARNINGS", "WANDB_SILENT", "WANDB_MODE")}
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[1])
    printed = []
    for args in (["fit", "--trainer.max_epochs=2"], ["test", "--ckpt_path", "best"]):
        result = subprocess.run(
            [sys.executable, "-m", PACKAGE, *args], cwd=tmp_path, env=env, capture_output=True, text=True
        )
        assert result.returncode == 0, result.stderr
        printed.append((result.stdout + result.stderr).splitlines())
    fit, test = printed
    lines = [line for line in fit + test if line.strip()]
    assert not [line for line in lines if any(noise in line for noise in KNOWN_NOISE)], lines
    assert [line.split("  ")[0] for line in fit if line.startswith("epoch ")] == [
        "epoch 1/2 done",
        "epoch 2/2 done",
    ]
    assert len([line for line in fit if line.strip() and not line.startswith("epoch ")]) <= 40, fit
    logger = yaml.safe_load(CONFIG_FILES[-1].read_text())["trainer"]["logger"]  # the default logger
    syncs = int("WandbLogger" in str(logger))  # W&B's: one sync command per run; others: none
    assert sum("wandb sync" in line for line in fit) == sum("wandb sync" in line for line in test) == syncs
    assert [line for line in test if line.startswith("test: ")] and len(test) <= 5, test
