"""Exact resume: per-epoch reseeding, generator states in the checkpoint, and the resumable training
loader (PRACTICES.md rows 8 and 9; the engine's README, "Checkpoints and exact resume")."""

from __future__ import annotations

import functools
import logging
import math
import os
import random
import signal
import threading
from collections.abc import Callable, Iterator, Sized
from typing import Any, TypeVar

import numpy as np
import torch
from lightning.fabric.utilities.seed import pl_worker_init_function
from lightning.pytorch import Callback, LightningModule, Trainer
from lightning.pytorch.utilities import CombinedLoader, rank_zero_warn
from torch.utils.data import Dataset, DistributedSampler, get_worker_info
from torchdata.stateful_dataloader import StatefulDataLoader

from . import private
from .errors import ConfigError

log = logging.getLogger(__name__)
T = TypeVar("T")


def epoch_seed(seed: int, epoch: int) -> int:
    """A well-mixed 32-bit seed for ``(seed, epoch)`` (numpy's ``SeedSequence``)."""
    return int(np.random.SeedSequence([seed, epoch]).generate_state(1)[0])


def collect_rng_states(cuda: bool = True) -> dict[str, Any]:
    """The python, numpy, torch and (with ``cuda`` and a GPU) CUDA generator states, in types
    ``torch.load(weights_only=True)`` accepts (numpy's key array is stored as an ``int64`` tensor).
    Pass ``cuda=False`` in a DataLoader worker process (CUDA must not be initialised there)."""
    kind, keys, position, has_gauss, cached = np.random.get_state(legacy=True)
    numpy = (str(kind), torch.from_numpy(np.asarray(keys).astype(np.int64)), position, has_gauss, cached)
    states: dict[str, Any] = {"python": random.getstate(), "numpy": numpy, "torch": torch.get_rng_state()}
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
    """Make a resumed run draw exactly the random numbers, and see exactly the batches, of the
    uninterrupted run: at each training epoch start python, numpy and torch are seeded with
    :func:`epoch_seed` ``(seed, epoch)``; their states are saved in every checkpoint and restored in a
    resumed run's ``on_train_start`` (also mid-epoch); loader state that Lightning missed (a model that
    asked for ``trainer.estimated_stepping_batches``, Lightning #20550) is loaded here. A resume whose
    model configures another number of LR schedulers than its checkpoint continues stops with a
    :class:`ConfigError` (the schedule would restart), and so does a resume in the middle of an epoch
    whose training loader's ``batch_size`` is not the checkpoint's (its position in the epoch counts
    the checkpoint's batches: the epoch would end early, its validation skipped), or whose number of
    processes is not the checkpoint's (each process's position is one of the checkpoint's shards).

    Under DDP (and any strategy with several processes) each process has its own generators and its
    own training-loader state (its shard's position, its workers' generators), and rank 0 alone
    writes the checkpoint: both are gathered from every process into it (``ranks``, a list indexed by
    rank; one collective per checkpoint, none per step) and each process restores its own.

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
        self._saved_schedulers: int | None = None
        self._other_world_size = False  # the checkpoint's (its training-loader state then dropped)
        # (epoch, is it the epoch's last batch) of the training batch in progress: a checkpoint saved
        # in its on_train_batch_end needs the fix in on_train_start
        self._batch: tuple[int, bool] = (0, False)
        # whether the training batch in progress is not its epoch's last, and the loader's batch_size
        self._mid_epoch = False
        self._batch_size: int | None = None
        self._align_step = False

    def _base_seed(self) -> int | None:
        env = os.environ.get("PL_GLOBAL_SEED")
        return self.seed if self.seed is not None else None if env is None else int(env)

    def on_save_checkpoint(
        self, trainer: Trainer, pl_module: LightningModule, checkpoint: dict[str, Any]
    ) -> None:
        """Record the number of processes; with several, gather every process's generator states and
        training-loader state into the checkpoint (``ranks``; a collective: Lightning saves on every
        process at once)."""
        state = checkpoint.get("callbacks", {}).get(self.state_key)
        if not self.enabled or state is None:
            return
        state["world_size"] = trainer.world_size
        if trainer.world_size > 1:
            fit_loop = checkpoint.get("loops", {}).get("fit_loop", {}).get("state_dict", {})
            own = {"rng_states": state["rng_states"], "combined_loader": fit_loop.get("combined_loader")}
            ranks: list[Any] = [None] * trainer.world_size
            torch.distributed.all_gather_object(ranks, own)
            state["ranks"] = ranks

    def on_load_checkpoint(
        self, trainer: Trainer, pl_module: LightningModule, checkpoint: dict[str, Any]
    ) -> None:
        """Note how many LR schedulers the checkpoint continues (checked in :meth:`on_fit_start`); refuse to
        continue an epoch with another number of processes; give this process its own generator states and
        training-loader state of a checkpoint of as many processes (the loader state of another number of
        processes is dropped: it describes other shards)."""
        if "optimizer_states" not in checkpoint:  # weights for evaluation, not a resume of training
            return
        self._saved_schedulers = len(checkpoint.get("lr_schedulers") or [])
        state = checkpoint.get("callbacks", {}).get(self.state_key) or {}
        saved = state.get("world_size")
        self._other_world_size = saved is not None and saved != trainer.world_size
        if self._other_world_size and (state.get("batch_size") is not None or state.get("mid_epoch")):
            saved_processes, now_processes = (
                f"{n} process{'es' * (n != 1)}" for n in (saved, trainer.world_size)
            )
            raise ConfigError(
                f"--ckpt_path={trainer.ckpt_path}: the checkpoint is in the middle of an epoch of "
                f"{saved_processes}, each at its place in its own share of the data, but this fit runs "
                f"{now_processes}; the epoch could not continue where it stopped. Resume with "
                f"{saved_processes} (--trainer.devices, --trainer.num_nodes), or from a checkpoint of an "
                "epoch's end, or start a new run from its weights (--init_from)."
            )
        fit_loop = checkpoint.get("loops", {}).get("fit_loop", {}).get("state_dict", {})
        if self._other_world_size:
            fit_loop.pop("combined_loader", None)
        elif (ranks := state.get("ranks")) is not None:
            own = ranks[trainer.global_rank]
            state["rng_states"] = own["rng_states"]
            if own["combined_loader"] is not None:
                fit_loop["combined_loader"] = own["combined_loader"]

    def on_fit_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        """Refuse a resume whose LR schedulers do not match the checkpoint's (before they are restored)."""
        saved, self._saved_schedulers = self._saved_schedulers, None
        now = len(trainer.lr_scheduler_configs)
        if saved is not None and trainer.ckpt_path is not None and saved != now:
            raise ConfigError(
                f"--ckpt_path={trainer.ckpt_path}: the checkpoint continues {saved} LR scheduler(s), but the "
                f"model now configures {now}; resuming would restart the schedule from step 0. Resume with "
                "the run's own model.lr_scheduler, or start a new run from its weights (--init_from)."
            )

    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        """In a resumed run: load loader state a too-early ``setup_data`` missed (or, after a checkpoint of
        another number of processes, start the epoch with a new iterator), restore the checkpoint's
        generator states, and give an epoch that starts right after a checkpoint of the previous epoch's
        last batch its seeds and its own iterator."""
        if private.load_missed_loader_state(trainer) or self._other_world_size:
            private.new_epoch_iterator(trainer)  # a finished epoch: the next starts afresh
        self._other_world_size = False
        self._align_step = trainer.ckpt_path is not None
        self._batch_size = now = getattr(trainer.train_dataloader, "batch_size", None)
        state, self._resume_state = self._resume_state, None
        if state is None:
            return
        if (saved := state.get("batch_size")) is not None and now is not None and saved != now:
            raise ConfigError(
                f"--ckpt_path={trainer.ckpt_path}: the checkpoint is in the middle of epoch "
                f"{trainer.current_epoch + 1}, read in batches of {saved}, but this fit's training batches "
                f"are of {now}; the epoch could not continue where it stopped. Resume with the run's batch "
                "size, or from a checkpoint of an epoch's end, or start a new run from its weights "
                "(--init_from)."
            )
        # (Lightning warns of a mid-epoch resume without loader state only for a loader with a length)
        if state.get("mid_epoch") and trainer.num_training_batches == math.inf:
            loaders = CombinedLoader(trainer.train_dataloader).flattened
            if not all(hasattr(loader, "load_state_dict") for loader in loaders):
                rank_zero_warn(
                    f"--ckpt_path={trainer.ckpt_path} is in the middle of epoch {trainer.current_epoch + 1}, "
                    "and the training loader, without a length, has no state to continue from (a DataLoader "
                    "of an IterableDataset): the epoch reads its data again from the start. For an exact "
                    "resume use torchdata's StatefulDataLoader, or resume from the end of an epoch.",
                    stacklevel=5,  # (shown as one line)
                )
        set_rng_states(state["rng_states"])
        epoch, last_batch = state.get("batch", (0, False))
        if last_batch and trainer.current_epoch > epoch:
            # Saved in on_train_batch_end of its epoch's last batch: Lightning (2.6) counts that epoch as
            # done and runs the next one without its on_train_epoch_start and without a new iterator.
            self.on_train_epoch_start(trainer, pl_module)
            private.new_epoch_iterator(trainer)

    def on_train_batch_start(
        self, trainer: Trainer, pl_module: LightningModule, batch: Any, batch_idx: int
    ) -> None:
        """Note whether this is the epoch's last batch; after a resume, align the loggers' step with
        ``global_step`` (:func:`~runwright.private.align_logger_step`)."""
        self._batch = (trainer.current_epoch, batch_idx + 1 >= trainer.num_training_batches)
        self._mid_epoch = not self._batch[1]
        if self._align_step and pl_module.automatic_optimization:
            self._align_step = False
            private.align_logger_step(trainer)

    def on_train_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        """A checkpoint from here on is one between epochs."""
        self._batch = (trainer.current_epoch, False)
        self._mid_epoch = False

    def on_validation_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        """A checkpoint from here on (or from the epoch's end on) is no longer one of a training batch's
        end."""
        self._batch = (trainer.current_epoch, False)

    def on_train_epoch_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        """Seed python, numpy and torch with ``epoch_seed(seed, current_epoch)``."""
        if not self.enabled:
            return
        if (base := self._base_seed()) is None:
            if not self._warned:
                log.warning("ExactResume: no seed set (seed_everything is off); epochs are not reseeded")
                self._warned = True
            return
        seed = epoch_seed(base, trainer.current_epoch)
        random.seed(seed)
        np.random.seed(seed)
        torch.manual_seed(seed)  # also seeds every CUDA device

    def state_dict(self) -> dict[str, Any]:
        """The base seed, the current python/numpy/torch/CUDA generator states, whether the checkpoint is
        within an epoch (not after its last batch) and then the training loader's ``batch_size``
        (:meth:`on_save_checkpoint` adds the number of processes, and under DDP every process's
        states)."""
        if not self.enabled:
            return {}
        state = {"seed": self._base_seed(), "rng_states": collect_rng_states(), "batch": self._batch}
        return {
            **state,
            "batch_size": self._batch_size if self._mid_epoch else None,
            "mid_epoch": self._mid_epoch,
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Take the seed and keep the generator states for ``on_train_start`` (a no-op for ``{}``)."""
        if not self.enabled or not state_dict:
            return
        if self.seed is None and (saved := state_dict.get("seed")) is not None:
            if (current := self._base_seed()) not in (None, saved):
                log.warning("ExactResume: continuing with the checkpoint's seed %s, not %s", saved, current)
            self.seed = int(saved)
        self._resume_state = state_dict


class EpochRandomSampler(DistributedSampler[int]):
    """Shuffle with a private ``torch.Generator`` reseeded with ``epoch_seed(seed, epoch)`` by
    :meth:`set_epoch`, which Lightning calls before every training epoch; ``epoch`` is the first
    iterator's, which Lightning creates before calling it.

    Each of ``num_replicas`` processes (DDP; default: ``torch.distributed``'s world size and rank when
    it is initialized, else 1 and 0) draws the same permutation of ``data_source`` (only its length is
    used) and takes every ``num_replicas``-th index of it from its ``rank`` on, the permutation padded
    with its first indices to a multiple of ``num_replicas`` (as ``DistributedSampler`` pads): an
    epoch's global order is the one a single process reads. Being a ``DistributedSampler``, Lightning
    uses it as it is instead of wrapping it in one of its own (whose epoch a resumed run's first
    iterator would not know).

    Pass :attr:`generator` to the DataLoader too, so the worker base seed is drawn from it (after the
    permutation). Its iterators are ``torchdata``-stateful: the generator state at the epoch start and
    the number of indices yielded.
    """

    def __init__(
        self,
        data_source: Sized,
        seed: int,
        epoch: int = 0,
        num_replicas: int | None = None,
        rank: int | None = None,
    ) -> None:
        if not (torch.distributed.is_available() and torch.distributed.is_initialized()):
            num_replicas, rank = num_replicas or 1, rank or 0  # (else DistributedSampler asks the group)
        super().__init__(data_source, num_replicas, rank, shuffle=True, seed=seed)  # type: ignore[arg-type]
        self.generator = torch.Generator()
        self.set_epoch(epoch)

    def set_epoch(self, epoch: int) -> None:
        """Reseed the generator for ``epoch`` (takes effect at the next iterator)."""
        super().set_epoch(epoch)
        self.generator.manual_seed(epoch_seed(self.seed, epoch))

    def __iter__(self) -> Iterator[int]:
        return _ShardIterator(self)


class _ShardIterator(Iterator[int]):
    """One epoch of an :class:`EpochRandomSampler`: its process's share of the permutation, drawn when
    the iterator is made. Its state, ``{"yielded": n, "generator": state at the epoch start}``, is that
    of ``torchdata``'s ``RandomSampler`` iterator (so a checkpoint of one process written by it loads)."""

    def __init__(self, sampler: EpochRandomSampler) -> None:
        self.sampler = sampler
        self.load_state_dict({"yielded": 0, "generator": sampler.generator.get_state()})

    def __next__(self) -> int:
        if self.yielded >= len(self.indices):
            raise StopIteration
        self.yielded += 1
        return self.indices[self.yielded - 1]

    def state_dict(self) -> dict[str, Any]:
        """The number of indices yielded and the generator state at the epoch start."""
        return {"yielded": self.yielded, "generator": self.generator_state}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Draw the epoch's permutation from the generator state ``generator``; continue after ``yielded``."""
        self.generator_state, sampler = state_dict["generator"], self.sampler
        sampler.generator.set_state(self.generator_state)
        order: list[int] = torch.randperm(len(sampler.dataset), generator=sampler.generator).tolist()  # type: ignore[arg-type]
        padded = (order * -(-sampler.total_size // len(order)))[: sampler.total_size] if order else []
        self.indices = padded[sampler.rank :: sampler.num_replicas]
        self.yielded = state_dict["yielded"]


class WorkerRNGDataset(Dataset[T]):
    """``dataset`` (indexing and length passed through) whose ``torchdata`` state is the python, numpy
    and torch CPU generator state of the worker process reading it.

    ``StatefulDataLoader`` keeps the state of the worker that produced the last batch handed to
    training and, in a resumed run, loads it in the new worker (after the usual ``base_seed +
    worker_id`` seeding). In the main process the state is empty: the global generators are
    :class:`ExactResume`'s job there.
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
    """A shuffling ``StatefulDataLoader`` for training that resumes exactly from any step: Lightning
    saves its position in every checkpoint and, on a mid-epoch resume, the interrupted epoch continues
    with exactly the batches it had left. Shuffled by :class:`EpochRandomSampler` (each epoch's order
    a function of ``(seed, epoch)``, each DDP process reading its share of it); with
    ``num_workers > 0`` the dataset is wrapped in :class:`WorkerRNGDataset` and the workers ignore
    SIGINT and SIGTERM (:func:`worker_init`); ``kwargs`` (``batch_size``, ``collate_fn``,
    ``worker_init_fn``, ...) go to the loader.
    """
    sampler = EpochRandomSampler(dataset, seed, epoch)  # type: ignore[arg-type]
    if num_workers > 0:
        kwargs["worker_init_fn"] = functools.partial(worker_init, then=kwargs.get("worker_init_fn"))
        dataset = WorkerRNGDataset(dataset)
    return StatefulDataLoader(
        dataset, sampler=sampler, generator=sampler.generator, num_workers=num_workers, **kwargs
    )


def worker_init(worker_id: int, then: Callable[[int], None] | None = None) -> None:
    """A DataLoader worker's ``worker_init_fn`` that lets it outlive Ctrl-C and a scheduler's SIGTERM,
    both sent to the whole process group (the main process stops at a batch's end, saves, and shuts
    its workers down; a worker killed by one fails the batch being read): SIGINT is ignored, and so is
    a SIGTERM that the worker's parent did not send (a thread waits for SIGTERM, blocked in the others;
    the parent's, sent when it exits or gives up on a worker, ends the worker as torch's own handler
    does; where Python cannot wait for a signal's sender, not Linux, SIGTERM is left to torch). Then
    ``then(worker_id)``, or the seeding Lightning adds after ``seed_everything(workers=True)``
    (``pl_worker_init_function``)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if hasattr(signal, "sigwaitinfo") and hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
        threading.Thread(target=_exit_on_parents_sigterm, args=(os.getppid(),), daemon=True).start()
    if then is not None:
        then(worker_id)
    elif int(os.environ.get("PL_SEED_WORKERS", 0)):
        pl_worker_init_function(worker_id)


def _exit_on_parents_sigterm(parent: int) -> None:
    while True:
        if signal.sigwaitinfo({signal.SIGTERM}).si_pid == parent:
            os._exit(0)
