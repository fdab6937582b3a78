"""The training loader behind exact resume from any step (README, "Checkpoints and exact resume").

Lightning saves the state of a ``torchdata`` ``StatefulDataLoader`` in every checkpoint (the fit loop's
``combined_loader`` entry) and loads it back when a run resumes mid-epoch, so the interrupted epoch
continues with the very batches it had left. Two pieces make the rest exact:

- :class:`EpochRandomSampler`: the shuffle order, and the seed of the DataLoader workers, of epoch ``e``
  are a function of ``(seed, e)`` only, so an epoch-boundary resume (where Lightning starts a fresh
  iterator and loads no loader state) repeats the uninterrupted run's epoch too.
- :class:`WorkerRNGDataset`: each worker process's python/numpy/torch generator states travel with the
  loader state, so worker-side augmentation continues exactly where the checkpoint was taken.
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
    """Shuffle with a private ``torch.Generator`` reseeded from ``(seed, epoch)`` by :meth:`set_epoch`.

    Lightning calls ``set_epoch`` before every training epoch (as for a ``DistributedSampler``); pass the
    epoch the loader is built in as ``epoch``, because Lightning creates the first epoch's iterator
    before it calls ``set_epoch``. Pass :attr:`generator` to the DataLoader as well (its ``generator``
    argument), so the worker base seed is drawn from it, after the permutation. The iterator's state
    (the generator state at the epoch start and the number of indices yielded) is ``torchdata``'s.

    Args:
        data_source: The dataset (only its length is used).
        seed: Base seed; the generator of epoch ``e`` is seeded with ``epoch_seed(seed, e)``
            (:func:`project.callbacks.epoch_seed`, numpy's ``SeedSequence``).
        epoch: The epoch of the first iterator.
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
    """A map-style dataset whose ``torchdata`` state is the RNG state of the worker process reading it.

    ``StatefulDataLoader`` asks each worker for its dataset's ``state_dict`` after every batch it
    loads, keeps the one that belongs to the last batch handed to training, and in a resumed run loads
    it in the new worker (after the usual ``base_seed + worker_id`` seeding and ``worker_init_fn``). The
    state is python's, numpy's and torch's CPU generator state (in types ``torch.load(weights_only=True)``
    reads); in the main process (``num_workers=0``) it is empty, as the global generators are
    :class:`~project.callbacks.ExactResume`'s job there.

    Args:
        dataset: The map-style dataset to read (indexing and length are passed through).
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
    """A shuffling ``StatefulDataLoader`` for training that resumes exactly from any step.

    Shuffles with :class:`EpochRandomSampler` (``seed``, ``epoch``), whose generator also draws the
    worker base seed; with ``num_workers > 0`` the dataset is wrapped in :class:`WorkerRNGDataset`.
    ``kwargs`` go to ``StatefulDataLoader`` (``batch_size``, ``pin_memory``, ``collate_fn``, ...).
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
