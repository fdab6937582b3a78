"""Parity: the template's ``fit`` against a hand-written PyTorch loop and a bare Lightning ``Trainer``.

Trains the same network on the same data with the same optimizer (AdamW, PyTorch defaults), LR
schedule (linear warmup + cosine, :func:`runwright.schedules.warmup_cosine_factor`),
gradient clipping (total norm 1.0), seed and batch order three ways, in one process, alternating the
runs:

- ``plain``: a PyTorch loop written the recommended way (``zero_grad(set_to_none=True)``, ``no_grad``
  evaluation, ``.item()`` only at logging points), reseeding python/numpy/torch at every epoch start
  with :func:`runwright.resume.epoch_seed` exactly like the template's ``ExactResume``
  callback and calling the training sampler's ``set_epoch`` as Lightning does;
- ``template``: ``ProjectCLI(...).trainer.fit`` with the default experiment's model (its
  ``lr_scheduler`` is the warmup-cosine :class:`~runwright.schedules.WarmupCosineLR`), every
  default callback, metric, logger and the progress bar (checkpoint writing is timed separately and
  reported on its own line);
- ``bare``: ``lightning.Trainer`` with no callbacks, logger, checkpointing or progress bar and a minimal
  LightningModule around the same network (schedule as a per-step ``LambdaLR``, reseeding in a hook);
- ``template -<group>``: the template with one of its own callbacks switched off
  (``--<group>.enabled=false``), and with the LR scheduler / progress bar / logger off, so each one's
  cost is its own number.

The final train loss of ``plain``, ``template`` and ``bare`` must agree to 5 decimals (numpy's
``assert_almost_equal(decimal=5)``); otherwise the script exits with an error. Dropout is set to 0 so
that the only consumer of the global RNG during training is the data pipeline (the template prefetches
one batch ahead, so augmentation and dropout would draw random numbers in a different interleaving).

    python engine/benchmarks/parity.py --workload digits    # SimpleCNN on the 8x8 digits, batch 64
    python engine/benchmarks/parity.py --workload cifar     # small ResNet, CIFAR-shaped synthetic, batch 128
    python engine/benchmarks/parity.py --workload digits --epochs 1 --repeats 1 --no-ablation   # quick check
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import io
import itertools
import json
import logging
import math
import os
import platform
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from jsonargparse import Namespace
from lightning.pytorch import Callback, LightningDataModule, LightningModule, Trainer
from lightning.pytorch.callbacks import ModelCheckpoint
from torch import Tensor, nn
from torch.nn import functional as F

REPO_ROOT = Path(__file__).resolve().parents[2]  # (the template: engine/benchmarks/ is two below)
if str(REPO_ROOT) not in sys.path:  # run from a checkout without installing the package
    sys.path.insert(0, str(REPO_ROOT))

from runwright import runs  # noqa: E402
from runwright.cli import ProjectCLI  # noqa: E402
from runwright.resume import epoch_seed  # noqa: E402
from runwright.runs import finish_wandb_run  # noqa: E402
from runwright.schedules import warmup_cosine_factor  # noqa: E402

PACKAGE = "project"  # the template's package whose workloads these are (ProjectCLI imports it by name)


def project_class(path: str) -> Any:
    """The class ``<PACKAGE>.<path>`` (``data.DigitsDataModule``), imported by name."""
    return runs.class_of(f"{PACKAGE}.{path}")


#: Our callbacks' config groups, each switched off in turn with ``--<group>.enabled=false``. Groups
#: found in the CLI that are not listed here are added automatically (any top-level group with an
#: ``enabled`` field); a group listed here that the CLI does not have is an error.
CALLBACK_GROUPS: list[str] = ["memory", "exact_resume", "training_monitor", "health", "interruption"]

#: Further template defaults switched off one at a time: name -> command-line overrides.
OTHER_ABLATIONS: dict[str, list[str]] = {
    "lr_scheduler": ["--model.lr_scheduler=null"],  # the warmup-cosine schedule (the loss changes)
    "progress_bar": ["--trainer.enable_progress_bar=false"],
    "logger": ["--trainer.logger=false"],
}

#: The clock: ``time.perf_counter`` (wall, the default) or ``time.process_time`` (CPU seconds of this
#: process, all its threads: steadier on a shared machine, but blind to GPU time and DataLoader
#: worker processes; ``--clock cpu``).
_clock: Callable[[], float] = time.perf_counter

# The template's defaults that the plain loop and the bare Trainer reproduce.
CLIP_NORM = 1.0  # runwright's defaults.yaml trainer.gradient_clip_val (algorithm "norm")
WARMUP_FRACTION = 0.05  # project/configs/default.yaml model.lr_scheduler (WarmupCosineLR)
WARMUP_START_FACTOR = 0.01  # WarmupCosineLR's default
MIN_LR_FACTOR = 0.01  # project/configs/default.yaml
LOG_EVERY_N_STEPS = 10  # runwright's defaults.yaml trainer.log_every_n_steps


class SmallResNet(nn.Module):
    """A CIFAR-style ResNet (He et al. 2016, section 4.2) with one basic block per stage.

    3x3 stem with ``widths[0]`` channels, then one residual basic block per entry of ``widths`` (stride 2
    from the second stage on), global average pooling. Input ``[B, in_channels, H, W]`` float32 ->
    features ``[B, widths[-1]]``. With the defaults it is a ResNet-8 of about 78k parameters: a
    realistic step (tens of ms on 2 CPU cores at batch 128 on 32x32 images) that keeps this benchmark
    short.
    """

    def __init__(self, in_channels: int = 3, widths: tuple[int, ...] = (16, 32, 64)) -> None:
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(in_channels, widths[0], 3, padding=1, bias=False), nn.BatchNorm2d(widths[0]), nn.ReLU()
        )
        blocks: list[nn.Module] = []
        previous = widths[0]
        for index, width in enumerate(widths):
            blocks.append(_BasicBlock(previous, width, stride=1 if index == 0 else 2))
            previous = width
        self.blocks = nn.Sequential(*blocks)
        self.out_features = previous

    def forward(self, x: Tensor) -> Tensor:
        """Map ``[B, C, H, W]`` images to ``[B, out_features]`` features."""
        return torch.flatten(F.adaptive_avg_pool2d(self.blocks(self.stem(x)), 1), 1)


class _BasicBlock(nn.Module):
    def __init__(self, in_channels: int, out_channels: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, out_channels, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(out_channels)
        self.conv2 = nn.Conv2d(out_channels, out_channels, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(out_channels)
        self.shortcut: nn.Module = nn.Identity()
        if stride != 1 or in_channels != out_channels:
            self.shortcut = nn.Sequential(
                nn.Conv2d(in_channels, out_channels, 1, stride=stride, bias=False),
                nn.BatchNorm2d(out_channels),
            )

    def forward(self, x: Tensor) -> Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        return F.relu(self.bn2(self.conv2(out)) + self.shortcut(x))


@dataclass
class Workload:
    """One benchmark setting: the data, the backbone and how the template's CLI spells them."""

    name: str
    make_data: Callable[[], LightningDataModule]
    make_backbone: Callable[[], nn.Module]
    cli_args: list[str]
    num_classes: int = 10
    notes: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


