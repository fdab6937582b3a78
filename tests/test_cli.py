"""The command line as a user meets it: run from an empty working directory."""

from __future__ import annotations

import csv
import re
from pathlib import Path

import pytest
import yaml
from conftest import CONFIGS, FAST, RunCLI, run_dirs, run_module


def test_help_and_print_config(tmp_path: Path) -> None:
    assert "fit" in run_module(["--help"], cwd=tmp_path).stdout
    printed = yaml.safe_load(run_module(["fit", "--print_config"], cwd=tmp_path).stdout)
    assert printed["model"]["class_path"] == "project.models.ImageClassifier"
    assert printed["data"]["class_path"] == "project.data.DigitsDataModule"
    assert not (tmp_path / "logs").exists(), "--print_config must not create a run folder"


def test_configs_compose_and_dotted_overrides_win(tmp_path: Path) -> None:
    printed = yaml.safe_load(
        run_module(
            [
                "fit",
                "--config",
                str(CONFIGS / "model" / "sgd.yaml"),
                "--config",
                str(CONFIGS / "trainer" / "cpu.yaml"),
                "--model.optimizer.lr=3e-4",
                "--seed_everything=7",
                "--trainer.max_epochs=3",
                "--print_config",
            ],
            cwd=tmp_path,
        ).stdout
    )
    assert printed["model"]["init_args"]["optimizer"]["class_path"] == "torch.optim.SGD"
    assert printed["model"]["init_args"]["optimizer"]["init_args"]["lr"] == pytest.approx(3e-4)
    assert printed["model"]["init_args"]["optimizer"]["init_args"]["momentum"] == 0.9
    assert printed["trainer"]["accelerator"] == "cpu"
    assert (printed["seed_everything"], printed["trainer"]["max_epochs"]) == (7, 3)


def test_optimizer_and_scheduler_come_from_the_command_line(run_cli: RunCLI) -> None:
    cli = run_cli(
        "fit",
        "--model.optimizer=torch.optim.SGD",
        "--model.optimizer.lr=0.05",
        "--model.lr_scheduler=torch.optim.lr_scheduler.StepLR",
        "--model.lr_scheduler.step_size=1",
        "--lr_schedule.enabled=false",
    )
    optimizer = cli.trainer.optimizers[0]
    assert type(optimizer).__name__ == "SGD"
    assert optimizer.param_groups[0]["initial_lr"] == pytest.approx(0.05)
    assert type(cli.trainer.lr_scheduler_configs[0].scheduler).__name__ == "StepLR"


def test_each_run_gets_its_own_folder_with_config_metrics_and_checkpoints(
    run_cli: RunCLI, workdir: Path, recwarn: pytest.WarningsRecorder
) -> None:
    first = run_cli("fit")
    # TensorBoard writes into the new folder before the CSV logger starts there; the CSV logger's
    # "exists and is not empty. Previous log files ... will be deleted" does not apply to it.
    second = run_cli("fit", "--config", str(CONFIGS / "logger" / "tensorboard.yaml"))
    assert not [w for w in recwarn if "exists and is not empty" in str(w.message)]
    folders = run_dirs(workdir / "logs")
    assert len(folders) == 2 and first.run_dir != second.run_dir
    for folder in folders:
        assert (folder / "config.yaml").is_file()
        assert (folder / "metrics.csv").is_file()
        assert {p.name for p in (folder / "checkpoints").iterdir()} == {"best.ckpt", "last.ckpt"}
    header = (folders[0] / "metrics.csv").read_text().splitlines()[0].split(",")
    for key in ("train/loss", "train/acc", "val/loss", "val/acc", "val/acc_best", "val/f1", "train/lr"):
        assert key in header, header


def test_fixed_run_name_refuses_to_reuse_a_folder(run_cli: RunCLI) -> None:
    run_cli("fit", "--run_name=baseline")
    with pytest.raises(FileExistsError, match="baseline"):
        run_cli("fit", "--run_name=baseline")


def test_a_bad_value_gets_a_short_usage_line_and_the_error(tmp_path: Path) -> None:
    result = run_module(["fit", "--trainer.max_epochs=abc"], cwd=tmp_path, check=False)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert lines[0] == "usage: python -m project fit [options]"
    assert "tip: For details of accepted options run: python -m project fit --help" in lines
    assert any(line.startswith("error:") for line in lines) and "abc" in result.stderr
    assert len(lines) < 30, result.stderr  # not the full option list
    result = run_module(["fitt"], cwd=tmp_path, check=False)
    assert result.returncode == 2
    subcommands = "{fit,validate,test,predict}"
    assert result.stderr.startswith(f"usage: python -m project {subcommands} [options]")


def test_missing_checkpoint_file_is_a_usage_error(tmp_path: Path) -> None:
    result = run_module(["test", "--ckpt_path", "nope.ckpt"], cwd=tmp_path, check=False)
    assert result.returncode == 2
    assert "nope.ckpt" in result.stderr and "no such file" in result.stderr
    result = run_module(["test", "--ckpt_path", "best"], cwd=tmp_path, check=False)
    assert result.returncode == 2 and "no run under" in result.stderr
    assert not (tmp_path / "logs").exists() or not any((tmp_path / "logs").iterdir())


def test_predict_writes_a_csv_into_its_run_folder(run_cli: RunCLI, workdir: Path) -> None:
    run_cli("fit")
    cli = run_cli("predict", "--ckpt_path=best")
    path = cli.run_dir / "predictions.csv"
    rows = list(csv.DictReader(path.open()))
    assert list(rows[0]) == ["index", "pred", "prob", *(f"probs_{k}" for k in range(10)), "target"]
    assert len(rows) == 64  # limit_predict_batches=1 batch of 64
    assert [int(r["index"]) for r in rows] == list(range(64))
    assert all(0 <= int(r["pred"]) < 10 and 0 < float(r["prob"]) <= 1 for r in rows)


@pytest.mark.slow
def test_default_fit_then_test_best_reaches_097_from_an_empty_directory(tmp_path: Path) -> None:
    """The README's promise, exactly as written: the default run, then the best checkpoint's test."""
    fit = run_module(["fit", "--trainer.enable_progress_bar=false"], cwd=tmp_path)
    assert "Best checkpoint" in fit.stdout
    test = run_module(["test", "--ckpt_path", "best", "--trainer.enable_progress_bar=false"], cwd=tmp_path)
    match = re.search(r"test/acc\s*[│|]\s*([0-9.]+)", test.stdout)
    assert match, test.stdout
    assert float(match.group(1)) >= 0.97
    predict = run_module(["predict", "--ckpt_path", "best", *FAST[-3:]], cwd=tmp_path)
    assert "predictions.csv" in predict.stdout
    assert len(run_dirs(tmp_path / "logs")) == 3


def test_short_epochs_still_log_loss_lr_and_epoch_metrics(run_cli: RunCLI) -> None:
    """train/loss and train/lr are logged on logging steps and on each epoch's last batch; metrics
    once per epoch. With 2 batches and log_every_n_steps=50 only the last batch logs them."""
    cli = run_cli("fit", "--trainer.max_epochs=2", "--trainer.log_every_n_steps=50")
    metrics = cli.trainer.callback_metrics
    for key in ("train/loss", "train/lr", "train/acc", "train/f1", "val/loss", "val/acc", "val/acc_best"):
        assert key in metrics, key
    assert 0.0 <= float(metrics["train/acc"]) <= 1.0
