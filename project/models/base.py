"""The task-independent part of every LightningModule in this project.

A task subclasses :class:`BaseModule`, builds the network and its metrics in ``__init__`` and passes the
metrics up; it supplies ``forward``, the loss and how a batch is split into inputs and targets.
Everything else (the metric keys ``<stage>/<name>``, the best-so-far validation metric, optimizer and
LR-scheduler wiring from the config) lives here once, written the way Lightning's examples write it.
"""

from __future__ import annotations

import inspect
from typing import Any, Literal

import torch
from lightning.pytorch import LightningModule
from lightning.pytorch.cli import LRSchedulerCallable, OptimizerCallable
from lightning.pytorch.utilities.types import LRSchedulerConfigType, OptimizerLRScheduler
from torch import Tensor
from torchmetrics import MaxMetric, MeanMetric, MetricCollection, MinMetric

from ..errors import ConfigError


class BaseModule(LightningModule):
    """A LightningModule with one metric-key scheme and config-driven optimizers.

    Logged keys: ``train/loss`` (every step), ``val/loss`` and ``test/loss`` (epoch means over samples)
    and, for every metric ``m`` of ``metrics``, ``train/m``, ``val/m``, ``test/m`` (epoch values). The
    best epoch value of ``val/<best_metric>`` so far is logged as ``val/<best_metric>_best``; it is part
    of the model's state, so it survives a resume.

    Args:
        optimizer: A callable that takes the parameters and returns an optimizer; in YAML a
            ``class_path`` such as ``torch.optim.AdamW`` with its ``init_args`` (LightningCLI's
            ``OptimizerCallable``). Default: AdamW with PyTorch's defaults (lr 1e-3, weight decay 1e-2).
        lr_scheduler: Optional callable that takes the optimizer and returns an LR scheduler
            (LightningCLI's ``LRSchedulerCallable``). Leave it ``None`` while the warmup-cosine
            callback sets the LR (``--lr_schedule.enabled=false`` turns that off).
        lr_scheduler_interval: ``"step"`` steps the scheduler after every optimizer step, ``"epoch"``
            after every epoch (Lightning's ``interval``). ``ReduceLROnPlateau`` always steps per epoch.
        lr_scheduler_monitor: Metric that a ``ReduceLROnPlateau`` scheduler watches.
        metrics: The metrics computed for every stage (cloned per stage); keyword-only.
        best_metric: Name (without stage prefix) of the metric tracked as ``val/<name>_best``; one of
            the keys of ``metrics``. Linked into the checkpoint's ``monitor`` by the CLI.
        best_mode: ``"max"`` if a larger ``best_metric`` is better (accuracy), ``"min"`` otherwise (MAE).

    Raises:
        ValueError: ``best_metric`` is not a key of ``metrics``, or a bad ``best_mode`` or interval.
    """

    def __init__(
        self,
        optimizer: OptimizerCallable = torch.optim.AdamW,
        lr_scheduler: LRSchedulerCallable | None = None,
        lr_scheduler_interval: Literal["step", "epoch"] = "epoch",
        lr_scheduler_monitor: str = "val/loss",
        *,
        metrics: MetricCollection,
        best_metric: str,
        best_mode: Literal["max", "min"],
    ) -> None:
        super().__init__()
        if best_mode not in ("max", "min"):
            raise ValueError(f"best_mode={best_mode!r}: must be 'max' (larger is better) or 'min'")
        if lr_scheduler_interval not in ("step", "epoch"):
            raise ValueError(f"lr_scheduler_interval={lr_scheduler_interval!r}: must be 'step' or 'epoch'")
        if best_metric not in metrics:
            raise ValueError(
                f"best_metric={best_metric!r} is not one of this model's metrics "
                f"{sorted(map(str, metrics.keys()))}; set --model.best_metric=NAME and "
                "--model.best_mode=min|max"
            )
        self.optimizer = optimizer
        self.lr_scheduler = lr_scheduler
        self.lr_scheduler_interval = lr_scheduler_interval
        self.lr_scheduler_monitor = lr_scheduler_monitor
        self.best_metric = best_metric
        self.best_mode = best_mode
        self.train_metrics = metrics.clone(prefix="train/")
        self.val_metrics = metrics.clone(prefix="val/")
        self.test_metrics = metrics.clone(prefix="test/")
        # MeanMetric, not self.log(sync_dist=True): Lightning 2.6 averages the per-process sample
        # counts as integers, so 180 + 179 samples count as 2 x 179 and the DDP mean comes out wrong
        self.val_loss, self.test_loss = MeanMetric(), MeanMetric()
        self.val_best = MaxMetric() if best_mode == "max" else MinMetric()
        self.val_best.persistent(True)  # saved in checkpoints: the best so far survives a resume

    # ----------------------------------------------------------------- to be provided by a task
    def compute_loss(self, output: Tensor, target: Tensor) -> Tensor:
        """Return the scalar loss for the network ``output`` and ``target`` of one batch."""
        raise NotImplementedError

    def split_batch(self, batch: Any) -> tuple[Any, Tensor]:
        """Return ``(inputs, target)`` of a batch; ``inputs`` is what :meth:`forward` takes.

        The default unpacks a 2-tuple. Override it for other layouts, e.g. the
        ``(padded, mask, lengths, target)`` batches of :class:`~project.data.collate.PadCollate`.
        """
        inputs, target = batch
        return inputs, target

    def metric_inputs(self, output: Tensor, target: Tensor) -> tuple[Tensor, Tensor]:
        """Map ``(output, target)`` to the ``(preds, target)`` the metrics take (identity here)."""
        return output, target

    # ----------------------------------------------------------------- steps
    def _step(self, batch: Any, stage: Literal["train", "val", "test"]) -> Tensor:
        inputs, target = self.split_batch(batch)
        output = self(inputs)
        loss = self.compute_loss(output, target)
        metrics: MetricCollection = getattr(self, f"{stage}_metrics")
        metrics.update(*self.metric_inputs(output.detach(), target))
        # Metric objects logged on_epoch: Lightning computes, logs and resets them at the epoch's end
        # (and logs nothing for an epoch without batches).
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

    def on_validation_epoch_end(self) -> None:
        """Log ``val/<best_metric>_best``, the best epoch value so far (the sanity check excluded)."""
        if self.trainer.sanity_checking or not self.val_metrics[self.best_metric].update_called:
            return
        self.val_best.update(self.val_metrics[self.best_metric].compute())
        self.log(f"val/{self.best_metric}_best", self.val_best.compute(), prog_bar=True)

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """Keep in the saved ``hyper_parameters`` only what ``load_from_checkpoint`` can use safely.

        Dropped: values that are not arguments of this class (the CLI's links record ``None`` for
        targets a class does not take, e.g. ``num_classes`` for a regressor; with ``**kwargs``, the
        ``None`` values it does not name), and Python objects such
        as a backbone class or an optimizer passed in plain Lightning use (pickled, they would make the
        checkpoint unloadable with ``weights_only=True``; the class's defaults are used on reload, so
        pass other values again: ``load_from_checkpoint(path, backbone=...)``). Built by the CLI, such
        arguments are configs (``class_path``, ``init_args``) and are kept.
        """
        parameters = inspect.signature(type(self)).parameters
        any_name = any(p.kind is p.VAR_KEYWORD for p in parameters.values())
        hparams = checkpoint.get("hyper_parameters") or {}
        for name, value in list(hparams.items()):
            # (a class with **kwargs: a None it does not name is a link target it does not take)
            unknown = not (name in parameters or name.startswith("_") or (any_name and value is not None))
            if unknown or callable(value):
                del hparams[name]

    def setup(self, stage: str) -> None:
        """Set ``example_input_array`` (zeros ``[2, *dims]``) from the DataModule's ``dims`` (the shape
        of one input, e.g. ``(1, 8, 8)``), so the model summary shows each layer's input/output shape."""
        dims = getattr(getattr(self.trainer, "datamodule", None), "dims", None)
        if self.example_input_array is None and dims is not None:
            self.example_input_array = torch.zeros(2, *dims)

    def configure_optimizers(self) -> OptimizerLRScheduler:
        """Build the optimizer (and optional LR scheduler, stepped every ``lr_scheduler_interval``).

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
        config: LRSchedulerConfigType = {"scheduler": scheduler, "interval": self.lr_scheduler_interval}
        if isinstance(scheduler, torch.optim.lr_scheduler.ReduceLROnPlateau):
            config["monitor"], config["interval"] = self.lr_scheduler_monitor, "epoch"
        return {"optimizer": optimizer, "lr_scheduler": config}
