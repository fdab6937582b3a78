"""``fit --init_from PATH|best|last``: a new run from another run's weights only (fresh optimizer, LR
schedule and step count), a head of another size left as initialised and named (README, "Fine-tuning
from another run's weights")."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from helpers import Recorder
from lightning.pytorch import Callback, LightningModule, Trainer
from support import PLAIN_MODEL, RunCLI, main
from torch import Tensor


class StartWeights(Callback):
    """Keeps the model's weights when training starts."""

    runs: list[StartWeights] = []

    def __init__(self) -> None:
        self.weights: dict[str, Tensor] = {}
        StartWeights.runs.append(self)

    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self.weights = {key: value.detach().clone() for key, value in pl_module.state_dict().items()}


def test_a_four_class_run_initialises_a_three_class_run(
    run_cli: Any, workdir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    Recorder.runs.clear()
    source = run_cli(
        "fit", "--trainer.max_epochs=2", "--run_name=source", "--trainer.callbacks+=helpers.Recorder"
    )
    best = torch.load(source.run_dir / "checkpoints/best.ckpt", weights_only=True)
    capsys.readouterr()
    new = run_cli(
        "fit", "--init_from=best", "--data.num_classes=3", "--run_name=new",
        "--trainer.callbacks+=helpers.Recorder", "--trainer.callbacks+=test_init_from.StartWeights",
    )  # fmt: skip
    (line,) = [line for line in capsys.readouterr().out.splitlines() if line.startswith("--init_from: ")]
    assert line == (
        f"--init_from: 7 of 9 tensors of TinyClassifier from {source.run_dir / 'checkpoints/best.ckpt'}; "
        "other shape, initialised anew: head.weight [4, 128] vs [3, 128], head.bias [4] vs [3]"
    )
    start = StartWeights.runs[-1].weights
    backbone = [key for key in best["state_dict"] if key.startswith("backbone.")]
    assert backbone and all(torch.equal(start[key], best["state_dict"][key]) for key in backbone)
    assert start["head.weight"].shape == (3, 128)  # the new head, as initialised
    # a new run: its own folder, steps from 0, the warmup from its start, a fresh optimizer
    assert new.run_dir.name == "new" and new.trainer.global_step == 2 and new.trainer.current_epoch == 1
    source_rec, new_rec = Recorder.runs
    assert new_rec.step_lrs[0] == source_rec.step_lrs[0] and new_rec.step_lrs[0][0] == 0
    optimizer = torch.load(new.run_dir / "checkpoints/last.ckpt", weights_only=True)["optimizer_states"][0]
    assert {int(state["step"]) for state in optimizer["state"].values()} == {2}
    # the config it saved names the file it started from, so re-running it starts from the same weights
    assert (
        f"init_from: {source.run_dir / 'checkpoints/best.ckpt'}" in (new.run_dir / "config.yaml").read_text()
    )


def test_init_from_refuses_what_cannot_work_in_one_line(
    workdir: Path, capsys: pytest.CaptureFixture[str], fitted: Any
) -> None:
    last = fitted("source") / "checkpoints/last.ckpt"

    def error(*args: str) -> str:
        capsys.readouterr()
        with pytest.raises(SystemExit) as caught:
            main(list(args))
        lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
        assert caught.value.code == 2 and len(lines) == 1, lines
        return lines[0]

    assert "--init_from and --ckpt_path: pass one" in error(
        "fit", f"--init_from={last}", f"--ckpt_path={last}"
    )
    assert "none of its 9 tensors fits PlainClassifier" in error(
        "fit", f"--init_from={last}", f"--model={PLAIN_MODEL}", "--checkpoint.monitor=val_acc"
    )
    assert error("fit", "--init_from=missing.ckpt").startswith(
        "error: --init_from='missing.ckpt': no such file"
    )
    assert f"--ckpt_path='{workdir}': a folder, not a checkpoint file" in error(
        "test", f"--ckpt_path={workdir}"
    )
    assert sorted(p.name for p in (workdir / "logs").iterdir()) == ["source"]  # nothing left behind


def test_a_fit_config_that_starts_from_weights_is_a_config_of_every_command(
    run_cli: RunCLI, fitted: Any
) -> None:
    """``init_from`` is a fit's key: ``test`` and ``validate`` given the config of a run that started from
    another's weights evaluate their own ``--ckpt_path`` (they were refused)."""
    last = fitted("source") / "checkpoints/last.ckpt"
    new = run_cli("fit", f"--init_from={last}", "--run_name=new")
    config, best = new.run_dir / "config.yaml", new.run_dir / "checkpoints/best.ckpt"
    assert f"init_from: {last}" in config.read_text()
    for command in ("validate", "test"):
        cli = run_cli(command, f"--config={config}", f"--ckpt_path={best}")
        assert cli.init_checkpoint is None and Path(cli.trainer.ckpt_path).resolve() == best.resolve()
