"""``python -m project lr_find`` and ``scale_batch_size``: a finite suggested LR, the
loss-vs-LR plot, the largest batch size within the training split, and configs and commands that
apply them."""

from __future__ import annotations

import math
import warnings
from pathlib import Path
from types import SimpleNamespace

import matplotlib.image
import numpy as np
import pytest
import torch
import yaml
from conftest import rerun_suggestion
from project.cli import ProjectCLI

from project import tuning

QUICK = [
    "--tune.num_training=20",
    "--trainer.enable_progress_bar=false",
    "--trainer.enable_model_summary=false",
]


def test_lr_find_suggests_a_finite_lr_saves_the_plot_and_a_usable_config(
    workdir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        lr, config = tuning.lr_find(QUICK)
    # LightningCLI's warning about args next to sys.argv (both are ours here) is not shown to users
    assert not [w for w in caught if "args parameter" in str(w.message)]
    assert math.isfinite(lr) and 1e-6 <= lr <= 1.0
    run_dir = config.parent
    assert run_dir.name.endswith("_lr_find")
    image = matplotlib.image.imread(run_dir / "lr_find.png")
    assert image.shape[0] > 100 and image[..., :3].std() > 0.01
    out = capsys.readouterr().out
    assert f"Suggested LR: {lr:.3g}" in out
    with pytest.raises(SystemExit):
        ProjectCLI(args=["fit", "--config", str(config), "--print_config"])
    printed = yaml.safe_load(capsys.readouterr().out)
    assert printed["model"]["init_args"]["optimizer"]["init_args"]["lr"] == pytest.approx(lr)
    assert printed["model"]["init_args"]["optimizer"]["class_path"] == "torch.optim.AdamW"
    # the printed command reruns the default experiment with the suggested LR
    cli = rerun_suggestion(out)
    assert type(cli.model).__name__ == "ImageClassifier"
    assert cli.config.fit.model.init_args.optimizer.init_args.lr == pytest.approx(lr)


def test_lr_find_rejects_an_empty_range(workdir: Path) -> None:
    with pytest.raises(SystemExit) as exit_info:
        tuning.lr_find([*QUICK, "--tune.min_lr=1e-2", "--tune.max_lr=1e-3"])
    assert exit_info.value.code == 2
    assert not (workdir / "logs").exists() or not any((workdir / "logs").iterdir())


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
    size, config = tuning.scale_batch_size([*QUICK[1:], "--data.batch_size=256"])
    out = capsys.readouterr().out
    # 1,168 training images: 256, 512, 1024 fit; 2048 would be larger than the split (Lightning tries it)
    assert size == 1024, out
    assert "stopped because the next size (2048) would exceed the training split of 1168 samples" in out
    saved = yaml.safe_load(config.read_text())
    data_class = "project.data.DigitsDataModule"
    assert saved == {"data": {"class_path": data_class, "init_args": {"batch_size": 1024}}}
    cli = rerun_suggestion(out)
    assert type(cli.model).__name__ == "ImageClassifier"
    assert cli.datamodule.batch_size == 1024  # type: ignore[attr-defined]
    assert len(cli.datamodule.train_set) == 1168  # type: ignore[attr-defined]
