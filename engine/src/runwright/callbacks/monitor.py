"""The LR, gradient norm, epoch time and throughput of training."""

from __future__ import annotations

import contextlib
import math
import time
import warnings
from typing import Any

import torch
from lightning.pytorch import Callback, LightningModule, Trainer
from lightning.pytorch.utilities import rank_zero_warn
from lightning.pytorch.utilities.data import extract_batch_size
from lightning.pytorch.utilities.exceptions import MisconfigurationException
from torch.optim import Optimizer

from .. import private


class TrainingMonitor(Callback):
    """Hand the loggers (never through the model), every ``log_every_n_steps`` optimizer steps,
    ``train/grad_norm`` (the total 2-norm of the gradients, ``torch.nn.utils.get_total_norm``, after AMP
    unscaling, before clipping) and, when the model has an LR scheduler, ``train/lr`` (the first param
    group's; ``train/lr_pg<i>`` the others'), at the step's number; per epoch ``train/epoch_time_sec`` (its
    first training batch to the end of its last, data loading included; under DDP the slowest process's)
    and ``train/samples_per_sec`` (the samples, Lightning's ``extract_batch_size`` of each batch, over that
    time; under DDP every process's samples over the slowest process's time: the run's throughput). The
    gradient norm and LR are the same in every DDP process (the gradients are averaged before the
    optimizer step): rank 0 computes them. Not Lightning's
    ``LearningRateMonitor`` (it raises without a logger and writes rows of its own, without the epoch) or
    ``ThroughputMonitor`` (it synchronizes a CUDA device after every batch). Warns at fit start when an
    epoch's batch count is not a multiple of ``accumulate_grad_batches`` (the partial last window's
    gradient is scaled down by the missing batches).

    Args:
        log_every_n_steps: Interval in optimizer steps; ``None``: the trainer's ``log_every_n_steps``;
            0 turns the gradient norm and LR off.
        enabled: Turn all of it off (the CLI adds no callback).

    Raises:
        ValueError: a negative ``log_every_n_steps``.
    """

    def __init__(self, log_every_n_steps: int | None = None, enabled: bool = True) -> None:
        if log_every_n_steps is not None and log_every_n_steps < 0:
            raise ValueError(f"log_every_n_steps={log_every_n_steps}: must be >= 0 (0 turns it off)")
        self.log_every_n_steps, self.enabled = log_every_n_steps, enabled
        self._epoch_start: float | None = None  # at the epoch's first batch (its workers started)
        self._samples = 0

    def on_before_optimizer_step(
        self, trainer: Trainer, pl_module: LightningModule, optimizer: Optimizer
    ) -> None:
        """Log the gradient norm and LR of the step that Lightning writes to the loggers."""
        every = self.log_every_n_steps
        every = getattr(trainer, "log_every_n_steps", 50) if every is None else every  # (set by Lightning)
        if not (every > 0 and (trainer.global_step + 1) % every == 0 and trainer.is_global_zero):
            return
        scheduled = trainer.lr_scheduler_configs and optimizer is trainer.optimizers[0]
        groups = enumerate(optimizer.param_groups if scheduled else [])
        metrics = {f"train/lr_pg{i}" if i else "train/lr": float(group["lr"]) for i, group in groups}
        if grads := [p.grad for p in pl_module.parameters() if p.grad is not None]:
            metrics["train/grad_norm"] = float(torch.nn.utils.get_total_norm(grads))
        private.log_metrics(trainer, metrics)

    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        """Warn about a partial accumulation window."""
        batches, accumulate = trainer.num_training_batches, trainer.accumulate_grad_batches
        if math.isfinite(batches) and (rest := int(batches) % accumulate):
            rank_zero_warn(
                f"an epoch has {int(batches)} training batches, not a multiple of accumulate_grad_batches="
                f"{accumulate}: its last step's gradient is scaled by {rest}/{accumulate}; change "
                "limit_train_batches or batch_size if that matters"
            )

    def on_train_epoch_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._epoch_start, self._samples = None, 0

    def on_train_batch_start(self, trainer: Trainer, pl_module: LightningModule, batch: Any, *_: Any) -> None:
        """Start the epoch clock at its first batch; count the batch's samples."""
        self._epoch_start = self._epoch_start or time.perf_counter()
        with warnings.catch_warnings():  # (Lightning warns when it has to guess)
            warnings.simplefilter("ignore")
            with contextlib.suppress(RecursionError, MisconfigurationException):
                self._samples += extract_batch_size(batch)

    def on_train_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        """Log the epoch's time and throughput."""
        if self._epoch_start is None:
            return
        if (device := pl_module.device).type == "cuda":
            torch.cuda.synchronize(device)
        reduce = trainer.strategy.reduce
        elapsed = torch.tensor(time.perf_counter() - self._epoch_start, device=device)
        seconds = reduce(elapsed, reduce_op="max")
        samples = reduce(torch.tensor(float(self._samples), device=device), reduce_op="sum")
        metrics = {"train/epoch_time_sec": float(seconds)}
        if samples.item():
            metrics["train/samples_per_sec"] = float(samples / seconds)
        private.log_metrics(trainer, metrics, epoch_end=True)
