"""A callback that tests select by ``class_path`` to count the samples an evaluation really saw."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from lightning.pytorch import Callback, LightningModule, Trainer


class CountTestSamples(Callback):
    """Count the test samples of all ranks (summed over processes) and write the total to
    ``<run folder>/test_samples.txt`` on rank 0."""

    def __init__(self) -> None:
        self.count = 0

    def on_test_batch_end(
        self,
        trainer: Trainer,
        pl_module: LightningModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None:
        self.count += len(batch[1])

    def on_test_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        total = trainer.strategy.reduce(torch.tensor(float(self.count)), reduce_op="sum")
        folder = Path(trainer.log_dir or ".")  # log_dir broadcasts: every rank must ask for it
        if trainer.is_global_zero:
            (folder / "test_samples.txt").write_text(f"{int(total)}\n")
