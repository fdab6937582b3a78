"""Image classification: a configurable backbone with a linear head."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

import torch
from lightning.pytorch.cli import LRSchedulerCallable, OptimizerCallable
from runwright import BaseModule
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint
from torchmetrics import MetricCollection
from torchmetrics.classification import MulticlassAccuracy, MulticlassF1Score

from .backbones import SimpleCNN

#: Label that the loss and the metrics skip (``torch.nn.functional.cross_entropy``'s default).
IGNORE_INDEX = -100


class ImageClassifier(BaseModule):
    """Classify images into ``num_classes`` classes with cross-entropy.

    Logged metrics: ``<stage>/loss``, ``<stage>/acc`` (micro accuracy), ``<stage>/f1`` (macro F1) for
    ``stage`` in train/val/test.

    Args:
        backbone: A callable that takes the number of input channels and returns the feature
            extractor, an ``nn.Module`` with an integer ``out_features`` attribute (see
            ``project.models.backbones``); in YAML a ``class_path`` (e.g. ``SimpleCNN``) whose
            ``init_args`` are all but ``in_channels``.
        in_channels: Channels of the input images (1 greyscale, 3 RGB).
        num_classes: Number of classes; labels must be integers in ``[0, num_classes)``.
        label_smoothing: Cross-entropy label smoothing in ``[0, 1)``.
        activation_checkpointing: Recompute the backbone's activations in the backward pass instead of
            storing them (``torch.utils.checkpoint``): less memory, about one extra forward of compute.
        optimizer, lr_scheduler, lr_scheduler_interval, lr_scheduler_monitor: see
            ``BaseModule`` (the engine's). The CLI links ``num_classes`` and ``in_channels`` from
            the DataModule's ``num_classes`` and ``dims[0]``.

    Shapes:
        ``forward``: images ``[B, C, H, W]`` float -> logits ``[B, num_classes]`` float.
        batches: ``(images [B, C, H, W] float32, labels [B] int64)``.
    """

    #: Input and output names of an exported (ONNX) model (the ``export`` command).
    export_names = ("images", "logits")

    def __init__(
        self,
        backbone: Callable[[int], nn.Module] = SimpleCNN,
        in_channels: int = 1,
        num_classes: int = 10,
        label_smoothing: float = 0.0,
        activation_checkpointing: bool = False,
        optimizer: OptimizerCallable = torch.optim.AdamW,
        lr_scheduler: LRSchedulerCallable | None = None,
        lr_scheduler_interval: Literal["step", "epoch"] = "epoch",
        lr_scheduler_monitor: str = "val/loss",
    ) -> None:
        if num_classes < 2:
            raise ValueError(f"num_classes={num_classes}: a classifier needs at least 2 classes")
        metrics = MetricCollection(
            {
                "acc": MulticlassAccuracy(num_classes, average="micro", ignore_index=IGNORE_INDEX),
                "f1": MulticlassF1Score(num_classes, average="macro", ignore_index=IGNORE_INDEX),
            }
        )
        super().__init__(
            optimizer, lr_scheduler, lr_scheduler_interval, lr_scheduler_monitor, metrics=metrics
        )
        backbone = backbone(in_channels)
        out_features = getattr(backbone, "out_features", None)
        if not isinstance(out_features, int):
            raise TypeError(
                f"backbone {type(backbone).__name__} has no integer attribute 'out_features'; "
                "set it to the size of the features its forward returns"
            )
        self.save_hyperparameters()
        self.backbone = backbone
        self.head = nn.Linear(out_features, num_classes)
        self.num_classes = num_classes
        self.label_smoothing = label_smoothing
        self.activation_checkpointing = activation_checkpointing

    def forward(self, x: Tensor) -> Tensor:
        """Map images ``[B, C, H, W]`` to logits ``[B, num_classes]``."""
        if self.activation_checkpointing and self.training and torch.is_grad_enabled():
            features = checkpoint(self.backbone, x, use_reentrant=False)
        else:
            features = self.backbone(x)
        return self.head(features)

    def metric_inputs(self, output: Tensor, target: Tensor) -> tuple[Tensor, Tensor]:
        """Predicted classes ``[B]`` int64 (argmax of the logits ``[B, K]``) and the labels ``[B]``."""
        return output.argmax(dim=-1), target

    def compute_loss(self, output: Tensor, target: Tensor) -> Tensor:
        """Cross-entropy between logits ``[B, K]`` and integer labels ``[B]``."""
        return nn.functional.cross_entropy(
            output, target, ignore_index=IGNORE_INDEX, label_smoothing=self.label_smoothing
        )

    def predict_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> dict[str, Tensor]:
        """Return ``pred`` (``[B]`` int64 class), ``prob`` (``[B]`` float, its softmax probability),
        ``probs`` (``[B, num_classes]`` float, every class's probability) and, when the batch carries
        labels, ``target`` (``[B]`` int64). A batch without labels is the input tensor alone."""
        inputs, target = batch if isinstance(batch, (list, tuple)) else (batch, None)
        probs = torch.softmax(self(inputs).float(), dim=-1)
        prob, pred = probs.max(dim=-1)
        out = {"pred": pred, "prob": prob, "probs": probs}
        if target is not None:
            out["target"] = target
        return out
