"""Checkpoint files: the run's ``best.ckpt`` and ``last.ckpt`` callbacks, atomic writes, safe loading, and
another run's weights loaded into a new run (``fit --init_from``)."""

from __future__ import annotations

import os
import pickle
import zipfile
from pathlib import Path
from typing import Any

import torch
from lightning.fabric.plugins import TorchCheckpointIO
from lightning.pytorch import Callback, LightningDataModule, LightningModule, Trainer
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.loggers import TensorBoardLogger
from lightning.pytorch.utilities import rank_zero_only
from torch import nn

from . import private
from .errors import CheckpointError, ConfigError
from .provenance import warn_on_version_change
from .runs import write_atomically


class RunCheckpoint(ModelCheckpoint):
    """``ModelCheckpoint`` whose file is in ``dirpath`` itself: a ``/`` in the formatted name (a metric
    key such as ``val/acc`` in ``filename='{epoch}-{val/acc:.2f}'``) becomes ``_`` (``val_acc=0.25``)."""

    def format_checkpoint_name(self, metrics: dict[str, torch.Tensor], *args: Any, **kwargs: Any) -> str:
        """Lightning's name, ``/`` in its file name replaced by ``_``."""
        path = super().format_checkpoint_name(metrics, *args, **kwargs)
        folder = os.path.join(self.dirpath, "") if self.dirpath else ""
        return folder + path[len(folder) :].replace("/", "_")

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """``ModelCheckpoint``'s, also for a run folder moved since the checkpoint was saved: when this
        ``dirpath`` is not the saved one but holds the saved ``best_model_path``'s file, the saved files are
        taken as this folder's (Lightning would keep only the old ``best_model_path``, so the resumed run
        forgot its best score and wrote ``best-v1.ckpt`` beside ``best.ckpt``)."""
        saved, best = state_dict.get("dirpath"), state_dict.get("best_model_path") or ""
        here = Path(self.dirpath or "")
        if (
            self.dirpath
            and saved
            and saved != self.dirpath
            and Path(best).parent == Path(saved)
            and (here / Path(best).name).is_file()
        ):

            def moved(path: str | None) -> str | None:
                return str(here / Path(path).name) if path else path

            keys = ("best_model_path", "kth_best_model_path", "last_model_path")
            state_dict = {
                **state_dict,
                "dirpath": self.dirpath,
                **{k: moved(state_dict.get(k)) for k in keys},
            }
            state_dict["best_k_models"] = {
                moved(k): v for k, v in state_dict.get("best_k_models", {}).items()
            }
        super().load_state_dict(state_dict)


