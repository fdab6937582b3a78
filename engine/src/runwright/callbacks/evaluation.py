"""Evaluation under DDP that counts every sample once, for any DataModule."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from lightning.pytorch import Callback, LightningModule, Trainer
from lightning.pytorch.overrides.distributed import UnrepeatedDistributedSampler
from torch.utils.data import DataLoader, DistributedSampler, IterableDataset, RandomSampler

from ..errors import ConfigError
from ..resume import synced_logs

#: The DataLoader settings that :func:`unrepeated` carries over to the rebuilt loader.
LOADER_SETTINGS = (
    "num_workers",
    "collate_fn",
    "pin_memory",
    "drop_last",
    "timeout",
    "worker_init_fn",
    "multiprocessing_context",
    "generator",
    "prefetch_factor",
    "persistent_workers",
)


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
    settings = {name: getattr(loader, name) for name in LOADER_SETTINGS}
    return type(loader)(loader.dataset, batch_size=loader.batch_size, sampler=sampler, **settings)


def check_synced_logs(trainer: Trainer, loaders: Any, split: str) -> None:
    """Refuse values logged with ``self.log(..., sync_dist=True)`` (listed by
    ``synced_logs`` of ``runwright.resume``) while the processes hold different numbers of samples
    of ``split`` (its size is not a multiple of the number of processes): their average would be
    wrong, and a value synced on every step hangs once one process runs out of batches.

    Raises:
        ConfigError: naming the values and what to log instead.
    """
    if trainer.world_size < 2:
        return
    if isinstance(loaders, dict):
        loaders = list(loaders.values())
    samplers = [
        getattr(loader, "sampler", None) for loader in (loaders if isinstance(loaders, list) else [loaders])
    ]
    sizes = [len(s.dataset) for s in samplers if isinstance(s, UnrepeatedDistributedSampler)]  # type: ignore[arg-type]
    uneven = [size for size in sizes if size % trainer.world_size]
    names = synced_logs(trainer) if uneven else []
    if names:
        raise ConfigError(
            f"the model logs {', '.join(names)} with self.log(..., sync_dist=True), and the {uneven[0]} "
            f"{split} samples do not split evenly over the {trainer.world_size} processes: Lightning would "
            "average the processes' values with rounded sample counts (a wrong value), and a value synced on "
            "every step hangs when the processes run different numbers of steps. Log a torchmetrics metric "
            "instead (e.g. torchmetrics.MeanMetric, updated with the batch size as weight), or evaluate in "
            "one process (--trainer.devices=1)."
        )


class DistributedEvaluation(Callback):
    """Give the DataModule's validation, test and predict loaders unrepeated distributed samplers when
    training or evaluating on several processes (DDP), so every sample counts once and the synced
    metrics equal a single process's: Lightning's own ``DistributedSampler`` pads the ranks to equal
    sizes by repeating samples (47 test images on 2 processes would count as 48). Single-process runs
    are untouched. A split smaller than the number of processes, and values logged with
    ``sync_dist=True`` on uneven shards (:func:`check_synced_logs`, after the first batch), stop with a
    :class:`~runwright.errors.ConfigError` on every process alike.
    """

    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        """Wrap the DataModule's loader methods (several processes only)."""
        datamodule = getattr(trainer, "datamodule", None)
        if trainer.world_size < 2 or datamodule is None or not trainer.distributed_sampler_kwargs:
            return
        splits = (
            ("val_dataloader", "validation"),
            ("test_dataloader", "test"),
            ("predict_dataloader", "predict"),
        )
        for name, split in splits:
            method: Callable[[], Any] = getattr(datamodule, name)
            if not getattr(method, "unrepeated", False):
                wrapped = functools.wraps(method)(
                    lambda method=method, split=split: unrepeated(method(), trainer, split)
                )
                wrapped.unrepeated = True  # type: ignore[attr-defined]
                setattr(datamodule, name, wrapped)

    def on_validation_batch_end(
        self,
        trainer: Trainer,
        pl_module: LightningModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None:
        """After the first validation batch: :func:`check_synced_logs`."""
        if batch_idx == 0:
            check_synced_logs(trainer, trainer.val_dataloaders, "validation")

    def on_test_batch_end(
        self,
        trainer: Trainer,
        pl_module: LightningModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None:
        """After the first test batch: :func:`check_synced_logs`."""
        if batch_idx == 0:
            check_synced_logs(trainer, trainer.test_dataloaders, "test")
