"""Your experiment's defaults: ``python -m project fit`` with no arguments trains the package's
example (``project/configs/default.yaml`` and ``logger.yaml`` there). Replace these
tests with your own when you replace the example; the engine's own tests (tests/engine/) do not use it."""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import pytest
import yaml

from project.engine.cli import CONFIG_FILES, ProjectCLI, main


def run(args: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """``python -m project ARGS`` in-process; returns its stdout (a non-zero exit fails)."""
    with warnings.catch_warnings():  # main's filters for its process
        try:
            main(args)
        except SystemExit as exit:
            assert exit.code == 0, capsys.readouterr().err
    return capsys.readouterr().out


def test_the_defaults_are_the_packages_yaml_files(workdir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert ProjectCLI.config_files == CONFIG_FILES
    printed = yaml.safe_load(run(["fit", "--print_config"], capsys))
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
def test_the_default_fit_then_test_best_reaches_097(
    workdir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The README's promise, as written: the default run, the best checkpoint's test, a prediction."""
    quiet = ["--trainer.enable_progress_bar=false"]
    assert "Best checkpoint (val/acc=" in run(["fit", *quiet], capsys)
    out = run(["test", "--ckpt_path", "best", *quiet], capsys)
    match = re.search(r"test/acc=([0-9.]+)", out)
    assert match, out
    assert float(match.group(1)) >= 0.97
    out = run(["predict", "--ckpt_path", "best", *quiet, "--trainer.limit_predict_batches=1"], capsys)
    assert "predictions.csv" in out
    assert len(list((workdir / "logs").iterdir())) == 3
