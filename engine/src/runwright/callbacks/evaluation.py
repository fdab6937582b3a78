"""Evaluation under DDP that counts every sample once, for any DataModule."""

from __future__ import annotations

import functools
import inspect
from typing import Any

from lightning.pytorch import Callback, LightningModule, Trainer
from lightning.pytorch.overrides.distributed import UnrepeatedDistributedSampler
from lightning_utilities.core.apply_func import apply_to_collection
from torch.utils.data import DataLoader, DistributedSampler, IterableDataset, RandomSampler

from ..errors import ConfigError
from ..private import synced_logs

#: The DataLoader arguments a rebuilt loader takes over from the original: all but the sampling ones.
SAMPLING = ("dataset", "shuffle", "sampler", "batch_sampler")
LOADER_SETTINGS = [name for name in inspect.signature(DataLoader).parameters if name not in SAMPLING]


class DistributedEvaluation(Callback):
    """Give the DataModule's val, test and predict DataLoaders Lightning's ``UnrepeatedDistributedSampler``
    under DDP (several processes), so every sample counts once and the synced metrics equal a single
    process's: each process takes every ``world_size``-th sample (the processes may differ by one), where
    Lightning's ``DistributedSampler`` pads them to equal sizes by repeating samples. Loaders that bring a
    ``DistributedSampler`` or iterate an ``IterableDataset``, and single-process runs, are left as they are.

    Raises:
        ConfigError: a split has fewer samples than there are processes; or, after the first val/test
            batch, the model logs values with ``self.log(..., sync_dist=True)`` while the split does not
            divide evenly over the processes (their mean would be wrong, a value synced every step hangs).
    """

    def __init__(self) -> None:
        self.uneven: dict[str, int] = {}  # split -> its size, for splits of unequal shards

    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        """Wrap the DataModule's loader methods (several processes only)."""
        datamodule = getattr(trainer, "datamodule", None)
        if trainer.world_size < 2 or datamodule is None or not trainer.distributed_sampler_kwargs:
            return
        for split in ("val", "test", "predict"):
            method = getattr(datamodule, f"{split}_dataloader")
            if not hasattr(method, "unrepeated"):  # not wrapped by an earlier setup

                @functools.wraps(method)
                def wrapped(method: Any = method, split: str = split) -> Any:
                    return apply_to_collection(method(), DataLoader, self._unrepeated, trainer, split)

                wrapped.unrepeated = True  # type: ignore[attr-defined]
                setattr(datamodule, f"{split}_dataloader", wrapped)

    def _unrepeated(self, loader: DataLoader, trainer: Trainer, split: str) -> DataLoader:
        if isinstance(loader.dataset, IterableDataset) or isinstance(loader.sampler, DistributedSampler):
            return loader
        if (size := len(loader.dataset)) < trainer.world_size:  # type: ignore[arg-type]
            raise ConfigError(
                f"the {split} split has {size} sample(s), fewer than the {trainer.world_size} processes, so a"
                " process would get none. Evaluate it in one process (--trainer.devices=1) or with more data."
            )
        if size % trainer.world_size:
            self.uneven[split] = size
        shuffle = isinstance(loader.sampler, RandomSampler)
        sampler = UnrepeatedDistributedSampler(
            loader.dataset, shuffle=shuffle, **(trainer.distributed_sampler_kwargs or {})
        )
        settings = {name: getattr(loader, name) for name in LOADER_SETTINGS}
        return type(loader)(loader.dataset, sampler=sampler, **settings)

    def on_validation_batch_end(
        self, trainer: Trainer, pl_module: LightningModule, outputs: Any, batch: Any, batch_idx: int, *_: Any
    ) -> None:
        """After the first val (``on_test_batch_end``: test) batch, refuse values synced on uneven shards."""
        split = "test" if trainer.testing else "val"
        if batch_idx == 0 and split in self.uneven and (names := synced_logs(trainer)):
            raise ConfigError(
                f"the model logs {', '.join(names)} with self.log(..., sync_dist=True), and the "
                f"{self.uneven[split]} {split} samples do not split evenly over the {trainer.world_size} "
                "processes: Lightning would average their values with rounded sample counts (a wrong value),"
                " and a value synced every step hangs when the processes run different numbers of steps. Log"
                " a torchmetrics metric instead (e.g. MeanMetric, weighted by the batch size), or evaluate in"
                " one process (--trainer.devices=1)."
            )

    on_test_batch_end = on_validation_batch_end  # type: ignore[assignment]
