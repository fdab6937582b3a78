"""Exact resume from any step: a run resumed from a mid-epoch checkpoint (``every_n_train_steps``, or the
``last.ckpt`` written on SIGTERM) ends with the uninterrupted run's weights, bit for bit, sees the same
batches and logs the same ``train/loss`` at every step; for ``num_workers`` 0 and 2, with shuffling,
augmentation and dropout on (README, "Checkpoints and exact resume")."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest
import torch
from fixture_task import TinyImages
from helpers import Recorder
from support import (
    FAST,
    RunCLI,
    assert_same_weights,
    ckpt_weights,
    every_step,
    metric_rows,
    run_main,
    run_module,
    start_module,
    step_losses,
    wait_for_file,
    weights,
)

from runwright.errors import ConfigError, TrainingInterrupted

#: 3 epochs of 4 batches (12 steps), dropout on; shuffling and augmentation are on by default.
RUN = ["--trainer.max_epochs=3", "--trainer.limit_train_batches=4", "--model.backbone.dropout=0.3"]
RECORD = ["--trainer.callbacks+=helpers.Recorder"]


@pytest.mark.slow
@pytest.mark.parametrize("num_workers", [0, 2])
def test_resuming_mid_epoch_twice_is_bit_identical(run_cli: RunCLI, workdir: Path, num_workers: int) -> None:
    args = ["fit", *RUN, f"--data.num_workers={num_workers}"]
    full = run_cli(*args, "--run_name=full", *every_step(workdir / "full_steps"))
    # step 6: epoch 1, two of its four batches done
    first = run_cli(
        *args,
        "--run_name=first",
        f"--ckpt_path={workdir}/full_steps/step=6.ckpt",
        *every_step(workdir / "first_steps"),
    )
    # the resumed run's own step-9 checkpoint (epoch 2, one batch done): a resumed run resumed again
    second = run_cli(*args, "--run_name=second", f"--ckpt_path={workdir}/first_steps/step=9.ckpt")
    assert full.trainer.global_step == first.trainer.global_step == second.trainer.global_step == 12
    assert_same_weights(weights(full), weights(first))
    assert_same_weights(weights(full), weights(second))
    # every checkpoint the resumed run wrote equals the uninterrupted run's at that step
    for step in (7, 9, 12):
        assert_same_weights(
            ckpt_weights(workdir / f"full_steps/step={step}.ckpt"),
            ckpt_weights(workdir / f"first_steps/step={step}.ckpt"),
        )
    losses = step_losses(workdir / "logs/full")
    assert sorted(losses) == list(range(12))
    assert step_losses(workdir / "logs/first") == {s: v for s, v in losses.items() if s >= 6}
    assert step_losses(workdir / "logs/second") == {s: v for s, v in losses.items() if s >= 9}


@pytest.mark.slow
@pytest.mark.parametrize("num_workers", [0, 2])
def test_resuming_from_the_end_of_an_epochs_last_batch_is_bit_identical(
    run_cli: RunCLI, workdir: Path, num_workers: int
) -> None:
    """A checkpoint saved in ``on_train_batch_end`` of an epoch's last batch (``every_n_train_steps``
    a multiple of the epoch length, or Ctrl-C there): Lightning 2.6 then starts the next epoch without
    its ``on_train_epoch_start`` and with the old epoch's finished iterator; ``ExactResume`` gives it
    its seeds and a new iterator through the private ``fit_loop._data_fetcher``, which this test pins
    (before that fix the resumed run skipped a whole epoch: 8 steps instead of 12)."""
    args = ["fit", *RUN, f"--data.num_workers={num_workers}"]
    full = run_cli(*args, "--run_name=full", *every_step(workdir / "steps"))
    resumed = run_cli(*args, "--run_name=resumed", f"--ckpt_path={workdir}/steps/step=4.ckpt")
    assert resumed.trainer.global_step == 12
    assert_same_weights(weights(full), weights(resumed))
    losses = step_losses(workdir / "logs/full")
    assert step_losses(workdir / "logs/resumed") == {s: v for s, v in losses.items() if s >= 4}


ONE_CYCLE_OWN = ["--model=helpers.OneCycleClassifier"]
ONE_CYCLE_BASE = [
    "--model.lr_scheduler=torch.optim.lr_scheduler.OneCycleLR",
    "--model.lr_scheduler.max_lr=0.05",
]


@pytest.mark.parametrize(
    "model, num_workers",
    [
        pytest.param(ONE_CYCLE_OWN, 0, id="own-configure_optimizers-0-workers"),
        pytest.param(ONE_CYCLE_OWN, 2, id="own-configure_optimizers-2-workers", marks=pytest.mark.slow),
        pytest.param(ONE_CYCLE_BASE, 0, id="BaseModule-OneCycleLR-0-workers", marks=pytest.mark.slow),
        pytest.param(ONE_CYCLE_BASE, 2, id="BaseModule-OneCycleLR-2-workers", marks=pytest.mark.slow),
    ],
)
def test_a_schedule_sized_by_estimated_stepping_batches_resumes_mid_epoch_exactly(
    run_cli: RunCLI, workdir: Path, model: list[str], num_workers: int
) -> None:
    """The OneCycleLR recipe reads ``trainer.estimated_stepping_batches`` in ``configure_optimizers``,
    which makes Lightning build the training loader before the checkpoint's loader state is restored
    (Lightning #20550): without ``ExactResume.on_train_start`` loading that state, the resumed epoch
    would restart at its first batch. Same batches, same LR at every step, same
    losses and bit-identical weights as the uninterrupted run."""
    Recorder.runs.clear()
    args = ["fit", *RUN, *model, f"--data.num_workers={num_workers}", *RECORD]
    full = run_cli(*args, "--run_name=full", *every_step(workdir / "steps"))
    resumed = run_cli(*args, "--run_name=resumed", f"--ckpt_path={workdir}/steps/step=6.ckpt")  # mid-epoch 1
    full_record, resumed_record = Recorder.runs
    assert type(full.trainer.lr_scheduler_configs[0].scheduler).__name__ == "OneCycleLR"
    assert len(full_record.inputs) == 12 and len(resumed_record.inputs) == 6
    for a, b in zip(full_record.inputs[6:], resumed_record.inputs, strict=True):
        assert torch.equal(a, b), "the resumed epoch must continue with the batches it had left"
    assert resumed_record.step_lrs == full_record.step_lrs[6:]
    assert_same_weights(weights(full), weights(resumed))
    losses = step_losses(workdir / "logs/full")
    assert step_losses(workdir / "logs/resumed") == {s: v for s, v in losses.items() if s >= 6}


@pytest.mark.slow
def test_sigterm_mid_epoch_then_resume_with_workers_is_bit_identical(tmp_path: Path) -> None:
    """The pre-empted cluster job: SIGTERM mid-epoch writes ``last.ckpt``; ``--ckpt_path FILE`` resumes it."""
    args = [
        *RUN,
        "--trainer.max_epochs=2",
        "--trainer.limit_train_batches=10",
        "--trainer.limit_val_batches=1",
        "--trainer.enable_progress_bar=false",
        "--trainer.log_every_n_steps=1",
        "--data.num_workers=2",
    ]
    run_module(["fit", *args, "--run_name=full"], cwd=tmp_path, timeout=300)
    process = start_module(
        ["fit", *args, "--run_name=stopped", "--trainer.callbacks+=helpers.SlowDown"], tmp_path
    )
    last = tmp_path / "logs/stopped/checkpoints/last.ckpt"
    wait_for_file(last, process)  # the end of epoch 0
    time.sleep(0.45)  # about 4 batches into epoch 1
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 143, stderr
    stopped_at = torch.load(last, weights_only=True)["global_step"]
    assert 10 < stopped_at < 20, "a mid-epoch checkpoint"
    run_module(["fit", *args, "--run_name=resumed", f"--ckpt_path={last}"], cwd=tmp_path, timeout=300)
    assert_same_weights(
        ckpt_weights(tmp_path / "logs/full/checkpoints/last.ckpt"),
        ckpt_weights(tmp_path / "logs/resumed/checkpoints/last.ckpt"),
    )
    losses = step_losses(tmp_path / "logs/full")
    assert step_losses(tmp_path / "logs/resumed") == {s: v for s, v in losses.items() if s >= stopped_at}


def test_the_training_loader_is_stateful_and_ordered_by_seed_and_epoch() -> None:
    data = TinyImages(batch_size=16, noise=0.0)
    data.setup("fit")
    data.shuffle_seed = 3
    loader = data.train_dataloader()
    first = next(iter(loader))[1]
    assert callable(loader.state_dict) and callable(loader.load_state_dict)
    loader.sampler.set_epoch(1)
    assert not torch.equal(next(iter(loader))[1], first), "each epoch has its own order"
    loader.sampler.set_epoch(0)
    assert torch.equal(next(iter(loader))[1], first), "and the same epoch the same order"
    # the seed travels in checkpoints through the DataModule's state
    other = TinyImages(batch_size=16, noise=0.0)
    other.load_state_dict(data.state_dict())
    other.setup("fit")
    assert torch.equal(next(iter(other.train_dataloader()))[1], first)


@pytest.mark.slow
def test_persistent_workers_resume_exactly_mid_epoch_but_not_at_an_epoch_boundary(
    run_cli: RunCLI, workdir: Path
) -> None:
    """The stated limit: with ``persistent_workers`` the worker processes (and their iterator) live
    across epochs, so a resume from an epoch-end checkpoint starts the next epoch differently (its
    batches differ; the step count and later epochs do not). A mid-epoch resume stays exact. If this
    test fails because both are exact, update the README."""
    args = ["fit", *RUN, "--data.num_workers=2", "--data.persistent_workers=true"]
    full = run_cli(
        *args, "--run_name=full", *every_step(workdir / "steps"),
        "--trainer.callbacks+=lightning.pytorch.callbacks.ModelCheckpoint",
        f"--trainer.callbacks.dirpath={workdir / 'epochs'}", "--trainer.callbacks.every_n_epochs=1",
        "--trainer.callbacks.save_top_k=-1", "--trainer.callbacks.filename={epoch}",
    )  # fmt: skip
    mid = run_cli(*args, "--run_name=mid", f"--ckpt_path={workdir}/steps/step=6.ckpt")
    assert_same_weights(weights(full), weights(mid))
    # the end of epoch 1 (after the end of epoch 0 the first workers' generators happen to line up)
    boundary = run_cli(*args, "--run_name=boundary", f"--ckpt_path={workdir}/epochs/epoch=1.ckpt")
    assert boundary.trainer.global_step == 12
    a, b = weights(full), weights(boundary)
    assert not all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.slow
@pytest.mark.parametrize("num_workers", [0, 2])
def test_resume_after_epoch_k_is_bit_identical_to_an_uninterrupted_run(
    run_cli: RunCLI, workdir: Path, num_workers: int
) -> None:
    Recorder.runs.clear()
    args = [
        "fit",
        "--trainer.max_epochs=4",
        "--trainer.limit_train_batches=5",
        f"--data.num_workers={num_workers}",
        "--model.backbone.dropout=0.3",
        *RECORD,
    ]  # shuffling and augmentation are on by default
    full = run_cli(*args, "--run_name=full")
    run_cli(
        *args,
        "--run_name=interrupted",
        "--trainer.callbacks+=helpers.StopAfterEpoch",
        "--trainer.callbacks.epoch=2",
    )
    interrupted_ckpt = torch.load(workdir / "logs/interrupted/checkpoints/last.ckpt", weights_only=True)
    assert interrupted_ckpt["epoch"] == 1 and "rng_states" in str(interrupted_ckpt["callbacks"])
    resumed = run_cli(
        *args, "--run_name=resumed", "--ckpt_path=last"
    )  # newest last.ckpt: the interrupted run
    assert resumed.trainer.global_step == full.trainer.global_step == 20
    assert_same_weights(weights(full), weights(resumed))
    assert_same_weights(
        ckpt_weights(workdir / "logs/full/checkpoints/last.ckpt"),
        ckpt_weights(workdir / "logs/resumed/checkpoints/last.ckpt"),
    )
    full_rec, _, resumed_rec = Recorder.runs
    assert resumed_rec.step_lrs == full_rec.step_lrs[10:], "the LR curve must continue exactly"


def test_a_resume_whose_model_has_another_number_of_lr_schedulers_is_refused(
    run_cli: RunCLI, workdir: Path
) -> None:
    """A checkpoint saved without an LR scheduler and without the model's hyperparameters (so the
    config's model, with its warmup-cosine schedule, is built) would restart the schedule from step 0:
    refused before training, the checkpoint untouched."""
    cli = run_cli("fit", "--model.lr_scheduler=null", "--trainer.logger=false")
    checkpoint = torch.load(cli.run_dir / "checkpoints/last.ckpt", weights_only=True)
    del checkpoint["hyper_parameters"]  # as saved by a model without save_hyperparameters
    torch.save(checkpoint, workdir / "plain.ckpt")
    with pytest.raises(ConfigError, match=r"continues 0 LR scheduler\(s\), but the model now configures 1"):
        run_cli("fit", f"--ckpt_path={workdir / 'plain.ckpt'}", "--trainer.max_epochs=2")
    assert_same_weights(checkpoint["state_dict"], ckpt_weights(workdir / "plain.ckpt"))
    resumed = run_cli(
        "fit", f"--ckpt_path={workdir / 'plain.ckpt'}", "--model.lr_scheduler=null", "--trainer.max_epochs=2"
    )
    assert resumed.trainer.global_step == 4


def test_a_mid_epoch_resume_with_another_batch_size_is_refused_and_one_from_an_epochs_end_runs(
    run_cli: RunCLI, workdir: Path
) -> None:
    """A mid-epoch checkpoint's place in its epoch counts its own batches: with another batch size the
    epoch would end early without its validation. Refused before training (the checkpoint untouched,
    no branch folder left); from the end of an epoch another batch size trains and validates every
    epoch."""
    args = ["fit", "--trainer.max_epochs=2", "--trainer.limit_train_batches=4"]
    run = run_cli(*args, "--trainer.max_epochs=1", "--run_name=run", *every_step(workdir / "steps"))
    mid = workdir / "steps/step=2.ckpt"  # epoch 1, two of its four batches done
    before = ckpt_weights(mid)
    message = r"middle of epoch 1, read in batches of 16, but this fit's training batches are of 8"
    with pytest.raises(ConfigError, match=message):
        run_cli(*args, "--run_name=branch", f"--ckpt_path={mid}", "--data.batch_size=8")
    assert_same_weights(before, ckpt_weights(mid))
    assert not (workdir / "logs/branch").exists()
    same = run_cli(*args, "--run_name=same", f"--ckpt_path={mid}")
    assert same.trainer.global_step == 8
    # after the epoch's last batch (its step checkpoint) and at the epoch's end (last.ckpt)
    ends = [f"--ckpt_path={workdir}/steps/step=4.ckpt", f"--ckpt_path={run.run_dir}/checkpoints/last.ckpt"]
    for name, ckpt_path in zip(("last-batch", "epoch-end"), ends, strict=True):
        other = run_cli(*args, f"--run_name={name}", ckpt_path, "--data.batch_size=8")
        assert other.trainer.global_step == 8
        assert [epoch for epoch, _, _ in metric_rows(other.run_dir, "val/loss")] == [1]


def test_a_periodic_checkpoint_is_last_ckpt_and_best_is_scored_by_its_own_validation(
    run_cli: RunCLI, workdir: Path
) -> None:
    """``--checkpoint.every_n_train_steps`` scored step checkpoints with the previous validation's
    ``val/acc`` (of other weights), so ``--ckpt_path best`` took a step whose score was not the best
    logged: refused (one line naming the periodic option that works, no folder left). With
    ``--last_checkpoint.every_n_train_steps`` last.ckpt is written every N steps and is the run's last
    step at its end, and best.ckpt is the validation with the best ``val/acc`` logged."""
    args = [
        "fit",
        "--trainer.max_epochs=4",
        "--trainer.limit_train_batches=6",
        "--trainer.limit_val_batches=2",
    ]
    with pytest.raises(
        ConfigError, match=r"--checkpoint.every_n_train_steps=5: best.ckpt is scored by val/acc"
    ):
        run_cli(*args, "--checkpoint.every_n_train_steps=5", "--run_name=refused")
    assert not (workdir / "logs/refused").exists()
    cli = run_cli(*args, "--last_checkpoint.every_n_train_steps=5", "--run_name=run")
    folder = cli.run_dir / "checkpoints"
    assert torch.load(folder / "last.ckpt", weights_only=True)["global_step"] == 24  # (not 20)
    scores = metric_rows(cli.run_dir, "val/acc")
    step, score = max(((s, v) for _, s, v in scores), key=lambda row: row[1])  # the first best
    best = torch.load(folder / "best.ckpt", weights_only=True)
    assert best["global_step"] == step + 1  # (validation logs at its last training batch's step)
    assert float(cli.trainer.checkpoint_callback.best_model_score) == pytest.approx(score)
    assert metric_rows(cli.run_dir, "best/val/acc")[-1][2] == pytest.approx(score)


def test_last_ckpt_is_the_runs_last_step_when_validation_runs_within_epochs(
    run_cli: RunCLI, workdir: Path
) -> None:
    """``--trainer.val_check_interval=2`` on 3 batches an epoch: Lightning saves after validations only
    (steps 2 and 5); last.ckpt is the end of every epoch too, so the run's last step."""
    cli = run_cli(
        "fit", "--trainer.max_epochs=2", "--trainer.limit_train_batches=3", "--trainer.val_check_interval=2"
    )
    assert torch.load(cli.run_dir / "checkpoints/last.ckpt", weights_only=True)["global_step"] == 6


def test_a_signal_at_an_epochs_last_batch_stops_after_that_epochs_validation_and_resumes_exactly(
    run_cli: RunCLI, workdir: Path
) -> None:
    """One process, Ctrl-C during an epoch's last batch: the epoch's validation and end run first and
    training stops at the end of the next epoch's first batch (stopping at once saved a checkpoint from
    which the resumed run skipped that validation); the resumed run logs every validation and ends
    bit-identical (and logs every step's ``train/loss`` but the one of the step it stopped at: the
    stated limit of a stop at a batch's end on one process)."""
    args = ["fit", *RUN, "--trainer.limit_val_batches=2"]
    full = run_cli(*args, "--run_name=full")
    with pytest.raises(TrainingInterrupted, match=r"epoch 2/3 \(step 5\)"):
        run_cli(
            *args, "--run_name=run", "--trainer.callbacks+=helpers.SignalAt", "--trainer.callbacks.batch=3"
        )
    resumed = run_cli(*args, "--run_name=run", "--ckpt_path=last")
    assert_same_weights(weights(full), weights(resumed))
    assert metric_rows(resumed.run_dir, "val/loss") == metric_rows(full.run_dir, "val/loss")
    assert step_losses(resumed.run_dir) == {s: v for s, v in step_losses(full.run_dir).items() if s != 4}


def test_a_mid_epoch_resume_of_a_training_loader_without_length_or_state_says_the_epoch_starts_again(
    workdir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A training loader over an ``IterableDataset`` (Lightning's demo one) cannot continue an epoch where
    it stopped: the resumed run says so in one line (Lightning itself says it only for a loader with a
    length)."""
    args = [
        "fit",
        *FAST,
        "--trainer.limit_train_batches=1.0",
        "--model=lightning.pytorch.demos.boring_classes.BoringModel",
        "--data=helpers.IterableTrainData",
        "--checkpoint.monitor=null",
        "--run_name=run",
    ]
    signal = ["--trainer.callbacks+=helpers.SignalAt", "--trainer.callbacks.batch=3"]
    assert run_main([*args, *signal], capsys)[0] == 130
    with pytest.warns(UserWarning, match="reads its data again from the start") as caught:
        code, _, err = run_main([*args[:-1], "--trainer.max_epochs=2", "--ckpt_path=last"], capsys)
    assert code == 0, err
    (line,) = [str(w.message) for w in caught if "reads its data again" in str(w.message)]
    assert line.startswith("--ckpt_path=logs/run/checkpoints/last.ckpt is in the middle of epoch 1,"), line
