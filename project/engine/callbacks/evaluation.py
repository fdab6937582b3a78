"""Evaluation under DDP that counts every sample once, for any DataModule."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from lightning.pytorch import Callback, LightningModule, Trainer
from lightning.pytorch.overrides.distributed import UnrepeatedDistributedSampler
from torch.utils.data import DataLoader, DistributedSampler, IterableDataset, RandomSampler

from ..errors import ConfigError


def unrepeated(loader: Any, trainer: Trainer, split: str) -> Any:
    """``loader`` (a DataLoader, or a list or dict of them) rebuilt with Lightning's
    ``UnrepeatedDistributedSampler``: each process takes every ``world_size``-th sample, so the ranks
    may differ by one sample and no sample is repeated. A loader that brings its own distributed
    sampler, or iterates an ``IterableDataset``, is kept as it is.

    Raises:
        ConfigError: the split has fewer samples than there are processes.
    """
    if isinstance(loader, (list, tuple)):
        return type(loader)(unrepeated(item, trainer, split) for item in loader)
    if isinstance(loader, dict):
        return {key: unrepeated(item, trainer, split) for key, item in loader.items()}
    if not isinstance(loader, DataLoader) or isinstance(loader.dataset, IterableDataset):
        return loader
    if isinstance(loader.sampler, DistributedSampler):
        return loader
    size = len(loader.dataset)  # type: ignore[arg-type]
    if size < trainer.world_size:
        raise ConfigError(
            f"the {split} split has {size} sample(s), fewer than the {trainer.world_size} processes, so a "
            "process would get none. Evaluate it in one process (--trainer.devices=1) or with more data."
        )
    shuffle = isinstance(loader.sampler, RandomSampler)
    sampler = UnrepeatedDistributedSampler(
        loader.dataset, shuffle=shuffle, **(trainer.distributed_sampler_kwargs or {})
    )
    settings = ["num_workers", "collate_fn", "pin_memory", "drop_last", "timeout", "worker_init_fn"]
    settings += ["multiprocessing_context", "generator", "prefetch_factor", "persistent_workers"]
    return type(loader)(
        loader.dataset,
        batch_size=loader.batch_size,
        sampler=sampler,
        **{name: getattr(loader, name) for name in settings},
    )


class DistributedEvaluation(Callback):
    """Give the DataModule's validation and test loaders unrepeated distributed samplers when training or
    evaluating on several processes (DDP), so every sample counts once and the synced metrics equal a
    single process's: Lightning's own ``DistributedSampler`` pads the ranks to equal sizes by repeating
    samples (359 test images on 2 processes would count as 360). ``predict`` already has Lightning's
    unrepeated sampler. Single-process runs are untouched.
    """

    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        """Wrap the DataModule's ``val_dataloader`` and ``test_dataloader`` (several processes only)."""
        datamodule = trainer.datamodule  # type: ignore[attr-defined]
        if trainer.world_size < 2 or datamodule is None or not trainer.distributed_sampler_kwargs:
            return
        for name, split in (("val_dataloader", "validation"), ("test_dataloader", "test")):
            method: Callable[[], Any] = getattr(datamodule, name)
            if not getattr(method, "unrepeated", False):
                wrapped = functools.wraps(method)(
                    lambda method=method, split=split: unrepeated(method(), trainer, split)
                )
                wrapped.unrepeated = True  # type: ignore[attr-defined]
                setattr(datamodule, name, wrapped)