class BestCheckpoint(RunCheckpoint):
    """The run's best checkpoint (``--checkpoint.*``; ``checkpoints/best.ckpt`` by default): Lightning's
    ``ModelCheckpoint`` by ``checkpoint.monitor``/``mode`` (set in your config, e.g. ``val/acc``/``max``).

    Each time it has scored a checkpoint it hands the loggers ``best/<monitor>`` (e.g. ``best/val/acc``):
    its own record of the best score so far (``best_model_score``, this epoch's included), the score of
    the checkpoint ``--ckpt_path best`` takes, whichever hook the model logs the monitor in. It is written
    to the loggers directly (never through the model, so it cannot collide with a key the model logs),
    at the step of the validation it follows; under DDP it is rank 0's record, the one that chose the
    file. Its state key starts with its class name (Lightning's ``ModelCheckpoint.state_key``), so a
    ``ModelCheckpoint`` the user adds in ``trainer.callbacks`` never takes its place.

    A ``val...`` monitor with a step or time trigger (``every_n_train_steps``, ``train_time_interval``)
    stops ``fit`` with a :class:`~runwright.errors.ConfigError`: between validations such a checkpoint
    would be scored with the last validation's value, computed on other weights (so ``--ckpt_path
    best`` could take a step whose score is not the best logged). ``best.ckpt`` is considered after
    every validation already; a periodic resumable checkpoint is ``LastCheckpoint``'s.
    """

    #: The prefix of the logged key: ``best/<monitor>``.
    PREFIX = "best/"
    #: The global step last scored, and last logged (set on the instance).
    _scored_step = _logged_step = -1

    @property
    def best_key(self) -> str | None:
        """The logged key of the best score, ``best/<monitor>`` (``None`` without a monitor)."""
        return None if self.monitor is None else f"{self.PREFIX}{self.monitor}"

    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        """Refuse a step or time trigger with a monitor that validation logs (see the class). In a ``fit``
        without validation (no ``validation_step``, no val loader, or ``limit_val_batches=0``) a
        ``val...`` monitor can never be logged: choose by none (``best.ckpt`` is then the latest epoch's)
        and say so in one line."""
        super().setup(trainer, pl_module, stage)
        trigger = private.step_or_time_trigger(self)
        if stage == "fit" and trigger is not None and str(self.monitor).startswith("val"):
            raise ConfigError(
                f"--checkpoint.{trigger}: best.ckpt is scored by {self.monitor}, which only a validation "
                "computes, so a checkpoint between validations would be scored with an earlier validation's "
                "value, of other weights. best.ckpt is considered after every validation already "
                "(--trainer.val_check_interval=N validates every N steps); for a periodic resumable "
                f"checkpoint use --last_checkpoint.{trigger}."
            )
        data, limit = getattr(trainer, "datamodule", None), trainer.limit_val_batches
        if stage == "fit" and str(self.monitor).startswith("val") and not validates(pl_module, data, limit):
            rank_zero_only(print)(
                f"--checkpoint.monitor={self.monitor}: {type(pl_module).__name__} has no validation loop, so "
                "best.ckpt is the latest epoch's (set --checkpoint.monitor to a value training_step logs "
                "to choose by it)",
                flush=True,
            )
            self.monitor = None

    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        """Give each TensorBoard logger's HPARAMS tab the best score as its metric (Lightning writes the
        hyperparameters there only with a metric; ``default_hp_metric=False`` leaves none), so runs compare
        by ``best/<monitor>`` there (its first value NaN, at step 0)."""
        if not (trainer.is_global_zero and self.best_key):
            return
        for logger in trainer.loggers:
            if isinstance(logger, TensorBoardLogger):
                logger.log_hyperparams(
                    logger.hparams or pl_module.hparams_initial, {self.best_key: float("nan")}
                )

    def on_sanity_check_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        """Stop before training when validation did not log a ``val...`` monitor (a monitor of training,
        not logged yet, is checked at the first validation instead; so is any with several validation
        loaders, of whose sanity check Lightning keeps no values)."""
        if str(self.monitor).startswith("val") and len(trainer.num_sanity_val_batches) < 2:
            self.check_monitor_logged(trainer)

    def on_validation_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        """Check the monitor, save as ``ModelCheckpoint`` does, then log the best score."""
        if not trainer.sanity_checking:
            self.check_monitor_logged(trainer)
        super().on_validation_end(trainer, pl_module)
        self._log_best(trainer)

    def on_train_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        """Save as ``ModelCheckpoint`` does (after a validation at the epoch's end, or without validation,
        it saves here), then log the best score."""
        super().on_train_epoch_end(trainer, pl_module)
        self._log_best(trainer, epoch_end=True)

    def on_train_batch_end(self, trainer: Trainer, pl_module: LightningModule, *args: Any) -> None:
        """Save as ``ModelCheckpoint`` does (``every_n_train_steps``), then log the best score."""
        super().on_train_batch_end(trainer, pl_module, *args)
        self._log_best(trainer)

    def check_monitor_top_k(self, trainer: Trainer, current: torch.Tensor | None = None) -> bool:
        """``ModelCheckpoint``'s decision whether ``current`` enters the top k; notes that this step was
        scored (its best score is then logged)."""
        self._scored_step = trainer.global_step
        return super().check_monitor_top_k(trainer, current)

    def _log_best(self, trainer: Trainer, epoch_end: bool = False) -> None:
        """Log the best score once after each step whose monitor value was scored (only one with a monitor
        is scored)."""
        step = trainer.global_step
        if self._scored_step != step or self._logged_step == step or self.best_model_score is None:
            return
        self._logged_step = step
        private.log_metrics(trainer, {str(self.best_key): float(self.best_model_score)}, epoch_end)

    def check_monitor_logged(self, trainer: Trainer) -> None:
        """Raise :class:`~runwright.errors.ConfigError` naming ``--checkpoint.monitor``, the closest logged
        key and the logged keys when the monitor (not ``None``) is not among the values logged so far
        (Lightning would raise at its first checkpoint, after a whole epoch of training)."""
        if self.monitor is not None:
            option, off = f"--checkpoint.monitor={self.monitor}", "pass --checkpoint.monitor=null"
            check_logged(trainer, option, self.monitor, "--checkpoint.mode", off)


