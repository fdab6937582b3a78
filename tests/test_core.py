"""The core wiring along Lightning's grain: defaults in YAML, linked values, config-time errors."""

from __future__ import annotations

import csv
import re
import warnings
from pathlib import Path

import pytest
import yaml
from conftest import CONFIGS, REPO_ROOT, RunCLI, run_module

from project.cli import DEFAULT_CONFIG_FILES, ProjectCLI

PACKAGE = REPO_ROOT / ProjectCLI.__module__.split(".")[0]


def test_defaults_come_from_the_packages_yaml_files(tmp_path: Path) -> None:
    printed = yaml.safe_load(run_module(["fit", "--print_config"], cwd=tmp_path).stdout)
    default = yaml.safe_load(Path(DEFAULT_CONFIG_FILES[0]).read_text())
    logger = yaml.safe_load(Path(DEFAULT_CONFIG_FILES[1]).read_text())
    for key, value in default["trainer"].items():
        assert printed["trainer"][key] == value, key
    assert printed["seed_everything"] == default["seed_everything"]
    assert printed["trainer"]["logger"]["class_path"] == logger["trainer"]["logger"]["class_path"]
    assert printed["model"]["class_path"].endswith(".ImageClassifier")
    assert printed["data"]["class_path"].endswith(".DigitsDataModule")
    # no Python copy of these defaults to keep in step
    source = (PACKAGE / "cli.py").read_text()
    assert "gradient_clip_algorithm" not in source and "DigitsDataModule" not in source


def test_the_datamodule_decides_classes_and_channels(run_cli: RunCLI) -> None:
    cli = run_cli(
        "fit",
        "--data=SyntheticDataModule",
        "--data.num_classes=5",
        "--data.image_shape=[3,8,8]",
        "--data.num_samples=64",
        "--data.batch_size=16",
    )
    assert cli.model.head.out_features == 5 and cli.model.num_classes == 5
    assert cli.model.backbone.features[0].in_channels == 3
    assert cli.trainer.state.finished
    # a checkpoint of it tests with the same shapes, and the model comes back with its own numbers
    test = run_cli("test", "--ckpt_path=best")
    assert test.model.head.out_features == 5


@pytest.mark.parametrize(
    "args",
    [
        ["--model.num_classes=7"],
        ["--checkpoint.monitor=val/loss"],
        ["--config", "nc.yaml"],
        ["--config=nc.yaml"],
        ["--config=monitor.yaml"],
    ],
)
def test_a_linked_value_cannot_be_set_against_its_source(workdir: Path, args: list[str]) -> None:
    (workdir / "nc.yaml").write_text("model:\n  init_args:\n    num_classes: 3\n")
    (workdir / "monitor.yaml").write_text("checkpoint:\n  monitor: val/loss\n")
    with pytest.raises(SystemExit) as caught:
        ProjectCLI(args=["fit", *args])
    assert caught.value.code == 2
    assert not (workdir / "logs").exists()


def test_the_checkpoint_monitor_follows_the_models_best_metric(run_cli: RunCLI) -> None:
    cli = run_cli("fit", "--model.best_metric=f1", "--model.best_mode=min")
    callback = cli.trainer.checkpoint_callback
    assert (callback.monitor, callback.mode) == ("val/f1", "min")  # type: ignore[union-attr]


def test_a_scheduler_can_step_every_optimizer_step(run_cli: RunCLI) -> None:
    args = [
        "--model.optimizer=torch.optim.SGD",
        "--model.optimizer.lr=1.0",
        "--model.lr_scheduler=torch.optim.lr_scheduler.LinearLR",
        "--model.lr_scheduler.start_factor=0.1",
        "--model.lr_scheduler.total_iters=10",
        "--lr_schedule.enabled=false",
        "--trainer.limit_train_batches=4",
    ]
    step = run_cli("fit", *args, "--model.lr_scheduler_interval=step")
    epoch = run_cli("fit", *args)  # the default interval: once per epoch
    # after 4 optimizer steps: lr = 1.0 * (0.1 + 0.9 * 4 / 10) per step, still the start factor per epoch
    assert step.trainer.optimizers[0].param_groups[0]["lr"] == pytest.approx(0.46)
    assert epoch.trainer.optimizers[0].param_groups[0]["lr"] == pytest.approx(0.19)


