"""Memory figures of training, and a warning for memory that grows every epoch."""

from __future__ import annotations

import gc
import itertools

import psutil
import torch
from lightning.pytorch import Callback, LightningModule, Trainer
from lightning.pytorch.utilities import rank_zero_warn

from .. import private


class MemoryGrowthWarning(UserWarning):
    """Memory after each training epoch kept growing: probably tensors kept alive across steps."""


def memory_stats_mib(device: torch.device) -> dict[str, float]:
    """The ``memory/<figure>`` values (MiB) of :class:`MemoryMonitor` for a model on ``device``."""
    stats = {"rss_mib": psutil.Process().memory_info().rss}
    if device.type == "cuda":
        stats["cuda_allocated_mib"] = torch.cuda.memory_allocated(device)
        stats["cuda_reserved_mib"] = torch.cuda.memory_reserved(device)
        stats["cuda_max_allocated_mib"] = torch.cuda.max_memory_allocated(device)
    return {f"memory/{key}": value / 2**20 for key, value in stats.items()}


class MemoryMonitor(Callback):
    """Hand the loggers (never through the model) ``memory/<figure>`` in MiB (2**20 bytes) every
    ``log_every_n_steps`` optimizer steps (0: never; under DDP rank 0's figures) and at each training
    epoch's end (under DDP the largest process's, the one nearest to running out): ``rss_mib`` (this
    process's resident set, psutil) and, on CUDA, ``cuda_allocated_mib`` (live tensors),
    ``cuda_reserved_mib`` (held by the caching allocator: reserved minus allocated is cache, not a leak)
    and ``cuda_max_allocated_mib`` (the epoch's peak). Warn
    (:class:`MemoryGrowthWarning`) when the CUDA allocated memory (on a GPU) or the RSS rose by at least
    ``min_growth_mib`` after each of the last ``patience`` epochs (the first ``warmup_epochs`` left out
    while caches fill; confirmed after a full garbage collection): the usual cause is a tensor kept across
    steps, such as a loss appended to a list. Under DDP each process checks its own growth.
    ``enabled=False`` turns logging and the check off (the CLI adds no callback).

    Raises:
        ValueError: ``patience`` is below 1.
    """

    def __init__(
        self,
        log_every_n_steps: int = 50,
        patience: int = 3,
        min_growth_mib: float = 4.0,
        warmup_epochs: int = 1,
        enabled: bool = True,
    ) -> None:
        if patience < 1:
            raise ValueError(f"patience={patience}: must be at least 1")
        self.log_every_n_steps, self.patience, self.enabled = log_every_n_steps, patience, enabled
        self.min_growth_mib, self.warmup_epochs = min_growth_mib, warmup_epochs
        self.epoch_end_mib: list[float] = []  # the checked figure after each epoch since the last warning

    def on_train_batch_end(self, trainer: Trainer, pl_module: LightningModule, *_: object) -> None:
        """Log the figures every ``log_every_n_steps`` optimizer steps."""
        every = self.log_every_n_steps
        if every > 0 and trainer.global_step % every == 0 and trainer.is_global_zero:
            private.log_metrics(trainer, memory_stats_mib(pl_module.device))

    def on_train_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        """Log the epoch-end figures, check the growth and reset the CUDA peak."""
        stats = memory_stats_mib(device := pl_module.device)
        key = "memory/cuda_allocated_mib" if device.type == "cuda" else "memory/rss_mib"
        if trainer.current_epoch >= self.warmup_epochs:
            self.epoch_end_mib.append(stats[key])
        if self._growing():
            gc.collect()  # confirm: free reference cycles (a full collection takes ~0.2 s, so only here)
            self.epoch_end_mib[-1] = (stats := memory_stats_mib(device))[key]
        if self._growing():
            message = f"{key} grew after each of the last {self.patience} epochs: a tensor kept across steps"
            rank_zero_warn(
                f"{message} (a loss in a list?) keeps its graph; store .item()", category=MemoryGrowthWarning
            )
            self.epoch_end_mib.clear()
        largest = trainer.strategy.reduce(torch.tensor(list(stats.values()), device=device), reduce_op="max")
        private.log_metrics(trainer, dict(zip(stats, largest.tolist(), strict=True)), epoch_end=True)
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)

    def _growing(self) -> bool:
        rises = [b - a for a, b in itertools.pairwise(self.epoch_end_mib[-self.patience - 1 :])]
        return len(rises) == self.patience and min(rises) >= self.min_growth_mib