def _class_path(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def make_workload(name: str, num_samples: int) -> Workload:
    """``digits``: SimpleCNN (dropout 0) on the 1,797 8x8 digits (augmented), batch 64.
    ``cifar``: :class:`SmallResNet` on CIFAR-10-shaped synthetic images ``[3, 32, 32]``, batch 128."""
    if name == "digits":
        return Workload(
            name,
            make_data=lambda: project_class("data.DigitsDataModule")(batch_size=64),
            make_backbone=lambda: project_class("models.SimpleCNN")(in_channels=1, dropout=0.0),
            cli_args=[
                f"--data={PACKAGE}.data.DigitsDataModule",
                "--data.batch_size=64",
                f"--model.backbone={PACKAGE}.models.SimpleCNN",
                "--model.backbone.dropout=0.0",
            ],
            notes="SimpleCNN (dropout 0), digits 1,168 train / 270 val images, batch 64",
        )
    if name == "cifar":
        return Workload(
            name,
            make_data=lambda: project_class("data.SyntheticDataModule")(
                num_samples=num_samples, batch_size=128
            ),
            make_backbone=lambda: SmallResNet(),
            cli_args=[
                f"--data={PACKAGE}.data.SyntheticDataModule",
                f"--data.num_samples={num_samples}",
                "--data.batch_size=128",
                f"--model.backbone={_class_path(SmallResNet)}",
            ],
            notes=f"SmallResNet (ResNet-8, widths 16/32/64), synthetic [3, 32, 32], {num_samples} train / "
            f"{num_samples // 4} val images, batch 128",
        )
    raise SystemExit(f"--workload {name!r}: choose 'digits' or 'cifar'")


@dataclass
class Result:
    """One run, in seconds of the chosen clock.

    ``seconds``: the whole fit (set-up, sanity check, every epoch, teardown; checkpoint writing
    included). ``checkpoint_seconds``: checkpoint writing alone, over the whole fit. ``final_loss``:
    the last step's train loss. ``epoch_seconds``: each epoch after the first (training and
    validation, from one epoch's start to the next's, the last one to the end of training), minus the
    checkpoint writing that began in it; empty for a one-epoch run.
    """

    seconds: float
    checkpoint_seconds: float
    final_loss: float
    epoch_seconds: list[float] = field(default_factory=list)


def later_epochs(epoch_starts: list[float], end: float, saves: list[tuple[float, float]]) -> list[float]:
    """Durations of the epochs after the first: epoch ``k`` runs from ``epoch_starts[k]`` to
    ``epoch_starts[k + 1]`` (the last to ``end``), minus the checkpoint writing that began in it
    (``saves``: ``(begin, seconds)`` pairs)."""
    bounds = [*epoch_starts[1:], end]
    return [
        stop - begin - sum(seconds for at, seconds in saves if begin <= at < stop)
        for begin, stop in itertools.pairwise(bounds)
    ]


class EpochClock(Callback):
    """Record the clock at every training epoch's start and at the end of training (for
    :func:`later_epochs`). The bare Trainer and the template both get one, so it costs both the
    same."""

    def __init__(self) -> None:
        self.epoch_starts: list[float] = []
        self.end = math.nan

    def on_train_epoch_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self.epoch_starts.append(_clock())

    def on_train_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self.end = _clock()


def _reseed(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def _schedule(total_steps: int) -> Callable[[int], float]:
    warmup = round(WARMUP_FRACTION * total_steps)
    return lambda step: warmup_cosine_factor(step, total_steps, warmup, WARMUP_START_FACTOR, MIN_LR_FACTOR)


def _network(workload: Workload, seed: int) -> nn.Module:
    """The backbone and a linear head, initialised exactly as the template's ``ImageClassifier`` is
    after ``seed_everything(seed)`` (backbone first, then the head)."""
    _reseed(seed)
    backbone = workload.make_backbone()
    head = nn.Linear(int(backbone.out_features), workload.num_classes)  # type: ignore[arg-type]
    return nn.Sequential(backbone, head)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def run_plain(workload: Workload, epochs: int, seed: int, device: torch.device) -> Result:
    """(a) The hand-written loop: train, then evaluate (loss and accuracy), every epoch."""
    model = _network(workload, seed).to(device)
    optimizer = torch.optim.AdamW(model.parameters())
    base_lrs = [group["lr"] for group in optimizer.param_groups]
    _sync(device)
    start = _clock()
    data = workload.make_data()
    data.setup("fit")
    data.shuffle_seed = seed  # type: ignore[attr-defined]  # the template's: the seed_everything value
    train_loader, val_loader = data.train_dataloader(), data.val_dataloader()
    schedule = _schedule(epochs * len(train_loader))
    step = 0
    loss = torch.zeros(())
    logged: list[float] = []
    epoch_starts: list[float] = []
    for epoch in range(epochs):
        epoch_starts.append(_clock())
        _reseed(epoch_seed(seed, epoch))  # what ExactResume does at every epoch start
        train_loader.sampler.set_epoch(epoch)  # as Lightning does
        model.train()
        for inputs, target in train_loader:
            inputs, target = inputs.to(device, non_blocking=True), target.to(device, non_blocking=True)
            factor = schedule(step)
            for group, base_lr in zip(optimizer.param_groups, base_lrs, strict=True):
                group["lr"] = base_lr * factor
            loss = F.cross_entropy(model(inputs), target)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), CLIP_NORM)
            optimizer.step()
            step += 1
            if step % LOG_EVERY_N_STEPS == 0:
                logged.append(loss.item())  # the only host sync in the loop, at logging points
        model.eval()
        total_loss = torch.zeros((), device=device)
        correct = torch.zeros((), device=device, dtype=torch.long)
        count = 0
        with torch.no_grad():
            for inputs, target in val_loader:
                inputs, target = inputs.to(device, non_blocking=True), target.to(device, non_blocking=True)
                output = model(inputs)
                total_loss += F.cross_entropy(output, target, reduction="sum")
                correct += (output.argmax(dim=1) == target).sum()
                count += len(target)
        logged.append(total_loss.item() / count)
        logged.append(correct.item() / count)
    final_loss = loss.item()
    _sync(device)
    end = _clock()
    return Result(end - start, 0.0, final_loss, later_epochs(epoch_starts, end, []))


