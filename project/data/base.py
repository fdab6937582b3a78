"""What every DataModule here shares: DataLoader settings, splits and train-split statistics."""

from __future__ import annotations

import os
import random
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from lightning.pytorch import LightningDataModule
from lightning.pytorch.overrides.distributed import UnrepeatedDistributedSampler
from torch import Tensor
from torch.utils.data import DataLoader, Dataset

from ..errors import ConfigError
from .predict_files import PredictInputs
from .stateful import resumable_train_loader


class Transformed(Dataset[tuple[Tensor, Tensor]]):
    """The ``(input, target)`` items of ``dataset``, ``transform`` applied to the input on each access."""

    def __init__(self, dataset: Dataset[tuple[Tensor, ...]], transform: Callable[[Tensor], Tensor]):
        self.dataset = dataset
        self.transform = transform

    def __len__(self) -> int:
        return len(self.dataset)  # type: ignore[arg-type]

    def __getitem__(self, index: int) -> tuple[Tensor, Tensor]:
        x, y = self.dataset[index]
        return self.transform(x), y


def channel_mean_std(x: Tensor) -> tuple[Tensor, Tensor]:
    """Mean and standard deviation (Bessel-corrected) of each index of dim 1 of ``x`` ``[N, C, ...]``:
    the channels of images ``[N, C, H, W]``, the columns of a table ``[N, F]``.

    Compute them on the training split only, then normalise every split with them (PRACTICES.md
    row 16). Returns two float64 tensors ``[C]``. Raises ``ValueError`` for fewer than 2 dims or
    2 values per channel, or for a constant channel (std 0: normalising would divide by zero).
    """
    if x.ndim < 2 or x.numel() < 2 * x.shape[1]:
        raise ValueError(f"expected an [N, C, ...] tensor with 2+ values per channel, got {tuple(x.shape)}")
    flat = x.double().transpose(0, 1).reshape(x.shape[1], -1)
    mean, std = flat.mean(dim=1), flat.std(dim=1)
    if bool((std == 0).any()):
        constant = torch.nonzero(std == 0).flatten().tolist()
        raise ValueError(f"channels (dim 1) {constant} are constant on the training split; cannot normalise")
    return mean, std


def check_fractions(**fractions: float) -> None:
    """Raise ``ValueError`` naming the arguments unless each fraction is > 0 and they sum to < 1
    (what is left over is the training split)."""
    if any(fraction <= 0 for fraction in fractions.values()) or sum(fractions.values()) >= 1:
        given = ", ".join(f"{name}={fraction}" for name, fraction in fractions.items())
        raise ValueError(f"{given}: each must be > 0 and together < 1 (the rest is the training split)")


def seeded_split(num_samples: int, fractions: Sequence[float], seed: int) -> list[Tensor]:
    """Split ``range(num_samples)`` into ``len(fractions) + 1`` disjoint int64 index tensors:
    ``round(f * num_samples)`` indices per fraction, the rest last.

    As ``torch.utils.data.random_split`` with integer lengths and a private ``torch.Generator`` seeded
    with ``seed`` (the same permutation), so the split never depends on (or disturbs) the global RNG.
    """
    check_fractions(**{f"fractions[{index}]": fraction for index, fraction in enumerate(fractions)})
    sizes = [round(f * num_samples) for f in fractions]
    permutation = torch.randperm(num_samples, generator=torch.Generator().manual_seed(seed))
    return list(permutation.split([*sizes, num_samples - sum(sizes)]))


