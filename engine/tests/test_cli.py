"""The command line as a user meets it, run from an empty working directory: defaults from YAML, composed
configs, run folders, linked values, and one ``error:`` line (exit code 2) for input that cannot work."""

from __future__ import annotations

import csv
import re
import warnings
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from support import CONFIG_FILES, FAST, LOGGERS, TINY, RunCLI, kept_environ, project_cli, run_dirs, run_main

from runwright import cli as cli_module


def no_run_folder(workdir: Path) -> bool:
    """True when no run folder was left under ``workdir/logs``."""
    logs = workdir / "logs"
    return not logs.exists() or not any(logs.iterdir())


def test_help_and_print_config_write_nothing(workdir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_main(["--help"], capsys)
    assert code == 0 and "fit" in out and "export" in out  # the extra commands are in the epilog
    code, out, _ = run_main(["fit", "--print_config"], capsys)
    printed = yaml.safe_load(out)
    assert code == 0 and printed["model"]["class_path"] == TINY
    assert printed["data"]["class_path"] == "fixture_task.TinyImages"
    assert no_run_folder(workdir), "--print_config must not create a run folder"


def test_defaults_come_from_the_engines_yaml_then_the_experiments(
    workdir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The engine's defaults.yaml, then the experiment (here the fixture's), with no Python copy of either."""
    _, out, _ = run_main(["fit", "--print_config"], capsys)
    printed = yaml.safe_load(out)
    engine, experiment = (yaml.safe_load(Path(path).read_text()) for path in CONFIG_FILES)
    for key, value in engine["trainer"].items():
        assert printed["trainer"][key] == value, key
    assert printed["checkpoint"]["filename"] == engine["checkpoint"]["filename"] == "best"
    # the experiment's file wins over the engine's (val/acc, max instead of val/loss, min)
    assert (printed["checkpoint"]["monitor"], printed["checkpoint"]["mode"]) == ("val/acc", "max")
    assert printed["seed_everything"] == experiment["seed_everything"]
    source = Path(cli_module.__file__).read_text()
    assert "gradient_clip_algorithm" not in source and "val/acc" not in source


def test_configs_compose_and_dotted_overrides_win(workdir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    sgd = workdir / "sgd.yaml"  # a model preset of the user's own (configs/model/ may be gone)
    sgd.write_text(
        "model:\n  init_args:\n    optimizer:\n      class_path: torch.optim.SGD\n"
        "      init_args:\n        lr: 0.05\n        momentum: 0.9\n"
    )
    cpu = workdir / "cpu.yaml"  # a trainer preset (configs/trainer/cpu.yaml in a user's repo)
    cpu.write_text("trainer:\n  accelerator: cpu\n  devices: 1\n")
    presets = ["--config", str(sgd), "--config", str(cpu)]
    overrides = ["--model.optimizer.lr=3e-4", "--seed_everything=7", "--trainer.max_epochs=3"]
    _, out, _ = run_main(["fit", *presets, *overrides, "--print_config"], capsys)
    printed = yaml.safe_load(out)
    optimizer = printed["model"]["init_args"]["optimizer"]
    assert optimizer["class_path"] == "torch.optim.SGD" and optimizer["init_args"]["momentum"] == 0.9
    assert optimizer["init_args"]["lr"] == pytest.approx(3e-4)
    assert printed["trainer"]["accelerator"] == "cpu"
    assert (printed["seed_everything"], printed["trainer"]["max_epochs"]) == (7, 3)


def test_a_config_before_the_subcommand_is_refused_with_one_line(
    workdir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--config x.yaml fit`` would ignore x.yaml and train the defaults: it is refused instead."""
    (workdir / "x.yaml").write_text("trainer:\n  max_epochs: 2\n")
    code, _, err = run_main(["--config", "x.yaml", "fit", *FAST], capsys)
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert code == 2 and len(errors) == 1, err
    assert "--config x.yaml comes before the subcommand" in errors[0] and "fit --config x.yaml" in errors[0]
    assert not (workdir / "logs").exists()
    # after the subcommand it is applied
    assert project_cli(["fit", *FAST, "--config", "x.yaml"]).trainer.current_epoch == 2


def test_optimizer_and_scheduler_come_from_the_command_line(run_cli: RunCLI) -> None:
    cli = run_cli(
        "fit",
        "--model.optimizer=torch.optim.SGD",
        "--model.optimizer.lr=0.05",
        "--model.lr_scheduler=torch.optim.lr_scheduler.StepLR",
        "--model.lr_scheduler.step_size=1",
    )
    optimizer = cli.trainer.optimizers[0]
    assert type(optimizer).__name__ == "SGD"
    assert optimizer.param_groups[0]["initial_lr"] == pytest.approx(0.05)
    assert type(cli.trainer.lr_scheduler_configs[0].scheduler).__name__ == "StepLR"
    off = run_cli("fit", "--model.lr_scheduler=null")
    assert off.trainer.lr_scheduler_configs == []
    assert off.trainer.optimizers[0].param_groups[0]["lr"] == pytest.approx(0.01)  # constant


def test_a_scheduler_can_step_every_optimizer_step(run_cli: RunCLI) -> None:
    args = [
        "--model.optimizer=torch.optim.SGD",
        "--model.optimizer.lr=1.0",
        "--model.lr_scheduler=torch.optim.lr_scheduler.LinearLR",
        "--model.lr_scheduler.start_factor=0.1",
        "--model.lr_scheduler.total_iters=10",
        "--trainer.limit_train_batches=4",
    ]
    step = run_cli("fit", *args, "--model.lr_scheduler_interval=step")
    epoch = run_cli("fit", *args)  # the default interval: once per epoch
    # after 4 optimizer steps: lr = 1.0 * (0.1 + 0.9 * 4 / 10) per step, still the start factor per epoch
    assert step.trainer.optimizers[0].param_groups[0]["lr"] == pytest.approx(0.46)
    assert epoch.trainer.optimizers[0].param_groups[0]["lr"] == pytest.approx(0.19)


def test_each_run_gets_its_own_folder_with_config_metrics_and_checkpoints(
    fitted: Callable[..., Path],
    workdir: Path,
    capsys: pytest.CaptureFixture[str],
    recwarn: pytest.WarningsRecorder,
) -> None:
    """A second fit (TensorBoard-logged) next to a finished one gets its own folder; each holds its
    config, metrics.csv with the engine's keys, and its checkpoints; TensorBoard's hyperparameters are
    compared by the best score."""
    first = fitted()  # (a fit's run folder, CSV-logged, in logs/)
    # TensorBoard writes into the new folder before the CSV logger starts there; the CSV logger's
    # "exists and is not empty. Previous log files ... will be deleted" does not apply to it.
    code, out, _ = run_main(["fit", *FAST, *LOGGERS["tensorboard"]], capsys)
    assert code == 0 and not [w for w in recwarn if "exists and is not empty" in str(w.message)]
    second = Path(out.split("Run folder: ")[1].splitlines()[0])
    assert list(second.glob("events.out.tfevents.*"))
    folders = run_dirs(workdir / "logs")
    assert folders == sorted([first, second])
    for folder in folders:
        assert (folder / "config.yaml").is_file()
        assert (folder / "metrics.csv").is_file()
        assert {p.name for p in (folder / "checkpoints").iterdir()} == {"best.ckpt", "last.ckpt"}
    header = (first / "metrics.csv").read_text().splitlines()[0].split(",")
    for key in ("train/loss", "train/acc", "val/loss", "val/acc", "best/val/acc", "val/f1", "train/lr"):
        assert key in header, header
    # TensorBoard's HPARAMS tab holds the model's hyperparameters with best/<monitor> as their metric, and
    # no hp_metric = -1 placeholder
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.plugins.hparams import plugin_data_pb2

    tags, metrics, params = set(), set(), set()
    for events in second.glob("events.out.tfevents.*"):
        accumulator = EventAccumulator(str(events))
        accumulator.Reload()
        tags |= set(accumulator.Tags()["scalars"])
        for content in accumulator.PluginTagToContent("hparams").values():
            data = plugin_data_pb2.HParamsPluginData.FromString(content)
            metrics |= {info.name.tag for info in data.experiment.metric_infos}
            params |= set(data.session_start_info.hparams)
    assert "val/acc" in tags and "best/val/acc" in tags and "hp_metric" not in tags
    assert metrics == {"best/val/acc"} and {"num_classes", "optimizer/init_args/lr"} <= params, params


def test_a_fixed_run_name_refuses_to_reuse_a_folder(
    fitted: Callable[..., Path], workdir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fitted("baseline")
    before = sorted(p.name for p in (workdir / "logs" / "baseline").rglob("*"))
    code, _, err = run_main(["fit", *FAST, "--run_name=baseline"], capsys)
    assert code == 2 and err.startswith("error: run_name='baseline'") and len(err.splitlines()) == 1, err
    assert sorted(p.name for p in (workdir / "logs" / "baseline").rglob("*")) == before


def test_a_run_name_cannot_leave_the_logs_folder(workdir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for name in ("../escape", "a/b", ".."):
        code, _, err = run_main(["fit", *FAST, f"--run_name={name}"], capsys)
        assert code == 2 and "plain folder name" in err, err
    assert not (workdir / "escape").exists() and no_run_folder(workdir)


def test_a_misspelt_command_is_one_line_naming_the_closest_of_all_commands(
    workdir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run_main(["fitt", *FAST], capsys)
    assert code == 2 and len(err.splitlines()) == 1, err
    assert (
        err.startswith("error: no command `fitt`; did you mean `fit`?")
        and "lr_find" in err
        and "sweep" in err
    )
    code, _, err = run_main(["lr_fnd"], capsys)
    assert code == 2 and "did you mean `lr_find`?" in err
    assert no_run_folder(workdir)


def test_a_bad_value_gets_a_short_usage_line_and_the_error(
    workdir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run_main(["fit", "--trainer.max_epochs=abc"], capsys)
    lines = err.strip().splitlines()
    assert code == 2 and lines[0] == "usage: python -m fixture_task fit [options]"
    assert "tip: For details of accepted options run: python -m fixture_task fit --help" in lines
    assert any(line.startswith("error:") for line in lines) and "abc" in err
    assert len(lines) < 30, err  # not the full option list
    code, _, err = run_main(["fit", "--trainer.max_epoch=2"], capsys)  # a typo is not an abbreviation
    assert code == 2 and "max_epoch" in err
    assert no_run_folder(workdir)


def test_a_missing_checkpoint_is_a_usage_error(workdir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_main(["test", "--ckpt_path", "nope.ckpt"], capsys)
    assert code == 2 and "nope.ckpt" in err and "no such file" in err
    code, _, err = run_main(["test", "--ckpt_path", "best"], capsys)
    assert code == 2 and "no run under" in err
    assert no_run_folder(workdir)


@pytest.mark.parametrize("args", [["--model.num_classes=7"], ["--config", "nc.yaml"], ["--config=nc.yaml"]])
def test_a_linked_value_cannot_be_set_against_its_source(
    workdir: Path, capsys: pytest.CaptureFixture[str], args: list[str]
) -> None:
    (workdir / "nc.yaml").write_text("model:\n  init_args:\n    num_classes: 3\n")
    code, _, err = run_main(["fit", *FAST, *args], capsys)
    (error,) = [line for line in err.splitlines() if line.startswith("error:")]
    assert code == 2 and "model.num_classes=" in error and "DataModule's num_classes (4)" in error, err
    assert no_run_folder(workdir)


def test_the_datamodule_decides_classes_and_channels(run_cli: RunCLI) -> None:
    """``num_classes`` and ``in_channels`` (``dims[0]``) of the model follow the DataModule."""
    cli = run_cli("fit", "--data=helpers.ColorImages", "--data.num_classes=5")
    assert cli.model.head.out_features == 5 and cli.model.num_classes == 5
    assert cli.model.backbone.features[0].in_channels == 3
    assert cli.trainer.state.finished
    # a checkpoint of it tests with the same shapes: the model comes back with its own numbers
    test = run_cli("test", "--ckpt_path=best")
    assert test.model.head.out_features == 5 and test.model.backbone.features[0].in_channels == 3


def test_the_monitored_metric_is_a_config_value(run_cli: RunCLI) -> None:
    """``checkpoint.monitor``/``mode`` choose the best checkpoint (any logged metric) and name the
    ``best/<monitor>`` column; they are no longer linked from the model."""
    cli = run_cli("fit", "--checkpoint.monitor=val/f1", "--checkpoint.mode=min")
    callback = cli.trainer.checkpoint_callback
    assert (callback.monitor, callback.mode) == ("val/f1", "min")  # type: ignore[union-attr]
    header = (cli.run_dir / "metrics.csv").read_text().splitlines()[0].split(",")
    assert "best/val/f1" in header and "best/val/acc" not in header


def test_switching_a_class_says_which_values_it_kept(workdir: Path) -> None:
    """jsonargparse keeps AdamW's weight_decay=0.01 for SGD (whose own default is 0): said once. A value
    given that differs from the carried one is not carried over (one given equal to it cannot be told
    apart from it: explicit values are the parsed config against the defaults)."""
    with kept_environ(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cli = project_cli(["--model.optimizer=torch.optim.SGD", "--model.optimizer.lr=0.05"], run=False)
    messages = [str(w.message) for w in caught if "keeps the value" in str(w.message)]
    assert cli.model.hparams["optimizer"]["init_args"]["weight_decay"] == 0.01
    assert len(messages) == 1 and "weight_decay=0.01 (its own default: 0)" in messages[0], messages
    with kept_environ(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        project_cli(
            [
                "--model.optimizer=torch.optim.SGD",
                "--model.optimizer.lr=0.05",
                "--model.optimizer.weight_decay=0.001",
            ],
            run=False,
        )
    assert not [w for w in caught if "keeps the value" in str(w.message)]


@pytest.mark.parametrize(
    "args",
    [
        ["--trainer.logger=lightning.pytorch.loggers.WandbLogger", "--trainer.logger.offline=true"],
        ["--model=helpers.FiveClassesByDefault"],  # num_classes comes from the data (4), not carried over
    ],
)
def test_what_the_engine_sets_itself_is_not_said_to_be_carried_over(workdir: Path, args: list[str]) -> None:
    """A logger's name/save_dir/version (the run folder's) and a model's linked arguments (the data's)
    are the engine's to set: switching the class (every logger preset does) draws no 'keeps the value'
    warning."""
    with kept_environ(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cli = project_cli(["--trainer.logger.save_dir=logs", *args], run=False)
    assert not [str(w.message) for w in caught if "keeps the value" in str(w.message)]
    if "FiveClassesByDefault" in args[0]:
        assert cli.model.hparams["num_classes"] == 4


@pytest.mark.parametrize(
    "args, words",
    [
        (  # the W&B logger whatever the repo's default logger is
            [*LOGGERS["wandb"], "--trainer.logger.log_model=true"],
            ["log_model", "offline", "Set `offline=False`"],  # Lightning's message, in one line
        ),
        (  # Lightning's own refusal, in one line (the default clipping does not apply to it: below)
            ["--model=helpers.ManualClassifier", "--trainer.gradient_clip_val=0.5"],
            ["manual optimization", "gradient_clip_val=0.5"],
        ),
        (["--data.batch_size=-1"], ["batch_size", "-1"]),
    ],
)
def test_settings_that_cannot_work_stop_before_anything_is_written(
    workdir: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    args: list[str],
    words: list[str],
) -> None:
    monkeypatch.delenv("WANDB_MODE")  # W&B as a user has it (offline by the logger's default)
    code, _, err = run_main(["fit", *FAST, *args], capsys)
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert code == 2 and len(errors) == 1 and all(word in errors[0] for word in words), err
    assert "Traceback" not in err and no_run_folder(workdir)


def test_a_model_that_optimizes_by_hand_trains_without_the_default_clipping(run_cli: RunCLI) -> None:
    """Lightning clips only in automatic optimization: the engine's default ``gradient_clip_val`` does not
    apply to a manual-optimization model (as Lightning's GAN example), which trains as written."""
    cli = run_cli("fit", "--model=helpers.ManualClassifier")
    assert cli.trainer.gradient_clip_val is None and cli.trainer.global_step == 2
    assert run_cli("fit", "--trainer.max_epochs=1").trainer.gradient_clip_val == 1.0  # (automatic: kept)


def test_a_model_scheduler_no_longer_conflicts_with_a_schedule_callback(run_cli: RunCLI) -> None:
    """Warmup-cosine is the model's ``lr_scheduler``: another scheduler replaces it (once refused as a
    conflict with the ``--lr_schedule`` callback), and ``train/lr`` is the scheduler's LR."""
    plateau = [  # as configs/model/plateau.yaml (the user's folder, which a generated repo may delete)
        "--model.lr_scheduler=torch.optim.lr_scheduler.ReduceLROnPlateau",
        "--model.lr_scheduler.patience=3",
        "--model.lr_scheduler_monitor=val/loss",
    ]
    cli = run_cli("fit", *plateau, "--trainer.max_epochs=2")
    (config,) = cli.trainer.lr_scheduler_configs
    assert type(config.scheduler).__name__ == "ReduceLROnPlateau"
    assert (config.monitor, config.interval) == ("val/loss", "epoch")
    rows = list(csv.DictReader((cli.run_dir / "metrics.csv").open()))
    assert [float(r["train/lr"]) for r in rows if r.get("train/lr")] == [pytest.approx(0.01)] * 4


def test_a_partial_accumulation_window_is_announced(run_cli: RunCLI) -> None:
    with pytest.warns(
        UserWarning, match=r"3 training batches, not a multiple of accumulate_grad_batches=4.*3/4"
    ):
        run_cli("fit", "--trainer.limit_train_batches=3", "--trainer.accumulate_grad_batches=4")


def test_short_epochs_log_their_epoch_metrics_and_lightning_says_why_no_step_is_logged(
    run_cli: RunCLI,
) -> None:
    """3 batches an epoch, log_every_n_steps=50: the epoch metrics are logged once per epoch, no step
    row is (Lightning's rule), and Lightning's warning that says so reaches the user."""
    with pytest.warns(UserWarning, match="smaller than the logging interval"):
        cli = run_cli(
            "fit",
            "--trainer.max_epochs=2",
            "--trainer.limit_train_batches=3",
            "--trainer.log_every_n_steps=50",
        )
    with (cli.run_dir / "metrics.csv").open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert [int(row["epoch"]) for row in rows if row.get("val/acc")] == [0, 1]
    assert [int(row["epoch"]) for row in rows if row.get("train/acc")] == [0, 1]
    assert not [row for row in rows if row.get("train/loss") or row.get("train/lr")]


def test_predict_writes_a_csv_into_its_run_folder(run_cli: RunCLI, fitted: Callable[..., Path]) -> None:
    fitted()
    cli = run_cli("predict", "--ckpt_path=best")
    rows = list(csv.DictReader((cli.run_dir / "predictions.csv").open()))
    assert list(rows[0]) == ["index", "pred", "prob", *(f"probs_{k}" for k in range(4)), "target"]
    assert [int(r["index"]) for r in rows] == list(range(16))  # limit_predict_batches=1 batch of 16
    assert all(0 <= int(r["pred"]) < 4 and 0 < float(r["prob"]) <= 1 for r in rows)


def test_the_engine_uses_relative_imports_and_never_a_users_package() -> None:
    """Inside the engine, its own modules are imported relatively; no module imports a package by a name
    it was not handed (the user's package comes in as ``main(package=...)``)."""
    engine = Path(cli_module.__file__).parent
    for path in engine.rglob("*.py"):
        text = path.read_text()
        assert not re.search(r"^\s*(from|import) runwright\b", text, re.M), path
        assert not re.search(r"^\s*(from|import) (project|fixture_task)\b", text, re.M), path


def test_every_config_the_engine_writes_is_a_config_of_every_command(
    run_cli: RunCLI, fitted: Callable[..., Path], workdir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The ``config.yaml`` of a fit, a test and a predict run, of a tuner's run (as a sweep trial's,
    whose copy is the sweep's ``best.yaml``) and the tuner's suggestion: each command that takes
    ``--config`` takes them all (``--print_config``: parsed and checked), its command-only keys
    (``ckpt_path``, ``verbose``, ``return_predictions``, ...) ignored or applied."""
    run = fitted()
    written = [run / "config.yaml"]
    for command in ("test", "predict"):
        written.append(run_cli(command, f"--ckpt_path={run}/checkpoints/best.ckpt").run_dir / "config.yaml")
    tuned = [
        "--tune.num_training=20",
        "--trainer.enable_progress_bar=false",
        "--trainer.enable_model_summary=false",
    ]
    code, _, err = run_main(["lr_find", *tuned], capsys)
    assert code == 0, err
    (tuner,) = workdir.glob("logs/*_lr_find")
    written += [tuner / "config.yaml", tuner / "suggested_lr.yaml"]
    configs = [arg for path in written for arg in ("--config", str(path))]
    sweep = ["--config", str(Path(__file__).with_name("fixture_sweep.yaml"))]
    for command in ("fit", "validate", "test", "predict", "lr_find", "scale_batch_size", "sweep"):
        extra = sweep if command == "sweep" else []
        code, out, err = run_main([command, *configs, *extra, "--print_config"], capsys)
        assert code == 0 and "model:" in out, (command, err)


def test_an_evaluation_run_named_with_run_name_runs_again_from_its_config(
    run_cli: RunCLI, fitted: Callable[..., Path], workdir: Path
) -> None:
    """``test --ckpt_path ... --run_name T`` saves a config that names the checkpoint it tested but not
    the run folder: ``test --config logs/T/config.yaml`` tests the same checkpoint again in a new folder
    (same result), and ``validate``/``lr_find`` take it too (not ``run_name='T': ... exists``)."""
    run = fitted()
    first = run_cli("test", f"--ckpt_path={run}/checkpoints/best.ckpt", "--run_name=T")
    saved = yaml.safe_load((first.run_dir / "config.yaml").read_text())
    assert "run_name" not in saved and saved["ckpt_path"] == f"{run}/checkpoints/best.ckpt"
    again = run_cli("test", "--config", str(first.run_dir / "config.yaml"))
    assert again.run_dir != first.run_dir
    loss = [float(cli.trainer.callback_metrics["test/loss"]) for cli in (first, again)]
    assert loss[0] == loss[1]
    run_cli("validate", "--config", str(first.run_dir / "config.yaml"))


def test_a_value_given_before_a_config_file_that_replaces_it_is_named_in_one_warning(
    workdir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """LightningCLI reads arguments in order, so ``--trainer.max_epochs=5 --config x.yaml`` (x.yaml:
    ``max_epochs: 3``) trains 3 epochs: one warning line says so and how to keep 5; after ``--config``, or
    equal to the file's, there is none."""
    (workdir / "x.yaml").write_text("trainer:\n  max_epochs: 3\n")
    for args, epochs, warned in (
        (["--trainer.max_epochs=5", "--config=x.yaml"], 3, True),
        (["--config=x.yaml", "--trainer.max_epochs=5"], 5, False),
        (["--trainer.max_epochs=3", "--config=x.yaml"], 3, False),
    ):
        code, out, err = run_main(["fit", *args, "--print_config"], capsys)
        assert code == 0 and yaml.safe_load(out)["trainer"]["max_epochs"] == epochs, err
        lines = [line for line in err.splitlines() if line.startswith("warning:")]
        expected = (
            "warning: --config x.yaml sets trainer.max_epochs=3 over the 5 given before it (later "
            "arguments win); give --trainer.max_epochs after --config to keep it"
        )
        assert lines == ([expected] if warned else []), err