def validates(model: Any, data: Any, limit_val_batches: float | None) -> bool:
    """Whether ``fit`` runs validation: the model (a LightningModule or its class) has a
    ``validation_step``, the DataModule (or its class; without one, the model) a ``val_dataloader``, and
    ``limit_val_batches`` is not 0."""

    def overrides(owner: Any, name: str) -> bool:
        cls = owner if isinstance(owner, type) else type(owner)
        base = LightningDataModule if issubclass(cls, LightningDataModule) else LightningModule
        return getattr(cls, name) is not getattr(base, name)

    validation = overrides(model, "validation_step") and overrides(data or model, "val_dataloader")
    return validation and limit_val_batches != 0


def check_logged(trainer: Trainer, option: str, monitor: str, mode: str, off: str) -> None:
    """Raise :class:`~runwright.errors.ConfigError` for ``option`` (``--checkpoint.monitor=...``, an
    ``EarlyStopping``'s ``monitor``) when ``monitor`` is not among the values logged so far: one line with
    the closest logged key, the logged keys, ``mode`` (the option that goes with a monitor) and ``off``
    (how to do without it)."""
    logged = list(trainer.callback_metrics)
    if monitor in (*logged, "epoch", "step"):
        return
    from .parser import closest, did_you_mean

    given = f"{option}: the model logs no such value"
    step = "validation_step" if monitor.startswith("val") else "training_step"
    log = f"log {monitor} with self.log in {step}"
    if not logged:
        raise ConfigError(f"{given} (it logged nothing): {log}, or {off}")
    raise ConfigError(
        f"{given}{did_you_mean(closest(monitor, logged))} (it logged {', '.join(logged)}): pass one "
        f"of them with {mode}=min or max, or {log}"
    )


class EarlyStoppingMonitorCheck(Callback):
    """Stop at the sanity check (without one, or with several validation loaders, at the first
    validation) when an ``EarlyStopping`` of ``trainer.callbacks`` (``strict``, the default) monitors a
    ``val...`` value that validation did not log: one ``ConfigError`` line naming the callback, the
    closest logged key and the logged keys, as for ``--checkpoint.monitor``. Lightning would raise a
    ``RuntimeError`` after a whole epoch of training.

    Must come before the ``EarlyStopping`` callbacks in ``trainer.callbacks`` (the CLI puts it first)."""

    checked = False  # (set on the instance once checked)

    def _check(self, trainer: Trainer) -> None:
        self.checked = True
        for callback in trainer.early_stopping_callbacks:
            if callback.strict and str(callback.monitor).startswith("val"):
                option = f"trainer.callbacks: EarlyStopping(monitor={callback.monitor})"
                check_logged(trainer, option, callback.monitor, "EarlyStopping's mode", "remove it")

    def on_sanity_check_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if len(trainer.num_sanity_val_batches) < 2:  # (else Lightning keeps no values of it)
            self._check(trainer)

    def on_validation_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if not trainer.sanity_checking and not self.checked:
            self._check(trainer)


