"""``python -m project lr_find``: a finite suggested LR, the loss-vs-LR plot and a config that
applies it."""

from __future__ import annotations

import math
import shlex
from pathlib import Path
from types import SimpleNamespace

import matplotlib.image
import numpy as np
import pytest
import torch
import yaml
from conftest import CONFIGS, FAST

from project import tuning
from project.cli import ProjectCLI

DIABETES = CONFIGS / "experiment" / "diabetes.yaml"
QUICK = [
    "--tune.num_training=20",
    "--trainer.enable_progress_bar=false",
    "--trainer.enable_model_summary=false",
]


def test_lr_find_suggests_a_finite_lr_saves_the_plot_and_a_usable_config(
    workdir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lr, config = tuning.lr_find(QUICK)
    assert math.isfinite(lr) and 1e-6 <= lr <= 1.0
    run_dir = config.parent
    assert run_dir.name.endswith("_lr_find")
    image = matplotlib.image.imread(run_dir / "lr_find.png")
    assert image.shape[0] > 100 and image[..., :3].std() > 0.01
    assert f"Suggested LR: {lr:.3g}" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        ProjectCLI(args=["fit", "--config", str(config), "--print_config"])
    printed = yaml.safe_load(capsys.readouterr().out)
    assert printed["model"]["init_args"]["optimizer"]["init_args"]["lr"] == pytest.approx(lr)
    assert printed["model"]["init_args"]["optimizer"]["class_path"] == "torch.optim.AdamW"


def test_lr_find_rejects_an_empty_range(workdir: Path) -> None:
    with pytest.raises(SystemExit) as exit_info:
        tuning.lr_find([*QUICK, "--tune.min_lr=1e-2", "--tune.max_lr=1e-3"])
    assert exit_info.value.code == 2
    assert not (workdir / "logs").exists() or not any((workdir / "logs").iterdir())


def _rerun(command: str) -> ProjectCLI:
    """Run the printed ``python -m project fit ...`` command in-process (with FAST overrides)."""
    words = shlex.split(command)
    assert words[:4] == ["python", "-m", "project", "fit"], command
    return ProjectCLI(args=["fit", *FAST, "--trainer.logger=false", *words[4:]], run=True)


def _use_it(out: str) -> str:
    (line,) = [line for line in out.splitlines() if line.startswith("Use it: ")]
    return line.removeprefix("Use it: ")


def test_lr_find_on_diabetes_suggests_the_steep_part_and_its_command_reruns_the_experiment(
    workdir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lr, config = tuning.lr_find([*QUICK[1:], "--config", str(DIABETES)])
    out = capsys.readouterr().out
    # 3e-3 trains this experiment well; Lightning's own rule said 1.3e-4 (on the flat start)
    assert 5e-4 <= lr <= 1e-2, out
    saved = yaml.safe_load(config.read_text())
    assert saved["model"]["init_args"]["optimizer"] == {
        "class_path": "torch.optim.AdamW",
        "init_args": {"lr": lr},
    }
    cli = _rerun(_use_it(out))
    assert type(cli.model).__name__ == "TabularRegressor"
    assert type(cli.datamodule).__name__ == "DiabetesDataModule"
    (group,) = cli.trainer.optimizers[0].param_groups
    assert group["weight_decay"] == 0.1  # the experiment's own, kept next to the suggested LR
    assert cli.config.fit.model.init_args.optimizer.init_args.lr == pytest.approx(lr)


def test_the_lr_curve_starts_at_the_initial_loss() -> None:
    # Lightning's recorder (the formula unsmooth_lightning_losses inverts): a constant loss of 2.0
    from lightning.pytorch.tuner.lr_finder import _LRCallback

    recorder = _LRCallback(num_training=30, early_stop_threshold=None, progress_bar_refresh_rate=0)
    trainer = SimpleNamespace(
        fit_loop=SimpleNamespace(batch_idx=0),
        accumulate_grad_batches=1,
        global_step=0,
        strategy=SimpleNamespace(broadcast=lambda value: value),
        should_stop=False,
    )
    losses = [2.0 + 0.1 * math.sin(step) for step in range(30)]
    for step, loss in enumerate(losses):
        trainer.global_step = step + 1  # Lightning records after the optimizer step
        recorder.on_train_batch_end(trainer, None, {"loss": torch.tensor(loss)}, None, step)  # type: ignore[arg-type]
    assert recorder.losses[0] == pytest.approx(2.0 * 0.02 / (1 - 0.98**2))  # about 1.0: half the loss
    raw = tuning.unsmooth_lightning_losses(recorder.losses)
    np.testing.assert_allclose(raw, losses, rtol=1e-5)


def test_suggest_lr_warns_when_the_loss_never_falls() -> None:
    lrs = np.geomspace(1e-6, 1.0, 60)
    flat = tuning.suggest_lr(lrs, np.ones(60) + 0.01 * np.sin(np.arange(60)))
    assert any("less than 10%" in note for note in flat.warnings)
    falling = 1.0 / (1.0 + np.exp(3 * (np.log10(lrs) + 3)))  # drops around 1e-3, still falling at the end
    steep = tuning.suggest_lr(lrs, 0.5 + falling)
    assert steep.lr == pytest.approx(1e-3, rel=0.5)
    assert any("raise it" in note for note in steep.warnings)


def test_scale_batch_size_stops_at_the_training_split_and_its_command_reruns_the_experiment(
    workdir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    size, config = tuning.scale_batch_size([*QUICK[1:], "--config", str(DIABETES)])
    out = capsys.readouterr().out
    # 288 training rows: 64, 128, 256 fit; 512 would be larger than the split (Lightning tries it)
    assert size == 256, out
    assert "stopped because the next size (512) would exceed the training split of 288 samples" in out
    saved = yaml.safe_load(config.read_text())
    data_class = "project.data.DiabetesDataModule"
    assert saved == {"data": {"class_path": data_class, "init_args": {"batch_size": 256}}}
    cli = _rerun(_use_it(out))
    assert type(cli.model).__name__ == "TabularRegressor"
    assert cli.datamodule.batch_size == 256  # type: ignore[attr-defined]
    assert cli.datamodule.hparams["split_seed"] == 0
