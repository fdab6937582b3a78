"""``lr_find`` and ``scale_batch_size`` on the fixture task: the raw loss and LR of every step of the
range test, a finite suggested LR, the loss-vs-LR plot, the largest batch size within the training
split, configs and commands that apply them, and a console without progress bars when it is not a
terminal."""

from __future__ import annotations

import contextlib
import logging
import math
import shlex
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path

import matplotlib.image
import numpy as np
import pytest
import yaml
from support import PACKAGE, PLAIN_DATA, PLAIN_MODEL, main, project_cli, rerun_suggestion

from runwright.commands import tune
from runwright.console import quiet_console
from runwright.errors import ConfigError


@contextlib.contextmanager
def lightning_records(caplog: pytest.LogCaptureFixture) -> Iterator[None]:
    """Let ``caplog`` see what Lightning's loggers print to the console (they do not propagate)."""
    logger = logging.getLogger("lightning.pytorch")
    logger.addHandler(caplog.handler)
    try:
        yield
    finally:
        logger.removeHandler(caplog.handler)


QUICK = [
    "--tune.num_training=20",
    "--trainer.enable_progress_bar=false",
    "--trainer.enable_model_summary=false",
]
PLATEAU = "torch.optim.lr_scheduler.ReduceLROnPlateau"
PLAIN = [f"--model={PLAIN_MODEL}", f"--data={PLAIN_DATA}", "--checkpoint.monitor=val_acc"]


def steps(run_dir: Path) -> np.ndarray:
    """The ``lr,loss`` rows of ``lr_find.csv``, float64 ``[T, 2]``."""
    return np.loadtxt(run_dir / "lr_find.csv", delimiter=",", skiprows=1, ndmin=2)