class BareClassifier(LightningModule):
    """(c) The least a LightningModule needs: cross-entropy, validation loss/accuracy, AdamW with the
    warmup-cosine factor as a per-step ``LambdaLR``, and the per-epoch reseeding of ``ExactResume``."""

    def __init__(self, net: nn.Module, total_steps: int, seed: int) -> None:
        super().__init__()
        self.net = net
        self.total_steps = total_steps
        self.seed = seed
        self.last_loss = torch.zeros(())

    def forward(self, x: Tensor) -> Tensor:
        return self.net(x)

    def on_train_epoch_start(self) -> None:
        _reseed(epoch_seed(self.seed, self.current_epoch))

    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor:
        inputs, target = batch
        loss = F.cross_entropy(self(inputs), target)
        self.last_loss = loss.detach()
        return loss

    def on_validation_epoch_start(self) -> None:
        self.val_sums = torch.zeros(2, device=self.device)
        self.val_count = 0

    def validation_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> None:
        inputs, target = batch
        output = self(inputs)
        self.val_sums[0] += F.cross_entropy(output, target, reduction="sum")
        self.val_sums[1] += (output.argmax(dim=1) == target).sum()
        self.val_count += len(target)

    def on_validation_epoch_end(self) -> None:
        self.val_result = (self.val_sums / max(self.val_count, 1)).tolist()

    def configure_optimizers(self) -> Any:
        optimizer = torch.optim.AdamW(self.parameters())
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, _schedule(self.total_steps))
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}


