"""Files written before the engine's redesign (issue 23): a ``config.yaml`` with the ``lr_schedule``
group and ``model.best_metric``, and a checkpoint whose model arguments have ``best_metric``/
``best_mode``. Each still works (evaluating the old checkpoint, ``--ckpt_path best`` of an old run) or is
refused with one line naming the change (training it further, the old config), never a silent change
of meaning (a warmup that restarts)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import yaml
from support import FAST, RunCLI, hashes, run_dirs, run_main


def old_config(new: Path, target: Path) -> Path:
    """``new`` (a config.yaml of today) as the template wrote it before: the warmup-cosine schedule in
    the ``lr_schedule`` callback group, the monitored metric in the model's ``best_metric``."""
    config = yaml.safe_load(new.read_text())
    config["model"]["init_args"].pop("lr_scheduler")
    config["model"]["init_args"].update(best_metric="acc", best_mode="max")
    config["lr_schedule"] = {"warmup_steps": 0.05, "min_lr_factor": 0.01}
    target.write_text(yaml.safe_dump(config))
    return target


def old_checkpoint(new: Path, target: Path) -> Path:
    """``new`` with the model arguments and callback state keys of a checkpoint written before."""
    checkpoint = torch.load(new, weights_only=True)
    checkpoint["hyper_parameters"].update(best_metric="acc", best_mode="max")
    checkpoint["callbacks"] = {
        key.replace("BestCheckpoint", "ModelCheckpoint"): value
        for key, value in checkpoint["callbacks"].items()
    }
    torch.save(checkpoint, target)
    return target


def test_an_old_config_yaml_is_refused_with_one_line_naming_the_change(
    run_cli: RunCLI, workdir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    first = run_cli("fit")
    old = old_config(first.run_dir / "config.yaml", workdir / "old.yaml")
    before = hashes(workdir / "logs")
    code, _, err = run_main(["fit", *FAST, "--config", str(old)], capsys)
    (error,) = [line for line in err.splitlines() if line.startswith("error:")]
    assert code == 2 and str(old) in error, err
    assert (
        "`lr_schedule` was replaced by model.lr_scheduler: class_path "
        "runwright.schedules.WarmupCosineLR" in error
    )
    assert "`model.best_metric` was replaced by checkpoint.monitor" in error
    assert "`model.best_mode` was replaced by checkpoint.mode" in error
    assert hashes(workdir / "logs") == before and run_dirs(workdir / "logs") == [first.run_dir]


def test_an_old_checkpoint_evaluates_and_is_refused_for_training(
    run_cli: RunCLI, workdir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    first = run_cli("fit", "--trainer.max_epochs=2")
    checkpoints = first.run_dir / "checkpoints"
    new = run_cli("test", "--ckpt_path=best")
    old = old_checkpoint(checkpoints / "best.ckpt", checkpoints / "old.ckpt")
    # test and validate: the removed arguments are dropped, the weights are the same, so is the score
    tested = run_cli("test", f"--ckpt_path={old}")
    assert float(tested.trainer.callback_metrics["test/acc"]) == float(
        new.trainer.callback_metrics["test/acc"]
    )
    run_cli("validate", f"--ckpt_path={old}")
    # fit: one line naming the change; no run folder touched, none made
    before, folders = hashes(workdir / "logs"), run_dirs(workdir / "logs")
    code, _, err = run_main(["fit", *FAST, "--trainer.max_epochs=3", f"--ckpt_path={old}"], capsys)
    (error,) = [line for line in err.splitlines() if line.startswith("error:")]
    assert code == 2 and "written by an older version of the template" in error, err
    assert "model.best_metric is now checkpoint.monitor" in error and "start a new run" in error
    assert hashes(workdir / "logs") == before and run_dirs(workdir / "logs") == folders


def test_best_of_an_old_run_is_its_model_checkpoints_record(run_cli: RunCLI) -> None:
    """An old run's last.ckpt records its best checkpoint under ModelCheckpoint's state key (the engine's
    BestCheckpoint has its own key now): ``--ckpt_path best`` still finds it."""
    first = run_cli(
        "fit", "--model=helpers.ScriptedClassifier", "--model.scores=[0.5,0.9,0.6]", "--trainer.max_epochs=3"
    )
    checkpoints = first.run_dir / "checkpoints"
    (checkpoints / "best.ckpt").rename(checkpoints / "epoch=1.ckpt")  # an old filename
    last = torch.load(checkpoints / "last.ckpt", weights_only=True)
    for state in last["callbacks"].values():
        if state.get("best_model_path", "").endswith("best.ckpt"):
            state["best_model_path"] = str(checkpoints / "epoch=1.ckpt")
    old_checkpoint_state = {
        k.replace("BestCheckpoint", "ModelCheckpoint"): v for k, v in last["callbacks"].items()
    }
    torch.save({**last, "callbacks": old_checkpoint_state}, checkpoints / "last.ckpt")
    test = run_cli("test", "--ckpt_path=best")
    assert Path(test.config.test.ckpt_path).name == "epoch=1.ckpt"
