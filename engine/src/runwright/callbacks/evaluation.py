"""Evaluation under DDP that counts every sample once, for any DataModule."""

from __future__ import annotations

import functools
import inspect
import itertools
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
    """Give the val, test and predict DataLoaders (the DataModule's, or without one the model's) Lightning's
    ``UnrepeatedDistributedSampler`` under DDP (several processes), so every sample counts once and the
    synced metrics equal a single process's: each process takes every ``world_size``-th sample (the
    processes may differ by one), where Lightning's ``DistributedSampler`` pads them to equal sizes by
    repeating samples. An ``IterableDataset`` is split the same way, by the order it yields
    (:class:`EveryNth`; a dataset that yields each process's share itself: ``--trainer.use_distributed_
    sampler=false``, which leaves every loader to you, as in Lightning). Loaders that bring a
    ``DistributedSampler``, and single-process runs, are left as they are.

    Raises:
        ConfigError: a split has fewer samples than there are processes; or, after the first val/test
            batch, the model logs values with ``self.log(..., sync_dist=True)`` while the split does not
            divide evenly over the processes (their mean would be wrong, a value synced every step hangs).
    """

    def __init__(self) -> None:
        self.uneven: dict[str, int] = {}  # split -> its size, for splits of unequal shards

    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        """Wrap the loader methods of the DataModule (or the model) (several processes only)."""
        source = getattr(trainer, "datamodule", None) or pl_module
        if not trainer.distributed_sampler_kwargs:
            return
        for split in ("val", "test", "predict"):
            method = getattr(source, f"{split}_dataloader")
            if not hasattr(method, "unrepeated"):  # not wrapped by an earlier setup

                @functools.wraps(method)
                def wrapped(method: Any = method, split: str = split) -> Any:
                    return apply_to_collection(method(), DataLoader, self._unrepeated, trainer, split)

                wrapped.unrepeated = True  # type: ignore[attr-defined]
                setattr(source, f"{split}_dataloader", wrapped)

    def _unrepeated(self, loader: DataLoader, trainer: Trainer, split: str) -> DataLoader:
        if isinstance(loader.dataset, EveryNth) or isinstance(loader.sampler, DistributedSampler):
            return loader  # (sharded already)
        settings = {name: getattr(loader, name) for name in LOADER_SETTINGS}
        if isinstance(loader.dataset, IterableDataset):
            return type(loader)(EveryNth(loader.dataset, trainer.global_rank, trainer.world_size), **settings)
        if (size := len(loader.dataset)) < trainer.world_size:  # type: ignore[arg-type]
            raise ConfigError(
                f"the {split} split has {size} sample(s), fewer than the {trainer.world_size} processes, so a"
                " process would get none. Evaluate it in one process (--trainer.devices=1) or with more data."
            )
        if size % trainer.world_size:
            self.uneven[split] = size
        shuffle, kwargs = isinstance(loader.sampler, RandomSampler), trainer.distributed_sampler_kwargs or {}
        sampler = UnrepeatedDistributedSampler(loader.dataset, shuffle=shuffle, **kwargs)
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


class EveryNth(IterableDataset):
    """The items ``rank``, ``rank + world_size``, ... of an ``IterableDataset``: one process's share."""

    def __init__(self, dataset: IterableDataset, rank: int, world_size: int) -> None:
        self.dataset, self.rank, self.world_size = dataset, rank, world_size

    def __iter__(self) -> Any:
        return itertools.islice(iter(self.dataset), self.rank, None, self.world_size)