def run_bare(workload: Workload, epochs: int, seed: int, accelerator: str) -> Result:
    """(c) A bare Lightning Trainer: no callbacks, logger, checkpointing, progress bar or summary."""
    data = workload.make_data()
    data.shuffle_seed = seed  # type: ignore[attr-defined]  # as the template's seed_everything value
    probe = workload.make_data()
    probe.setup("fit")
    steps_per_epoch = len(probe.train_dataloader())
    model = BareClassifier(_network(workload, seed), epochs * steps_per_epoch, seed)
    trainer = Trainer(
        accelerator=accelerator,
        devices=1,
        max_epochs=epochs,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[clock := EpochClock()],
        gradient_clip_val=CLIP_NORM,
        gradient_clip_algorithm="norm",
    )
    _sync(model.device)
    start = _clock()
    trainer.fit(model, datamodule=data)
    seconds = _clock() - start
    return Result(seconds, 0.0, float(model.last_loss), later_epochs(clock.epoch_starts, clock.end, []))


class Breakdown(Callback):
    """Clock time spent inside each part of the template during the epochs after the first.

    Wraps, on one template run: every ``on_*`` hook that a callback overrides (one row per callback
    class; the checkpoint callbacks share one), the model's ``lr_scheduler_step`` (Lightning steps every
    LR scheduler through it), its ``log`` (every ``self.log``/``log_dict`` call, whoever makes it), its
    metric collections' ``update`` and ``compute``, and each logger's ``log_metrics``/``save``. Rows
    overlap where one part calls another (a callback's row includes the ``self.log`` calls it makes).
    Unlike the switched-off runs, this does not depend on two noisy runs agreeing to a few ms.
    """

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self.active = False
        self.epochs = 0

    def wrap(self, owner: Any, name: str, label: str) -> None:
        """Replace ``owner.name`` by a wrapper that adds its time to ``label`` while active."""
        function = getattr(owner, name)
        self.seconds.setdefault(label, 0.0)

        def timed(*args: Any, **kwargs: Any) -> Any:
            if not self.active:
                return function(*args, **kwargs)
            begin = _clock()
            try:
                return function(*args, **kwargs)
            finally:
                self.seconds[label] += _clock() - begin

        object.__setattr__(owner, name, timed)  # (nn.Module.__setattr__ would also accept it)

    def attach(self, cli: ProjectCLI) -> None:
        """Wrap the parts of ``cli``'s trainer, model and loggers (see the class docstring)."""
        trainer, model = cli.trainer, cli.model
        for callback in list(trainer.callbacks):  # type: ignore[attr-defined]
            if isinstance(callback, (Breakdown, EpochClock)):
                continue
            # best.ckpt and last.ckpt: one row, from which the checkpoint writing is subtracted
            label = (
                "callback ModelCheckpoint"
                if isinstance(callback, ModelCheckpoint)
                else f"callback {type(callback).__name__}"
            )
            for name in dir(type(callback)):
                overridden = getattr(type(callback), name) is not getattr(Callback, name, None)
                if name.startswith("on_") and overridden:
                    self.wrap(callback, name, label)
        self.wrap(model, "lr_scheduler_step", "LR scheduler steps (warmup-cosine)")
        self.wrap(model, "log", "self.log calls (all, whoever makes them)")
        for stage in ("train", "val"):
            metrics = getattr(model, f"{stage}_metrics")
            self.wrap(metrics, "update", "metric updates")
            self.wrap(metrics, "compute", "epoch metrics: compute")
        for logger in trainer.loggers:
            for name in ("log_metrics", "save"):
                self.wrap(logger, name, f"logger {type(logger).__name__}: log_metrics and save")
        trainer.callbacks.append(self)  # type: ignore[attr-defined]

    def on_train_epoch_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if trainer.current_epoch >= 1:
            self.active = True
            self.epochs += 1

    def on_train_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self.active = False