class LastCheckpoint(RunCheckpoint):
    """The ``ModelCheckpoint`` that writes ``checkpoints/last.ckpt`` (``runwright/defaults.yaml`` sets
    ``monitor: null``, ``save_top_k: 1``, ``filename: last``), never scored: at the end of every epoch
    (every ``every_n_epochs``-th), also when validation runs within epochs (``val_check_interval``;
    Lightning then saves only after validations), or with ``every_n_train_steps=N`` /
    ``train_time_interval`` every N training steps / that often instead; and in every case at the end
    of the run, so that ``last.ckpt`` is always the run's last step. ``every_n_epochs=0`` alone turns
    it off.

    Its state key starts with its class name (``LastCheckpoint{...}``), so a user's ``ModelCheckpoint``
    with the same settings (e.g. one that keeps every epoch) can be added next to it.
    """

    def on_validation_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        """Save as ``ModelCheckpoint`` does; with a step or time trigger that saved at this step, before a
        validation within the epoch, save again, so that a resume continues from its best score."""
        super().on_validation_end(trainer, pl_module)
        if (
            private.step_or_time_trigger(self) is not None
            and not trainer.fit_loop.epoch_loop.batch_progress.is_last_batch
        ):
            private.save_again(self, trainer)

    def on_train_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        """Save at the epoch's end (if it is an ``every_n_epochs``-th), unless saved at this step; with a
        step or time trigger that saved at the epoch's last step, save again (after the epoch's
        validation and the best checkpoint's choice, which a resume continues from). Not after a stop
        within the epoch (``max_steps``): a file saved here resumes at the next epoch."""
        super().on_train_epoch_end(trainer, pl_module)
        if self.every_n_epochs and (trainer.current_epoch + 1) % self.every_n_epochs == 0:
            private.save_unless_saved(self, trainer)
        elif (
            private.step_or_time_trigger(self) is not None
            and trainer.fit_loop.epoch_loop.batch_progress.is_last_batch
        ):
            private.save_again(self, trainer)

    def on_train_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        """Save the run's last step, unless saved at it (or turned off)."""
        super().on_train_end(trainer, pl_module)
        if self.every_n_epochs or private.step_or_time_trigger(self) is not None:
            private.save_unless_saved(self, trainer)


class AtomicCheckpointIO(TorchCheckpointIO):
    """``torch.save`` into a temporary file next to the target, then ``os.replace`` it into place
    (:func:`~runwright.runs.write_atomically`).

    A crash, a kill or a full disk while a checkpoint is written leaves the previous ``last.ckpt`` (or
    best) intact instead of a truncated file; ``os.replace`` is atomic on POSIX and Windows for paths on
    one filesystem. Remote paths (``s3://...``) fall back to Lightning's default writer.

    With ``callback_states=False`` (``validate``, ``test``, ``predict``) a loaded checkpoint comes without
    its callbacks' states, which only a resumed ``fit`` uses: Lightning would otherwise warn about every
    callback of the run (its EMA, a checkpoint callback of another monitor) that the command lacks.
    """

    def __init__(self, callback_states: bool = True) -> None:
        super().__init__()
        self.callback_states = callback_states

    def load_checkpoint(self, path: str | Path, *args: Any, **kwargs: Any) -> dict[str, Any]:
        """Lightning's load, without the ``callbacks`` states unless ``callback_states``."""
        checkpoint = super().load_checkpoint(path, *args, **kwargs)
        if not self.callback_states:
            checkpoint.pop("callbacks", None)
        return checkpoint

    def save_checkpoint(
        self, checkpoint: dict[str, Any], path: str | Path, storage_options: Any | None = None
    ) -> None:
        """Write ``checkpoint`` to ``path`` atomically (raises what ``torch.save`` raises; an
        ``OSError``, e.g. a full disk, names ``path``)."""
        if "://" in str(path) or storage_options is not None:
            super().save_checkpoint(checkpoint, path, storage_options)
            return
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)

        def save(temporary: Path) -> None:
            with temporary.open("wb") as handle:  # (into a path, torch names no file when the disk is full)
                torch.save(checkpoint, handle)

        write_atomically(target, save)


