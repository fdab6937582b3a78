"""Linear warmup followed by cosine decay, set from ``trainer.global_step`` every optimizer step."""

from __future__ import annotations

import functools
import math

from lightning.pytorch import Callback, LightningModule, Trainer

from ..errors import ConfigError


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
    """Set every param group's LR to ``initial_lr * warmup_cosine_factor(global_step, ...)`` before each
    optimizer step (PRACTICES.md row 10).

    ``initial_lr`` is the LR the optimizer was built with (PyTorch's convention: saved and restored
    with the optimizer state, so a resumed run continues the same curve). The total number of
    optimizer steps is ``trainer.estimated_stepping_batches`` (``max_epochs``, ``max_steps``,
    ``limit_train_batches``, ``accumulate_grad_batches`` and the devices all count). The LR of param
    group 0 is logged as ``train/lr`` (``train/lr_pg<i>`` for further groups) every step.

    Args:
        warmup_steps: Warmup length in optimizer steps (an ``int``), or as a fraction of the total
            (a ``float`` in ``[0, 1)``, e.g. ``0.05``).
        warmup_start_factor: LR multiplier at step 0.
        min_lr_factor: LR multiplier at the last step.
        enabled: ``False`` leaves the LR to the optimizer / the model's own ``lr_scheduler``.

    Raises:
        ValueError: for bad arguments, or at fit start for an endless run (no ``max_epochs``/``max_steps``).
        ConfigError: at fit start if the model also returns an LR scheduler from ``configure_optimizers``.
    """

    def __init__(
        self,
        warmup_steps: int | float = 0.05,
        warmup_start_factor: float = 0.01,
        min_lr_factor: float = 0.01,
        enabled: bool = True,
    ) -> None:
        if not (0.0 <= warmup_steps < 1.0 if isinstance(warmup_steps, float) else warmup_steps >= 0):
            raise ValueError(f"warmup_steps={warmup_steps}: must be an int >= 0 or a fraction in [0, 1)")
        for name, value in (("warmup_start_factor", warmup_start_factor), ("min_lr_factor", min_lr_factor)):
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"{name}={value}: must be in [0, 1]")
        self.warmup_steps = warmup_steps
        self.warmup_start_factor = warmup_start_factor
        self.min_lr_factor = min_lr_factor
        self.enabled = enabled

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
            raise ValueError("warmup-cosine needs a finite length: set trainer.max_epochs or max_steps")
        warmup = self.warmup_steps
        self.factor = functools.partial(
            warmup_cosine_factor,
            total_steps=int(total),
            warmup_steps=round(warmup * total) if isinstance(warmup, float) else warmup,
            warmup_start_factor=self.warmup_start_factor,
            min_lr_factor=self.min_lr_factor,
        )
        for optimizer in trainer.optimizers:
            for group in optimizer.param_groups:
                group.setdefault("initial_lr", group["lr"])

    def on_train_batch_start(
        self, trainer: Trainer, pl_module: LightningModule, batch: object, batch_idx: int
    ) -> None:
        """Set the LR for the optimizer step that this batch contributes to, and log it."""
        if not self.enabled:
            return
        factor = self.factor(trainer.global_step)
        for optimizer in trainer.optimizers:
            for group in optimizer.param_groups:
                group["lr"] = group["initial_lr"] * factor
        for index, group in enumerate(trainer.optimizers[0].param_groups):
            pl_module.log("train/lr" if index == 0 else f"train/lr_pg{index}", group["lr"])
