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


def collect_rng_states(cuda: bool = True) -> dict[str, Any]:
    """The python, numpy, torch and (with ``cuda`` and a GPU) CUDA generator states, in types
    ``torch.load(weights_only=True)`` accepts (numpy's key array is stored as an ``int64`` tensor).
    Pass ``cuda=False`` in a DataLoader worker process (CUDA must not be initialised there)."""
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
    if cuda and torch.cuda.is_available():
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
    """Make a resumed run draw exactly the random numbers the uninterrupted run draws (README,
    "Checkpoints and exact resume"; the data order is the training loader's part,
    :mod:`project.data.stateful`).

    - At each training epoch start python, numpy and torch (CPU and CUDA) are seeded with
      :func:`epoch_seed` ``(seed, epoch)``, so an epoch's dropout and main-process augmentation do not
      depend on what ran before it.
    - Their states are saved in every checkpoint and restored in a resumed run's ``on_train_start``
      (after Lightning created the training iterator, before the first batch), which also covers a
      resume in the middle of an epoch.

    Args:
        seed: Base seed; ``None`` means the ``seed_everything`` value (env ``PL_GLOBAL_SEED``), and a
            resumed run then continues with its checkpoint's seed. With no seed at all epochs are not
            reseeded (said once); saved states are still restored.
        enabled: Turn the callback off (no reseeding, no RNG states in checkpoints).
    """

    def __init__(self, seed: int | None = None, enabled: bool = True) -> None:
        self.seed = seed
        self.enabled = enabled
        self._warned = False
        self._resume_state: dict[str, Any] | None = None
        # (epoch, is it the epoch's last batch) of the training batch in progress: a checkpoint saved
        # in its on_train_batch_end needs the fix in on_train_start
        self._batch: tuple[int, bool] = (0, False)

    def _base_seed(self) -> int | None:
        if self.seed is not None:
            return self.seed
        env = os.environ.get("PL_GLOBAL_SEED")
        return int(env) if env is not None else None

    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        """In a resumed run, restore the checkpoint's generator states (and see below)."""
        state, self._resume_state = self._resume_state, None
        if state is None:
            return
        set_rng_states(state["rng_states"])
        epoch, last_batch = state.get("batch", (0, False))
        if last_batch and trainer.current_epoch > epoch:
            # The checkpoint was saved in on_train_batch_end of its epoch's last batch. Lightning (2.6)
            # then counts that epoch as done and runs the next one without its on_train_epoch_start
            # and without a new iterator: the restored one, which is at the end of the old epoch.
            # Give the new epoch its seeds and its own iterator, in the order of an epoch start
            # (the private fetcher is pinned by tests/test_exact_resume.py).
            self.on_train_epoch_start(trainer, pl_module)
            sampler = getattr(trainer.train_dataloader, "sampler", None)
            if callable(getattr(sampler, "set_epoch", None)):
                sampler.set_epoch(trainer.current_epoch)  # type: ignore[union-attr]
            iter(trainer.fit_loop._data_fetcher)  # type: ignore[arg-type]

    def on_train_batch_start(
        self, trainer: Trainer, pl_module: LightningModule, batch: Any, batch_idx: int
    ) -> None:
        """Note whether this is the epoch's last batch (saved with a checkpoint taken in this batch)."""
        self._batch = (trainer.current_epoch, batch_idx + 1 >= trainer.num_training_batches)

    def on_train_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        """A checkpoint from here on (or from validation on) is no longer one of a training batch's end."""
        self._batch = (trainer.current_epoch, False)

    on_validation_start = on_train_epoch_end

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

    def state_dict(self) -> dict[str, Any]:
        """The base seed and the current python/numpy/torch/CUDA generator states."""
        if not self.enabled:
            return {}
        return {"seed": self._base_seed(), "rng_states": collect_rng_states(), "batch": self._batch}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Take the seed and keep the generator states for ``on_train_start`` (a no-op for ``{}``)."""
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
        self._resume_state = state_dict