def test_switching_a_class_says_which_values_it_kept(workdir: Path) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cli = ProjectCLI(args=["--model.optimizer=torch.optim.SGD", "--model.optimizer.lr=0.05"], run=False)
    messages = [str(w.message) for w in caught if "keeps the value" in str(w.message)]
    assert cli.model.hparams["optimizer"]["init_args"]["weight_decay"] == 0.01
    assert len(messages) == 1 and "weight_decay=0.01 (its own default: 0)" in messages[0], messages
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ProjectCLI(
            args=["--model.optimizer=torch.optim.SGD", "--model.optimizer.weight_decay=0.01"], run=False
        )
    assert not [w for w in caught if "keeps the value" in str(w.message)]  # given on purpose


@pytest.mark.parametrize(
    "args, words",
    [
        (  # the W&B logger whatever the repo's default logger is
            ["--config", str(CONFIGS / "logger" / "wandb.yaml"), "--trainer.logger.log_model=true"],
            ["log_model", "offline", "--trainer.logger.offline=false"],
        ),
        (["--model=training_helpers.ManualClassifier"], ["automatic_optimization", "gradient_clip_val"]),
        (
            ["--model.lr_scheduler=torch.optim.lr_scheduler.StepLR", "--model.lr_scheduler.step_size=1"],
            ["lr_schedule", "--lr_schedule.enabled=false"],
        ),
    ],
)
def test_settings_that_cannot_work_stop_before_anything_is_written(
    tmp_path: Path, args: list[str], words: list[str]
) -> None:
    tests = str(REPO_ROOT / "tests")
    result = run_module(["fit", *args], cwd=tmp_path, check=False, env={"PYTHONPATH": tests})
    assert result.returncode == 2, result.stderr
    error = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(error) == 1 and all(word in error[0] for word in words), result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "logs").exists() or not any((tmp_path / "logs").iterdir())


def test_a_partial_accumulation_window_is_announced(run_cli: RunCLI) -> None:
    with pytest.warns(
        UserWarning, match=r"3 training batches, not a multiple of accumulate_grad_batches=4.*3/4"
    ):
        run_cli("fit", "--trainer.limit_train_batches=3", "--trainer.accumulate_grad_batches=4")


def test_a_run_shorter_than_log_every_n_steps_has_a_training_curve(run_cli: RunCLI) -> None:
    cli = run_cli(
        "fit", "--trainer.max_epochs=2", "--trainer.limit_train_batches=3", "--trainer.log_every_n_steps=50"
    )
    with (cli.run_dir / "metrics.csv").open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    loss_steps = [int(row["step"]) for row in rows if row.get("train/loss")]
    lr_steps = [int(row["step"]) for row in rows if row.get("train/lr")]
    assert loss_steps == lr_steps == [2, 5]  # the last step of each epoch


def test_tensorboard_has_no_placeholder_hp_metric(run_cli: RunCLI) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    cli = run_cli("fit", "--config", str(CONFIGS / "logger" / "tensorboard.yaml"))
    tags = set()
    for events in cli.run_dir.glob("events.out.tfevents.*"):
        accumulator = EventAccumulator(str(events))
        accumulator.Reload()
        tags |= set(accumulator.Tags()["scalars"])
    assert "val/acc" in tags and "hp_metric" not in tags


def test_the_package_uses_relative_imports_and_configs_short_class_names() -> None:
    for path in PACKAGE.rglob("*.py"):
        assert not re.search(rf"^\s*(from|import) {PACKAGE.name}\b", path.read_text(), re.M), path
    for path in CONFIGS.rglob("*.yaml"):
        assert f"class_path: {PACKAGE.name}." not in path.read_text(), path
