"""Gradient norm, throughput and epoch time of training (PRACTICES.md row 11)."""

from __future__ import annotations

import math
import time
from typing import Any

import torch
from lightning.pytorch import Callback, LightningModule, Trainer
from lightning.pytorch.utilities import rank_zero_warn
from torch.optim import Optimizer

#: Step-level keys written for an epoch's last step (see :class:`TrainingMonitor`).
STEP_KEYS = ("train/loss", "train/lr", "train/grad_norm")


class TrainingMonitor(Callback):
    """Log the gradient norm, epoch time and throughput of training; write each epoch's last step.

    - ``train/grad_norm`` (every ``log_every_n_steps`` optimizer steps): total 2-norm of all gradients
      (``torch.nn.utils.get_total_norm``), read in ``on_before_optimizer_step``: after AMP unscaling,
      before clipping. When the model has an LR scheduler also ``train/lr``, the LR of the first param
      group (``train/lr_pg<i>`` for the others). Lightning's ``LearningRateMonitor`` would name it
      ``lr-<Optimizer>`` without a scheduler and fails without a logger.
    - ``train/epoch_time_sec``: wall-clock seconds from the epoch's first training batch to the end of
      its last (data loading included, validation excluded); ``train/samples_per_sec``: the samples
      this process saw in that time (the length of the batch's first tensor) divided by it (per
      process: multiply by the number of processes under DDP).
    - The last step of every epoch is written to the loggers (``train/loss``, ``train/lr``,
      ``train/grad_norm`` as in ``trainer.callback_metrics``) even when it is not a multiple of
      ``trainer.log_every_n_steps``, so a run shorter than that has a training curve.
    - A warning at fit start when an epoch's batch count is not a multiple of
      ``accumulate_grad_batches``: Lightning steps on the partial last window of ``r`` batches, whose
      losses are each divided by ``accumulate_grad_batches``, so its gradient is scaled by
      ``r / accumulate_grad_batches``.

    Args:
        log_every_n_steps: Interval in optimizer steps for ``train/grad_norm``; ``None`` means the
            trainer's ``log_every_n_steps``; 0 turns the gradient norm off.
        enabled: Turn all of it off.

    Raises:
        ValueError: ``log_every_n_steps < 0``.
    """

    def __init__(self, log_every_n_steps: int | None = None, enabled: bool = True) -> None:
        if log_every_n_steps is not None and log_every_n_steps < 0:
            raise ValueError(f"log_every_n_steps={log_every_n_steps}: must be >= 0 (0 turns it off)")
        self.log_every_n_steps = log_every_n_steps
        self.enabled = enabled
        self._epoch_start: float | None = None
        self._samples = 0

    def on_before_optimizer_step(
        self, trainer: Trainer, pl_module: LightningModule, optimizer: Optimizer
    ) -> None:
        """Log the total gradient 2-norm (and the LR) on logging steps."""
        every = self.log_every_n_steps
        every = int(getattr(trainer, "log_every_n_steps", 50)) if every is None else every  # (Lightning's)
        # Lightning writes a step's values when (global_step + 1) % every == 0 (global_step counts the
        # steps done): compute them for that step and for the epoch's last (on_train_batch_end writes it)
        if not self.enabled or every <= 0:
            return
        if (trainer.global_step + 1) % every and not trainer.is_last_batch:
            return
        if trainer.lr_scheduler_configs and optimizer is trainer.optimizers[0]:
            for index, group in enumerate(optimizer.param_groups):
                pl_module.log("train/lr" if index == 0 else f"train/lr_pg{index}", group["lr"])
        grads = [p.grad for p in pl_module.parameters() if p.grad is not None]
        if grads:
            pl_module.log("train/grad_norm", torch.nn.utils.get_total_norm(grads, norm_type=2.0))

    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        """Warn about a partial accumulation window."""
        batches, accumulate = trainer.num_training_batches, trainer.accumulate_grad_batches
        rest = int(batches) % accumulate if math.isfinite(batches) else 0
        if self.enabled and rest:
            rank_zero_warn(
                f"an epoch has {int(batches)} training batches, not a multiple of accumulate_grad_batches="
                f"{accumulate}: its last step's gradient is scaled by {rest}/{accumulate}; change "
                "limit_train_batches or batch_size if that matters"
            )

    def on_train_epoch_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        """Start the epoch clock at the first batch (not here: the loader's workers start first)."""
        self._epoch_start = None
        self._samples = 0

    def on_train_batch_start(
        self, trainer: Trainer, pl_module: LightningModule, batch: Any, batch_idx: int
    ) -> None:
        """Start the clock on the epoch's first batch."""
        if self._epoch_start is None:
            self._epoch_start = time.perf_counter()

    def on_train_batch_end(
        self, trainer: Trainer, pl_module: LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        """Count the batch's samples; write the epoch's last step if Lightning's rule skipped it."""
        first = batch[0] if isinstance(batch, (list, tuple)) else batch
        self._samples += len(first) if isinstance(first, torch.Tensor) else 0
        every = int(getattr(trainer, "log_every_n_steps", 50))  # set on the Trainer by Lightning
        if not (self.enabled and trainer.is_last_batch and every > 0) or trainer.global_step % every == 0:
            return
        values = {key: float(value) for key, value in trainer.callback_metrics.items() if key in STEP_KEYS}
        for logger in trainer.loggers if values else []:
            logger.log_metrics(values, step=trainer.global_step - 1)  # Lightning's step for these values

    def on_train_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        """Log the epoch's time and throughput."""
        if not self.enabled or self._epoch_start is None:
            return
        if pl_module.device.type == "cuda":
            torch.cuda.synchronize(pl_module.device)
        seconds = time.perf_counter() - self._epoch_start
        pl_module.log("train/epoch_time_sec", seconds)
        if self._samples and seconds > 0:
            pl_module.log("train/samples_per_sec", self._samples / seconds)