def load_checkpoint(path: str | Path, weights_only: bool | None = True) -> dict[str, Any]:
    """Load a checkpoint on the CPU, memory-mapped (cheap even for large files), with clear errors.

    With ``weights_only`` true (or ``None``) only tensors and plain containers are unpickled, so a
    file cannot run code (PRACTICES.md row 15); ``weights_only=False`` is the explicit trust flag.
    Warns (once per file) when it was saved under another major.minor version of torch or Lightning.

    Raises:
        CheckpointError: the file does not exist, is truncated or corrupt, or needs arbitrary
            unpickling while ``weights_only`` is not ``False``.
    """
    file = Path(path)
    if not file.is_file():
        raise CheckpointError(f"checkpoint {str(file)!r} does not exist")
    safe = weights_only is not False
    try:
        checkpoint: dict[str, Any] = torch.load(file, map_location="cpu", weights_only=safe, mmap=True)
    except pickle.UnpicklingError as error:
        unsafe = torch.serialization.get_unsafe_globals_in_checkpoint(file) if safe else []
        if unsafe:
            raise CheckpointError(
                f"checkpoint {str(file)!r} holds Python objects ({', '.join(unsafe[:3])}) that only a full "
                "unpickle can load, and unpickling can run arbitrary code. If you trust this file, pass "
                "--weights_only=false."
            ) from None
        raise CheckpointError(f"checkpoint {str(file)!r} is corrupt: {error}") from None
    except (RuntimeError, EOFError, OSError, ValueError, zipfile.BadZipFile) as error:
        raise CheckpointError(
            f"checkpoint {str(file)!r} is not a readable PyTorch checkpoint (truncated or corrupt? "
            f"{type(error).__name__}: {str(error).splitlines()[0]})"
        ) from None
    warn_on_version_change(checkpoint, file)  # saved under another torch/Lightning major.minor
    return checkpoint


def load_matching_weights(model: nn.Module, checkpoint: dict[str, Any], path: str | Path) -> str:
    """Load into ``model`` every tensor of the checkpoint's ``state_dict`` whose key and shape match
    (``fit --init_from``: a new run from another run's weights, e.g. a new head size); the others keep
    their initial values. Returns one line naming what was loaded and every key left out.

    Raises:
        CheckpointError: the checkpoint has no ``state_dict``, or none of its tensors fits ``model``.
    """
    if "state_dict" not in checkpoint:
        raise CheckpointError(
            f"--init_from={path}: no 'state_dict' in the checkpoint: not a Lightning checkpoint"
        )
    saved, own = checkpoint["state_dict"], model.state_dict()
    loaded = {key: value for key, value in saved.items() if key in own and value.shape == own[key].shape}
    if not loaded:
        raise CheckpointError(
            f"--init_from={path}: none of its {len(saved)} tensors fits {type(model).__name__} (no key with "
            "the same name and shape); is it a checkpoint of this kind of model?"
        )
    model.load_state_dict(loaded, strict=False)
    shapes = [
        f"{key} {list(saved[key].shape)} vs {list(own[key].shape)}"
        for key in own
        if key in saved and key not in loaded
    ]
    left = {
        "other shape, initialised anew": shapes,
        "not in the checkpoint, initialised anew": [key for key in own if key not in saved],
        "not in the model, unused": [key for key in saved if key not in own],
    }
    parts = [f"{what}: {', '.join(keys)}" for what, keys in left.items() if keys]
    return f"--init_from: {len(loaded)} of {len(own)} tensors of {type(model).__name__} from {path}" + (
        f"; {'; '.join(parts)}" if parts else " (all)"
    )
