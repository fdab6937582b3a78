"""Gradient norm, throughput and epoch time of training (PRACTICES.md row 11)."""

from __future__ import annotations

import time
from typing import Any

import torch
from lightning.pytorch import Callback, LightningModule, Trainer
from torch.optim import Optimizer


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

    def on_before_optimizer_step(
        self, trainer: Trainer, pl_module: LightningModule, optimizer: Optimizer
    ) -> None:
        """Log the total gradient 2-norm on logging steps."""
        every = self.log_every_n_steps
        if every is None:  # set on the Trainer by Lightning's logger connector
            every = int(getattr(trainer, "log_every_n_steps", 50))
        if not self.enabled or every <= 0 or trainer.global_step % every != 0:
            return
        if trainer.lr_scheduler_configs and optimizer is trainer.optimizers[0]:
            # A model scheduler (e.g. ReduceLROnPlateau) sets the LR; the warmup-cosine callback, which
            # logs it otherwise, is off then.
            pl_module.log("train/lr", optimizer.param_groups[0]["lr"], on_step=True, on_epoch=False)
        grads = [p.grad for p in pl_module.parameters() if p.grad is not None]
        if grads:
            norm = torch.nn.utils.get_total_norm(grads, norm_type=2.0)
            pl_module.log("train/grad_norm", norm, on_step=True, on_epoch=False)

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
        """Count the batch's samples."""
        first = batch[0] if isinstance(batch, (list, tuple)) else batch
        self._samples += len(first) if isinstance(first, torch.Tensor) else 0

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
