"""The task-independent part of every LightningModule in this project.

A task subclasses :class:`BaseModule` and supplies the network (``forward``), the loss, the metrics and
how a batch is split into inputs and targets. Everything else (the metric-key scheme ``<stage>/<name>``,
the best-so-far validation metric, optimizer and LR-scheduler wiring from the config) lives here once.
"""

from __future__ import annotations

from typing import Any, Literal

import torch
from lightning.pytorch import LightningModule
from lightning.pytorch.cli import LRSchedulerCallable, OptimizerCallable
from lightning.pytorch.utilities.types import LRSchedulerConfigType, OptimizerLRScheduler
from torch import Tensor
from torchmetrics import MaxMetric, MeanMetric, MetricCollection, MinMetric

from project.errors import ConfigError

Stage = Literal["train", "val", "test"]


class BaseModule(LightningModule):
    """A LightningModule with one metric-key scheme and config-driven optimizers.

    Logged keys are ``train/loss``, ``val/loss``, ``test/loss`` and, for every metric ``m`` returned by
    :meth:`build_metrics`, ``train/m``, ``val/m``, ``test/m``. The best value of ``val/<best_metric>``
    seen so far is logged as ``val/<best_metric>_best`` (``val/acc_best`` for the classifier,
    ``val/mae_best`` for the regressor).

    Args:
        optimizer: A callable that takes the parameters and returns an optimizer; in YAML, a
            ``class_path`` such as ``torch.optim.AdamW`` with its ``init_args`` (LightningCLI's
            ``OptimizerCallable``). Default: AdamW with PyTorch's defaults (lr 1e-3, weight decay 1e-2).
        lr_scheduler: Optional callable that takes the optimizer and returns an LR scheduler
            (LightningCLI's ``LRSchedulerCallable``). ``ReduceLROnPlateau`` monitors
            ``lr_scheduler_monitor``. Leave it ``None`` when the warmup-cosine callback sets the LR.
        lr_scheduler_monitor: Metric that a ``ReduceLROnPlateau`` scheduler watches (default ``val/loss``).
        best_metric: Name (without stage prefix) of the validation metric tracked as ``val/<name>_best``;
            one of the keys of :meth:`build_metrics`. Keyword-only and required: each task states its
            own (the classifier ``acc``, the regressor ``mae``).
        best_mode: ``"max"`` if a larger ``best_metric`` is better (accuracy), ``"min"`` otherwise (MAE).
    """

    #: Metric inputs are held for up to this many batches and passed to the metrics in one update:
    #: each torchmetrics update costs 0.2-0.4 ms of Python on a CPU whatever its size (2-5% of a small
    #: model's step). 1 updates every batch.
    metric_update_batches: int = 16
    #: ...or sooner, once the held tensors have this many elements in all (so large per-sample
    #: outputs, such as segmentation masks, are passed on at every batch).
    metric_update_max_elements: int = 1 << 20

    def __init__(
        self,
        optimizer: OptimizerCallable = torch.optim.AdamW,
        lr_scheduler: LRSchedulerCallable | None = None,
        lr_scheduler_monitor: str = "val/loss",
        *,
        best_metric: str,
        best_mode: Literal["max", "min"],
    ) -> None:
        super().__init__()
        if best_mode not in ("max", "min"):
            raise ValueError(f"best_mode={best_mode!r}: must be 'max' (larger is better) or 'min'")
        self.optimizer = optimizer
        self.lr_scheduler = lr_scheduler
        self.lr_scheduler_monitor = lr_scheduler_monitor
        self.best_metric = best_metric
        self.best_mode = best_mode
        self.val_best = MaxMetric() if best_mode == "max" else MinMetric()

    # ----------------------------------------------------------------- to be provided by a task
    def build_metrics(self) -> MetricCollection:
        """Return the metrics computed for every stage (a fresh collection; it is cloned per stage)."""
        raise NotImplementedError

    def compute_loss(self, output: Tensor, target: Tensor) -> Tensor:
        """Return the scalar training loss for the network ``output`` and ``target`` of one batch."""
        raise NotImplementedError

    def split_batch(self, batch: Any) -> tuple[Any, Tensor]:
        """Return ``(inputs, target)`` of a batch; ``inputs`` is what :meth:`forward` takes.

        The default unpacks a 2-tuple ``(inputs, target)``. Override it for other layouts, e.g. the
        ``(padded, mask, lengths, target)`` batches of :class:`~project.data.collate.PadCollate`
        (see docs/extending.md).
        """
        inputs, target = batch
        return inputs, target

    def metric_inputs(self, output: Tensor, target: Tensor) -> tuple[Tensor, Tensor]:
        """Map ``(output, target)`` to the ``(preds, target)`` pair the metrics expect (identity here)."""
        return output, target

    # ----------------------------------------------------------------- shared wiring
    def setup_metrics(self) -> None:
        """Create one metric collection per stage; call at the end of a subclass ``__init__``."""
        metrics = self.build_metrics()
        if self.best_metric not in metrics:
            raise ValueError(
                f"best_metric={self.best_metric!r} is not one of this model's metrics "
                f"{sorted(str(key) for key in metrics)}; set it (and best_mode) in the config or with "
                "--model.best_metric=NAME --model.best_mode=min|max"
            )
        self.train_metrics = metrics.clone(prefix="train/")
        self.val_metrics = metrics.clone(prefix="val/")
        self.test_metrics = metrics.clone(prefix="test/")
        # Epoch-mean val/test loss over samples. nan_strategy="disable": a NaN loss stays NaN (the
        # default "warn" would drop it, and checks each value with a host-device sync).
        self.val_loss = MeanMetric(nan_strategy="disable")
        self.test_loss = MeanMetric(nan_strategy="disable")
        self._held: dict[Stage, list[tuple[Tensor, ...]]] = {"train": [], "val": [], "test": []}
        self._held_elements: dict[Stage, int] = {"train": 0, "val": 0, "test": 0}

    def _metrics(self, stage: Stage) -> MetricCollection:
        return {"train": self.train_metrics, "val": self.val_metrics, "test": self.test_metrics}[stage]

    def shared_step(self, batch: Any, stage: Stage) -> Tensor:
        """Forward one batch (split by :meth:`split_batch`), queue the metric inputs, log ``train/loss``.

        ``train/loss`` is logged on the steps the logger writes (every ``trainer.log_every_n_steps``)
        and on each epoch's last batch (the progress bar shows the latest of them). ``val/loss`` and
        ``test/loss`` are epoch means over samples (a ``MeanMetric``). The metrics and those means are
        fed a few batches at a time (:attr:`metric_update_batches`), then computed and logged once
        per epoch (:meth:`log_epoch_metrics`). So the hot path has no host-device synchronisation
        beyond what the progress bar asks for, no per-step ``self.log`` call and few metric updates:
        each costs 0.2-0.4 ms of Python on a CPU, 2-5% of a small model's step.
        """
        inputs, target = self.split_batch(batch)
        output = self(inputs)
        loss = self.compute_loss(output, target)
        if stage == "train" and self._logging_step():
            self.log("train/loss", loss, on_step=True, on_epoch=False, prog_bar=True)
        preds, metric_target = self.metric_inputs(output.detach(), target)
        held: tuple[Tensor, ...] = (preds, metric_target)
        if stage != "train":
            # One copy of the batch's mean loss per sample (a view), so batches count by size.
            # Not update(loss, weight=n): with nan_strategy="disable", torchmetrics 1.9 replaces the
            # weights by ones (Lightning-AI/torchmetrics#3434).
            held += (loss.detach().expand(len(metric_target)),)
        self._held[stage].append(held)
        self._held_elements[stage] += sum(tensor.numel() for tensor in held)
        if (
            len(self._held[stage]) >= self.metric_update_batches
            or self._held_elements[stage] >= self.metric_update_max_elements
        ):
            self.update_metrics(stage)
        return loss

    def update_metrics(self, stage: Stage) -> None:
        """Pass the held metric inputs of ``stage`` to its metrics (and loss mean), then drop them.

        Batches whose inputs have the same shape past the batch dimension are concatenated into one
        update; otherwise (e.g. variable-length sequences) each batch is its own update. Either way
        the results equal updating every batch: the metrics accumulate per-sample statistics.
        """
        held = self._held[stage]
        if not held:
            return
        columns = list(zip(*held, strict=True))
        if len(held) > 1 and all(_concatenable(column) for column in columns):
            held = [tuple(torch.cat(column) for column in columns)]
        metrics = self._metrics(stage)
        for preds, target, *loss in held:
            metrics.update(preds, target)
            if loss and stage != "train":
                self._loss_mean(stage).update(loss[0])
        self._held[stage] = []
        self._held_elements[stage] = 0

    def _loss_mean(self, stage: Literal["val", "test"]) -> MeanMetric:
        return self.val_loss if stage == "val" else self.test_loss

    def _logging_step(self) -> bool:
        """Whether to log this training step: the logger writes it (Lightning's own rule, the one its
        ``LearningRateMonitor`` uses), or it is the epoch's last batch (so ``callback_metrics`` and the
        progress bar end each epoch with its last loss); ``True`` outside a trainer."""
        trainer = self._trainer
        if trainer is None:
            return True
        return bool(trainer._logger_connector.should_update_logs or trainer.is_last_batch)

    def log_epoch_metrics(self, stage: Stage) -> dict[str, Tensor]:
        """Compute the stage's metrics over the epoch (synced across processes by torchmetrics), log
        them as ``<stage>/<name>`` (plus ``<stage>/loss`` for val and test), reset them, and return
        the computed values (0-dim tensors)."""
        self.update_metrics(stage)
        metrics = self._metrics(stage)
        values = dict(metrics.compute())
        metrics.reset()
        if stage != "train":
            loss_mean = self._loss_mean(stage)
            if loss_mean.update_called:  # not when the epoch had no batches
                values[f"{stage}/loss"] = loss_mean.compute()
            loss_mean.reset()
        # The values are already global; sync_dist only silences Lightning's DDP epoch-level warning.
        self.log_dict(values, prog_bar=stage != "train", sync_dist=True)
        return values

    def training_step(self, batch: Any, batch_idx: int) -> Tensor:
        """Return the training loss of one batch (a scalar ``float32`` tensor that requires grad)."""
        return self.shared_step(batch, "train")

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        """Log ``val/loss`` and update validation metrics for one batch."""
        self.shared_step(batch, "val")

    def test_step(self, batch: Any, batch_idx: int) -> None:
        """Log ``test/loss`` and update test metrics for one batch."""
        self.shared_step(batch, "test")

    def setup(self, stage: str) -> None:
        """Set ``example_input_array`` (zeros ``[2, *dims]``) from the datamodule's ``dims``.

        With it, Lightning's model summary shows each layer's input and output shapes. Only set when the
        datamodule declares ``dims`` (the shape of one input, e.g. ``(1, 8, 8)``) and nothing set it yet.
        """
        datamodule = getattr(self._trainer, "datamodule", None) if self._trainer is not None else None
        dims = getattr(datamodule, "dims", None)
        if self.example_input_array is None and dims is not None:
            self.example_input_array = torch.zeros(2, *dims)

    def on_train_start(self) -> None:
        """Forget the sanity-check validation values so ``val/*_best`` only tracks real epochs."""
        self.val_best.reset()

    def on_train_epoch_end(self) -> None:
        """Log the epoch's ``train/<metric>`` values."""
        self.log_epoch_metrics("train")

    def on_validation_epoch_end(self) -> None:
        """Log ``val/<metric>`` and ``val/<best_metric>_best``: the best epoch value of
        ``val/<best_metric>`` so far (not updated by the sanity check)."""
        values = self.log_epoch_metrics("val")
        key = f"val/{self.best_metric}"
        if key not in values:
            names = sorted(name.removeprefix("val/") for name in values)
            raise KeyError(f"best_metric={self.best_metric!r} is not one of this model's metrics {names}")
        if self.trainer.sanity_checking:
            return
        self.val_best.update(values[key])
        self.log(f"val/{self.best_metric}_best", self.val_best.compute(), prog_bar=True)

    def on_test_epoch_end(self) -> None:
        """Log the epoch's ``test/<metric>`` values."""
        self.log_epoch_metrics("test")

    def configure_optimizers(self) -> OptimizerLRScheduler:
        """Build the optimizer (and optional LR scheduler) from the callables given in the config.

        Raises:
            ConfigError: the optimizer or scheduler rejects its arguments (e.g. a negative ``lr``).
        """
        try:
            optimizer = self.optimizer(self.parameters())
            scheduler = None if self.lr_scheduler is None else self.lr_scheduler(optimizer)
        except (ValueError, TypeError) as error:
            raise ConfigError(
                f"model.optimizer / model.lr_scheduler: {error}. Fix the value in the config or on the "
                "command line (e.g. --model.optimizer.init_args.lr=0.001)."
            ) from error
        if scheduler is None:
            return optimizer
        config: LRSchedulerConfigType = {"scheduler": scheduler}
        if isinstance(scheduler, torch.optim.lr_scheduler.ReduceLROnPlateau):
            config["monitor"] = self.lr_scheduler_monitor
            config["interval"] = "epoch"
        return {"optimizer": optimizer, "lr_scheduler": config}


def _concatenable(tensors: tuple[Tensor, ...]) -> bool:
    """Whether ``torch.cat`` can join these tensors along dim 0 without changing any of them: at
    least 1-d, and the same dtype, device and shape past the first dimension."""
    first = tensors[0]
    return first.dim() > 0 and all(
        t.dim() == first.dim()
        and t.shape[1:] == first.shape[1:]
        and t.dtype == first.dtype
        and t.device == first.device
        for t in tensors
    )
