"""The engine tests' own task: small enough that a fit takes a second, rich enough to exercise
everything the engine promises (augmentation and dropout for exact resume, accuracy and F1, odd split
sizes for DDP, image files for predict). It is not the example a user replaces: the engine's tests run
on it, whatever the package's own models and data are.

``TinyClassifier``/``TinyImages`` use the engine's optional helpers (``BaseModule``, ``BaseDataModule``);
``PlainClassifier``/``PlainData`` are written as Lightning's docs write them, with no class of ours.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from lightning.pytorch import LightningDataModule, LightningModule
from lightning.pytorch.cli import LRSchedulerCallable, OptimizerCallable
from torch import Tensor, nn
from torch.utils.data import DataLoader, TensorDataset
from torchmetrics import MetricCollection
from torchmetrics.classification import MulticlassAccuracy, MulticlassF1Score

from runwright import (
    BaseDataModule,
    BaseModule,
    PredictInputs,
    Transformed,
    read_image_files,
)


def tiny_images(num_samples: int, num_classes: int, seed: int) -> tuple[Tensor, Tensor]:
    """``num_samples`` images ``[1, 8, 8]`` float32 of a standard normal and int64 labels: the arg-max
    of a fixed random linear map of the pixels (learnable, as for ``SyntheticDataModule``)."""
    generator = torch.Generator().manual_seed(seed)
    images = torch.randn(num_samples, 1, 8, 8, generator=generator)
    teacher = torch.randn(64, num_classes, generator=torch.Generator().manual_seed(1234))
    return images, (images.flatten(1) @ teacher).argmax(dim=1)


class AddNoise:
    """Training augmentation drawn from the global torch generator (main process or worker)."""

    def __init__(self, std: float) -> None:
        self.std = std

    def __call__(self, image: Tensor) -> Tensor:
        return image + self.std * torch.randn_like(image)


class TinyImages(BaseDataModule):
    """Seeded random ``[1, 8, 8]`` images in ``num_classes`` learnable classes: 192 training, 45
    validation and 47 test images by default (odd, so two processes get uneven shards), Gaussian noise
    added to the training images on every access.

    Batches are ``(images [B, 1, 8, 8] float32, labels [B] int64)``.
    """

    dims = (1, 8, 8)

    def __init__(
        self,
        num_train: int = 192,
        num_val: int = 45,
        num_test: int = 47,
        num_classes: int = 4,
        noise: float = 0.1,
        seed: int = 0,
        batch_size: int = 16,
        num_workers: int = 0,
        pin_memory: bool = False,
        persistent_workers: bool = False,
        prefetch_factor: int | None = None,
        predict_path: str | None = None,
    ) -> None:
        super().__init__(
            batch_size, num_workers, pin_memory, persistent_workers, prefetch_factor, predict_path
        )
        self.save_hyperparameters(ignore=["predict_path"])
        self.sizes = [num_train, num_val, num_test]
        self.num_classes = num_classes
        self.noise = noise
        self.seed = seed

    def setup(self, stage: str | None = None) -> None:
        """Generate the three splits (the same for every stage)."""
        images, labels = tiny_images(sum(self.sizes), self.num_classes, self.seed)
        train, val, test = (
            TensorDataset(x, y)
            for x, y in zip(images.split(self.sizes), labels.split(self.sizes), strict=True)
        )
        self.train_set = Transformed(train, AddNoise(self.noise)) if self.noise else train
        self.val_set, self.test_set = val, test

    def read_predict_inputs(self, path: Path) -> PredictInputs:
        """Grayscale image files, resized to 8x8, pixel / 255."""
        from torchvision.transforms import v2

        transform = v2.Compose([v2.Resize((8, 8)), v2.ToImage(), v2.ToDtype(torch.float32, scale=True)])
        return read_image_files(path, 1, transform)


class TinyCNN(nn.Module):
    """conv3x3(8) - BatchNorm - ReLU - max-pool - dropout: ``[B, C, 8, 8]`` -> features ``[B, 128]``."""

    def __init__(self, in_channels: int = 1, width: int = 8, dropout: float = 0.1) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(in_channels, width, 3, padding=1), nn.BatchNorm2d(width), nn.ReLU(), nn.MaxPool2d(2)
        )
        self.dropout = nn.Dropout(dropout)
        self.out_features = width * 16

    def forward(self, x: Tensor) -> Tensor:
        return self.dropout(self.features(x).flatten(1))


class TinyClassifier(BaseModule):
    """A backbone (default :class:`TinyCNN`) and a linear head, cross-entropy; logs ``<stage>/loss``,
    ``<stage>/acc`` and ``<stage>/f1``. ``forward``: ``[B, C, 8, 8]`` -> logits ``[B, num_classes]``."""

    export_names = ("images", "logits")

    def __init__(
        self,
        backbone: Callable[[int], nn.Module] = TinyCNN,
        in_channels: int = 1,
        num_classes: int = 4,
        optimizer: OptimizerCallable = torch.optim.AdamW,
        lr_scheduler: LRSchedulerCallable | None = None,
        lr_scheduler_interval: str = "epoch",
        lr_scheduler_monitor: str = "val/loss",
    ) -> None:
        metrics = MetricCollection(
            {"acc": MulticlassAccuracy(num_classes, average="micro"), "f1": MulticlassF1Score(num_classes)}
        )
        super().__init__(
            optimizer, lr_scheduler, lr_scheduler_interval, lr_scheduler_monitor, metrics=metrics
        )  # type: ignore[arg-type]
        self.save_hyperparameters()
        self.backbone = backbone(in_channels)
        self.head = nn.Linear(self.backbone.out_features, num_classes)  # type: ignore[arg-type]
        self.num_classes = num_classes

    def forward(self, x: Tensor) -> Tensor:
        return self.head(self.backbone(x))

    def compute_loss(self, output: Tensor, target: Tensor) -> Tensor:
        return nn.functional.cross_entropy(output, target)

    def metric_inputs(self, output: Tensor, target: Tensor) -> tuple[Tensor, Tensor]:
        return output.argmax(dim=-1), target

    def predict_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> dict[str, Tensor]:
        inputs, target = batch if isinstance(batch, (list, tuple)) else (batch, None)
        probs = torch.softmax(self(inputs).float(), dim=-1)
        prob, pred = probs.max(dim=-1)
        return {"pred": pred, "prob": prob, "probs": probs, **({} if target is None else {"target": target})}


class PlainData(LightningDataModule):
    """A LightningDataModule as Lightning's docs write one: the tiny images, no class of ours."""

    def __init__(self, batch_size: int = 16) -> None:
        super().__init__()
        self.batch_size = batch_size

    def setup(self, stage: str) -> None:
        images, labels = tiny_images(192 + 45 + 47, 4, seed=0)
        self.train, self.val, self.test = (
            TensorDataset(x, y)
            for x, y in zip(images.split([192, 45, 47]), labels.split([192, 45, 47]), strict=True)
        )

    def train_dataloader(self) -> DataLoader[Any]:
        return DataLoader(self.train, batch_size=self.batch_size, shuffle=True)

    def val_dataloader(self) -> DataLoader[Any]:
        return DataLoader(self.val, batch_size=self.batch_size)

    def test_dataloader(self) -> DataLoader[Any]:
        return DataLoader(self.test, batch_size=self.batch_size)

    def predict_dataloader(self) -> DataLoader[Any]:
        return DataLoader(self.test, batch_size=self.batch_size)


class PlainClassifier(LightningModule):
    """A LightningModule as Lightning's docs write one: no base class, metrics logged as ``val_acc``."""

    def __init__(self, num_classes: int = 4, lr: float = 0.01) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.net = nn.Sequential(nn.Flatten(), nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, num_classes))
        self.example_input_array = torch.zeros(2, 1, 8, 8)

    def forward(self, x: Tensor) -> Tensor:
        return self.net(x)

    def training_step(self, batch: Any, batch_idx: int) -> Tensor:
        x, y = batch
        loss = nn.functional.cross_entropy(self(x), y)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        logits = self(x)
        self.log("val_loss", nn.functional.cross_entropy(logits, y))
        self.log("val_acc", (logits.argmax(dim=1) == y).float().mean())

    def test_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        logits = self(x)
        self.log("test_loss", nn.functional.cross_entropy(logits, y))
        self.log("test_acc", (logits.argmax(dim=1) == y).float().mean())

    def predict_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> Tensor:
        return self(batch[0]).argmax(dim=1)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.parameters(), lr=self.hparams.lr)
