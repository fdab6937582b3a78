"""Synthetic image classification data of any shape, for smoke tests and benchmarks."""

from __future__ import annotations

import torch
from runwright import BaseDataModule
from torch.utils.data import TensorDataset


class SyntheticDataModule(BaseDataModule):
    """Random images with learnable labels, generated in memory from ``seed`` (no files, no download).

    Images are ``[C, H, W]`` ``float32`` drawn from a standard normal; the label of an image is the
    arg-max of a fixed random linear map of its pixels, so a model can fit it and the loss falls. The
    same ``seed`` gives the same data. Shapes default to CIFAR-10's ``[3, 32, 32]`` with 10 classes.

    Args:
        num_samples: Training images; validation and test get ``num_samples // 4`` each.
        image_shape: ``(C, H, W)``.
        num_classes: Number of label values ``[0, num_classes)``.
        seed: Seed of the generator used for the data.
        batch_size, num_workers, pin_memory, persistent_workers, prefetch_factor: see
            :class:`~project.data.base.BaseDataModule`.
    """

    def __init__(
        self,
        num_samples: int = 2048,
        image_shape: tuple[int, int, int] = (3, 32, 32),
        num_classes: int = 10,
        seed: int = 0,
        batch_size: int = 128,
        num_workers: int = 0,
        pin_memory: bool = False,
        persistent_workers: bool = False,
        prefetch_factor: int | None = None,
    ) -> None:
        super().__init__(batch_size, num_workers, pin_memory, persistent_workers, prefetch_factor)
        self.save_hyperparameters()
        self.num_samples = num_samples
        self.dims = tuple(image_shape)
        self.num_classes = num_classes
        self.seed = seed

    def setup(self, stage: str | None = None) -> None:
        """Generate the three splits."""
        generator = torch.Generator().manual_seed(self.seed)
        n_eval = max(1, self.num_samples // 4)
        images = torch.randn(self.num_samples + 2 * n_eval, *self.dims, generator=generator)
        teacher = torch.randn(images[0].numel(), self.num_classes, generator=generator)
        labels = (images.flatten(1) @ teacher).argmax(dim=1)
        sizes = [self.num_samples, n_eval, n_eval]
        splits = [TensorDataset(x, y) for x, y in zip(images.split(sizes), labels.split(sizes), strict=True)]
        self.train_set, self.val_set, self.test_set = splits
