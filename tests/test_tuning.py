"""``python -m project lr_find``: a finite suggested LR, the loss-vs-LR plot and a config that applies it."""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib.image
import pytest
import yaml

from project import tuning
from project.cli import ProjectCLI

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