def _template_cli(
    workload: Workload, epochs: int, seed: int, accelerator: str, logs_dir: str, extra: list[str]
) -> ProjectCLI:
    args = [
        *workload.cli_args,
        f"--trainer.max_epochs={epochs}",
        f"--trainer.accelerator={accelerator}",
        "--trainer.devices=1",
        f"--seed_everything={seed}",
        f"--logs_dir={logs_dir}",
        *extra,
    ]
    argv, sys.argv = sys.argv, sys.argv[:1]  # LightningCLI warns when sys.argv also holds arguments
    try:
        return ProjectCLI(args=args, run=False, package=PACKAGE)
    finally:
        sys.argv = argv


def discover_groups(config: Namespace) -> list[str]:
    """Our callbacks' config groups: :data:`CALLBACK_GROUPS`, then any other top-level group of the
    parsed CLI ``config`` that has an ``enabled`` field. Exits with an error naming a listed group the
    CLI does not have (so a renamed or removed callback cannot silently drop out of the table)."""
    found = [
        key for key, value in vars(config).items() if isinstance(value, Namespace) and "enabled" in value
    ]
    missing = [group for group in CALLBACK_GROUPS if group not in found]
    if missing:
        raise SystemExit(
            f"parity.py: CALLBACK_GROUPS names {missing}, but the CLI has no such group with an 'enabled' "
            f"field (groups found: {found}). Update CALLBACK_GROUPS at the top of "
            "engine/benchmarks/parity.py."
        )
    return CALLBACK_GROUPS + [group for group in found if group not in CALLBACK_GROUPS]


