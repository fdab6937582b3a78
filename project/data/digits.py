"""scikit-learn's bundled 8x8 handwritten digits: 1,797 real images, no download needed."""

from __future__ import annotations

from pathlib import Path

import torch
from torchvision.transforms import InterpolationMode, v2

from .base import (
    BaseDataModule,
    TensorDataset,
    channel_mean_std,
    check_fractions,
    seeded_split,
)
from .predict_files import PredictInputs, read_image_files


class DigitsDataModule(BaseDataModule):
    """The UCI optical digits shipped inside scikit-learn (``sklearn.datasets.load_digits``).

    Images are ``[1, 8, 8]`` ``float32`` in ``[0, 1]`` (the raw 0..16 counts divided by 16), labels
    ``int64`` in ``[0, 10)``. The train/val/test split is a seeded permutation (``split_seed``) and does
    not depend on the global seed. Normalisation uses the train split's own mean and std. Train-only
    augmentation is a small random affine (rotation and translation: geometric, then normalise).

    Args:
        val_fraction: Share of the 1,797 images used for validation.
        test_fraction: Share used for the test split.
        split_seed: Seed of the split permutation.
        augment: Apply the random affine to training images.
        max_rotation: Largest rotation in degrees (uniform in ``[-max_rotation, max_rotation]``).
        max_translation: Largest shift as a fraction of the side (0.125 is one pixel of eight).
        batch_size, num_workers, pin_memory, persistent_workers, prefetch_factor, predict_path: see
            :class:`~project.data.base.BaseDataModule`. ``predict_path`` images (PNG,
            JPEG, any size,
            see :meth:`read_predict_inputs`) are converted like the digits: grayscale, 8x8, light ink on
            a dark background.
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
        """Load the digits, split them and build the train/val/test datasets (all stages at once);
        for ``predict`` with ``predict_path``, read those images too."""
        if self.train_set is None:
            self._setup_splits()
        if stage == "predict":
            self.setup_predict_inputs()

    def read_predict_inputs(self, path: Path) -> PredictInputs:
        """Image files at ``path`` (a file or folder), as the test split sees the digits: grayscale,
        reduced to 8x8 by averaging blocks of pixels (PIL's box filter: the digits themselves are
        counts of set pixels in 4x4 blocks of 32x32 bitmaps), scaled to ``[0, 1]`` (pixel / 255, as
        the digits' 0..16 counts are divided by 16), then normalised with the train split's mean and
        std. The digits are light strokes on a dark background; invert dark-on-light scans first."""
        transform = v2.Compose(
            [
                v2.Resize(self.dims[1:], interpolation=InterpolationMode.BOX),
                v2.ToImage(),
                v2.ToDtype(torch.float32, scale=True),
                v2.Normalize(self.mean, self.std),
            ]
        )
        return read_image_files(path, self.dims[0], transform)

    def _setup_splits(self) -> None:
        from sklearn.datasets import load_digits

        digits = load_digits()
        images = torch.tensor(digits.images, dtype=torch.float32).unsqueeze(1) / 16.0
        labels = torch.tensor(digits.target, dtype=torch.int64)
        test_idx, val_idx, train_idx = seeded_split(
            len(images), [self.test_fraction, self.val_fraction], self.split_seed
        )
        mean, std = channel_mean_std(images[train_idx])
        normalize = v2.Normalize(mean, std)
        train_steps: list[v2.Transform] = []
        if self.augment:
            shift = (self.max_translation, self.max_translation)
            train_steps.append(v2.RandomAffine(degrees=self.max_rotation, translate=shift))
        train_transform = v2.Compose([*train_steps, normalize])
        self.mean, self.std = mean, std
        self.train_set = TensorDataset(images[train_idx], labels[train_idx], train_transform)
        self.val_set = TensorDataset(images[val_idx], labels[val_idx], normalize)
        self.test_set = TensorDataset(images[test_idx], labels[test_idx], normalize)