def test_lr_find_suggests_a_finite_lr_saves_the_plot_and_a_usable_config(
    workdir: Path, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    with warnings.catch_warnings(record=True) as caught, lightning_records(caplog):
        warnings.simplefilter("always")
        main(["lr_find", *QUICK])  # as `python -m project lr_find` runs it
    # LightningCLI's warning about args next to sys.argv (both are ours here) is not shown to users
    assert not [w for w in caught if "args parameter" in str(w.message)]
    captured = capsys.readouterr()
    out = captured.out
    # captured output is not a terminal: no progress bar, no carriage returns
    assert "\r" not in out + captured.err and "it/s" not in out + captured.err
    # the finder's temporary checkpoint is not news: no "`weights_only` was not set", no "Restoring states"
    shown = out + captured.err + caplog.text
    assert "weights_only" not in shown and "Restor" not in shown, shown
    (use,) = [line for line in out.splitlines() if line.startswith("Use it: ")]
    config = Path(shlex.split(use)[-1])
    run_dir = config.parent
    assert run_dir.name.endswith("_lr_find")
    lr = yaml.safe_load(config.read_text())["model"]["init_args"]["optimizer"]["init_args"]["lr"]
    assert math.isfinite(lr) and 1e-6 <= lr <= 1.0
    assert f"Suggested LR: {lr:.3g} for torch.optim.AdamW on fixture_task.TinyClassifier" in out
    assert lr in steps(run_dir)[:, 0]  # the LR of one of the steps
    image = matplotlib.image.imread(run_dir / "lr_find.png")
    assert image.shape[0] > 100 and image[..., :3].std() > 0.01
    assert {"config.yaml", "provenance.yaml"} <= {p.name for p in run_dir.iterdir()}
    assert not (run_dir / "checkpoints").exists()  # the range test saves no checkpoint
    with pytest.raises(SystemExit):
        project_cli(["fit", "--config", str(config), "--print_config"])
    printed = yaml.safe_load(capsys.readouterr().out)
    assert printed["model"]["init_args"]["optimizer"]["init_args"]["lr"] == pytest.approx(lr)
    assert printed["model"]["init_args"]["optimizer"]["class_path"] == "torch.optim.AdamW"
    # the printed command reruns the fixture experiment with the suggested LR
    cli = rerun_suggestion(out)
    assert type(cli.model).__name__ == "TinyClassifier"
    assert cli.config.fit.model.init_args.optimizer.init_args.lr == pytest.approx(lr)


@pytest.mark.parametrize(
    ("command", "args"),
    [
        (tune.lr_find, ["--tune.min_lr=1e-2", "--tune.max_lr=1e-3"]),
        (tune.lr_find, ["--tune.num_training=1"]),
        (tune.scale_batch_size, ["--tune.max_trials=0"]),
    ],
)
def test_tuning_rejects_bad_options_before_any_run_folder(
    workdir: Path, command: Callable[[list[str], str], object], args: list[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        command([*QUICK, *args], PACKAGE)
    assert exit_info.value.code == 2
    assert not (workdir / "logs").exists() or not any((workdir / "logs").iterdir())


def test_lr_find_leaves_no_run_folder_or_environment_after_a_bad_class_argument(workdir: Path) -> None:
    with pytest.raises(ConfigError, match="batch_size=-1"):  # raised after seeding: conftest checks the env
        tune.lr_find([*QUICK, "--data.batch_size=-1"], PACKAGE)
    assert not (workdir / "logs").exists() or not any((workdir / "logs").iterdir())


def test_lr_find_refuses_manual_optimization_in_one_line_without_a_run_folder(
    workdir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Lightning's LR finder reads the loss ``training_step`` returns to Lightning's optimization loop,
    which a module with ``automatic_optimization = False`` does not use: refused, not 10 NaN losses."""
    with pytest.raises(SystemExit) as exit_info:
        main(["lr_find", *QUICK, "--model=helpers.ManualClassifier"])
    assert exit_info.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        "error: lr_find: ManualClassifier sets automatic_optimization = False; Lightning's LR finder needs "
        "automatic optimization (training_step returning the loss)"
    )
    assert not (workdir / "logs").exists() or not any((workdir / "logs").iterdir())


def test_lr_find_given_a_checkpoint_says_it_trains_a_new_model_and_its_command_runs(
    fitted: Callable[..., Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """``lr_find --ckpt_path <a run's last.ckpt>`` tunes a new model of the experiment's config and says
    so; the ``Use it`` command it prints starts a new fit (it does not continue the run's optimizer)."""
    last = fitted() / "checkpoints" / "last.ckpt"
    capsys.readouterr()
    main(["lr_find", *QUICK, "--trainer.limit_train_batches=2", f"--ckpt_path={last}"])
    out = capsys.readouterr().out
    assert f"lr_find does not use --ckpt_path={last}: it trains a new model of the experiment's config" in out
    (line,) = [line for line in out.splitlines() if line.startswith("Use it: ")]
    words = shlex.split(line.removeprefix("Use it: "))[3:]
    assert words[0] == "fit" and not [word for word in words if "ckpt_path" in word]
    assert yaml.safe_load(Path(words[-1]).read_text())["ckpt_path"] is None
    project_cli([*words, "--trainer.max_epochs=1", "--trainer.limit_val_batches=1"])


def test_scale_batch_size_rejects_a_start_larger_than_the_training_split(
    workdir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        tune.scale_batch_size([*QUICK[1:], "--data.batch_size=256"], PACKAGE)
    assert exit_info.value.code == 2
    assert "data.batch_size=256 is larger than the training split (192 samples)" in capsys.readouterr().err


@pytest.mark.parametrize(
    "schedule",
    [
        [],  # the fixture's WarmupCosineLR, stepped every optimizer step
        # a per-epoch scheduler that waits for val/loss, never computed in the range test (2-step epochs)
        [f"--model.lr_scheduler={PLATEAU}", "--trainer.limit_train_batches=2"],
    ],
    ids=["warmup_cosine", "plateau"],
)
def test_lr_find_records_the_raw_loss_and_the_lr_of_every_step(workdir: Path, schedule: list[str]) -> None:
    _, config = tune.lr_find([*QUICK, "--model=helpers.ScriptedLossClassifier", *schedule], PACKAGE)
    assert config is not None
    recorded = steps(config.parent)
    # every step ran at its LR of the range, rising exponentially from min_lr to max_lr (the model's own
    # scheduler did not move it; Lightning's schedule takes step 1 to the range's third point) ...
    np.testing.assert_allclose(recorded[:, 0], np.geomspace(1e-6, 1.0, 21)[[0, *range(2, 21)]], rtol=1e-6)
    # ... and its loss is what training_step returned, not a running average of it
    np.testing.assert_allclose(recorded[:, 1], [2.0 + 0.1 * math.sin(t) for t in range(20)], rtol=1e-6)


def test_lr_find_suggests_from_the_losses_before_a_nan_without_a_health_check_error(
    workdir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lr, config = tune.lr_find(
        [*QUICK, "--model=helpers.NaNLossClassifier", "--model.nan_at_step=12"], PACKAGE
    )
    assert config is not None
    losses = steps(config.parent)[:, 1]
    assert len(losses) == 20 and np.isfinite(losses[:12]).all() and np.isnan(losses[12:]).all()
    assert math.isfinite(lr) and lr in steps(config.parent)[:12, 0]
    assert "health check" not in capsys.readouterr().out


def test_lr_find_on_a_plain_lightning_module_sets_its_lr_argument(
    workdir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lr, config = tune.lr_find([*QUICK, *PLAIN], PACKAGE)
    assert config is not None
    assert yaml.safe_load(config.read_text()) == {"model": {"init_args": {"lr": lr}}}
    out = capsys.readouterr().out
    assert f"Suggested LR: {lr:.3g} for fixture_task.PlainClassifier's lr" in out
    cli = rerun_suggestion(out)
    assert type(cli.model).__name__ == "PlainClassifier"
    assert cli.model.hparams.lr == pytest.approx(lr)
    assert cli.trainer.optimizers[0].param_groups[0]["lr"] == pytest.approx(lr)


def test_lr_find_says_how_to_use_the_lr_when_the_model_has_no_lr_argument(
    workdir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lr, config = tune.lr_find([*QUICK, *PLAIN, "--model=helpers.FixedLRClassifier"], PACKAGE)
    assert config is None
    out = capsys.readouterr().out
    assert (
        f"helpers.FixedLRClassifier has no optimizer, lr or learning_rate argument: set lr={lr:.3g} where "
        "its configure_optimizers builds the optimizer"
    ) in out
    assert "Use it:" not in out
    assert not list(workdir.glob("logs/*/suggested_lr.yaml"))


def test_suggest_lr_warns_when_the_loss_never_falls() -> None:
    lrs = np.geomspace(1e-6, 1.0, 60)
    flat = tune.suggest_lr(lrs, np.ones(60) + 0.01 * np.sin(np.arange(60)))
    assert any("less than 10%" in note for note in flat.warnings)
    falling = 1.0 / (1.0 + np.exp(3 * (np.log10(lrs) + 3)))  # drops around 1e-3, still falling at the end
    steep = tune.suggest_lr(lrs, 0.5 + falling)
    assert steep.lr == pytest.approx(1e-3, rel=0.5)
    assert any("raise it" in note for note in steep.warnings)


def test_scale_batch_size_stops_at_the_training_split_and_its_command_reruns_the_experiment(
    workdir: Path, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    with lightning_records(caplog), quiet_console():  # (as main runs it)
        size, config = tune.scale_batch_size(QUICK[1:], PACKAGE)
    captured = capsys.readouterr()
    out = captured.out
    assert "\r" not in out + captured.err
    assert "will continue with full run" not in caplog.text  # (Lightning's line: the engine says what ran)
    # 192 training images: 16, 32, 64, 128 fit; 256 would be larger than the split (Lightning tries it)
    assert size == 128, out
    assert "stopped because the next size (256) would exceed the training split of 192 samples" in out
    saved = yaml.safe_load(config.read_text())
    assert saved == {"data": {"class_path": "fixture_task.TinyImages", "init_args": {"batch_size": 128}}}
    cli = rerun_suggestion(out)
    assert type(cli.model).__name__ == "TinyClassifier"
    assert cli.datamodule.batch_size == 128
    assert len(cli.datamodule.train_set) == 192


def test_lr_find_from_weights_sets_a_given_checkpoint_aside(
    fitted: Callable[..., Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """``lr_find --init_from <best> --ckpt_path <last>``: the tuner trains a new model, so it sets the
    ``--ckpt_path`` aside with its note (as without ``--init_from``) and starts from the ``--init_from``
    weights; the ``--init_from``/``--ckpt_path`` conflict of ``fit`` (a resume) does not apply to it."""
    checkpoints = fitted() / "checkpoints"
    capsys.readouterr()
    main(
        [
            "lr_find",
            *QUICK,
            "--trainer.limit_train_batches=2",
            f"--init_from={checkpoints / 'best.ckpt'}",
            f"--ckpt_path={checkpoints / 'last.ckpt'}",
        ]
    )
    out = capsys.readouterr().out
    assert f"lr_find does not use --ckpt_path={checkpoints / 'last.ckpt'}" in out
    assert "--init_from: " in out and "Use it: " in out
