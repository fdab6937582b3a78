"""Training engineering from config, each with a check that fails if the switch silently did nothing:
clipping, accumulation, seeding, worker seeds, bf16, DDP, SyncBatchNorm guard, exact resume, the
warmup-cosine schedule and the memory monitor."""

from __future__ import annotations

import csv
import math
import os
from pathlib import Path

import pytest
import torch
from conftest import REPO_ROOT, RunCLI, run_dirs, run_module
from training_helpers import Recorder, RecordingSGD

from project.callbacks import warmup_cosine_factor
from project.cli import ProjectCLI

TESTS = str(REPO_ROOT / "tests")
RECORD = ["--trainer.callbacks+=training_helpers.Recorder"]


def weights(cli: ProjectCLI) -> dict[str, torch.Tensor]:
    """The model's weights (its state without the best-so-far metric, which depends on the val batches)."""
    return {k: v.detach().clone() for k, v in cli.model.state_dict().items() if not k.startswith("val_best.")}


def ckpt_weights(path: Path) -> dict[str, torch.Tensor]:
    return torch.load(path, weights_only=True, map_location="cpu")["state_dict"]


def assert_same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert a.keys() == b.keys()
    different = [k for k in a if not torch.equal(a[k], b[k])]
    assert not different, f"not bit-identical: {different[:5]}"


def test_gradient_clipping_bounds_the_norm_the_optimizer_sees(run_cli: RunCLI) -> None:
    RecordingSGD.seen_norms.clear()
    Recorder.runs.clear()
    run_cli(
        "fit",
        "--model.optimizer=training_helpers.RecordingSGD",
        "--model.optimizer.lr=0.1",
        "--trainer.gradient_clip_val=0.05",
        "--trainer.limit_train_batches=6",
        *RECORD,
    )
    pre_clip = Recorder.runs[-1].pre_clip_norms
    assert max(pre_clip) > 0.05, "the test needs gradients larger than the clip value"
    assert len(RecordingSGD.seen_norms) == 6
    assert max(RecordingSGD.seen_norms) <= 0.05 * (1 + 1e-4)


@pytest.mark.slow
def test_accumulating_k_batches_of_b_equals_one_batch_of_k_times_b(run_cli: RunCLI) -> None:
    no_batch_dependence = [
        "--model.backbone.batch_norm=false",
        "--model.backbone.dropout=0",
        "--data.augment=false",
        "--trainer.gradient_clip_val=null",
        "--model.optimizer=torch.optim.SGD",
        "--model.optimizer.lr=0.5",
    ]
    accumulated = run_cli(
        "fit",
        *no_batch_dependence,
        "--data.batch_size=8",
        "--trainer.accumulate_grad_batches=4",
        "--trainer.limit_train_batches=8",
    )
    big_batch = run_cli(
        "fit", *no_batch_dependence, "--data.batch_size=32", "--trainer.limit_train_batches=2"
    )
    small_steps = run_cli(
        "fit", *no_batch_dependence, "--data.batch_size=8", "--trainer.limit_train_batches=2"
    )
    assert accumulated.trainer.global_step == big_batch.trainer.global_step == 2
    a, b, c = weights(accumulated), weights(big_batch), weights(small_steps)
    for key in a:
        torch.testing.assert_close(a[key], b[key], rtol=1e-5, atol=1e-6)
    assert any(not torch.allclose(a[k], c[k]) for k in a), "control run should differ"


@pytest.mark.slow
def test_same_seed_same_weights_other_seed_other_weights(run_cli: RunCLI) -> None:
    first = weights(run_cli("fit", "--seed_everything=3", "--trainer.max_epochs=2"))
    second = weights(run_cli("fit", "--seed_everything=3", "--trainer.max_epochs=2"))
    other = weights(run_cli("fit", "--seed_everything=4", "--trainer.max_epochs=2"))
    assert_same(first, second)
    assert any(not torch.equal(first[k], other[k]) for k in first)


@pytest.mark.slow
def test_dataloader_workers_get_distinct_seeds_that_repeat_across_runs(run_cli: RunCLI) -> None:
    Recorder.runs.clear()
    args = [
        "fit",
        "--data.num_workers=2",
        "--data.batch_size=4",
        "--trainer.limit_train_batches=4",
        "--trainer.callbacks+=training_helpers.Recorder",
        "--trainer.callbacks.identical_images=true",
    ]
    run_cli(*args)
    run_cli(*args)
    first, second = Recorder.runs
    # every image is the same, so differences come from augmentation randomness alone;
    # batches 0 and 2 come from worker 0, batches 1 and 3 from worker 1
    assert not torch.equal(first.inputs[0], first.inputs[1]), "two workers produced the same augmentations"
    assert not torch.equal(first.inputs[0], first.inputs[2])
    for a, b in zip(first.inputs, second.inputs, strict=True):
        assert torch.equal(a, b), "the same seed must reproduce each worker's augmentations"


