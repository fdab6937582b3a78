"""Weight averaging (Lightning's ``WeightAveraging``, e.g. ``EMAWeightAveraging``) that evaluates and
saves the trained weights until its average exists."""

from __future__ import annotations

import itertools
from typing import Any

import torch
from lightning.pytorch import Callback, LightningModule, Trainer
from lightning.pytorch.callbacks import WeightAveraging

from ..private import average_model


class AverageFromTrainedWeights(Callback):
    """Until a ``WeightAveraging`` callback's first update (e.g. before ``update_starting_at_step`` of
    ``EMAWeightAveraging``), make its average a copy of the trained weights (parameters and buffers), at
    each moment the callback uses the average: validation (so ``best.ckpt``'s choice and early stopping),
    every checkpoint's ``state_dict`` and the end of training (which copies the average into the model,
    for test, predict and export). Otherwise Lightning evaluates and saves the initial weights there, the
    average that was never updated. The first update copies the weights anyway (torch's
    ``AveragedModel.update_parameters`` with ``n_averaged == 0``), so the average itself is unchanged.

    Must come before the averaging callbacks in ``trainer.callbacks`` (the CLI puts it first).
    """

    def _copy_trained_weights(self, trainer: Trainer, pl_module: LightningModule, *_: Any) -> None:
        """Copy the trained weights into every average not yet updated."""
        for callback in trainer.callbacks:  # type: ignore[attr-defined]
            average = average_model(callback) if isinstance(callback, WeightAveraging) else None
            if average is None or int(average.n_averaged) > 0:
                continue
            trained = itertools.chain(pl_module.parameters(), pl_module.buffers())
            averaged = itertools.chain(average.module.parameters(), average.module.buffers())
            with torch.no_grad():
                for target, source in zip(averaged, trained, strict=True):
                    target.copy_(source)

    on_validation_epoch_start = on_save_checkpoint = on_train_end = _copy_trained_weights  # type: ignore[assignment]
