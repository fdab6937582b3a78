"""What every DataModule in this project shares: DataLoader settings and train-split statistics."""

from __future__ import annotations

import os
import random
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from lightning.pytorch import LightningDataModule
from torch import Tensor
from torch.utils.data import DataLoader, Dataset, Sampler

from ..errors import ConfigError
from .predict_files import PredictInputs
from .stateful import resumable_train_loader


class TensorDataset(Dataset[tuple[Tensor, Tensor]]):
    """In-memory images with labels and an optional per-sample transform.

    Args:
        inputs: ``[N, ...]`` float tensor (images ``[N, C, H, W]`` scaled to ``[0, 1]``).
        targets: ``[N]`` tensor (int64 class labels or float regression targets).
        transform: Applied to one input ``[...]`` at a time (augmentation, then normalisation).
    """

    def __init__(self, inputs: Tensor, targets: Tensor, transform: Callable[[Tensor], Tensor] | None = None):
        if len(inputs) != len(targets):
            raise ValueError(f"inputs has {len(inputs)} samples but targets has {len(targets)}")
        self.inputs = inputs
        self.targets = targets
        self.transform = transform

    def __len__(self) -> int:
        return len(self.inputs)

    def __getitem__(self, index: int) -> tuple[Tensor, Tensor]:
        x = self.inputs[index]
        if self.transform is not None:
            x = self.transform(x)
        return x, self.targets[index]


def channel_mean_std(images: Tensor) -> tuple[list[float], list[float]]:
    """Per-channel mean and standard deviation of ``images`` ``[N, C, H, W]`` (any float dtype).

    Compute them on the training split only, then normalise every split with them (PRACTICES.md
    row 16). Returns two lists of ``C`` Python floats; raises ``ValueError`` for an empty tensor or a
    constant channel (its std would be 0 and normalising would divide by zero).
    """
    if images.ndim != 4 or images.shape[0] == 0:
        raise ValueError(f"expected a non-empty [N, C, H, W] tensor, got shape {tuple(images.shape)}")
    flat = images.double().transpose(0, 1).reshape(images.shape[1], -1)
    mean, std = flat.mean(dim=1), flat.std(dim=1)
    if bool((std == 0).any()):
        raise ValueError(f"a channel is constant (std {std.tolist()}); it cannot be normalised")
    return mean.tolist(), std.tolist()


def check_fractions(**fractions: float) -> None:
    """Raise ``ValueError`` naming the arguments unless each fraction is > 0 and they sum to < 1
    (what is left over is the training split)."""
    if any(fraction <= 0 for fraction in fractions.values()) or sum(fractions.values()) >= 1:
        given = ", ".join(f"{name}={fraction}" for name, fraction in fractions.items())
        raise ValueError(f"{given}: each must be > 0 and together < 1 (the rest is the training split)")


def seeded_split(num_samples: int, fractions: Sequence[float], seed: int) -> list[Tensor]:
    """Split ``range(num_samples)`` into ``len(fractions) + 1`` disjoint index tensors (int64).

    The first ``len(fractions)`` parts get ``round(f * num_samples)`` indices each and the last part
    gets the rest. The permutation comes from a private ``torch.Generator`` seeded with ``seed``, so
    the split never depends on (or disturbs) the global RNG.
    """
    check_fractions(**{f"fractions[{index}]": fraction for index, fraction in enumerate(fractions)})
    permutation = torch.randperm(num_samples, generator=torch.Generator().manual_seed(seed))
    sizes = [round(f * num_samples) for f in fractions]
    parts, start = [], 0
    for size in sizes:
        parts.append(permutation[start : start + size])
        start += size
    parts.append(permutation[start:])
    return parts


