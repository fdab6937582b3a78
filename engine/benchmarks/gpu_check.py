"""GPU check for a lent GPU (issue: training engineering). One script, under 5 minutes on one GPU.

Runs the template's own ``fit`` path (``ProjectCLI``) on CIFAR-10-shaped synthetic images with a
ResNet-18 backbone and reports, per precision (32-true, 16-mixed, bf16-mixed): images/s over the
timed epochs, peak CUDA memory (MiB), and the final train loss; then DDP with ``sync_batchnorm`` on
one GPU (checks the BatchNorm layers became SyncBatchNorm and training ran); then the memory
callback's CUDA figures. Prints a Markdown table (paste it into engine/benchmarks/README.md).

    python engine/benchmarks/gpu_check.py                 # on a GPU
    python engine/benchmarks/gpu_check.py --smoke         # tiny CPU run: checks the script itself works
"""

from __future__ import annotations

import argparse
import datetime
import time
from typing import Any

import torch
from lightning.pytorch import Callback, LightningModule, Trainer

from runwright.cli import ProjectCLI

PACKAGE = "project"  # the template's package whose workloads these are (ProjectCLI imports it by name)


class Timer(Callback):
    """Images/s over all epochs after the first (warm-up: cuDNN autotune, allocator growth)."""

    def __init__(self) -> None:
        self.start = 0.0
        self.images = 0
        self.seconds = 0.0

    def on_train_epoch_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        self.start = time.perf_counter()
        self.epoch_images = 0

    def on_train_batch_end(
        self, trainer: Trainer, pl_module: LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        self.epoch_images += batch[0].shape[0]

    def on_train_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        if trainer.current_epoch > 0:
            self.seconds += time.perf_counter() - self.start
            self.images += self.epoch_images


def run(extra: list[str], smoke: bool) -> tuple[ProjectCLI, Timer]:
    timer = Timer()
    size = (
        ["--data.num_samples=64", "--data.batch_size=16", "--trainer.max_epochs=2"]
        if smoke
        else ["--data.num_samples=20000", "--data.batch_size=256", "--trainer.max_epochs=3"]
    )
    accelerator = "cpu" if smoke else "gpu"
    args = [
        f"--data={PACKAGE}.data.SyntheticDataModule",
        f"--model.backbone={PACKAGE}.models.TorchvisionResNet",
        f"--trainer.accelerator={accelerator}",
        "--trainer.devices=1",
        "--trainer.limit_val_batches=2",
        "--trainer.enable_progress_bar=false",
        "--logs_dir=logs/gpu_check",
        "--memory.log_every_n_steps=10",
        *size,
        *extra,
    ]
    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()
    cli = ProjectCLI(args=args, run=False, package=PACKAGE)
    cli.trainer.callbacks.append(timer)  # type: ignore[attr-defined]
    cli.trainer.fit(cli.model, datamodule=cli.datamodule)
    return cli, timer


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--smoke", action="store_true", help="tiny CPU run to check the script")
    smoke = parser.parse_args().smoke
    if not smoke and not torch.cuda.is_available():
        raise SystemExit("No CUDA GPU: run with --smoke to check the script on CPU")
    device = "CPU (smoke)" if smoke else torch.cuda.get_device_name(0)
    print(f"# GPU check: {device}, torch {torch.__version__}, {datetime.date.today()}\n")
    print("| run | images/s | peak memory (MiB) | final train/loss |")
    print("|---|---:|---:|---:|")
    precisions = ["32-true", "bf16-mixed"] if smoke else ["32-true", "16-mixed", "bf16-mixed"]
    for precision in precisions:
        cli, timer = run([f"--trainer.precision={precision}"], smoke)
        peak = torch.cuda.max_memory_allocated() / 2**20 if torch.cuda.is_available() else float("nan")
        loss = float(cli.trainer.callback_metrics["train/loss"])
        print(f"| {precision} | {timer.images / max(timer.seconds, 1e-9):.0f} | {peak:.0f} | {loss:.4f} |")
    if not smoke:
        cli, timer = run(
            ["--trainer.strategy=ddp", "--trainer.sync_batchnorm=true", "--trainer.precision=bf16-mixed"],
            smoke,
        )
        sync = sum(isinstance(m, torch.nn.SyncBatchNorm) for m in cli.model.modules())
        plain = sum(type(m) is torch.nn.BatchNorm2d for m in cli.model.modules())
        loss = float(cli.trainer.callback_metrics["train/loss"])
        print(
            f"| ddp + sync_batchnorm (1 GPU, bf16) | {timer.images / max(timer.seconds, 1e-9):.0f} | "
            f"{torch.cuda.max_memory_allocated() / 2**20:.0f} | {loss:.4f} |"
        )
        print(f"\nSyncBatchNorm layers: {sync}, plain BatchNorm2d left: {plain}")
    memory = {k: float(v) for k, v in cli.trainer.logged_metrics.items() if k.startswith("memory/")}
    print("\nMemory callback (last logged):", ", ".join(f"{k}={v:.0f}" for k, v in sorted(memory.items())))


if __name__ == "__main__":
    main()
