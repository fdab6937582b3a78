"""Exact resume from any step: a run resumed from a mid-epoch checkpoint (``every_n_train_steps``, or the
``last.ckpt`` written on SIGTERM) ends with the uninterrupted run's weights, bit for bit, and logs the
same ``train/loss`` at every step; for ``num_workers`` 0 and 2, with shuffling, augmentation and dropout
on (README, "Checkpoints and exact resume")."""

from __future__ import annotations

import csv
import os
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest
import torch
from conftest import REPO_ROOT, RunCLI, run_module

from project.cli import ProjectCLI
from project.data import DigitsDataModule

TESTS = str(REPO_ROOT / "tests")

#: 3 epochs of 4 batches, dropout on; shuffling and augmentation are on by default.
RUN = ["--trainer.max_epochs=3", "--trainer.limit_train_batches=4", "--model.backbone.dropout=0.3"]


def every_step(dirpath: Path) -> list[str]:
    """A second ModelCheckpoint that keeps a checkpoint of every training step as ``step=N.ckpt``."""
    return [
        "--trainer.callbacks+=lightning.pytorch.callbacks.ModelCheckpoint",
        f"--trainer.callbacks.dirpath={dirpath}",
        "--trainer.callbacks.every_n_train_steps=1",
        "--trainer.callbacks.save_top_k=-1",
        "--trainer.callbacks.filename={step}",
    ]


def weights(cli: ProjectCLI) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in cli.model.state_dict().items()}


def ckpt_weights(path: Path) -> dict[str, torch.Tensor]:
    return torch.load(path, weights_only=True, map_location="cpu")["state_dict"]


def assert_same_weights(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert a.keys() == b.keys()
    different = [k for k in a if not torch.equal(a[k], b[k])]
    assert not different, f"not bit-identical: {different[:5]}"


def step_losses(run: Path) -> dict[int, str]:
    """``{step: train/loss}`` from a run's metrics.csv (the logged text, so equality is exact)."""
    with (run / "metrics.csv").open() as file:
        return {int(row["step"]): row["train/loss"] for row in csv.DictReader(file) if row["train/loss"]}


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
    env = {"PYTHONPATH": TESTS, "OMP_NUM_THREADS": "1", "WANDB_MODE": "disabled"}
    run_module(["fit", *args, "--run_name=full"], cwd=tmp_path, env=env)
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "project",
            "fit",
            *args,
            "--run_name=stopped",
            "--trainer.callbacks+=training_helpers.SlowDown",
        ],
        cwd=tmp_path,
        env={**os.environ, **env, "PYTHONPATH": os.pathsep.join([TESTS, str(REPO_ROOT)])},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    last = tmp_path / "logs/stopped/checkpoints/last.ckpt"
    deadline = time.monotonic() + 120
    while not last.exists() and time.monotonic() < deadline and process.poll() is None:
        time.sleep(0.05)
    assert last.exists(), process.communicate()
    time.sleep(0.45)  # about 4 batches into epoch 1
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 143, stderr
    stopped_at = torch.load(last, weights_only=True)["global_step"]
    assert 10 < stopped_at < 20, "a mid-epoch checkpoint"
    run_module(["fit", *args, "--run_name=resumed", f"--ckpt_path={last}"], cwd=tmp_path, env=env)
    assert_same_weights(
        ckpt_weights(tmp_path / "logs/full/checkpoints/last.ckpt"),
        ckpt_weights(tmp_path / "logs/resumed/checkpoints/last.ckpt"),
    )
    losses = step_losses(tmp_path / "logs/full")
    assert step_losses(tmp_path / "logs/resumed") == {s: v for s, v in losses.items() if s >= stopped_at}


def test_the_training_loader_is_stateful_quiet_and_ordered_by_seed_and_epoch() -> None:
    data = DigitsDataModule(batch_size=16)
    data.setup("fit")
    data.shuffle_seed = 3
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loader = data.train_dataloader()
    assert not [w for w in caught if "set_vital" in str(w.message)], "torchdata's warning reaches the user"
    first = next(iter(loader))[1]
    assert callable(loader.state_dict) and callable(loader.load_state_dict)
    loader.sampler.set_epoch(1)  # type: ignore[attr-defined]
    assert not torch.equal(next(iter(loader))[1], first), "each epoch has its own order"
    loader.sampler.set_epoch(0)  # type: ignore[attr-defined]
    assert torch.equal(next(iter(loader))[1], first), "and the same epoch the same order"
    # the seed travels in checkpoints through the DataModule's state
    other = DigitsDataModule(batch_size=16)
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
    boundary = run_cli(*args, "--run_name=boundary", f"--ckpt_path={workdir}/epochs/epoch=0.ckpt")
    assert boundary.trainer.global_step == 12
    a, b = weights(full), weights(boundary)
    assert not all(torch.equal(a[k], b[k]) for k in a)
