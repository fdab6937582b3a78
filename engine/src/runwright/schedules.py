"""Linear warmup, then cosine decay: an LR scheduler stepped after every optimizer step."""

from __future__ import annotations

import math
from typing import Any

from lightning.pytorch.utilities import rank_zero_warn
from torch import Tensor
from torch.optim import Optimizer
from torch.optim.lr_scheduler import LRScheduler


def warmup_cosine_factor(
    step: int, total_steps: int, warmup_steps: int, warmup_start_factor: float, min_lr_factor: float
) -> float:
    """The LR multiplier for optimizer step ``step`` (0-based) of ``total_steps``.

    Closed form (linear warmup: Goyal et al. 2017, "Accurate, Large Minibatch SGD"; cosine decay:
    Loshchilov & Hutter 2017, "SGDR"; the shape of nanoGPT's ``get_lr``), with ``W = warmup_steps`` and
    ``T = total_steps``:

    - ``step < W``: ``warmup_start_factor + (1 - warmup_start_factor) * step / W`` (from the start
      factor at step 0 up to, not including, 1);
    - ``step >= W``: ``min_lr_factor + (1 - min_lr_factor) * (1 + cos(pi * p)) / 2`` with
      ``p = (step - W) / (T - 1 - W)`` clipped to ``[0, 1]``: 1 at ``step == W``, ``min_lr_factor``
      at the last step ``T - 1`` and after it.
    """
    if step < warmup_steps:
        return warmup_start_factor + (1.0 - warmup_start_factor) * step / warmup_steps
    decay_steps = total_steps - 1 - warmup_steps
    progress = 1.0 if decay_steps <= 0 else min(1.0, (step - warmup_steps) / decay_steps)
    return min_lr_factor + (1.0 - min_lr_factor) * 0.5 * (1.0 + math.cos(math.pi * progress))


class WarmupCosineLR(LRScheduler):
    """``lr = base_lr * warmup_cosine_factor(step, ...)`` for every param group (PRACTICES.md row 10).

    Step it after every optimizer step (Lightning's ``interval: "step"``). ``base_lr`` is the LR the
    optimizer was built with. Its state (step count and the arguments below) is saved with the
    optimizer, so a resumed run continues the same curve; a resume whose own ``total_steps`` differs
    (``max_epochs`` raised) keeps the checkpoint's and says so.

    Args:
        optimizer: The wrapped optimizer.
        total_steps: Optimizer steps of the whole run; left null in a config,
            ``BaseModule`` (``runwright.base``) passes ``trainer.estimated_stepping_batches``
            (``max_epochs``, ``max_steps``, ``limit_train_batches``, ``accumulate_grad_batches`` and the
            devices all count).
        warmup_steps: Warmup length in optimizer steps (an ``int``), or as a fraction of
            ``total_steps`` (a ``float`` in ``[0, 1)``, e.g. ``0.05``).
        warmup_start_factor: LR multiplier at step 0, in ``[0, 1]``.
        min_lr_factor: LR multiplier at the last step, in ``[0, 1]``.
        last_epoch: PyTorch's resume argument (the index of the last step; -1 for a new schedule).

    Raises:
        ValueError: ``total_steps`` is not a finite number >= 1 (an endless run: set ``max_epochs``
            or ``max_steps``), or an argument is outside its range.
    """

    def __init__(
        self,
        optimizer: Optimizer,
        total_steps: int | None = None,
        warmup_steps: int | float = 0.05,
        warmup_start_factor: float = 0.01,
        min_lr_factor: float = 0.01,
        last_epoch: int = -1,
    ) -> None:
        if total_steps is None or not 1 <= total_steps < math.inf:
            raise ValueError(f"total_steps={total_steps}: needs a finite run (set max_epochs or max_steps)")
        fraction = isinstance(warmup_steps, float)
        if not (0 <= warmup_steps < 1 if fraction else warmup_steps >= 0):
            raise ValueError(f"warmup_steps={warmup_steps}: must be an int >= 0 or a fraction in [0, 1)")
        for name, value in (("warmup_start_factor", warmup_start_factor), ("min_lr_factor", min_lr_factor)):
            if not 0 <= value <= 1:
                raise ValueError(f"{name}={value}: must be in [0, 1]")
        self.total_steps = int(total_steps)
        self.warmup_steps = round(warmup_steps * total_steps) if fraction else int(warmup_steps)
        self.warmup_start_factor, self.min_lr_factor = warmup_start_factor, min_lr_factor
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float | Tensor]:
        """The LR of each param group at the current step (``self.last_epoch`` counts steps here)."""
        factor = warmup_cosine_factor(
            self.last_epoch, self.total_steps, self.warmup_steps, self.warmup_start_factor, self.min_lr_factor
        )
        return [float(base_lr) * factor for base_lr in self.base_lrs]

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Continue the saved schedule; warn when this run's ``total_steps`` is not the saved one."""
        if state_dict.get("total_steps", self.total_steps) != self.total_steps:
            rank_zero_warn(
                f"warmup-cosine continues the checkpoint's total_steps={state_dict['total_steps']} (this run "
                f"has {self.total_steps}): to re-size the schedule, start a new run from the weights",
                stacklevel=5,  # (Lightning's checkpoint loading: shown as one line, without a source line)
            )
        super().load_state_dict(state_dict)
