"""Training engineering from config, each with a check that fails if the switch silently did nothing:
clipping, accumulation, seeding, worker seeds, bf16, DDP, the SyncBatchNorm guard, the loss averaging
of BaseModule and the memory monitor."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from fixture_task import TinyClassifier
from helpers import Recorder, RecordingSGD
from lightning.pytorch import Trainer
from support import FAST, RunCLI, assert_same_weights, metric_rows, run_dirs, run_main, run_module, weights
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

RECORD = ["--trainer.callbacks+=helpers.Recorder"]
DDP = ["--trainer.accelerator=cpu", "--trainer.strategy=ddp", "--trainer.devices=2"]


def test_gradient_clipping_bounds_the_norm_the_optimizer_sees(run_cli: RunCLI) -> None:
    RecordingSGD.seen_norms.clear()
    Recorder.runs.clear()
    run_cli(
        "fit",
        "--model.optimizer=helpers.RecordingSGD",
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
        "--model.backbone=helpers.LinearBackbone",
        "--data.noise=0",
        "--trainer.gradient_clip_val=null",
        "--model.optimizer=torch.optim.SGD",
        "--model.optimizer.lr=0.5",
        "--model.lr_scheduler=null",
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
    assert_same_weights(first, second)
    assert any(not torch.equal(first[k], other[k]) for k in first)


@pytest.mark.slow
def test_dataloader_workers_get_distinct_seeds_that_repeat_across_runs(run_cli: RunCLI) -> None:
    Recorder.runs.clear()
    args = [
        "fit",
        "--data.num_workers=2",
        "--data.batch_size=4",
        "--trainer.limit_train_batches=4",
        "--trainer.callbacks+=helpers.Recorder",
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


@pytest.mark.slow
def test_two_process_cpu_ddp_writes_once_syncs_metrics_and_loads_into_one_process(tmp_path: Path) -> None:
    fit = ["fit", *DDP, "--trainer.max_epochs=2", "--trainer.limit_train_batches=4"]
    run_module([*fit, "--trainer.enable_progress_bar=false"], cwd=tmp_path, timeout=300)
    (fit_dir,) = run_dirs(tmp_path / "logs")  # rank 1 reused rank 0's folder
    # besides provenance.package.diff when the checkout has uncommitted changes
    names = {p.name for p in fit_dir.iterdir() if p.suffix != ".diff"}
    assert names == {"checkpoints", "config.yaml", "hparams.yaml", "metrics.csv", "provenance.yaml"}
    assert {p.name for p in (fit_dir / "checkpoints").iterdir()} == {"best.ckpt", "last.ckpt"}
    (*_, (_, _, ddp_acc)) = metric_rows(fit_dir, "val/acc")
    (*_, (_, _, ddp_loss)) = metric_rows(fit_dir, "val/loss")
    # the DDP checkpoint loads into one process; its val metrics over the whole split equal the
    # synced DDP ones (45 val images: 23 and 22 on the two ranks)
    last = fit_dir / "checkpoints" / "last.ckpt"
    run_module(["validate", f"--ckpt_path={last}", "--trainer.enable_progress_bar=false"], cwd=tmp_path)
    validate_dir = run_dirs(tmp_path / "logs")[-1]
    assert metric_rows(validate_dir, "val/acc")[-1][2] == pytest.approx(ddp_acc, abs=1e-6)
    assert metric_rows(validate_dir, "val/loss")[-1][2] == pytest.approx(ddp_loss, rel=1e-4)


def test_sync_batchnorm_on_cpu_stops_before_any_worker_starts(
    run_cli: RunCLI, workdir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run_main(["fit", *FAST, *DDP, "--trainer.sync_batchnorm=true"], capsys)
    assert code == 2
    assert "sync_batchnorm" in err and "does not run on CPU" in err
    assert "Traceback" not in err
    assert not (workdir / "logs").exists()


def test_val_loss_is_the_mean_over_samples_with_an_uneven_last_batch(tmp_path: Path) -> None:
    """BaseModule weights each batch's loss by its size (a mean of batch means would weight the last
    batch of 1 like the others)."""
    torch.manual_seed(0)
    images, labels = torch.randn(5, 1, 8, 8), torch.tensor([0, 1, 2, 3, 0])
    loader = DataLoader(TensorDataset(images, labels), batch_size=2)  # batches of 2, 2, 1
    model = TinyClassifier()
    trainer = Trainer(
        default_root_dir=tmp_path, logger=False, enable_progress_bar=False, enable_model_summary=False
    )
    (result,) = trainer.validate(model, loader, verbose=False)
    with torch.no_grad():
        expected = nn.functional.cross_entropy(model.eval()(images), labels)  # mean over 5 samples
    assert result["val/loss"] == pytest.approx(expected.item(), rel=1e-5)


@pytest.mark.slow
def test_memory_monitor_warns_on_losses_kept_in_a_list_but_not_on_a_clean_run(tmp_path: Path) -> None:
    # each run in a fresh process: memory freed by earlier tests in this process would hide growth
    args = [
        "fit",
        "--trainer.max_epochs=6",
        "--trainer.limit_val_batches=1",
        "--model.backbone.width=64",  # graphs large enough to grow by several MiB an epoch
        "--memory.patience=3",
        "--memory.min_growth_mib=4",
        "--trainer.enable_progress_bar=false",
    ]
    leaky = run_module([*args, "--model=helpers.LeakyClassifier", "--run_name=leaky"], cwd=tmp_path)
    assert "grew after each of the last 3 epochs" in leaky.stderr and ".item()" in leaky.stderr, leaky.stderr[
        -2000:
    ]
    clean = run_module([*args, "--run_name=clean"], cwd=tmp_path)
    assert "grew after each" not in clean.stderr
    header = (tmp_path / "logs" / "clean" / "metrics.csv").read_text().splitlines()[0].split(",")
    assert "memory/rss_mib" in header


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA memory figures need a GPU")
def test_memory_monitor_logs_cuda_figures(run_cli: RunCLI) -> None:  # pragma: no cover - GPU only
    cli = run_cli("fit", "--trainer.accelerator=gpu", "--trainer.devices=1")
    for key in ("cuda_allocated_mib", "cuda_reserved_mib", "cuda_max_allocated_mib"):
        assert f"memory/{key}" in cli.trainer.logged_metrics
