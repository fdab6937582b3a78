"""Tabular regression: a multilayer perceptron with mean-squared-error loss."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import torch
from lightning.pytorch.cli import LRSchedulerCallable, OptimizerCallable
from runwright import BaseModule
from torch import Tensor, nn
from torchmetrics import MeanAbsoluteError, MeanSquaredError, MetricCollection, R2Score


class TabularRegressor(BaseModule):
    """Predict one real number from a feature vector with an MLP trained on mean squared error.

    Network: ``[Linear(in, h) -> ReLU -> Dropout]`` for each ``h`` in ``hidden_sizes``, then
    ``Linear(h_last, 1)``; with ``hidden_sizes=[]`` it is linear regression.

    Target units: the DataModule may standardise the target (``y_std = (y - mean) / std``,
    see :class:`~project.data.DiabetesDataModule`). At :meth:`setup` the model copies the
    DataModule's ``target_mean`` and ``target_std`` (if it has them) into buffers, which are saved in
    checkpoints.
    The network and the loss work on the standardised scale; the metrics and ``predict`` outputs are
    mapped back to the original units (``y = y_std * std + mean``).

    Logged metrics: ``<stage>/loss`` (MSE on the standardised scale), ``<stage>/mae`` (mean absolute
    error), ``<stage>/rmse`` (root mean squared error; both in the target's original units),
    ``<stage>/r2`` (coefficient of determination, unitless; 1 is perfect, 0 is predicting the mean of
    the evaluated split) for ``stage`` in train/val/test.

    Args:
        in_features: Number of input features ``F`` (linked from the DataModule's ``num_features``).
        hidden_sizes: Widths of the hidden layers.
        dropout: Dropout probability after each hidden layer.
        optimizer, lr_scheduler, lr_scheduler_interval, lr_scheduler_monitor: see
            :class:`~runwright.BaseModule`.

    Shapes:
        ``forward``: features ``[B, F]`` float -> predictions ``[B]`` float (standardised scale).
        batches: ``(features [B, F] float32, target [B] float32)``.
    """

    target_mean: Tensor
    target_std: Tensor
    #: Input and output names of an exported (ONNX) model (the ``export`` command).
    export_names = ("features", "predictions")

    def __init__(
        self,
        in_features: int = 10,
        hidden_sizes: Sequence[int] = (64, 64),
        dropout: float = 0.1,
        optimizer: OptimizerCallable = torch.optim.AdamW,
        lr_scheduler: LRSchedulerCallable | None = None,
        lr_scheduler_interval: Literal["step", "epoch"] = "epoch",
        lr_scheduler_monitor: str = "val/loss",
    ) -> None:
        metrics = MetricCollection(
            {"mae": MeanAbsoluteError(), "rmse": MeanSquaredError(squared=False), "r2": R2Score()}
        )
        super().__init__(
            optimizer, lr_scheduler, lr_scheduler_interval, lr_scheduler_monitor, metrics=metrics
        )
        if in_features < 1:
            raise ValueError(f"in_features={in_features}: need at least one input feature")
        if any(size < 1 for size in hidden_sizes):
            raise ValueError(f"hidden_sizes={list(hidden_sizes)}: every layer needs at least one unit")
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout={dropout}: must be in [0, 1)")
        self.save_hyperparameters()
        layers: list[nn.Module] = []
        width = in_features
        for size in hidden_sizes:
            layers += [nn.Linear(width, size), nn.ReLU(), nn.Dropout(dropout)]
            width = size
        layers.append(nn.Linear(width, 1))
        self.net = nn.Sequential(*layers)
        self.register_buffer("target_mean", torch.tensor(0.0))
        self.register_buffer("target_std", torch.tensor(1.0))

    def setup(self, stage: str) -> None:
        """Take ``target_mean`` / ``target_std`` from the trainer's DataModule when it has them."""
        super().setup(stage)
        datamodule = getattr(self.trainer, "datamodule", None)
        for name in ("target_mean", "target_std"):
            value = getattr(datamodule, name, None)
            if value is not None:
                getattr(self, name).fill_(float(value))

    def forward(self, x: Tensor) -> Tensor:
        """Map features ``[B, F]`` to predictions ``[B]`` on the standardised target scale."""
        return self.net(x).squeeze(-1)

    def compute_loss(self, output: Tensor, target: Tensor) -> Tensor:
        """Mean squared error between predictions ``[B]`` and targets ``[B]`` (standardised scale)."""
        return nn.functional.mse_loss(output, target.to(output.dtype))

    def to_original_units(self, values: Tensor) -> Tensor:
        """Undo the target standardisation: ``values * target_std + target_mean`` (float32)."""
        return values.float() * self.target_std + self.target_mean

    def metric_inputs(self, output: Tensor, target: Tensor) -> tuple[Tensor, Tensor]:
        """Predictions and targets ``[B]`` in the original units, for MAE, RMSE and R2."""
        return self.to_original_units(output), self.to_original_units(target)

    def predict_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> dict[str, Tensor]:
        """Return ``pred`` (``[B]`` float32, original units) and, when the batch carries targets,
        ``target`` (``[B]`` float32, original units)."""
        inputs, target = batch if isinstance(batch, (list, tuple)) else (batch, None)
        out = {"pred": self.to_original_units(self(inputs))}
        if target is not None:
            out["target"] = self.to_original_units(target)
        return out
