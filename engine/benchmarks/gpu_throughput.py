"""GPU throughput: images/s and peak memory of a ResNet-18 on CIFAR-10-shaped tensors under
``32-true``, ``16-mixed``, ``bf16-mixed``, ``channels_last`` and ``torch.compile``, then the parity
ratios (engine/benchmarks/parity.py) on the GPU. One script, a few minutes on one GPU.

    python engine/benchmarks/gpu_throughput.py            # needs a CUDA GPU
    python engine/benchmarks/gpu_throughput.py --smoke    # tiny CPU run that checks the script itself

Every configuration runs the template's own ``fit`` path (``ProjectCLI``, default callbacks) with
``project.models.TorchvisionResNet`` (resnet18, 3x3 stem for 32x32 inputs) on
``project.data.SyntheticDataModule`` (20,000 images ``[3, 32, 32]``, batch 256). Images/s
count the epochs after the first (cuDNN autotuning, allocator growth and compilation happen in the first);
peak memory is ``torch.cuda.max_memory_allocated`` over the whole fit. ``channels_last`` converts the
model's parameters (cuDNN then runs NHWC kernels); ``torch.compile`` is the engine's switch
(``--compile.enabled=true``: the model's forward, inductor; ``--smoke`` uses the ``eager`` backend,
which checks the wiring without a compiler run); ``EMA`` adds ``configs/callbacks/ema.yaml``.
"""

from __future__ import annotations

import argparse
import datetime
import sys
import time
from pathlib import Path
from typing import Any

import torch
from lightning.pytorch import Callback, LightningModule, Trainer

REPO_ROOT = Path(__file__).resolve().parents[2]  # (the template: engine/benchmarks/ is two below)
for path in (REPO_ROOT, Path(__file__).resolve().parent):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

import parity  # noqa: E402

from runwright.cli import ProjectCLI  # noqa: E402

PACKAGE = "project"  # the template's package whose workloads these are (ProjectCLI imports it by name)

#: (label, precision, channels_last, compile, EMA)
CONFIGS: list[tuple[str, str, bool, bool, bool]] = [
    ("32-true", "32-true", False, False, False),
    ("16-mixed", "16-mixed", False, False, False),
    ("bf16-mixed", "bf16-mixed", False, False, False),
    ("bf16-mixed + channels_last", "bf16-mixed", True, False, False),
    ("bf16-mixed + channels_last + torch.compile", "bf16-mixed", True, True, False),
    ("32-true + torch.compile", "32-true", False, True, False),
    ("32-true + EMA", "32-true", False, False, True),
]


class Throughput(Callback):
    """Images/s over the training batches of every epoch after the first."""

    def __init__(self) -> None:
        self.images = 0
        self.seconds = 0.0
        self._start = 0.0
        self._epoch_images = 0

    def _sync(self, pl_module: LightningModule) -> None:
        if pl_module.device.type == "cuda":
            torch.cuda.synchronize(pl_module.device)

    def on_train_epoch_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._sync(pl_module)
        self._start = time.perf_counter()
        self._epoch_images = 0

    def on_train_batch_end(
        self, trainer: Trainer, pl_module: LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        self._epoch_images += len(batch[0])

    def on_train_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._sync(pl_module)
        if trainer.current_epoch > 0:
            self.seconds += time.perf_counter() - self._start
            self.images += self._epoch_images


def run(
    precision: str, channels_last: bool, compile_model: bool, ema: bool, smoke: bool, logs_dir: str
) -> dict[str, float]:
    """One template fit; returns images/s, peak memory (MiB) and the final train loss."""
    size = (
        ["--data.num_samples=64", "--data.batch_size=16", "--trainer.max_epochs=2"]
        if smoke
        else ["--data.num_samples=20000", "--data.batch_size=256", "--trainer.max_epochs=3"]
    )
    args = [
        f"--data={PACKAGE}.data.SyntheticDataModule",
        f"--model.backbone={PACKAGE}.models.TorchvisionResNet",
        "--model.backbone.arch=resnet18",
        "--model.backbone.small_input=true",
        f"--trainer.accelerator={'cpu' if smoke else 'gpu'}",
        "--trainer.devices=1",
        f"--trainer.precision={precision}",
        "--trainer.limit_val_batches=2",
        "--trainer.enable_progress_bar=false",
        "--trainer.enable_model_summary=false",
        f"--logs_dir={logs_dir}",
        *size,
        *(
            ["--compile.enabled=true", f"--compile.backend={'eager' if smoke else 'inductor'}"]
            if compile_model
            else []
        ),
        *(["--config", str(REPO_ROOT / "configs" / "callbacks" / "ema.yaml")] if ema else []),
    ]
    argv, sys.argv = sys.argv, sys.argv[:1]
    try:
        cli = ProjectCLI(args=args, run=False, package=PACKAGE)
    finally:
        sys.argv = argv
    model: Any = cli.model
    if channels_last:
        model = model.to(memory_format=torch.channels_last)
    timer = Throughput()
    cli.trainer.callbacks.append(timer)  # type: ignore[attr-defined]
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    cli.trainer.fit(model, datamodule=cli.datamodule)
    peak = torch.cuda.max_memory_allocated() / 2**20 if torch.cuda.is_available() else float("nan")
    return {
        "images_per_s": timer.images / max(timer.seconds, 1e-9),
        "peak_mib": peak,
        "loss": float(cli.trainer.callback_metrics["train/loss"]),
    }


def main(argv: list[str] | None = None) -> None:
    """Print the throughput table, then the parity table on the GPU (Markdown)."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--smoke", action="store_true", help="tiny CPU run to check the script")
    parser.add_argument("--skip-parity", action="store_true")
    args = parser.parse_args(argv)
    if not args.smoke and not torch.cuda.is_available():
        raise SystemExit("No CUDA GPU: run with --smoke to check the script on CPU")
    import tempfile

    device = "CPU (smoke run)" if args.smoke else torch.cuda.get_device_name(0)
    print(f"### GPU throughput: {device}, torch {torch.__version__}, {datetime.date.today()}\n")
    print("| configuration | images/s | peak memory (MiB) | final train/loss |")
    print("|---|---:|---:|---:|")
    with tempfile.TemporaryDirectory(prefix="gpu_throughput_") as logs_dir:
        for label, precision, channels_last, compile_model, ema in CONFIGS:
            if args.smoke and precision == "16-mixed":  # float16 autocast with loss scaling is CUDA-only
                continue
            result = run(precision, channels_last, compile_model, ema, args.smoke, logs_dir)
            print(
                f"| {label} | {result['images_per_s']:,.0f} | {result['peak_mib']:,.0f} | "
                f"{result['loss']:.4f} |",
                flush=True,
            )
    if not args.skip_parity:
        parity_args = ["--workload", "cifar", "--no-ablation"]
        if args.smoke:
            parity_args += ["--num-samples", "256", "--epochs", "1", "--repeats", "1", "--no-warmup"]
        else:
            parity_args += ["--device", "cuda", "--num-samples", "10240", "--epochs", "3", "--repeats", "3"]
        parity.main(parity_args)


if __name__ == "__main__":
    main()
