"""Memory logging and a warning for memory that grows every epoch (PRACTICES.md row 4)."""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import itertools
import logging
import warnings
from typing import Any

import psutil
import torch
from lightning.pytorch import Callback, LightningModule, Trainer

log = logging.getLogger(__name__)

MIB = 2**20


class MemoryGrowthWarning(UserWarning):
    """Memory after each training epoch kept growing: probably tensors kept alive across steps."""


class _MallInfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in (
            "arena",
            "ordblks",
            "smblks",
            "hblks",
            "hblkhd",
            "usmblks",
            "fsmblks",
            "uordblks",
            "fordblks",
            "keepcost",
        )
    ]


def _load_mallinfo2() -> Any:
    """glibc's ``mallinfo2`` (glibc >= 2.33), or ``None`` elsewhere (macOS, musl, Windows)."""
    try:
        function = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").mallinfo2
    except (OSError, AttributeError):
        return None
    function.restype = _MallInfo2
    return function


_MALLINFO2 = _load_mallinfo2()


def heap_in_use_mib() -> float | None:
    """Bytes the C heap has handed out and not freed (glibc ``mallinfo2``: ``uordblks + hblkhd``), in
    MiB, or ``None`` where glibc is not the allocator. Unlike RSS this does not stay flat when a leak
    reuses memory freed earlier, so it shows CPU tensors kept alive."""
    if _MALLINFO2 is None:
        return None
    info = _MALLINFO2()
    return (info.uordblks + info.hblkhd) / MIB


def memory_stats_mib(device: torch.device | None = None) -> dict[str, float]:
    """Current memory figures in MiB (2**20 bytes).

    Always ``rss_mib`` (resident set size of this process, from psutil) and, with glibc, ``heap_mib``
    (see :func:`heap_in_use_mib`). On a CUDA ``device`` also
    ``cuda_allocated_mib`` (live tensors), ``cuda_reserved_mib`` (held by the caching allocator:
    reserved minus allocated is cache/fragmentation, not a leak) and ``cuda_max_allocated_mib`` (peak
    since the last ``torch.cuda.reset_peak_memory_stats``).
    """
    stats = {"rss_mib": psutil.Process().memory_info().rss / MIB}
    heap = heap_in_use_mib()
    if heap is not None:
        stats["heap_mib"] = heap
    if device is not None and device.type == "cuda":
        stats["cuda_allocated_mib"] = torch.cuda.memory_allocated(device) / MIB
        stats["cuda_reserved_mib"] = torch.cuda.memory_reserved(device) / MIB
        stats["cuda_max_allocated_mib"] = torch.cuda.max_memory_allocated(device) / MIB
    return stats


def _growth_figure(stats: dict[str, float]) -> float:
    """The figure the growth check follows: CUDA allocated, else C-heap in use, else RSS."""
    return stats.get("cuda_allocated_mib", stats.get("heap_mib", stats["rss_mib"]))


class MemoryMonitor(Callback):
    """Log memory every ``log_every_n_steps`` optimizer steps and at each training epoch end, and warn
    when memory after each epoch keeps growing.

    Logged keys (MiB, this process / its device): ``memory/rss_mib`` always, ``memory/heap_mib`` with
    glibc; on CUDA also
    ``memory/cuda_allocated_mib``, ``memory/cuda_reserved_mib`` and ``memory/cuda_max_allocated_mib``
    (the peak is reset at each epoch start, so it is the epoch's peak).

    The growth check reads, at each training epoch end, CUDA allocated memory on a GPU, else the C
    heap in use (glibc), else RSS (re-read after a full garbage collection before it warns). If it
    rose by at least ``min_growth_mib`` in each of the last ``patience`` epochs (after
    ``warmup_epochs`` epochs are ignored while caches fill), a :class:`MemoryGrowthWarning` names the
    usual cause: a tensor kept across steps, such as a loss appended to a list without
    ``.item()``/``.detach()``, which keeps its whole graph alive.

    Args:
        log_every_n_steps: Interval in optimizer steps for the step-level figures (0: epoch end only).
        patience: Number of consecutive growing epochs that trigger the warning.
        min_growth_mib: Smallest growth per epoch, in MiB, that counts.
        warmup_epochs: Epochs at the start whose end-of-epoch figure is not used.
        enabled: Turn logging and the check off.
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

    def _log(self, pl_module: LightningModule, stats: dict[str, float], on_step: bool) -> None:
        for key, value in stats.items():
            pl_module.log(f"memory/{key}", value, on_step=on_step, on_epoch=not on_step, sync_dist=False)

    def on_train_epoch_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        """Reset the CUDA peak so ``cuda_max_allocated_mib`` is per epoch."""
        if self.enabled and pl_module.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(pl_module.device)

    def on_train_batch_end(
        self, trainer: Trainer, pl_module: LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        """Log the figures every ``log_every_n_steps`` optimizer steps."""
        if not self.enabled or self.log_every_n_steps <= 0:
            return
        step = trainer.global_step
        if step % self.log_every_n_steps == 0 and step != self._last_logged_step:
            self._last_logged_step = step
            self._log(pl_module, memory_stats_mib(pl_module.device), on_step=True)

    def on_train_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        """Log the epoch-end figures and run the growth check."""
        if not self.enabled:
            return
        stats = memory_stats_mib(pl_module.device)
        self._log(pl_module, stats, on_step=False)
        if trainer.current_epoch < self.warmup_epochs:
            return
        self.epoch_end_mib.append(_growth_figure(stats))
        recent = self.epoch_end_mib[-(self.patience + 1) :]
        if self.warned or len(recent) < self.patience + 1:
            return
        growth = [after - before for before, after in itertools.pairwise(recent)]
        if all(g >= self.min_growth_mib for g in growth):
            # Confirm before warning: collect reference cycles (a full gc costs ~0.2 s, so only here).
            gc.collect()
            stats = memory_stats_mib(pl_module.device)
            recent[-1] = self.epoch_end_mib[-1] = _growth_figure(stats)
            growth[-1] = recent[-1] - recent[-2]
        if all(g >= self.min_growth_mib for g in growth):
            self.warned = True
            kind = {"cuda_allocated_mib": "CUDA allocated memory", "heap_mib": "C-heap memory in use"}.get(
                next((k for k in ("cuda_allocated_mib", "heap_mib") if k in stats), ""), "process RSS"
            )
            message = (
                f"{kind} grew after each of the last {self.patience} epochs "
                f"(+{sum(growth) / len(growth):.1f} MiB per epoch, now {recent[-1]:.0f} MiB). "
                "Something keeps tensors alive across steps: most often a loss or output appended to a "
                "list (or a metric accumulated) without .item() or .detach(), which keeps its autograd "
                "graph. Store Python floats or detached tensors instead."
            )
            log.warning(message)
            warnings.warn(message, MemoryGrowthWarning, stacklevel=2)
