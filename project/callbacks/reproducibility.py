"""Exact resume: per-epoch reseeding and RNG states in the checkpoint (PRACTICES.md rows 8 and 9)."""

from __future__ import annotations

import logging
import os
import random
from typing import Any

import numpy as np
import torch
from lightning.pytorch import Callback, LightningModule, Trainer

log = logging.getLogger(__name__)


def epoch_seed(seed: int, epoch: int) -> int:
    """A well-mixed 32-bit seed for ``(seed, epoch)`` (numpy's ``SeedSequence``)."""
    return int(np.random.SeedSequence([seed, epoch]).generate_state(1)[0])


def collect_rng_states() -> dict[str, Any]:
    """The python, numpy, torch and CUDA generator states, in types ``torch.load(weights_only=True)``
    accepts (numpy's key array is stored as an ``int64`` tensor)."""
    kind, keys, position, has_gauss, cached = np.random.get_state(legacy=True)
    states: dict[str, Any] = {
        "python": random.getstate(),
        "numpy": (
            str(kind),
            torch.from_numpy(np.asarray(keys).astype(np.int64)),
            int(position),
            int(has_gauss),
            float(cached),
        ),
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        states["torch.cuda"] = torch.cuda.get_rng_state_all()
    return states


def set_rng_states(states: dict[str, Any]) -> None:
    """Restore generator states collected by :func:`collect_rng_states` (CUDA only when available)."""
    version, internal, gauss = states["python"]
    random.setstate((version, tuple(internal), gauss))
    kind, keys, position, has_gauss, cached = states["numpy"]
    np.random.set_state((kind, keys.numpy().astype(np.uint32), position, has_gauss, cached))
    torch.set_rng_state(states["torch"])
    if "torch.cuda" in states and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(states["torch.cuda"])


class ExactResume(Callback):
    """Make every training epoch's randomness a function of ``(seed, epoch)`` only.

    At the start of each training epoch the python, numpy and torch (CPU and CUDA) generators are
    seeded with :func:`epoch_seed`. Shuffling (``RandomSampler`` draws its seed from torch's global
    generator when the epoch's iterator is created), DataLoader worker seeds (drawn the same way),
    augmentation and dropout therefore repeat exactly in a resumed run: stopping after epoch ``k`` and
    resuming from that checkpoint gives bit-identical weights to an uninterrupted run on the same
    hardware. The generators' states are also saved in the checkpoint and restored on load, which
    covers randomness between the restore and the next epoch start.

    ``seed`` defaults to the global seed set by ``seed_everything`` (env ``PL_GLOBAL_SEED``); a resumed
    run continues with the seed stored in its checkpoint. With no seed at all the callback does
    nothing and says so once.

    Args:
        seed: Base seed; ``None`` means the ``seed_everything`` value.
        enabled: Turn the per-epoch reseeding off (RNG states are then not saved either).
    """

    def __init__(self, seed: int | None = None, enabled: bool = True) -> None:
        self.seed = seed
        self.enabled = enabled
        self._warned = False
        self._run_start_epoch = -1

    def _base_seed(self) -> int | None:
        if self.seed is not None:
            return self.seed
        env = os.environ.get("PL_GLOBAL_SEED")
        return int(env) if env is not None else None

    def on_train_epoch_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        """Seed python, numpy and torch with ``epoch_seed(seed, current_epoch)``."""
        if not self.enabled:
            return
        base = self._base_seed()
        if base is None:
            if not self._warned:
                log.warning("ExactResume: no seed set (seed_everything is off); epochs are not reseeded")
                self._warned = True
            return
        seed = epoch_seed(base, trainer.current_epoch)
        random.seed(seed)
        np.random.seed(seed)
        torch.manual_seed(seed)  # also seeds every CUDA device
        if trainer.current_epoch == self._run_start_epoch:
            # Lightning creates the first epoch's iterator (and prefetches a batch) in
            # FitLoop.setup_data, before this hook; later epochs create it right after this hook.
            # Re-create it now so it, too, starts from the reseeded state.
            self._run_start_epoch = -1
            fetcher = getattr(trainer.fit_loop, "_data_fetcher", None)
            if fetcher is not None:
                iter(fetcher)

    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        """Remember the epoch this run starts in (after a mid-epoch restart its start hook is skipped)."""
        self._run_start_epoch = trainer.current_epoch

    def state_dict(self) -> dict[str, Any]:
        """The base seed and the current python/numpy/torch/CUDA generator states."""
        if not self.enabled:
            return {}
        return {"seed": self._base_seed(), "rng_states": collect_rng_states()}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore the generator states saved by :meth:`state_dict` (a no-op for an empty state)."""
        if not self.enabled or not state_dict:
            return
        saved_seed = state_dict.get("seed")
        if self.seed is None and saved_seed is not None:
            current = self._base_seed()
            if current is not None and current != saved_seed:
                log.warning(
                    "ExactResume: continuing with the checkpoint's seed %s, not %s", saved_seed, current
                )
            self.seed = int(saved_seed)
        set_rng_states(state_dict["rng_states"])
