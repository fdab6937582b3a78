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
    """Log ``train/grad_norm`` every N optimizer steps, and ``train/samples_per_sec`` and
    ``train/epoch_time_sec`` once per training epoch.

    - ``train/grad_norm``: total 2-norm over all parameters' gradients (the norm of the vector of every
      gradient entry, ``torch.nn.utils.get_total_norm``), read in ``on_before_optimizer_step``: after
      AMP unscaling, before gradient clipping, so it shows what clipping acts on. Computed only on
      logging steps, so other steps pay nothing.
    - ``train/lr``: the LR of the first param group, on the same steps, but only when the model's own
      LR scheduler is in use (otherwise the warmup-cosine callback logs it).
    - ``train/epoch_time_sec``: wall-clock seconds from the first training batch of the epoch to the
      end of the last one (data loading included, validation excluded).
    - ``train/samples_per_sec``: training samples this process saw in that time, divided by it (per
      process; multiply by the number of processes for the global rate under DDP). The batch size is
      the length of the first tensor in the batch.
    - The last step of every epoch is written to the loggers even when it is not a multiple of
      ``trainer.log_every_n_steps`` (the step-level values then in ``trainer.callback_metrics``:
      ``train/loss``, ``train/lr``, ``train/grad_norm``), so a run shorter than ``log_every_n_steps``
      has a training curve.
    - A warning at fit start when an epoch has fewer batches than ``accumulate_grad_batches``, or a
      number that is not a multiple of it: Lightning then steps the optimizer on the epoch's last,
      partial window, whose gradient is the sum of its ``r`` losses each divided by
      ``accumulate_grad_batches``: scaled by ``r / accumulate_grad_batches`` against a full window.

    Args:
        log_every_n_steps: Interval in optimizer steps for ``train/grad_norm``; ``None`` means the
            trainer's ``log_every_n_steps``; 0 turns the gradient norm off.
        enabled: Turn all three off.
    """

    def __init__(self, log_every_n_steps: int | None = None, enabled: bool = True) -> None:
        if log_every_n_steps is not None and log_every_n_steps < 0:
            raise ValueError(f"log_every_n_steps={log_every_n_steps}: must be >= 0 (0 turns it off)")
        self.log_every_n_steps = log_every_n_steps
        self.enabled = enabled
        self._epoch_start: float | None = None
        self._samples = 0
        self._resumed = False

    def on_before_optimizer_step(
        self, trainer: Trainer, pl_module: LightningModule, optimizer: Optimizer
    ) -> None:
        """Log the total gradient 2-norm on logging steps."""
        every = self.log_every_n_steps
        if every is None:  # set on the Trainer by Lightning's logger connector
            every = int(getattr(trainer, "log_every_n_steps", 50))
        # Lightning writes a step's values when (global_step + 1) % log_every_n_steps == 0 (before the
        # step, global_step counts the steps done): compute them for exactly that step, and for the
        # epoch's last step, which on_train_batch_end writes.
        if not self.enabled or every <= 0:
            return
        if (trainer.global_step + 1) % every and not trainer.is_last_batch:
            return
        if trainer.lr_scheduler_configs and optimizer is trainer.optimizers[0]:
            # A model scheduler (e.g. ReduceLROnPlateau) sets the LR; the warmup-cosine callback, which
            # logs it otherwise, is off then.
            pl_module.log("train/lr", optimizer.param_groups[0]["lr"], on_step=True, on_epoch=False)
        grads = [p.grad for p in pl_module.parameters() if p.grad is not None]
        if grads:
            norm = torch.nn.utils.get_total_norm(grads, norm_type=2.0)
            pl_module.log("train/grad_norm", norm, on_step=True, on_epoch=False)

    def on_load_checkpoint(
        self, trainer: Trainer, pl_module: LightningModule, checkpoint: dict[str, Any]
    ) -> None:
        """Note that this run was resumed (see :meth:`on_train_batch_start`)."""
        self._resumed = True

    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        """Warn about a partial accumulation window at the end of each epoch."""
        batches, accumulate = trainer.num_training_batches, trainer.accumulate_grad_batches
        if self.enabled and accumulate > 1 and math.isfinite(batches) and int(batches) % accumulate:
            rest = int(batches) % accumulate
            rank_zero_warn(
                f"an epoch has {int(batches)} training batches, not a multiple of accumulate_grad_batches="
                f"{accumulate}: the last optimizer step of each epoch accumulates {rest} batch(es), so its "
                f"gradient is scaled by {rest}/{accumulate} against a full window. Choose a batch count "
                "(limit_train_batches, batch_size) that divides evenly if that matters."
            )

    def on_train_epoch_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        """Start the epoch clock at the first batch (not here: the loader's workers start first)."""
        self._epoch_start = None
        self._samples = 0

    def on_train_batch_start(
        self, trainer: Trainer, pl_module: LightningModule, batch: Any, batch_idx: int
    ) -> None:
        """Start the clock on the epoch's first batch; after a resume, align the logging step.

        Lightning's loggers count steps with the epoch loop's ``_batches_that_stepped``, which equals
        ``global_step`` in an uninterrupted run (automatic optimization). Restoring some checkpoints
        saved at an epoch's end (e.g. after ``max_steps``) leaves it one ahead, so the resumed run
        would log step ``k`` at ``k + 1``, one more per resume. It is set back to ``global_step`` at
        the first batch after a resume. A private attribute: ``tests/test_lifecycle.py`` compares the
        logged steps of resumed and uninterrupted runs, so a change in Lightning fails there.
        """
        if self._epoch_start is None:
            self._epoch_start = time.perf_counter()
        if self._resumed and pl_module.automatic_optimization:
            self._resumed = False
            loop = trainer.fit_loop.epoch_loop
            if getattr(loop, "_batches_that_stepped", trainer.global_step) != trainer.global_step:
                loop._batches_that_stepped = trainer.global_step

    def on_train_batch_end(
        self, trainer: Trainer, pl_module: LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        """Count the batch's samples; write the epoch's last step if Lightning's rule skipped it."""
        first = batch[0] if isinstance(batch, (list, tuple)) else batch
        self._samples += len(first) if isinstance(first, torch.Tensor) else 0
        every = int(getattr(trainer, "log_every_n_steps", 50))  # set on the Trainer by Lightning
        if not (self.enabled and trainer.is_last_batch and every > 0) or trainer.global_step % every == 0:
            return
        values = {key: trainer.callback_metrics[key] for key in STEP_KEYS if key in trainer.callback_metrics}
        if values:
            step = trainer.global_step - 1  # Lightning's step column for this step's values
            for logger in trainer.loggers:
                logger.log_metrics({key: float(value) for key, value in values.items()}, step=step)

    def on_train_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        """Log the epoch's time and throughput."""
        if not self.enabled or self._epoch_start is None:
            return
        if pl_module.device.type == "cuda":
            torch.cuda.synchronize(pl_module.device)
        seconds = time.perf_counter() - self._epoch_start
        pl_module.log("train/epoch_time_sec", seconds, on_step=False, on_epoch=True, sync_dist=False)
        if self._samples and seconds > 0:
            rate = self._samples / seconds
            pl_module.log("train/samples_per_sec", rate, on_step=False, on_epoch=True, sync_dist=False)
