"""Memory logging and a warning for memory that grows every epoch (PRACTICES.md row 4)."""

from __future__ import annotations

import ctypes
import gc
import itertools
from typing import Any

import psutil
import torch
from lightning.pytorch import Callback, LightningModule, Trainer
from lightning.pytorch.utilities import rank_zero_warn

MIB = 2**20
#: The figures the growth check can follow, in order of preference, and what they measure.
GROWTH_FIGURES = {
    "cuda_allocated_mib": "CUDA allocated memory",
    "heap_mib": "C-heap memory in use",
    "rss_mib": "process RSS",
}


class MemoryGrowthWarning(UserWarning):
    """Memory after each training epoch kept growing: probably tensors kept alive across steps."""


class _MallInfo2(ctypes.Structure):
    # glibc's struct mallinfo2: ten size_t fields, in this order
    _names = ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks")
    _fields_ = [(name, ctypes.c_size_t) for name in (*_names, "keepcost")]


try:
    _MALLINFO2: Any = ctypes.CDLL(None).mallinfo2
    _MALLINFO2.restype = _MallInfo2
except (OSError, AttributeError, TypeError):  # not glibc >= 2.33 (macOS, musl, Windows)
    _MALLINFO2 = None


def memory_stats_mib(device: torch.device) -> dict[str, float]:
    """Current memory figures in MiB (2**20 bytes): ``rss_mib`` (this process's resident set, psutil);
    with glibc ``heap_mib``, what the C heap has handed out and not freed (``mallinfo2``:
    ``uordblks + hblkhd``; unlike RSS it grows when a leak reuses memory freed earlier, so it shows CPU
    tensors kept alive); on a CUDA ``device`` ``cuda_allocated_mib`` (live tensors),
    ``cuda_reserved_mib`` (held by the caching allocator; reserved minus allocated is cache, not a leak)
    and ``cuda_max_allocated_mib`` (peak since ``torch.cuda.reset_peak_memory_stats``).
    """
    stats = {"rss_mib": psutil.Process().memory_info().rss / MIB}
    if _MALLINFO2 is not None:
        info = _MALLINFO2()
        stats["heap_mib"] = (info.uordblks + info.hblkhd) / MIB
    if device.type == "cuda":
        stats["cuda_allocated_mib"] = torch.cuda.memory_allocated(device) / MIB
        stats["cuda_reserved_mib"] = torch.cuda.memory_reserved(device) / MIB
        stats["cuda_max_allocated_mib"] = torch.cuda.max_memory_allocated(device) / MIB
    return stats


class MemoryMonitor(Callback):
    """Log ``memory/<key>`` for each figure of :func:`memory_stats_mib` every ``log_every_n_steps``
    optimizer steps and at each training epoch end (the CUDA peak is reset at each epoch start), and warn
    when memory after each epoch keeps growing.

    The growth check follows the first of :data:`GROWTH_FIGURES` there is. If it rose by at least
    ``min_growth_mib`` after each of the last ``patience`` epochs (the first ``warmup_epochs`` are
    ignored while caches fill; confirmed after a full garbage collection), a
    :class:`MemoryGrowthWarning` names the usual cause: a tensor kept across steps, such as a loss
    appended to a list without ``.item()``, which keeps its whole graph alive.

    Args:
        log_every_n_steps: Interval in optimizer steps for the step-level figures (0: epoch end only).
        patience: Number of consecutive growing epochs that trigger the warning.
        min_growth_mib: Smallest growth per epoch, in MiB, that counts.
        warmup_epochs: Epochs at the start whose end-of-epoch figure is not used.
        enabled: Turn logging and the check off.

    Raises:
        ValueError: ``patience < 1``.
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
        self.log_every_n_steps = log_every_n_steps
        self.patience = patience
        self.min_growth_mib = min_growth_mib
        self.warmup_epochs = warmup_epochs
        self.enabled = enabled
        self.epoch_end_mib: list[float] = []
        self.warned = False
        self._last_logged_step = -1

    def _log(self, pl_module: LightningModule) -> dict[str, float]:
        stats = memory_stats_mib(pl_module.device)
        pl_module.log_dict({f"memory/{key}": value for key, value in stats.items()})
        return stats

    def on_train_epoch_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        """Reset the CUDA peak so ``cuda_max_allocated_mib`` is per epoch."""
        if self.enabled and pl_module.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(pl_module.device)

    def on_train_batch_end(
        self, trainer: Trainer, pl_module: LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        """Log the figures every ``log_every_n_steps`` optimizer steps (once per step under accumulation)."""
        step, every = trainer.global_step, self.log_every_n_steps
        if self.enabled and every > 0 and step % every == 0 and step != self._last_logged_step:
            self._last_logged_step = step
            self._log(pl_module)

    def on_train_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        """Log the epoch-end figures and run the growth check."""
        stats = self._log(pl_module) if self.enabled else {}
        if not stats or trainer.current_epoch < self.warmup_epochs or self.warned:
            return
        key = next(key for key in GROWTH_FIGURES if key in stats)
        self.epoch_end_mib.append(stats[key])
        if not self._growing():
            return
        gc.collect()  # confirm first: free reference cycles (a full gc costs ~0.2 s, so only here)
        self.epoch_end_mib[-1] = now = memory_stats_mib(pl_module.device)[key]
        if self._growing():
            self.warned = True
            rise = (now - self.epoch_end_mib[-1 - self.patience]) / self.patience
            rank_zero_warn(
                f"{GROWTH_FIGURES[key]} grew after each of the last {self.patience} epochs (+{rise:.1f} MiB "
                f"per epoch, now {now:.0f} MiB): a tensor kept across steps keeps its graph (a loss appended "
                "to a list?); store .item() values",
                category=MemoryGrowthWarning,
            )

    def _growing(self) -> bool:
        recent = self.epoch_end_mib[-(self.patience + 1) :]
        rises = [after - before for before, after in itertools.pairwise(recent)]
        return len(rises) == self.patience and min(rises) >= self.min_growth_mib
