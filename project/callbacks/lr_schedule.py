"""Linear warmup followed by cosine decay, set from ``trainer.global_step`` every optimizer step."""

from __future__ import annotations

import math

from lightning.pytorch import Callback, LightningModule, Trainer

from project.errors import ConfigError


def warmup_cosine_factor(
    step: int, total_steps: int, warmup_steps: int, warmup_start_factor: float, min_lr_factor: float
) -> float:
    """The LR multiplier for optimizer step ``step`` (0-based) of ``total_steps``.

    Closed form (linear warmup: Goyal et al. 2017, "Accurate, Large Minibatch SGD"; cosine decay:
    Loshchilov & Hutter 2017, "SGDR"), with ``W = warmup_steps`` and ``T = total_steps``:

    - ``step < W``: ``warmup_start_factor + (1 - warmup_start_factor) * step / W`` (from the start
      factor at step 0 up to, not including, 1);
    - ``step >= W``: ``min_lr_factor + (1 - min_lr_factor) * (1 + cos(pi * p)) / 2`` with
      ``p = (step - W) / (T - 1 - W)`` clipped to ``[0, 1]``: 1 at ``step == W``, ``min_lr_factor``
      at the last step ``T - 1`` and after it.

    Raises ``ValueError`` when ``total_steps < 1`` or ``warmup_steps`` is negative.
    """
    if total_steps < 1:
        raise ValueError(f"total_steps={total_steps}: need at least one optimizer step")
    if warmup_steps < 0:
        raise ValueError(f"warmup_steps={warmup_steps}: must be >= 0")
    if step < warmup_steps:
        return warmup_start_factor + (1.0 - warmup_start_factor) * step / warmup_steps
    decay_steps = total_steps - 1 - warmup_steps
    progress = 1.0 if decay_steps <= 0 else min(1.0, (step - warmup_steps) / decay_steps)
    return min_lr_factor + (1.0 - min_lr_factor) * 0.5 * (1.0 + math.cos(math.pi * progress))


class WarmupCosineSchedule(Callback):
    """Set every param group's LR to ``base_lr * warmup_cosine_factor(global_step, ...)`` before each
    optimizer step (PRACTICES.md row 10).

    ``base_lr`` is the LR the optimizer was built with (kept in each param group as ``initial_lr``,
    PyTorch's convention, so it is saved and restored with the optimizer state). The total number of
    optimizer steps is ``trainer.estimated_stepping_batches``, which accounts for ``max_epochs``,
    ``max_steps``, ``limit_train_batches``, ``accumulate_grad_batches`` and the number of devices.
    Because the LR depends only on ``global_step``, a resumed run continues the same curve. The LR of
    param group 0 is logged as ``train/lr`` (``train/lr_pg<i>`` for further groups) on the steps the
    logger writes (every ``trainer.log_every_n_steps``) and on each epoch's last batch.

    Args:
        warmup_steps: Warmup length in optimizer steps (an ``int``), or as a fraction of the total
            (a ``float`` in ``[0, 1)``, e.g. ``0.05``).
        warmup_start_factor: LR multiplier at step 0.
        min_lr_factor: LR multiplier at the last step.
        enabled: ``False`` leaves the LR to the optimizer / the model's own ``lr_scheduler``.

    Raises:
        ValueError: at fit start if the model also returns an LR scheduler from
            ``configure_optimizers`` (two schedules would fight over the LR), or for bad arguments.
    """

    def __init__(
        self,
        warmup_steps: int | float = 0.05,
        warmup_start_factor: float = 0.01,
        min_lr_factor: float = 0.01,
        enabled: bool = True,
    ) -> None:
        if isinstance(warmup_steps, float) and not 0.0 <= warmup_steps < 1.0:
            raise ValueError(
                f"warmup_steps={warmup_steps}: a fraction must be in [0, 1); use an int for steps"
            )
        if isinstance(warmup_steps, int) and warmup_steps < 0:
            raise ValueError(f"warmup_steps={warmup_steps}: must be >= 0")
        for name, value in (("warmup_start_factor", warmup_start_factor), ("min_lr_factor", min_lr_factor)):
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"{name}={value}: must be in [0, 1]")
        self.warmup_steps = warmup_steps
        self.warmup_start_factor = warmup_start_factor
        self.min_lr_factor = min_lr_factor
        self.enabled = enabled
        self.total_steps = 0
        self.warmup_steps_resolved = 0

    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        """Check for a competing scheduler and size the schedule from the trainer."""
        if not self.enabled:
            return
        if trainer.lr_scheduler_configs:
            raise ConfigError(
                "The model's configure_optimizers returned an LR scheduler while the warmup-cosine "
                "callback is enabled. Use one: --lr_schedule.enabled=false, or --model.lr_scheduler=null."
            )
        total = trainer.estimated_stepping_batches
        if not math.isfinite(total):
            raise ValueError(
                "warmup-cosine needs a finite length: set trainer.max_epochs or trainer.max_steps"
            )
        self.total_steps = int(total)
        if isinstance(self.warmup_steps, float):
            self.warmup_steps_resolved = round(self.warmup_steps * self.total_steps)
        else:
            self.warmup_steps_resolved = self.warmup_steps
        for optimizer in trainer.optimizers:
            for group in optimizer.param_groups:
                group.setdefault("initial_lr", group["lr"])

    def lr_factor(self, step: int) -> float:
        """The multiplier this schedule applies at optimizer step ``step``."""
        return warmup_cosine_factor(
            step, self.total_steps, self.warmup_steps_resolved, self.warmup_start_factor, self.min_lr_factor
        )

    def on_train_batch_start(
        self, trainer: Trainer, pl_module: LightningModule, batch: object, batch_idx: int
    ) -> None:
        """Set the LR for the optimizer step that this batch contributes to, and log it."""
        if not self.enabled:
            return
        factor = self.lr_factor(trainer.global_step)
        # Log only on the steps the logger writes (as Lightning's LearningRateMonitor does): a
        # self.log call per step cost more than the rest of this callback.
        log = trainer._logger_connector.should_update_logs or trainer.is_last_batch
        for optimizer in trainer.optimizers:
            for index, group in enumerate(optimizer.param_groups):
                group["lr"] = group["initial_lr"] * factor
                name = "train/lr" if index == 0 else f"train/lr_pg{index}"
                if log and optimizer is trainer.optimizers[0]:
                    pl_module.log(name, group["lr"], on_step=True, on_epoch=False)