class BaseDataModule(LightningDataModule):
    """DataLoader settings shared by every DataModule (PRACTICES.md row 7).

    Subclasses set ``self.train_set``, ``self.val_set``, ``self.test_set`` (and optionally
    ``self.predict_set``, which defaults to the test split) in :meth:`setup`, and may set
    ``self.collate_fn`` (default ``None``: PyTorch's ``default_collate``), e.g. to
    :class:`~project.data.collate.PadCollate` for variable-length sequences.

    The training loader is a ``torchdata`` ``StatefulDataLoader`` (:mod:`project.data.stateful`):
    Lightning keeps its position in checkpoints, and its shuffle order is a function of
    ``(shuffle_seed, epoch)``, so a resume from any step repeats the uninterrupted run exactly.
    ``shuffle_seed`` is the ``seed_everything`` value (``PL_GLOBAL_SEED``, else a random one), fixed at
    the first :meth:`train_dataloader` call and kept in checkpoints (:meth:`state_dict`).

    Args:
        batch_size: Samples per batch per device (the global batch is ``batch_size * devices *
            accumulate_grad_batches``).
        num_workers: DataLoader worker processes; 0 loads in the main process.
        pin_memory: Page-lock host batches for faster, asynchronous copies to a GPU.
        persistent_workers: Keep workers alive between epochs (only with ``num_workers > 0``). Saves
            start-up time per epoch; note that worker-side augmentation then resumes exactly only from
            a mid-epoch checkpoint (see README, "Checkpoints and exact resume").
        prefetch_factor: Batches each worker loads ahead (only with ``num_workers > 0``; ``None`` keeps
            PyTorch's default of 2).
        predict_path: A file or folder of new inputs for ``predict`` (images, CSV rows, ...), read by
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
                "persistent_workers and prefetch_factor only apply with num_workers > 0; "
                f"got num_workers=0, persistent_workers={persistent_workers}, "
                f"prefetch_factor={prefetch_factor}"
            )
        self.batch_size = batch_size
        self.num_workers = num_workers
        self.pin_memory = pin_memory
        self.persistent_workers = persistent_workers
        self.prefetch_factor = prefetch_factor
        self.train_set: Dataset[Any] | None = None
        self.val_set: Dataset[Any] | None = None
        self.test_set: Dataset[Any] | None = None
        self.predict_set: Dataset[Any] | None = None
        self.collate_fn: Callable[[list[Any]], Any] | None = None
        self.shuffle_seed: int | None = None
        self.predict_path = predict_path
        #: Names of the inputs read from ``predict_path`` (file names, ``file:line``), one per
        #: ``predict_set`` item; the predictions CSV shows them. ``None`` without ``predict_path``.
        self.predict_names: list[str] | None = None
        #: ``(file, reason)`` of every file under ``predict_path`` that was not read.
        self.predict_skipped: list[tuple[str, str]] = []

    def read_predict_inputs(self, path: Path) -> PredictInputs:
        """Read the new inputs at ``path`` (a file or a folder) for ``predict --data.predict_path``.

        A DataModule that supports new inputs overrides this, converting them exactly as its test
        split is converted (see ``project/data/predict_files.py`` for image files and CSV rows).
        Called from :meth:`setup_predict_inputs` after ``setup``, so train-split statistics exist.

        Raises:
            project.errors.ConfigError: here, where the DataModule cannot read new inputs.
        """
        raise ConfigError(
            f"data.predict_path={str(path)!r}: {type(self).__name__} cannot read new inputs (it does not "
            "implement read_predict_inputs); predict on its test split without --data.predict_path"
        )

    def setup_predict_inputs(self) -> None:
        """Set ``predict_set``, ``predict_names`` and ``predict_skipped`` from ``predict_path`` (once;
        nothing without ``predict_path``). Call at the end of ``setup`` for the ``predict`` stage. Prints
        each skipped file with the reason."""
        if self.predict_path is None or self.predict_names is not None:
            return
        found = self.read_predict_inputs(Path(self.predict_path).expanduser())
        self.predict_set, self.predict_names, self.predict_skipped = found.dataset, found.names, found.skipped
        print(f"predict_path: {len(found.names)} inputs from {self.predict_path}", flush=True)
        for file, reason in found.skipped:
            print(f"Skipped {file}: {reason}", flush=True)

    def _loader(self, dataset: Dataset[Any] | None, split: str, shuffle: bool) -> DataLoader[Any]:
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
        if split == "train":  # resumable from any step (project/data/stateful.py)
            if self.shuffle_seed is None:
                env = os.environ.get("PL_GLOBAL_SEED")
                self.shuffle_seed = int(env) if env is not None else random.randrange(2**32)
            # the epoch the first iterator serves: what Lightning passes to `set_epoch` (after a resume from
            # an end-of-epoch checkpoint `current_epoch` is still the finished epoch at this point)
            epoch = 0
            if self.trainer is not None:
                epoch = self.trainer.fit_loop.epoch_progress.current.processed  # type: ignore[attr-defined]
            return resumable_train_loader(dataset, self.shuffle_seed, epoch, **settings)
        # its own generator: creating an evaluation iterator (which draws the worker seed) leaves the
        # global generators, and so the training run's randomness, untouched
        sampler = self.eval_sampler(dataset)
        return DataLoader(dataset, sampler=sampler, generator=torch.Generator(), **settings)

    def state_dict(self) -> dict[str, Any]:
        """``{"shuffle_seed": ...}`` once the training loader exists (Lightning saves it in checkpoints)."""
        return {} if self.shuffle_seed is None else {"shuffle_seed": self.shuffle_seed}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Take the checkpoint's ``shuffle_seed``, so a resumed run shuffles like the original one."""
        if state_dict.get("shuffle_seed") is not None:
            self.shuffle_seed = int(state_dict["shuffle_seed"])

    def eval_sampler(self, dataset: Dataset[Any]) -> Sampler[int] | None:
        """The sampler of a val/test/predict loader: ``None`` (in order) in one process; with several
        processes (DDP) each rank gets every ``world_size``-th sample and nothing is repeated.

        Lightning's own ``DistributedSampler`` (``Trainer(use_distributed_sampler=True)``) pads the
        split with repeated samples so that every rank gets the same count; for ``validate`` and
        ``test`` that counts some samples twice (360 of the 359-image digits test split on 2
        processes) and the metrics differ from a single process. ``UnrepeatedDistributedSampler``
        (Lightning's, the one it uses for ``predict``) lets the ranks differ by one sample instead,
        and Lightning keeps a sampler that is already a ``DistributedSampler``. The metrics are
        torchmetrics states synced over all ranks, so each sample counts exactly once.
        """
        trainer = self.trainer
        if trainer is None or trainer.world_size <= 1 or not trainer.distributed_sampler_kwargs:
            return None
        from lightning.pytorch.overrides.distributed import UnrepeatedDistributedSampler

        return UnrepeatedDistributedSampler(dataset, shuffle=False, **trainer.distributed_sampler_kwargs)

    def train_dataloader(self) -> DataLoader[Any]:
        """Shuffled, resumable loader over the training split (augmentation on)."""
        return self._loader(self.train_set, "train", shuffle=True)

    def val_dataloader(self) -> DataLoader[Any]:
        """Loader over the validation split, in order, without augmentation."""
        return self._loader(self.val_set, "val", shuffle=False)

    def test_dataloader(self) -> DataLoader[Any]:
        """Loader over the test split, in order, without augmentation."""
        return self._loader(self.test_set, "test", shuffle=False)

    def predict_dataloader(self) -> DataLoader[Any]:
        """Loader over ``predict_set`` (the inputs read from ``predict_path``, else the test split), in
        order."""
        return self._loader(
            self.predict_set if self.predict_set is not None else self.test_set, "predict", False
        )