def run_template(
    workload: Workload,
    epochs: int,
    seed: int,
    accelerator: str,
    logs_dir: str,
    extra: list[str],
    breakdown: Breakdown | None = None,
) -> Result:
    """(b) The template's fit path with its defaults; ``extra`` switches things off; with a
    ``breakdown``, the time of each part is recorded in it."""
    cli = _template_cli(workload, epochs, seed, accelerator, logs_dir, extra)
    saves: list[tuple[float, float]] = []
    save_checkpoint = cli.trainer.save_checkpoint
    clock = EpochClock()
    cli.trainer.callbacks.append(clock)  # type: ignore[attr-defined]
    if breakdown is not None:
        breakdown.attach(cli)

    def timed_save(*args: Any, **kwargs: Any) -> None:
        begin = _clock()
        save_checkpoint(*args, **kwargs)
        saves.append((begin, _clock() - begin))
        if breakdown is not None and breakdown.active:  # writing is reported on its own line
            breakdown.seconds["checkpoint writing"] = (
                breakdown.seconds.get("checkpoint writing", 0.0) + (saves[-1][1])
            )

    cli.trainer.save_checkpoint = timed_save  # type: ignore[method-assign]
    # The last step's loss (the template logs train/loss only every log_every_n_steps steps).
    last_loss = torch.zeros(())
    training_step = cli.model.training_step

    def capture_loss(*args: Any, **kwargs: Any) -> Any:
        nonlocal last_loss
        output = training_step(*args, **kwargs)
        last_loss = output.detach()
        return output

    cli.model.training_step = capture_loss
    _sync(cli.model.device)
    start = _clock()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        cli.trainer.fit(cli.model, datamodule=cli.datamodule)
    seconds = _clock() - start
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        finish_wandb_run()  # close the W&B run (untimed), so the next run and the clean-up start clean
    epoch_seconds = later_epochs(clock.epoch_starts, clock.end, saves)
    return Result(seconds, sum(seconds for _, seconds in saves), float(last_loss), epoch_seconds)


