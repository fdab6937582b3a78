"""Warmup-cosine is the model's LR scheduler (``WarmupCosineLR``): its closed form, one value per
optimizer step (not per batch), sized from the run's length, continued exactly by a resume, logged as
``train/lr``; an endless run is refused with one line; another scheduler or none replaces it."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from helpers import Recorder
from support import FAST, RunCLI, every_step, main, metric_rows

from runwright.schedules import WarmupCosineLR, warmup_cosine_factor

RECORD = ["--trainer.callbacks+=helpers.Recorder"]


def test_warmup_cosine_closed_form() -> None:
    total, warmup, start, floor = 101, 10, 0.01, 0.05
    assert warmup_cosine_factor(0, total, warmup, start, floor) == pytest.approx(start)
    assert warmup_cosine_factor(5, total, warmup, start, floor) == pytest.approx(start + (1 - start) * 0.5)
    assert warmup_cosine_factor(warmup, total, warmup, start, floor) == pytest.approx(1.0)
    assert warmup_cosine_factor(55, total, warmup, start, floor) == pytest.approx(floor + (1 - floor) * 0.5)
    assert warmup_cosine_factor(total - 1, total, warmup, start, floor) == pytest.approx(floor)
    assert warmup_cosine_factor(total + 5, total, warmup, start, floor) == pytest.approx(floor)
    optimizer = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=1.0)
    assert (
        WarmupCosineLR(optimizer, total_steps=200, warmup_steps=0.05).warmup_steps == 10
    )  # a fraction of it
    for bad, named in [({"total_steps": 0}, "total_steps=0"), ({"total_steps": None}, "total_steps=None")]:
        with pytest.raises(ValueError, match=named):
            WarmupCosineLR(optimizer, **bad)  # type: ignore[arg-type]
    for bad, named in [
        ({"warmup_steps": 1.5}, "warmup_steps=1.5"),
        ({"min_lr_factor": 2.0}, "min_lr_factor=2.0"),
    ]:
        with pytest.raises(ValueError, match=named):
            WarmupCosineLR(optimizer, total_steps=10, **bad)


def test_warmup_cosine_in_a_run_follows_optimizer_steps_not_batches(run_cli: RunCLI) -> None:
    Recorder.runs.clear()
    cli = run_cli(
        "fit",
        "--trainer.max_epochs=2",
        "--trainer.limit_train_batches=10",
        "--trainer.accumulate_grad_batches=2",
        "--model.lr_scheduler.warmup_steps=3",
        "--model.lr_scheduler.min_lr_factor=0.1",
        "--model.optimizer.lr=0.01",
        *RECORD,
    )
    record = Recorder.runs[-1]
    assert cli.trainer.estimated_stepping_batches == 10  # 2 epochs x 10 batches / accumulate 2
    expected = [0.01 * warmup_cosine_factor(step, 10, 3, 0.01, 0.1) for step in range(10)]
    assert [step for step, _ in record.step_lrs] == list(range(10))
    assert [lr for _, lr in record.step_lrs] == pytest.approx(expected)
    # at the end of each batch: the LR moves on after the batch that ends a window (its optimizer step),
    # never between the two batches of a window
    assert record.batch_lrs[0::2] == pytest.approx(expected), (
        "LR must change per optimizer step, not per batch"
    )
    assert record.batch_lrs[2::2] == record.batch_lrs[1::2][:-1]
    assert record.step_lrs[-1][1] == pytest.approx(0.001)
    # train/lr (TrainingMonitor) is the LR each optimizer step used
    assert [value for _, _, value in metric_rows(cli.run_dir, "train/lr")] == pytest.approx(expected)


def test_warmup_cosine_continues_exactly_after_a_mid_epoch_resume(run_cli: RunCLI, workdir: Path) -> None:
    Recorder.runs.clear()
    args = [
        "fit",
        "--trainer.max_epochs=2",
        "--trainer.limit_train_batches=4",
        "--model.lr_scheduler.warmup_steps=3",
    ]
    full = run_cli(*args, *RECORD, "--run_name=full", *every_step(workdir / "steps"))
    resumed = run_cli(*args, *RECORD, "--run_name=resumed", f"--ckpt_path={workdir}/steps/step=3.ckpt")
    full_record, resumed_record = Recorder.runs
    assert [step for step, _ in resumed_record.step_lrs] == [3, 4, 5, 6, 7]
    assert resumed_record.step_lrs == full_record.step_lrs[3:]  # the same floats: the same schedule state
    lrs = metric_rows(full.run_dir, "train/lr")
    assert metric_rows(resumed.run_dir, "train/lr") == [row for row in lrs if row[1] >= 3]


def test_a_resume_with_another_run_length_keeps_the_checkpoints_schedule_and_says_so(
    run_cli: RunCLI,
) -> None:
    """Raising max_epochs on a resume would otherwise silently stretch the curve the run is half-way along."""
    Recorder.runs.clear()
    run_cli("fit", "--model.lr_scheduler.min_lr_factor=0.1", "--run_name=short")  # 2 steps
    with pytest.warns(UserWarning, match=r"continues the checkpoint's total_steps=2 \(this run has 4"):
        run_cli(
            "fit",
            *RECORD,
            "--model.lr_scheduler.min_lr_factor=0.1",
            "--trainer.max_epochs=2",
            "--ckpt_path=last",
        )
    assert Recorder.runs[-1].step_lrs == [(2, pytest.approx(0.001)), (3, pytest.approx(0.001))]


def test_an_endless_run_is_refused_with_one_error_line(
    workdir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Warmup-cosine is sized in optimizer steps: ``max_epochs=-1`` without ``max_steps`` has none."""
    with pytest.raises(SystemExit) as caught:
        main(["fit", *FAST, "--trainer.max_epochs=-1"])
    assert caught.value.code == 2
    err = capsys.readouterr().err
    (line,) = [line for line in err.splitlines() if line.startswith("error:")]
    assert line == (
        "error: model.lr_scheduler is sized in optimizer steps and this run has inf (from "
        "--trainer.max_epochs=-1, --trainer.max_steps=-1 and --trainer.limit_train_batches=2): give a "
        "finite run with training batches, or --model.lr_scheduler=null"
    )
    assert "Traceback" not in err


def test_another_scheduler_replaces_warmup_cosine_and_null_switches_scheduling_off(run_cli: RunCLI) -> None:
    """Warmup-cosine is only the config's default ``lr_scheduler``: there is never a second schedule
    writing the LR (before, a callback did, and a model scheduler next to it had to be refused)."""
    Recorder.runs.clear()
    step = run_cli(
        "fit",
        *RECORD,
        "--trainer.max_epochs=2",
        "--model.lr_scheduler=torch.optim.lr_scheduler.StepLR",
        "--model.lr_scheduler.step_size=1",
        "--model.lr_scheduler.gamma=0.5",
    )
    assert [type(config.scheduler).__name__ for config in step.trainer.lr_scheduler_configs] == ["StepLR"]
    assert [lr for _, lr in Recorder.runs[-1].step_lrs] == pytest.approx([0.01, 0.01, 0.005, 0.005])
    off = run_cli("fit", *RECORD, "--trainer.max_epochs=2", "--model.lr_scheduler=null")
    assert off.trainer.lr_scheduler_configs == []
    assert [lr for _, lr in Recorder.runs[-1].step_lrs] == [0.01] * 4
    assert "train/lr" not in (off.run_dir / "metrics.csv").read_text().splitlines()[0].split(",")
