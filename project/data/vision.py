"""torchvision's MNIST, FashionMNIST and CIFAR-10, read from ``data_dir`` (downloaded only when asked)."""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any, ClassVar

import torch
from runwright import BaseDataModule, DataError, PredictInputs, read_image_files, seeded_split
from torch.utils.data import Dataset, Subset
from torchvision.transforms import v2


class TorchvisionDataModule(BaseDataModule):
    """A torchvision classification dataset with a seeded train/val split of its training files.

    Batches are ``(images [B, C, H, W] float32, labels [B] int64)``. Transforms: the subclass's
    :meth:`augmentations` (train only; geometric, then colour), then conversion to ``float32`` in
    ``[0, 1]`` and normalisation with the dataset's published train-set ``mean``/``std`` (recompute
    them for your own data with :func:`project.data.base.channel_mean_std`).

    Args:
        data_dir: Folder that holds (or will hold) the dataset in torchvision's layout, relative to
            the working directory unless absolute.
        download: Download into ``data_dir`` in ``prepare_data`` if the files are missing (off: nothing
            is fetched unless you ask).
        val_size: Number of training images held out for validation.
        split_seed: Seed of the train/val split (independent of the global seed).
        augment: Apply the train-only augmentations.
        batch_size, num_workers, pin_memory, persistent_workers, prefetch_factor, predict_path: see
            :class:`~project.data.base.BaseDataModule`. ``predict`` with ``predict_path`` needs
            no dataset files in ``data_dir``.

    Raises:
        project.errors.DataError: (a ``FileNotFoundError``) in ``setup`` when the dataset's files
            in ``data_dir`` are missing, truncated or corrupt.
    """

    dataset_name: ClassVar[str]
    dims: ClassVar[tuple[int, int, int]]
    mean: ClassVar[tuple[float, ...]]
    std: ClassVar[tuple[float, ...]]
    num_classes = 10

    def __init__(
        self,
        data_dir: str = "data",
        download: bool = False,
        val_size: int = 5000,
        split_seed: int = 0,
        augment: bool = True,
        batch_size: int = 128,
        num_workers: int = 2,
        pin_memory: bool = False,
        persistent_workers: bool = False,
        prefetch_factor: int | None = None,
        predict_path: str | None = None,
    ) -> None:
        super().__init__(
            batch_size, num_workers, pin_memory, persistent_workers, prefetch_factor, predict_path
        )
        self.save_hyperparameters(ignore=["predict_path"])
        self.data_dir = Path(data_dir).expanduser()
        self.download = download
        self.val_size = val_size
        self.split_seed = split_seed
        self.augment = augment

    def augmentations(self) -> list[v2.Transform]:
        """The train-only augmentations, geometric ones first (none here)."""
        return []

    def transform(self, train: bool) -> v2.Compose:
        """The full transform for one split: augmentation (train only), to float, normalise."""
        steps = self.augmentations() if train and self.augment else []
        steps += [v2.ToImage(), v2.ToDtype(torch.float32, scale=True), v2.Normalize(self.mean, self.std)]
        return v2.Compose(steps)

    def prepare_data(self) -> None:
        """Download both splits into ``data_dir`` when ``download`` is on (called on one process only)."""
        from torchvision import datasets

        if self.download:
            for train in (True, False):
                getattr(datasets, self.dataset_name)(str(self.data_dir), train=train, download=True)

    def _load(self, train: bool, transform: v2.Compose) -> Dataset[Any]:
        from torchvision import datasets

        try:
            return getattr(datasets, self.dataset_name)(str(self.data_dir), train=train, transform=transform)
        except (RuntimeError, ValueError, OSError, EOFError, pickle.UnpicklingError) as error:
            raise DataError(
                f"{self.dataset_name} in data_dir={str(self.data_dir)!r} (absolute: "
                f"{self.data_dir.resolve()}) is missing or unreadable: {type(error).__name__}: {error}. "
                "Download it with --data.download=true (delete a partial download first), or point "
                "--data.data_dir at a folder that holds it in torchvision's layout."
            ) from error

    def read_predict_inputs(self, path: Path) -> PredictInputs:
        """Image files at ``path`` (PNG, JPEG, any size), converted to the dataset's channels, resized to
        its ``dims`` (antialiased), then given the test split's transform."""
        transform = v2.Compose([v2.Resize(self.dims[1:], antialias=True), self.transform(train=False)])
        return read_image_files(path, self.dims[0], transform)

    def setup(self, stage: str | None = None) -> None:
        """Build the train/val split of the training files and the test split (for ``predict`` with
        ``predict_path``: nothing, no dataset files needed)."""
        if (stage == "predict" and self.predict_path is not None) or self.train_set is not None:
            return
        train_aug = self._load(train=True, transform=self.transform(train=True))
        train_plain = self._load(train=True, transform=self.transform(train=False))
        num_train = len(train_aug)  # type: ignore[arg-type]
        if not 0 < self.val_size < num_train:
            raise ValueError(f"val_size={self.val_size} must be between 1 and {num_train - 1}")
        val_idx, train_idx = seeded_split(num_train, [self.val_size / num_train], self.split_seed)
        self.train_set = Subset(train_aug, train_idx.tolist())
        self.val_set = Subset(train_plain, val_idx.tolist())
        self.test_set = self._load(train=False, transform=self.transform(train=False))


class MNISTDataModule(TorchvisionDataModule):
    """MNIST handwritten digits, ``[1, 28, 28]``. Mean/std 0.1307/0.3081: the train-set statistics
    used in PyTorch's MNIST example."""

    dataset_name = "MNIST"
    mean = (0.1307,)
    std = (0.3081,)
    dims = (1, 28, 28)

    def augmentations(self) -> list[v2.Transform]:
        """Random rotation up to 10 degrees and shift up to 10% of the side."""
        return [v2.RandomAffine(degrees=10.0, translate=(0.1, 0.1))]


class FashionMNISTDataModule(MNISTDataModule):
    """Fashion-MNIST clothing images, ``[1, 28, 28]``. Mean/std 0.2860/0.3530: computed on the 60,000
    training images."""

    dataset_name = "FashionMNIST"
    mean = (0.2860,)
    std = (0.3530,)

    def augmentations(self) -> list[v2.Transform]:
        """A shift of up to 2 pixels (crop with padding) and a random horizontal flip."""
        return [v2.RandomCrop(28, padding=2), v2.RandomHorizontalFlip()]


class CIFAR10DataModule(TorchvisionDataModule):
    """CIFAR-10, ``[3, 32, 32]`` RGB. Mean/std: the per-channel statistics of the 50,000 training
    images."""

    dataset_name = "CIFAR10"
    mean = (0.4914, 0.4822, 0.4465)
    std = (0.2470, 0.2435, 0.2616)
    dims = (3, 32, 32)

    def augmentations(self) -> list[v2.Transform]:
        """Random 32x32 crop of the 4-pixel-padded image and horizontal flip (He et al. 2016), then
        brightness, contrast and saturation jitter of up to 20%."""
        return [
            v2.RandomCrop(32, padding=4),
            v2.RandomHorizontalFlip(),
            v2.ColorJitter(brightness=0.2, contrast=0.2, saturation=0.2),
        ]