class BaseDataModule(LightningDataModule):
    """DataLoader settings shared by every DataModule (PRACTICES.md row 7).

    Subclasses set ``self.train_set``, ``self.val_set`` and ``self.test_set`` in :meth:`setup`, and may
    set ``self.collate_fn`` (default ``None``: PyTorch's ``default_collate``), e.g. to
    :class:`~project.data.collate.PadCollate`. The training loader is resumable from any step
    (:mod:`project.data.stateful`); its shuffle seed is the ``seed_everything`` value
    (``PL_GLOBAL_SEED``, else a random one), fixed at the first :meth:`train_dataloader` call and kept
    in checkpoints (:meth:`state_dict`).

    Args:
        batch_size: Samples per batch per device (the global batch is ``batch_size * devices *
            accumulate_grad_batches``).
        num_workers: DataLoader worker processes; 0 loads in the main process.
        pin_memory: Page-lock host batches for faster, asynchronous copies to a GPU.
        persistent_workers: Keep workers alive between epochs (only with ``num_workers > 0``); then
            worker-side augmentation resumes exactly only from a mid-epoch checkpoint (README,
            "Checkpoints and exact resume").
        prefetch_factor: Batches each worker loads ahead (only with ``num_workers > 0``; ``None``:
            PyTorch's default of 2).
        predict_path: A file or folder of new inputs for ``predict``, read by
            :meth:`read_predict_inputs` instead of predicting on the test split. Not saved in
            checkpoints (it belongs to one ``predict`` run).

    Raises:
        ValueError: a bad loader setting, or a ``predict_path`` that does not exist.
    """

    def __init__(
        self,
        batch_size: int = 64,
        num_workers: int = 0,
        pin_memory: bool = False,
        persistent_workers: bool = False,
        prefetch_factor: int | None = None,
        predict_path: str | None = None,
    ) -> None:
        super().__init__()
        if predict_path is not None and not Path(predict_path).expanduser().exists():
            raise ValueError(f"predict_path={predict_path!r}: no such file or folder")
        if batch_size < 1:
            raise ValueError(f"batch_size={batch_size}: must be at least 1")
        if num_workers < 0:
            raise ValueError(f"num_workers={num_workers}: must be 0 (main process) or more")
        if num_workers == 0 and (persistent_workers or prefetch_factor is not None):
            raise ValueError(
                "persistent_workers and prefetch_factor only apply with num_workers > 0; got num_workers=0, "
                f"persistent_workers={persistent_workers}, prefetch_factor={prefetch_factor}"
            )
        self.batch_size = batch_size  # read by each loader: Lightning's batch size finder sets it
        self.num_workers = num_workers
        self.pin_memory = pin_memory
        self.persistent_workers = persistent_workers
        self.prefetch_factor = prefetch_factor
        self.train_set: Dataset[Any] | None = None
        self.val_set: Dataset[Any] | None = None
        self.test_set: Dataset[Any] | None = None
        self.collate_fn: Callable[[list[Any]], Any] | None = None
        self.shuffle_seed: int | None = None
        self.predict_path = predict_path
        #: What :meth:`predict_dataloader` read from ``predict_path``: the inputs, one name per input
        #: (file name, ``file:line``) for the predictions CSV, and ``(file, reason)`` per skipped file.
        self.predict_set: Dataset[Any] | None = None
        self.predict_names: list[str] | None = None
        self.predict_skipped: list[tuple[str, str]] = []

    def read_predict_inputs(self, path: Path) -> PredictInputs:
        """The new inputs at ``path`` (a file or a folder) for ``predict --data.predict_path``, converted
        exactly as the test split is (helpers: :mod:`project.data.predict_files`). Called by
        :meth:`predict_dataloader` after ``setup``. Raises ``ConfigError`` unless overridden."""
        raise ConfigError(
            f"data.predict_path={str(path)!r}: {type(self).__name__} cannot read new inputs (it does not "
            "implement read_predict_inputs); predict on its test split without --data.predict_path"
        )

    def _loader(self, dataset: Dataset[Any] | None, split: str) -> DataLoader[Any]:
        if dataset is None:
            raise RuntimeError(f"the {split} split is not set up; call setup() for the right stage first")
        settings: dict[str, Any] = {
            "batch_size": self.batch_size,
            "num_workers": self.num_workers,
            "pin_memory": self.pin_memory,
            "persistent_workers": self.persistent_workers,
            "prefetch_factor": self.prefetch_factor,
            "collate_fn": self.collate_fn,
        }
        if split == "train":
            if self.shuffle_seed is None:
                env = os.environ.get("PL_GLOBAL_SEED")
                self.shuffle_seed = int(env) if env is not None else random.randrange(2**32)
            # the epoch of the first iterator, which Lightning creates before it calls `set_epoch` (after
            # a resume from an end-of-epoch checkpoint `current_epoch` is still the finished one here)
            epoch = 0
            if self.trainer is not None:
                epoch = self.trainer.fit_loop.epoch_progress.current.processed  # type: ignore[attr-defined]
            return resumable_train_loader(dataset, self.shuffle_seed, epoch, **settings)
        # with several processes (DDP) Lightning's UnrepeatedDistributedSampler evaluates each sample once;
        # its default DistributedSampler repeats samples to even out the ranks (360 of the 359 digits test
        # images on 2), so the synced metrics would differ from one process. Lightning keeps this sampler.
        sampler, trainer = None, self.trainer
        if trainer is not None and trainer.world_size > 1 and trainer.distributed_sampler_kwargs:
            sampler = UnrepeatedDistributedSampler(
                dataset, shuffle=False, **trainer.distributed_sampler_kwargs
            )
        # a generator of its own: creating an evaluation iterator (which draws the worker seed) leaves
        # the global generators, and so the training run's randomness, untouched
        return DataLoader(dataset, sampler=sampler, generator=torch.Generator(), **settings)

    def state_dict(self) -> dict[str, Any]:
        """``{"shuffle_seed": ...}`` once the training loader exists (Lightning saves it in checkpoints)."""
        return {} if self.shuffle_seed is None else {"shuffle_seed": self.shuffle_seed}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Take the checkpoint's ``shuffle_seed``, so a resumed run shuffles like the original one."""
        if state_dict.get("shuffle_seed") is not None:
            self.shuffle_seed = int(state_dict["shuffle_seed"])

    def train_dataloader(self) -> DataLoader[Any]:
        """Shuffled, resumable loader over the training split (augmentation on)."""
        return self._loader(self.train_set, "train")

    def val_dataloader(self) -> DataLoader[Any]:
        """Loader over the validation split, in order, without augmentation."""
        return self._loader(self.val_set, "val")

    def test_dataloader(self) -> DataLoader[Any]:
        """Loader over the test split, in order, without augmentation."""
        return self._loader(self.test_set, "test")

    def predict_dataloader(self) -> DataLoader[Any]:
        """Loader, in order, over the inputs read from ``predict_path`` (once, printing how many and each
        skipped file with the reason), else over the test split."""
        if self.predict_path is not None and self.predict_names is None:
            found = self.read_predict_inputs(Path(self.predict_path).expanduser())
            self.predict_set, self.predict_names = found.dataset, found.names
            self.predict_skipped = found.skipped
            if getattr(self.trainer, "is_global_zero", True):  # once, not once per DDP process
                print(f"predict_path: {len(found.names)} inputs from {self.predict_path}", flush=True)
                for file, reason in found.skipped:
                    print(f"Skipped {file}: {reason}", flush=True)
        return self._loader(self.predict_set if self.predict_names is not None else self.test_set, "predict")