@pytest.mark.slow
def test_bf16_mixed_trains_on_cpu(run_cli: RunCLI) -> None:
    Recorder.runs.clear()
    cli = run_cli("fit", "--trainer.precision=bf16-mixed", "--trainer.limit_train_batches=4", *RECORD)
    assert torch.bfloat16 in Recorder.runs[-1].head_dtypes, "autocast was not active"
    assert all(p.dtype == torch.float32 for p in cli.model.parameters()), "weights stay float32"
    assert math.isfinite(float(cli.trainer.callback_metrics["train/loss"]))


def _last_row(metrics_csv: Path, key: str) -> float:
    rows = [r for r in csv.DictReader(metrics_csv.open()) if r.get(key)]
    return float(rows[-1][key])


@pytest.mark.slow
def test_two_process_cpu_ddp_writes_once_syncs_metrics_and_loads_into_one_process(tmp_path: Path) -> None:
    # tests/ for the helper modules, this checkout, then whatever the caller had (keeps working for
    # a checkout that is not pip-installed, e.g. a freshly generated repo or a git worktree)
    env = {"PYTHONPATH": os.pathsep.join(filter(None, [TESTS, str(REPO_ROOT), os.environ.get("PYTHONPATH")]))}
    run_module(
        [
            "fit",
            "--trainer.accelerator=cpu",
            "--trainer.strategy=ddp",
            "--trainer.devices=2",
            "--trainer.max_epochs=2",
            "--trainer.limit_train_batches=4",
            "--trainer.enable_progress_bar=false",
            "--trainer.enable_model_summary=false",
        ],
        cwd=tmp_path,
        env=env,
        timeout=300,
    )
    (fit_dir,) = run_dirs(tmp_path / "logs")  # rank 1 reused rank 0's folder
    # (besides the logger's own files: TensorBoard's event file, if it is the logger; W&B is disabled
    # in the tests; provenance.package.diff when the checkout has uncommitted changes)
    names = {
        p.name
        for p in fit_dir.iterdir()
        if not p.name.startswith("events.out.tfevents.") and p.suffix != ".diff"
    }
    assert names == {"checkpoints", "config.yaml", "hparams.yaml", "metrics.csv", "provenance.yaml"}
    assert {p.name for p in (fit_dir / "checkpoints").iterdir()} == {"best.ckpt", "last.ckpt"}
    ddp_acc = _last_row(fit_dir / "metrics.csv", "val/acc")
    ddp_loss = _last_row(fit_dir / "metrics.csv", "val/loss")
    # the DDP checkpoint loads into one process; its val metrics over the whole split equal the
    # synced DDP ones (270 val images split 135/135 across the two ranks)
    run_module(
        [
            "validate",
            "--ckpt_path",
            str(fit_dir / "checkpoints" / "last.ckpt"),
            "--trainer.enable_progress_bar=false",
        ],
        cwd=tmp_path,
        env=env,
    )
    validate_dir = run_dirs(tmp_path / "logs")[-1]
    assert _last_row(validate_dir / "metrics.csv", "val/acc") == pytest.approx(ddp_acc, abs=1e-6)
    assert _last_row(validate_dir / "metrics.csv", "val/loss") == pytest.approx(ddp_loss, rel=1e-4)


def test_sync_batchnorm_on_cpu_stops_before_any_worker_starts(tmp_path: Path) -> None:
    result = run_module(
        [
            "fit",
            "--trainer.accelerator=cpu",
            "--trainer.strategy=ddp",
            "--trainer.devices=2",
            "--trainer.sync_batchnorm=true",
        ],
        cwd=tmp_path,
        check=False,
    )
    assert result.returncode == 2
    assert "sync_batchnorm" in result.stderr and "does not run on CPU" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "logs").exists()


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
        "--trainer.callbacks+=training_helpers.StopAfterEpoch",
        "--trainer.callbacks.epoch=2",
    )
    interrupted_ckpt = torch.load(workdir / "logs/interrupted/checkpoints/last.ckpt", weights_only=True)
    assert interrupted_ckpt["epoch"] == 1 and "rng_states" in str(interrupted_ckpt["callbacks"])
    resumed = run_cli(
        *args, "--run_name=resumed", "--ckpt_path=last"
    )  # newest last.ckpt: the interrupted run
    assert resumed.trainer.global_step == full.trainer.global_step == 20
    assert_same(weights(full), weights(resumed))
    assert_same(
        ckpt_weights(workdir / "logs/full/checkpoints/last.ckpt"),
        ckpt_weights(workdir / "logs/resumed/checkpoints/last.ckpt"),
    )
    full_rec, _, resumed_rec = Recorder.runs
    assert resumed_rec.step_lrs == full_rec.step_lrs[10:], "the LR curve must continue exactly"