def check_losses(results: dict[str, list[Result]], names: list[str]) -> None:
    """Exit with an error unless the final train losses of ``names`` agree to 5 decimals in every
    repetition (``numpy.testing.assert_almost_equal(decimal=5)``: ``|a - b| < 1.5e-5``)."""
    for index in range(len(results[names[0]])):
        losses = {name: results[name][index].final_loss for name in names}
        for name in names[1:]:
            try:
                np.testing.assert_almost_equal(losses[name], losses[names[0]], decimal=5)
            except AssertionError:
                raise SystemExit(
                    f"parity.py: final train losses differ beyond 5 decimals in repetition {index}: "
                    + ", ".join(f"{key}={value:.8f}" for key, value in losses.items())
                    + ". The runs no longer do the same computation (model, data order, schedule, "
                    "clipping or seeding changed on one side)."
                ) from None


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Run the benchmark, print Markdown tables, and return the medians (also written with --json)."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--workload", choices=["digits", "cifar"], default="digits")
    parser.add_argument("--epochs", type=int, default=None, help="default: 10 (digits), 2 (cifar)")
    parser.add_argument("--repeats", type=int, default=3, help="alternating repetitions (median over them)")
    parser.add_argument("--num-samples", type=int, default=1280, help="cifar: training images")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--no-ablation", action="store_true", help="skip the one-switch-off runs")
    parser.add_argument(
        "--no-breakdown",
        action="store_true",
        help="skip the timed-parts runs of the template (see Breakdown)",
    )
    parser.add_argument("--no-warmup", action="store_true", help="skip the unrecorded warm-up runs")
    parser.add_argument(
        "--clock",
        choices=["wall", "cpu"],
        default="wall",
        help="wall: elapsed seconds; cpu: this process's CPU seconds (steadier on a shared machine)",
    )
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    parser.add_argument("--json", type=Path, default=None, help="also write the results here")
    args = parser.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda: no CUDA GPU is available")
    global _clock
    _clock = time.process_time if args.clock == "cpu" else time.perf_counter
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    epochs = args.epochs or (10 if args.workload == "digits" else 2)
    workload = make_workload(args.workload, args.num_samples)
    device = torch.device(args.device)
    if device.type == "cuda":  # same kernels in every run, so the losses can agree to 5 decimals
        torch.backends.cudnn.deterministic = True
        torch.backends.cudnn.benchmark = False
    accelerator = "gpu" if args.device == "cuda" else "cpu"
    logs = tempfile.TemporaryDirectory(prefix="parity_logs_")

    def template(extra: list[str], n_epochs: int = epochs) -> Callable[[], Result]:
        return lambda: run_template(workload, n_epochs, args.seed, accelerator, logs.name, extra)

    runs: dict[str, Callable[[], Result]] = {
        "plain": lambda: run_plain(workload, epochs, args.seed, device),
        "template": template([]),
        "bare": lambda: run_bare(workload, epochs, args.seed, accelerator),
    }
    groups = discover_groups(_template_cli(workload, 1, args.seed, accelerator, logs.name, []).config)
    if not args.no_ablation:
        for group in groups:
            runs[f"template -{group}"] = template([f"--{group}.enabled=false"])
        for name, extra in OTHER_ABLATIONS.items():
            runs[f"template -{name}"] = template(extra)

    if not args.no_warmup:  # first-use costs (lazy imports, allocator, kernels) off the record
        run_plain(workload, 1, args.seed, device)
        run_template(workload, 1, args.seed, accelerator, logs.name, [])
        run_bare(workload, 1, args.seed, accelerator)
    results: dict[str, list[Result]] = {name: [] for name in runs}
    names = list(runs)
    for repeat in range(args.repeats):
        order = names[repeat % len(names) :] + names[: repeat % len(names)]  # rotate the order
        for name in order:
            results[name].append(runs[name]())
            print(
                f"  repeat {repeat}: {name:28s} {results[name][-1].seconds / epochs:.3f} s/epoch", flush=True
            )
    breakdowns: list[Breakdown] = []
    if not args.no_breakdown and epochs > 1:
        for _ in range(args.repeats):
            breakdowns.append(Breakdown())
            run_template(workload, epochs, args.seed, accelerator, logs.name, [], breakdowns[-1])
    logs.cleanup()
    check_losses(results, ["plain", "template", "bare"])

    def median(name: str, value: Callable[[Result], float]) -> float:
        return statistics.median(value(result) for result in results[name])

    def epoch_of(result: Result) -> float:  # one run's typical epoch
        if result.epoch_seconds:
            return statistics.median(result.epoch_seconds)
        return (result.seconds - result.checkpoint_seconds) / epochs

    def whole_of(result: Result) -> float:
        return (result.seconds - result.checkpoint_seconds) / epochs

    def paired_ratios(name: str, reference: str, value: Callable[[Result], float] = epoch_of) -> list[float]:
        """name / reference per repetition, both runs from the same repetition (seconds apart), so the
        machine's slower and faster minutes cancel out of the ratio."""
        return [value(a) / value(b) for a, b in zip(results[name], results[reference], strict=True)]

    def paired(name: str, reference: str, value: Callable[[Result], float] = epoch_of) -> float:
        return statistics.median(paired_ratios(name, reference, value))

    def spread(name: str, reference: str) -> str:
        """The quartiles of the per-repetition ratios (how far one repetition can be trusted)."""
        ratios = paired_ratios(name, reference)
        if len(ratios) < 2:
            return "one repetition"
        low, _, high = statistics.quantiles(ratios, n=4, method="inclusive")
        return f"quartiles {low:.3f}-{high:.3f}"

    def pooled(name: str) -> float:  # every later epoch of every repetition
        epochs_seen = [seconds for result in results[name] for seconds in result.epoch_seconds]
        return statistics.median(epochs_seen) if epochs_seen else median(name, whole_of)

    steady = {name: pooled(name) for name in names}
    whole = {name: median(name, whole_of) for name in names}
    one_off = {name: epochs * (whole[name] - steady[name]) for name in names}
    ratio_plain = {name: paired(name, "plain") for name in names}
    ratio_bare = {name: paired(name, "bare") for name in names}
    whole_ratio_bare = {name: paired(name, "bare", whole_of) for name in names}
    summary: dict[str, Any] = {
        "workload": workload.name,
        "notes": workload.notes,
        "epochs": epochs,
        "repeats": args.repeats,
        "device": torch.cuda.get_device_name(0) if args.device == "cuda" else platform.processor() or "cpu",
        "threads": torch.get_num_threads(),
        "clock": args.clock,
        "date": datetime.date.today().isoformat(),
        "load_average": os.getloadavg(),
        "seconds_per_epoch": steady,
        "whole_fit_seconds_per_epoch": whole,
        "one_off_seconds": one_off,
        "checkpoint_seconds_per_epoch": median("template", lambda r: r.checkpoint_seconds / epochs),
        "final_loss": {name: results[name][0].final_loss for name in ("plain", "template", "bare")},
        "ratio_template_plain": ratio_plain["template"],
        "ratio_template_bare": ratio_bare["template"],
        "ratio_bare_plain": ratio_plain["bare"],
        "whole_fit_ratio_template_plain": paired("template", "plain", whole_of),
        "whole_fit_ratio_template_bare": whole_ratio_bare["template"],
    }
    print(f"\n### Parity, {workload.name}: {workload.notes}")
    print(
        f"{epochs} epochs, {args.repeats} alternating repetitions, {summary['device']}, "
        f"{summary['threads']} threads, {summary['date']}, load average {summary['load_average'][0]:.1f}\n"
    )
    print(f"Clock: {'CPU seconds of the process' if args.clock == 'cpu' else 'wall seconds'}.\n")
    print(
        "s/epoch: median duration of one epoch (training and validation) over every epoch after the "
        "first of every repetition, checkpoint writing excluded. Ratios: the median over repetitions "
        "of the ratio of two runs of the same repetition (each run: the median of its epochs). Whole "
        "fit: set-up, sanity check, every epoch and teardown, checkpoint writing excluded, divided by "
        "the epochs. One-off: epochs x (whole fit - s/epoch), what a run costs once (set-up, the first "
        "epoch's extra, teardown).\n"
    )
    print(
        "| run | s/epoch | / plain (a) | / bare Lightning (c) | whole fit s/epoch | whole fit / (c) "
        "| one-off s | final train loss |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for name in names:
        loss = results[name][0].final_loss
        print(
            f"| {name} | {steady[name]:.4f} | {ratio_plain[name]:.3f} | {ratio_bare[name]:.3f} | "
            f"{whole[name]:.4f} | {whole_ratio_bare[name]:.3f} | {one_off[name]:.3f} | {loss:.6f} |"
        )
    print(
        f"\nCheckpoint writing (best.ckpt + last.ckpt): {summary['checkpoint_seconds_per_epoch']:.4f} s/epoch"
    )
    if not args.no_ablation:
        print("\n| switched off | saves per epoch (ms) | share of the epoch | saves once per fit (ms) |")
        print("|---|---:|---:|---:|")
        for name in names[3:]:
            saved = statistics.median(  # paired, as the ratios
                epoch_of(a) - epoch_of(b) for a, b in zip(results["template"], results[name], strict=True)
            )
            saved_once = one_off["template"] - one_off[name]
            print(
                f"| {name.removeprefix('template -')} | {1000 * saved:.1f} | "
                f"{100 * saved / steady['template']:.1f}% | {1000 * saved_once:.0f} |"
            )
    if breakdowns:
        parts = {
            label: statistics.median(b.seconds.get(label, 0.0) / b.epochs for b in breakdowns)
            for label in breakdowns[0].seconds
        }
        writing = parts.pop("checkpoint writing", 0.0)
        if "callback ModelCheckpoint" in parts:
            parts["callbacks BestCheckpoint + LastCheckpoint (writing excluded)"] = (
                parts.pop("callback ModelCheckpoint") - writing
            )
        summary["breakdown_seconds_per_epoch"] = parts
        print(
            f"\nWhere the template's time goes (epochs after the first, median of {len(breakdowns)} "
            "timed runs; rows overlap where one part calls another, e.g. a callback's row includes "
            "the self.log calls it makes):\n"
        )
        print("| part | ms/epoch | share of the template's epoch |")
        print("|---|---:|---:|")
        for label, seconds in sorted(parts.items(), key=lambda item: -item[1]):
            print(f"| {label} | {1000 * seconds:.2f} | {100 * seconds / steady['template']:.1f}% |")
    print(
        f"\nPer epoch: (b)/(a) template/plain = {summary['ratio_template_plain']:.3f} "
        f"({spread('template', 'plain')}); (b)/(c) template/bare = {summary['ratio_template_bare']:.3f} "
        f"({spread('template', 'bare')}); (c)/(a) bare/plain = {summary['ratio_bare_plain']:.3f} "
        f"({spread('bare', 'plain')}). Whole fit: (b)/(a) = "
        f"{summary['whole_fit_ratio_template_plain']:.3f}; "
        f"(b)/(c) = {summary['whole_fit_ratio_template_bare']:.3f}"
    )
    if args.json is not None:
        args.json.write_text(json.dumps(summary, indent=2))
    return summary


if __name__ == "__main__":
    # Quiet "GPU available: ..." from every Trainer and W&B's run summaries (only as a script: main()
    # may run inside tests).
    for logger_name in ("lightning.pytorch", "lightning.fabric"):
        logging.getLogger(logger_name).setLevel(logging.WARNING)
    os.environ.setdefault("WANDB_SILENT", "true")
    main()
