"""scikit-learn's bundled 8x8 handwritten digits: 1,797 real images, no download needed."""

from __future__ import annotations

from pathlib import Path

import torch
from runwright import (
    BaseDataModule,
    PredictInputs,
    Transformed,
    channel_mean_std,
    check_fractions,
    read_image_files,
    seeded_split,
)
from torch.utils.data import TensorDataset
from torchvision.transforms import InterpolationMode, v2


class DigitsDataModule(BaseDataModule):
    """The UCI optical digits shipped inside scikit-learn (``sklearn.datasets.load_digits``).

    Batches are ``(images [B, 1, 8, 8] float32, labels [B] int64 in [0, 10))``; the raw 0..16 counts
    are divided by 16, then normalised with the train split's own mean and std (``mean``, ``std``). The
    train/val/test split is a seeded permutation (``split_seed``), independent of the global seed.

    Args:
        val_fraction: Share of the 1,797 images used for validation.
        test_fraction: Share used for the test split.
        split_seed: Seed of the split permutation.
        augment: Apply a random affine to training images (before normalisation).
        max_rotation: Largest rotation in degrees (uniform in ``[-max_rotation, max_rotation]``).
        max_translation: Largest shift as a fraction of the side (0.125 is one pixel of eight).
        batch_size, num_workers, pin_memory, persistent_workers, prefetch_factor, predict_path: see
            :class:`~project.data.base.BaseDataModule`; ``predict_path`` images: see
            :meth:`read_predict_inputs`.
    """

    num_classes = 10
    dims = (1, 8, 8)

    def __init__(
        self,
        val_fraction: float = 0.15,
        test_fraction: float = 0.2,
        split_seed: int = 0,
        augment: bool = True,
        max_rotation: float = 10.0,
        max_translation: float = 0.125,
        batch_size: int = 64,
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
        check_fractions(val_fraction=val_fraction, test_fraction=test_fraction)
        self.val_fraction = val_fraction
        self.test_fraction = test_fraction
        self.split_seed = split_seed
        self.augment = augment
        self.max_rotation = max_rotation
        self.max_translation = max_translation

    def setup(self, stage: str | None = None) -> None:
        """Load the digits, split them and build the three splits (for every stage)."""
        from sklearn.datasets import load_digits

        digits = load_digits()
        images = torch.tensor(digits.images, dtype=torch.float32).unsqueeze(1) / 16.0
        labels = torch.tensor(digits.target, dtype=torch.int64)
        test, val, train = seeded_split(len(images), [self.test_fraction, self.val_fraction], self.split_seed)
        mean, std = channel_mean_std(images[train])
        self.mean, self.std = mean.tolist(), std.tolist()
        self.normalize = v2.Normalize(self.mean, self.std)
        shift = (self.max_translation, self.max_translation)
        augment = [v2.RandomAffine(degrees=self.max_rotation, translate=shift)] if self.augment else []
        train_transform = v2.Compose([*augment, self.normalize])
        self.train_set = Transformed(TensorDataset(images[train], labels[train]), train_transform)
        self.val_set = TensorDataset(self.normalize(images[val]), labels[val])
        self.test_set = TensorDataset(self.normalize(images[test]), labels[test])

    def read_predict_inputs(self, path: Path) -> PredictInputs:
        """Image files at ``path``, as the test split sees the digits: grayscale, reduced to 8x8 by
        averaging blocks of pixels (PIL's box filter: the digits are counts of set pixels in 4x4 blocks
        of 32x32 bitmaps), scaled to ``[0, 1]`` (pixel / 255, as the counts / 16), then normalised with
        the train split's mean and std. The digits are light strokes on a dark background; invert
        dark-on-light scans first."""
        resize = v2.Resize(self.dims[1:], interpolation=InterpolationMode.BOX)
        transform = v2.Compose([resize, v2.ToImage(), v2.ToDtype(torch.float32, scale=True), self.normalize])
        return read_image_files(path, self.dims[0], transform)