def test_warmup_cosine_closed_form() -> None:
    total, warmup, start, floor = 101, 10, 0.01, 0.05
    assert warmup_cosine_factor(0, total, warmup, start, floor) == pytest.approx(start)
    assert warmup_cosine_factor(5, total, warmup, start, floor) == pytest.approx(start + (1 - start) * 0.5)
    assert warmup_cosine_factor(warmup, total, warmup, start, floor) == pytest.approx(1.0)
    assert warmup_cosine_factor(55, total, warmup, start, floor) == pytest.approx(floor + (1 - floor) * 0.5)
    assert warmup_cosine_factor(total - 1, total, warmup, start, floor) == pytest.approx(floor)
    with pytest.raises(ValueError, match="total_steps=0"):
        warmup_cosine_factor(0, 0, 0, start, floor)


def test_warmup_cosine_in_a_run_follows_optimizer_steps_not_batches(run_cli: RunCLI) -> None:
    Recorder.runs.clear()
    cli = run_cli(
        "fit",
        "--trainer.max_epochs=2",
        "--trainer.limit_train_batches=10",
        "--trainer.accumulate_grad_batches=2",
        "--lr_schedule.warmup_steps=3",
        "--lr_schedule.min_lr_factor=0.1",
        "--model.optimizer.lr=0.01",
        *RECORD,
    )
    record = Recorder.runs[-1]
    total = cli.trainer.estimated_stepping_batches
    assert total == 10  # 2 epochs x 10 batches / accumulate 2
    expected = [0.01 * warmup_cosine_factor(step, 10, 3, 0.01, 0.1) for step in range(10)]
    assert [step for step, _ in record.step_lrs] == list(range(10))
    assert [lr for _, lr in record.step_lrs] == pytest.approx(expected)
    assert record.batch_lrs[0::2] == record.batch_lrs[1::2], (
        "LR must change per optimizer step, not per batch"
    )
    assert record.step_lrs[-1][1] == pytest.approx(0.001)


def test_warmup_cosine_refuses_a_second_scheduler(run_cli: RunCLI) -> None:
    with pytest.raises(ValueError, match=r"lr_schedule\.enabled=false"):
        run_cli(
            "fit", "--model.lr_scheduler=torch.optim.lr_scheduler.StepLR", "--model.lr_scheduler.step_size=1"
        )


@pytest.mark.slow
def test_memory_monitor_warns_on_losses_kept_in_a_list_but_not_on_a_clean_run(tmp_path: Path) -> None:
    # each run in a fresh process: memory freed by earlier tests in this process would hide growth
    args = [
        "fit",
        "--trainer.max_epochs=6",
        "--trainer.limit_train_batches=10",
        "--trainer.limit_val_batches=1",
        "--memory.patience=3",
        "--memory.min_growth_mib=4",
        "--trainer.enable_progress_bar=false",
    ]
    env = {"PYTHONPATH": TESTS}
    leaky = run_module(
        [*args, "--model=training_helpers.LeakyClassifier", "--run_name=leaky"], cwd=tmp_path, env=env
    )
    assert "grew after each of the last 3 epochs" in leaky.stderr and ".item()" in leaky.stderr, leaky.stderr[
        -2000:
    ]
    clean = run_module([*args, "--run_name=clean"], cwd=tmp_path, env=env)
    assert "grew after each" not in clean.stderr
    header = (tmp_path / "logs" / "clean" / "metrics.csv").read_text().splitlines()[0].split(",")
    assert "memory/rss_mib" in header and "memory/heap_mib" in header


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA memory figures need a GPU")
def test_memory_monitor_logs_cuda_figures(run_cli: RunCLI) -> None:  # pragma: no cover - GPU only
    cli = run_cli("fit", "--trainer.accelerator=gpu", "--trainer.devices=1")
    for key in ("cuda_allocated_mib", "cuda_reserved_mib", "cuda_max_allocated_mib"):
        assert f"memory/{key}" in cli.trainer.logged_metrics
