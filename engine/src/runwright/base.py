"""Optional helpers for your classes: :class:`BaseModule` (metric keys, optimizer and LR scheduler from
the config) and :class:`BaseDataModule` (loader settings, splits, the resumable training loader).

Neither is required: the engine runs any LightningModule and LightningDataModule (its README).
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import math
import os
import random
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Literal

import torch
from lightning.pytorch import LightningDataModule, LightningModule
from lightning.pytorch.cli import LRSchedulerCallable, OptimizerCallable
from lightning.pytorch.utilities.types import LRSchedulerConfigType, OptimizerLRScheduler
from torch import Tensor
from torch.utils.data import DataLoader, Dataset
from torchmetrics import MeanMetric, MetricCollection

from .errors import ConfigError
from .inputs import PredictInputs
from .resume import resumable_train_loader, worker_init

#: The defaults of :class:`BaseModule`'s arguments that plain Python use passes as objects.
PYTHON_DEFAULTS: dict[str, Any] = {"optimizer": torch.optim.AdamW, "lr_scheduler": None}


class BaseModule(LightningModule):
    """A LightningModule with one metric-key scheme and the optimizer and LR scheduler from the config.

    Logged keys: ``train/loss`` (every step), ``val/loss`` and ``test/loss`` (epoch means over samples,
    exact under DDP) and, for every metric ``m`` of ``metrics``, ``train/m``, ``val/m``, ``test/m``
    (epoch values). A subclass builds its network and metrics in ``__init__`` and supplies ``forward``
    and :meth:`compute_loss` (and :meth:`split_batch`, :meth:`metric_inputs` where its batches or
    metrics need it).

    Args:
        optimizer: A callable that takes the parameters and returns an optimizer; in YAML a
            ``class_path`` such as ``torch.optim.AdamW`` with its ``init_args`` (LightningCLI's
            ``OptimizerCallable``). Default: AdamW with PyTorch's defaults (lr 1e-3, weight decay 1e-2).
        lr_scheduler: Optional callable that takes the optimizer and returns an LR scheduler
            (LightningCLI's ``LRSchedulerCallable``), e.g. ``runwright.WarmupCosineLR``.
            A scheduler with a ``total_steps`` argument left null (``WarmupCosineLR``,
            ``torch.optim.lr_scheduler.OneCycleLR``) is given ``trainer.estimated_stepping_batches``
            and stepped after every optimizer step.
        lr_scheduler_interval: ``"step"`` or ``"epoch"`` (Lightning's ``interval``) for the other
            schedulers; ``ReduceLROnPlateau`` always steps per epoch.
        lr_scheduler_monitor: Metric that a ``ReduceLROnPlateau`` scheduler watches.
        metrics: The metrics computed for every stage (cloned per stage); keyword-only.
    """

    def __init__(
        self,
        optimizer: OptimizerCallable = torch.optim.AdamW,
        lr_scheduler: LRSchedulerCallable | None = None,
        lr_scheduler_interval: Literal["step", "epoch"] = "epoch",
        lr_scheduler_monitor: str = "val/loss",
        *,
        metrics: MetricCollection,
    ) -> None:
        super().__init__()
        if lr_scheduler_interval not in ("step", "epoch"):
            raise ValueError(f"lr_scheduler_interval={lr_scheduler_interval!r}: must be 'step' or 'epoch'")
        self.optimizer, self.lr_scheduler = optimizer, lr_scheduler
        self.lr_scheduler_interval, self.lr_scheduler_monitor = lr_scheduler_interval, lr_scheduler_monitor
        self.train_metrics = metrics.clone(prefix="train/")
        self.val_metrics = metrics.clone(prefix="val/")
        self.test_metrics = metrics.clone(prefix="test/")
        # MeanMetric, not self.log(sync_dist=True): Lightning 2.6 averages the per-process sample
        # counts as integers, so 180 + 179 samples count as 2 x 179 and the DDP mean comes out wrong
        self.val_loss, self.test_loss = MeanMetric(), MeanMetric()

    def compute_loss(self, output: Tensor, target: Tensor) -> Tensor:
        """Return the scalar loss for the network ``output`` and ``target`` of one batch."""
        raise NotImplementedError

    def split_batch(self, batch: Any) -> tuple[Any, Tensor]:
        """Return ``(inputs, target)`` of a batch (``inputs``: what ``forward`` takes); the default
        unpacks a 2-tuple. Override it for other layouts, e.g. ``(padded, mask, lengths, target)``."""
        inputs, target = batch
        return inputs, target

    def metric_inputs(self, output: Tensor, target: Tensor) -> tuple[Tensor, Tensor]:
        """Map ``(output, target)`` to the ``(preds, target)`` the metrics take (identity here)."""
        return output, target

    def _step(self, batch: Any, stage: Literal["train", "val", "test"]) -> Tensor:
        inputs, target = self.split_batch(batch)
        output = self(inputs)
        loss = self.compute_loss(output, target)
        metrics: MetricCollection = getattr(self, f"{stage}_metrics")
        metrics.update(*self.metric_inputs(output.detach(), target))
        # Metric objects logged on_epoch: Lightning computes, logs and resets them at the epoch's end
        self.log_dict(metrics, on_step=False, on_epoch=True, prog_bar=stage == "val")
        if stage == "train":  # per step, this process's loss (no sync per step)
            self.log("train/loss", loss, prog_bar=True)
        else:  # the epoch mean over samples, of all processes under DDP
            mean_loss: MeanMetric = getattr(self, f"{stage}_loss")
            mean_loss.update(loss.detach(), weight=len(target))
            self.log(f"{stage}/loss", mean_loss, on_epoch=True, prog_bar=True)
        return loss

    def training_step(self, batch: Any, batch_idx: int) -> Tensor:
        """Return the training loss of one batch (a scalar ``float32`` tensor that requires grad)."""
        return self._step(batch, "train")

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        """Log ``val/loss`` and update the validation metrics for one batch."""
        self._step(batch, "val")

    def test_step(self, batch: Any, batch_idx: int) -> None:
        """Log ``test/loss`` and update the test metrics for one batch."""
        self._step(batch, "test")

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """Drop Python objects (a backbone class, an optimizer passed in plain Python use) from the saved
        ``hyper_parameters``: pickled, they would make the checkpoint unloadable with
        ``weights_only=True``. The names of those that are not the defaults are kept in
        ``checkpoint["python_arguments"]`` (:meth:`on_load_checkpoint`). Built by the CLI, such arguments
        are configs and are kept."""
        hparams = checkpoint.get("hyper_parameters") or {}
        dropped = [name for name, value in hparams.items() if callable(value)]
        if own := [name for name in dropped if hparams[name] is not PYTHON_DEFAULTS.get(name)]:
            checkpoint["python_arguments"] = own
        for name in dropped:
            del hparams[name]

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """Say what a checkpoint of a model built in Python lacks: its ``optimizer`` and ``lr_scheduler``
        objects, which no checkpoint holds, when this instance has the defaults instead (``AdamW``,
        ``None``). Resuming ``fit`` so would train on without the schedule: ``ConfigError``; loading for
        evaluation (``load_from_checkpoint``) warns.

        Raises:
            ConfigError: ``Trainer.fit(ckpt_path=...)`` with such a model.
        """
        missing = [
            name
            for name in checkpoint.get("python_arguments", ())
            if name in PYTHON_DEFAULTS and getattr(self, name, None) is PYTHON_DEFAULTS[name]
        ]
        if not missing:
            return
        name, given = type(self).__name__, ", ".join(f"{name}=..." for name in missing)
        message = (
            f"{name}: the checkpoint's model was built in Python with its own {' and '.join(missing)}, "
            f"which a checkpoint cannot hold; this one has the defaults. Pass them again: "
            f"{name}.load_from_checkpoint(path, {given}) or {name}({given})"
        )
        with contextlib.suppress(RuntimeError):  # (not attached to a Trainer: load_from_checkpoint)
            if self.trainer.state.fn == "fit":
                raise ConfigError(message)
        warnings.warn(message, stacklevel=2)

    def setup(self, stage: str) -> None:
        """Set ``example_input_array`` (zeros ``[2, *dims]``) from the DataModule's ``dims`` (the shape
        of one input, e.g. ``(1, 8, 8)``): the model summary shows each layer's shapes, and ``export``
        traces it when the test split gives no input."""
        dims = getattr(getattr(self.trainer, "datamodule", None), "dims", None)
        if self.example_input_array is None and dims is not None:
            self.example_input_array = torch.zeros(2, *dims)

    def configure_optimizers(self) -> OptimizerLRScheduler:
        """Build the optimizer and the optional LR scheduler (see the class docstring).

        Raises:
            ConfigError: the optimizer or scheduler rejects its arguments (e.g. a negative ``lr``, or
                an endless run for a schedule sized in steps).
        """
        sized = sized_in_steps(self.lr_scheduler)
        steps = self.trainer.estimated_stepping_batches if sized else 1
        if not 1 <= steps < math.inf:
            trainer = self.trainer
            raise ConfigError(
                f"model.lr_scheduler is sized in optimizer steps and this run has {steps} (from "
                f"--trainer.max_epochs={trainer.max_epochs}, --trainer.max_steps={trainer.max_steps} and "
                f"--trainer.limit_train_batches={trainer.limit_train_batches}): give a finite run with "
                "training batches, or --model.lr_scheduler=null"
            )
        try:
            optimizer = self.optimizer(self.parameters())
            if self.lr_scheduler is None:
                return optimizer
            scheduler = self.lr_scheduler(optimizer, **({"total_steps": steps} if sized else {}))
        except (ValueError, TypeError) as error:
            raise ConfigError(
                f"model.optimizer / model.lr_scheduler: {error}. Fix the value in the config or on the "
                "command line (e.g. --model.optimizer.init_args.lr=0.001)."
            ) from error
        interval = "step" if sized else self.lr_scheduler_interval
        config: LRSchedulerConfigType = {"scheduler": scheduler, "interval": interval}
        if isinstance(scheduler, torch.optim.lr_scheduler.ReduceLROnPlateau):
            config["monitor"], config["interval"] = self.lr_scheduler_monitor, "epoch"
        return {"optimizer": optimizer, "lr_scheduler": config}


def sized_in_steps(scheduler: Callable[..., Any] | None) -> bool:
    """Whether ``scheduler`` (a ``partial`` of an LR scheduler class, as the config's or one written in
    Python) leaves its ``total_steps`` argument null: given as ``None`` (the config's), or not given
    where the class's default is ``None`` (``partial(WarmupCosineLR, warmup_steps=0.1)``,
    ``partial(OneCycleLR, max_lr=0.1)``, unless it is sized by ``epochs`` and ``steps_per_epoch``).
    Another callable may set it itself: ``False``."""
    keywords = getattr(scheduler, "keywords", None) or {}
    if "total_steps" in keywords or not isinstance(scheduler, functools.partial):
        return keywords.get("total_steps", False) is None
    parameter = inspect.signature(scheduler).parameters.get("total_steps")  # (keywords as the defaults)
    by_epochs = None not in map(keywords.get, ("epochs", "steps_per_epoch"))  # (OneCycleLR's other way)
    return parameter is not None and parameter.default is None and not by_epochs


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


#: The arguments of :class:`BaseDataModule` that its loaders take, as they are, from its attributes.
LOADER_ARGS = ("batch_size", "num_workers", "pin_memory", "persistent_workers", "prefetch_factor")


class BaseDataModule(LightningDataModule):
    """DataLoader settings shared by the DataModules (PRACTICES.md row 7).

    Subclasses set ``self.train_set``, ``self.val_set`` and ``self.test_set`` in ``setup``, and may set
    ``self.collate_fn`` (default ``None``: PyTorch's ``default_collate``), e.g. a padding one. The
    training loader is resumable from any step
    (``resumable_train_loader``, ``runwright.resume``); its shuffle seed is the ``seed_everything``
    value (``PL_GLOBAL_SEED``, else a random one), fixed at the first :meth:`train_dataloader` call and
    kept in checkpoints (:meth:`state_dict`).

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
        self.num_workers, self.pin_memory = num_workers, pin_memory
        self.persistent_workers, self.prefetch_factor = persistent_workers, prefetch_factor
        self.train_set: Dataset[Any] | None = None
        self.val_set: Dataset[Any] | None = None
        self.test_set: Dataset[Any] | None = None
        self.collate_fn: Callable[[list[Any]], Any] | None = None
        self.shuffle_seed: int | None = None
        self.predict_path = predict_path
        #: What :meth:`predict_dataloader` read from ``predict_path``, once it has: the inputs, one name per
        #: input (file name, ``file:line``) for the predictions CSV, and ``(file, reason)`` per skipped file.
        self.predict_inputs: PredictInputs | None = None

    def read_predict_inputs(self, path: Path) -> PredictInputs:
        """The new inputs at ``path`` (a file or a folder) for ``predict --data.predict_path``, converted
        exactly as the test split is (helpers: :mod:`runwright.inputs`). Called by
        :meth:`predict_dataloader` after ``setup``. Raises ``ConfigError`` unless overridden."""
        raise ConfigError(
            f"data.predict_path={str(path)!r}: {type(self).__name__} cannot read new inputs (it does not "
            "implement read_predict_inputs); predict on its test split without --data.predict_path"
        )

    def _loader(self, dataset: Dataset[Any] | None, split: str) -> DataLoader[Any]:
        if dataset is None:
            raise RuntimeError(f"the {split} split is not set up; call setup() for the right stage first")
        settings = {name: getattr(self, name) for name in (*LOADER_ARGS, "collate_fn")}
        if split != "train":
            # a generator of its own: creating an evaluation iterator (which draws the worker seed) leaves
            # the global generators, and so the training run's randomness, untouched; workers that outlive
            # a SIGTERM or Ctrl-C sent to the process group (a validation during fit stops cleanly)
            init = worker_init if self.num_workers > 0 else None
            return DataLoader(dataset, generator=torch.Generator(), worker_init_fn=init, **settings)
        if self.shuffle_seed is None:  # the seed_everything value, else a random one
            self.shuffle_seed = int(os.environ.get("PL_GLOBAL_SEED") or random.randrange(2**32))
        # the epoch of the first iterator, which Lightning creates before it calls `set_epoch` (after a
        # resume from an end-of-epoch checkpoint `current_epoch` is still the finished one here)
        progress = self.trainer.fit_loop.epoch_progress.current if self.trainer is not None else None
        epoch = int(getattr(progress, "processed", 0))
        return resumable_train_loader(dataset, self.shuffle_seed, epoch, **settings)

    def state_dict(self) -> dict[str, Any]:
        """``{"shuffle_seed": ...}`` once the training loader exists (Lightning saves it in checkpoints)."""
        return {} if self.shuffle_seed is None else {"shuffle_seed": self.shuffle_seed}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Take the checkpoint's ``shuffle_seed``, so a resumed run shuffles like the original one."""
        self.shuffle_seed = state_dict.get("shuffle_seed", self.shuffle_seed)

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
        if self.predict_path is not None and self.predict_inputs is None:
            self.predict_inputs = found = self.read_predict_inputs(Path(self.predict_path).expanduser())
            if getattr(self.trainer, "is_global_zero", True):  # once, not once per DDP process
                count = len(found.names)
                print(f"predict_path: {count} input{'s' * (count != 1)} from {self.predict_path}", flush=True)
                for file, reason in found.skipped:
                    print(f"Skipped {file}: {reason}", flush=True)
        return self._loader(self.predict_inputs.dataset if self.predict_inputs else self.test_set, "predict")
