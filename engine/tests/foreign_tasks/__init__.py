"""Foreign tasks: LightningModules and DataModules written as Lightning's docs, examples and tutorials and
lightning-hydra-template write them (none of runwright's classes), each module citing its source, on tiny
synthetic data of the sources' shapes and types. ``tests/test_foreign_tasks.py`` runs each through every
command. :class:`CountValSamples` is that test's instrument, not a foreign task."""

from pathlib import Path
from typing import Any

import torch
from lightning.pytorch import Callback, LightningModule, Trainer
from lightning.pytorch.utilities.data import extract_batch_size


class CountValSamples(Callback):
    """Count the samples of the last validation epoch (the sanity check left out), summed over the
    processes and over the validation loaders, and write the number to ``<run folder>/val_samples.txt``."""

    def on_validation_epoch_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self.count = 0

    def on_validation_batch_end(
        self, trainer: Trainer, pl_module: LightningModule, outputs: Any, batch: Any, *_: Any
    ) -> None:
        self.count += extract_batch_size(batch)

    def on_validation_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        total = trainer.strategy.reduce(torch.tensor(float(self.count)), reduce_op="sum")
        folder = Path(trainer.log_dir or trainer.default_root_dir)  # log_dir broadcasts: every rank asks
        if trainer.is_global_zero and not trainer.sanity_checking:
            (folder / "val_samples.txt").write_text(f"{int(total)}\n")
