"""The training loader behind exact resume from any step (README, "Checkpoints and exact resume").

Lightning saves a ``torchdata`` ``StatefulDataLoader``'s state in every checkpoint and loads it back on
a mid-epoch resume, so the interrupted epoch continues with the batches it had left.
:class:`EpochRandomSampler` makes each epoch's order (and worker seeds) a function of ``(seed, epoch)``
only, so an epoch-boundary resume (a fresh iterator, no loader state) repeats it too;
:class:`WorkerRNGDataset` carries the workers' generator states, so worker-side augmentation continues.
"""

from __future__ import annotations

import warnings
from collections.abc import Sized
from typing import Any, TypeVar

import torch
from torch.utils.data import Dataset, get_worker_info
from torchdata.stateful_dataloader import StatefulDataLoader
from torchdata.stateful_dataloader.sampler import RandomSampler

from ..callbacks.reproducibility import collect_rng_states, epoch_seed, set_rng_states

T = TypeVar("T")


class EpochRandomSampler(RandomSampler):
    """Shuffle with a private ``torch.Generator`` reseeded with ``epoch_seed(seed, epoch)``
    (:func:`project.callbacks.epoch_seed`) by :meth:`set_epoch`, which Lightning calls before
    every training epoch; ``epoch`` is the first iterator's, which Lightning creates before calling it.

    Pass :attr:`generator` to the DataLoader too, so the worker base seed is drawn from it (after the
    permutation). The iterator's state (the generator state at the epoch start and the number of
    indices yielded) is ``torchdata``'s. ``data_source``: the dataset (only its length is used).
    """

    def __init__(self, data_source: Sized, seed: int, epoch: int = 0) -> None:
        super().__init__(data_source, generator=torch.Generator())
        self.seed = seed
        self.set_epoch(epoch)

    def set_epoch(self, epoch: int) -> None:
        """Reseed the generator for ``epoch`` (takes effect at the next iterator)."""
        self.epoch = epoch
        self.generator.manual_seed(epoch_seed(self.seed, epoch))


class WorkerRNGDataset(Dataset[T]):
    """``dataset`` (indexing and length passed through) whose ``torchdata`` state is the python, numpy
    and torch CPU generator state of the worker process reading it.

    ``StatefulDataLoader`` keeps the state of the worker that produced the last batch handed to
    training and, in a resumed run, loads it in the new worker (after the usual ``base_seed +
    worker_id`` seeding). In the main process the state is empty: the global generators are
    :class:`~project.callbacks.ExactResume`'s job there.
    """

    def __init__(self, dataset: Dataset[T]) -> None:
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)  # type: ignore[arg-type]

    def __getitem__(self, index: int) -> T:
        return self.dataset[index]

    def state_dict(self) -> dict[str, Any]:
        """This worker's generator states, or ``{}`` outside a DataLoader worker."""
        return collect_rng_states(cuda=False) if get_worker_info() is not None else {}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore the generator states saved by :meth:`state_dict` (a no-op for ``{}``)."""
        if state_dict:
            set_rng_states(state_dict)


def resumable_train_loader(
    dataset: Dataset[Any], seed: int, epoch: int, num_workers: int, **kwargs: Any
) -> StatefulDataLoader:
    """A shuffling ``StatefulDataLoader`` for training that resumes exactly from any step: shuffled by
    :class:`EpochRandomSampler`, the dataset wrapped in :class:`WorkerRNGDataset` when
    ``num_workers > 0``; ``kwargs`` (``batch_size``, ``collate_fn``, ...) go to the loader.
    """
    sampler = EpochRandomSampler(dataset, seed, epoch)  # type: ignore[arg-type]
    with warnings.catch_warnings():
        # torchdata 0.11 calls torch.set_vital, deprecated in recent torch: noise on every fit
        # (tests/test_exact_resume.py pins that no such warning reaches the user)
        warnings.filterwarnings("ignore", message=".*set_vital.*is deprecated")
        return StatefulDataLoader(
            WorkerRNGDataset(dataset) if num_workers > 0 else dataset,
            sampler=sampler,
            generator=sampler.generator,
            num_workers=num_workers,
            **kwargs,
        )
