"""Exact resume under DDP (2 CPU processes, gloo; each run a subprocess, because signals are the point): a
fit stopped by SIGTERM in the middle of an epoch and again at an epoch's end, each time resumed with
``--ckpt_path last``, ends with the uninterrupted run's weights bit for bit and logs its ``train/loss``
at every step, with ``num_workers`` 0 (the signal to the main process) and 2 (to the whole process
group, as a scheduler sends it); a SIGTERM at any moment ends a DDP fit (never a hang); a resume with
another number of processes is refused in the middle of an epoch and continues from an epoch's end
(README, "Checkpoints and exact resume", "Several GPUs and several machines").

CPU-s on the 2-core development machine, shared (``/usr/bin/time`` user + sys of pytest, the runs it
waits for included): the two stop-and-resume sequences 67 together, the SIGTERM moments 27, the
world-size test 32; the whole file 115 in one run (350 s of wall time). All are marked slow."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest
import torch
from helpers import Recorder
from support import (
    RunCLI,
    assert_same_weights,
    ckpt_weights,
    every_step,
    finish,
    metric_rows,
    run_module,
    start_module,
    step_losses,
    wait_for_file,
)

from runwright.errors import ConfigError

DDP = [
    "--trainer.accelerator=cpu",
    "--trainer.strategy=ddp",
    "--trainer.devices=2",
    "--trainer.enable_progress_bar=false",
    "--trainer.enable_model_summary=false",
]
#: 3 epochs of 4 batches per process (12 steps), every step logged, dropout on; shuffling and
#: augmentation are on by default.
RUN = [
    "fit",
    *DDP,
    "--trainer.max_epochs=3",
    "--trainer.limit_train_batches=4",
    "--trainer.limit_val_batches=1",
    "--trainer.log_every_n_steps=1",
    "--model.backbone.dropout=0.3",
]


def epoch_checkpoints(folder: Path) -> list[str]:
    """A ModelCheckpoint that keeps the end of every epoch in ``folder`` as ``epoch=N.ckpt``."""
    return [
        "--trainer.callbacks+=lightning.pytorch.callbacks.ModelCheckpoint",
        f"--trainer.callbacks.dirpath={folder}",
        "--trainer.callbacks.every_n_epochs=1",
        "--trainer.callbacks.save_top_k=-1",
        "--trainer.callbacks.filename={epoch}",
    ]


def signal_at(epoch: int, batch: int, group: bool) -> list[str]:
    """Rank 0 sends SIGTERM at the end of ``batch`` of ``epoch`` (``-1``: the epoch's end), to itself
    or to the run's process group."""
    return [
        "--trainer.callbacks+=helpers.SignalAt",
        f"--trainer.callbacks.epoch={epoch}",
        f"--trainer.callbacks.batch={batch}",
        "--trainer.callbacks.signum=SIGTERM",
        f"--trainer.callbacks.group={group}",
    ]


def stop(args: list[str], cwd: Path) -> str:
    """Run a fit that a ``signal_at`` stops (in a session of its own); it must exit with 143 and no
    traceback. Returns stderr."""
    process = start_module(args, cwd, new_session=True)
    _, stderr = finish(process, timeout=300)
    assert process.returncode == 143, stderr[-3000:]
    assert "Traceback" not in stderr and "saved a resumable checkpoint" in stderr, stderr[-3000:]
    return stderr


@pytest.mark.slow
@pytest.mark.parametrize(
    "num_workers, group",
    [(0, False), (2, True)],
    ids=["0-workers-signal-to-process", "2-workers-signal-to-group"],
)
def test_a_ddp_fit_stopped_mid_epoch_and_at_an_epochs_end_resumes_bit_identical(
    workdir: Path, num_workers: int, group: bool
) -> None:
    run = [*RUN, f"--data.num_workers={num_workers}"]
    run_module([*run, "--run_name=full", *epoch_checkpoints(workdir / "full_epochs")], cwd=workdir)
    ours = [*run, "--run_name=run", *epoch_checkpoints(workdir / "run_epochs")]
    last = workdir / "logs/run/checkpoints/last.ckpt"
    # stop 1: in epoch 0, after its second batch
    stop([*ours, *signal_at(0, 1, group)], workdir)
    saved = torch.load(last, weights_only=True)
    assert (saved["global_step"], saved["epoch"]) == (2, 0)
    # stop 2, of the resumed run: at the end of epoch 1, after its validation
    stop([*ours, "--ckpt_path=last", *signal_at(1, -1, group)], workdir)
    saved = torch.load(last, weights_only=True)
    assert (saved["global_step"], saved["epoch"]) == (8, 2)
    # one stop: the end of epoch 1 of the resumed run is the uninterrupted run's
    assert_same_weights(
        ckpt_weights(workdir / "full_epochs/epoch=1.ckpt"), ckpt_weights(workdir / "run_epochs/epoch=1.ckpt")
    )
    run_module([*ours, "--ckpt_path=last"], cwd=workdir)
    # two stops: the end of the run, and every step's train/loss (rank 0's batch) and every val/loss
    full, resumed = workdir / "logs/full", workdir / "logs/run"
    assert torch.load(last, weights_only=True)["global_step"] == 12
    assert_same_weights(ckpt_weights(full / "checkpoints/last.ckpt"), ckpt_weights(last))
    losses = step_losses(full)
    assert sorted(losses) == list(range(12)) and step_losses(resumed) == losses
    assert metric_rows(resumed, "val/loss") == metric_rows(full, "val/loss")


@pytest.mark.slow
def test_sigterm_at_any_moment_ends_a_ddp_fit_with_a_resumable_checkpoint(tmp_path: Path) -> None:
    """SIGTERM to the main process of a DDP fit whose steps are short (so it lands in or between
    collectives: the per-step broadcast, the gradients' all-reduce, validation's syncs), at a few
    moments after the first epoch's end. It once hung for good when it landed in a collective: the
    engine's extra stop-flag all-reduce, or Lightning's per-step broadcast, met the broadcast that
    Lightning's SIGTERM handler ran inside the signal handler."""
    fit = ["fit", *DDP, "--trainer.max_epochs=20", "--data.num_train=1200", "--trainer.limit_val_batches=1"]
    for index, delay in enumerate((0.4, 1.0, 1.6)):
        process = start_module([*fit, f"--run_name=run{index}"], tmp_path, new_session=True)
        last = tmp_path / f"logs/run{index}/checkpoints/last.ckpt"
        wait_for_file(last, process, timeout=300)  # the end of epoch 0
        time.sleep(delay)
        process.send_signal(signal.SIGTERM)  # to the main process (rank 0)
        started = time.monotonic()
        _, stderr = finish(process, timeout=120)
        assert process.returncode == 143, stderr[-3000:]
        assert time.monotonic() - started < 60
        assert "saved a resumable checkpoint" in stderr and "Traceback" not in stderr
        assert torch.load(last, weights_only=True)["global_step"] > 38  # (38 steps an epoch)


@pytest.mark.slow
def test_a_resume_with_another_number_of_processes_continues_from_an_epochs_end_only(
    run_cli: RunCLI, workdir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """In the middle of an epoch each process's place is one in its own share of the data: a resume with
    another number of processes is refused with one line naming both (exit 2, the checkpoint untouched,
    no folder left), 2 -> 1 and 1 -> 2. From an epoch's end it continues: every later epoch reads the
    samples in the order (and with the augmentation) a run of the new number of processes reads them,
    from the checkpoint's weights (so the weights equal no uninterrupted run's)."""
    # (in-process runs add FAST: its two batches an epoch are lifted back to whole epochs)
    one_epoch = [
        "--trainer.max_epochs=1",
        "--trainer.limit_train_batches=1.0",
        "--trainer.limit_val_batches=1",
    ]
    # 2 -> 1: two processes train one epoch (6 steps), one process resumes
    run_module(["fit", *DDP, *one_epoch, "--run_name=two", *every_step(workdir / "two_steps")], cwd=workdir)
    mid, end = workdir / "two_steps/step=3.ckpt", workdir / "logs/two/checkpoints/last.ckpt"
    before = ckpt_weights(mid)
    message = r"the checkpoint is in the middle of an epoch of 2 processes, .* but this fit runs 1 process"
    with pytest.raises(ConfigError, match=message):
        run_cli("fit", *one_epoch, "--trainer.max_epochs=2", f"--ckpt_path={mid}", "--run_name=branch")
    assert_same_weights(before, ckpt_weights(mid))
    assert not (workdir / "logs/branch").exists()
    Recorder.runs.clear()
    record = [*one_epoch, "--trainer.max_epochs=2", "--trainer.callbacks+=helpers.Recorder"]
    run_cli("fit", *record, "--run_name=one")
    continued = run_cli("fit", *record, f"--ckpt_path={end}", "--run_name=continued")
    assert continued.trainer.global_step == 6 + 12
    one, resumed = Recorder.runs
    assert len(resumed.inputs) == 12
    for a, b in zip(one.inputs[12:], resumed.inputs, strict=True):
        assert torch.equal(a, b), "epoch 2 as one process reads it"
    # 1 -> 2: one process trains one epoch (12 steps), two processes resume
    run_cli("fit", *one_epoch, "--run_name=single", *every_step(workdir / "one_steps"))
    refused = run_module(
        ["fit", *DDP, f"--ckpt_path={workdir}/one_steps/step=5.ckpt", "--run_name=branch2"],
        cwd=workdir,
        check=False,
    )
    assert refused.returncode == 2, refused.stderr[-3000:]
    (line,) = [line for line in refused.stderr.splitlines() if line.startswith("error:")]
    assert "middle of an epoch of 1 process," in line and "this fit runs 2 processes" in line, line
    assert "Traceback" not in refused.stderr and not (workdir / "logs/branch2").exists()
    run_module(
        ["fit", *DDP, f"--ckpt_path={workdir}/logs/single/checkpoints/last.ckpt", "--run_name=two_more"],
        cwd=workdir,
    )
    assert (
        torch.load(workdir / "logs/two_more/checkpoints/last.ckpt", weights_only=True)["global_step"]
        == 12 + 6
    )
