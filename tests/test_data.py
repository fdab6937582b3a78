"""DataModules: the embedded digits and the torchvision loaders (on tiny files written here)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
import torchvision.datasets.cifar
from fake_datasets import write_cifar10, write_mnist

from project.data import (
    CIFAR10DataModule,
    DigitsDataModule,
    FashionMNISTDataModule,
    MNISTDataModule,
    SyntheticDataModule,
    channel_mean_std,
    seeded_split,
)


@pytest.fixture
def cifar_without_md5(monkeypatch: pytest.MonkeyPatch) -> None:
    """The tiny CIFAR files cannot match the real archive's md5 sums: check existence only."""
    monkeypatch.setattr(
        torchvision.datasets.cifar, "check_integrity", lambda path, md5=None: os.path.isfile(path)
    )


def test_digits_split_is_deterministic_disjoint_and_complete() -> None:
    first, second = DigitsDataModule(), DigitsDataModule()
    first.setup("fit")
    second.setup("fit")
    sizes = [len(first.train_set), len(first.val_set), len(first.test_set)]  # type: ignore[arg-type]
    assert sum(sizes) == 1797
    assert sizes == [1168, 270, 359]
    for name in ("train_set", "val_set", "test_set"):
        assert torch.equal(getattr(first, name).targets, getattr(second, name).targets)
        assert torch.equal(getattr(first, name).inputs, getattr(second, name).inputs)
    other = DigitsDataModule(split_seed=1)
    other.setup("fit")
    assert not torch.equal(other.test_set.inputs, first.test_set.inputs)  # type: ignore[union-attr]


def test_digits_normalised_with_train_statistics_and_train_only_augmentation() -> None:
    dm = DigitsDataModule(augment=True)
    dm.setup("fit")
    assert dm.train_set is not None and dm.val_set is not None
    train = torch.stack([dm.val_set.transform(x) for x in dm.train_set.inputs])  # type: ignore[misc]
    assert abs(train.mean().item()) < 1e-4
    assert abs(train.std().item() - 1.0) < 1e-3
    mean, std = channel_mean_std(dm.train_set.inputs)
    assert dm.mean == mean and dm.std == std
    # validation items are the same every time; training items are augmented
    assert torch.equal(dm.val_set[0][0], dm.val_set[0][0])
    torch.manual_seed(0)
    draws = [dm.train_set[0][0] for _ in range(5)]
    assert any(not torch.equal(draws[0], d) for d in draws[1:])
    x, y = next(iter(dm.train_dataloader()))
    assert x.shape == (64, 1, 8, 8) and x.dtype == torch.float32
    assert y.shape == (64,) and y.dtype == torch.int64


def test_seeded_split_and_statistics_reject_bad_input() -> None:
    with pytest.raises(ValueError, match="fractions"):
        seeded_split(10, [0.6, 0.5], seed=0)
    with pytest.raises(ValueError, match="constant"):
        channel_mean_std(torch.ones(4, 1, 2, 2))
    with pytest.raises(ValueError, match="N, C, H, W"):
        channel_mean_std(torch.ones(4, 2))


def test_loader_settings_are_exposed_and_validated() -> None:
    dm = DigitsDataModule(
        batch_size=16, num_workers=2, pin_memory=False, persistent_workers=True, prefetch_factor=3
    )
    dm.setup("fit")
    loader = dm.train_dataloader()
    assert (loader.batch_size, loader.num_workers, loader.persistent_workers, loader.prefetch_factor) == (
        16,
        2,
        True,
        3,
    )
    with pytest.raises(ValueError, match="num_workers > 0"):
        DigitsDataModule(num_workers=0, persistent_workers=True)
    with pytest.raises(ValueError, match="batch_size=0"):
        DigitsDataModule(batch_size=0)


@pytest.mark.parametrize(
    "module, name", [(MNISTDataModule, "MNIST"), (FashionMNISTDataModule, "FashionMNIST")]
)
def test_mnist_style_loaders_read_idx_files(tmp_path: Path, module: type[MNISTDataModule], name: str) -> None:
    write_mnist(tmp_path, name=name, n_train=60, n_test=20)
    dm = module(data_dir=str(tmp_path), val_size=10, batch_size=8, num_workers=0)
    dm.prepare_data()  # download is off: must not touch the network
    dm.setup("fit")
    assert (len(dm.train_set), len(dm.val_set), len(dm.test_set)) == (50, 10, 20)  # type: ignore[arg-type]
    x, y = next(iter(dm.train_dataloader()))
    assert x.shape == (8, 1, 28, 28) and x.dtype == torch.float32 and y.dtype == torch.int64
    # val and test are normalised but not augmented: the same item twice is identical
    assert torch.equal(dm.val_set[0][0], dm.val_set[0][0])  # type: ignore[index]
    names = [type(t).__name__ for t in dm.transform(train=True).transforms]
    assert names[-1] == "Normalize" and names[-3:-1] == ["ToImage", "ToDtype"]
    assert [type(t).__name__ for t in dm.transform(train=False).transforms] == [
        "ToImage",
        "ToDtype",
        "Normalize",
    ]


def test_cifar10_loader_reads_pickled_batches_with_transforms_in_order(
    tmp_path: Path, cifar_without_md5: None
) -> None:
    write_cifar10(tmp_path, n_per_batch=12, n_test=20)
    dm = CIFAR10DataModule(data_dir=str(tmp_path), val_size=10, batch_size=4, num_workers=0)
    dm.setup("fit")
    assert (len(dm.train_set), len(dm.val_set), len(dm.test_set)) == (50, 10, 20)  # type: ignore[arg-type]
    x, _ = next(iter(dm.train_dataloader()))
    assert x.shape == (4, 3, 32, 32) and x.dtype == torch.float32
    names = [type(t).__name__ for t in dm.transform(train=True).transforms]
    # geometric, then colour, then conversion and normalisation
    assert names == ["RandomCrop", "RandomHorizontalFlip", "ColorJitter", "ToImage", "ToDtype", "Normalize"]


def test_missing_data_dir_names_the_path_and_the_fix(tmp_path: Path) -> None:
    dm = MNISTDataModule(data_dir=str(tmp_path / "nowhere"), num_workers=0)
    with pytest.raises(FileNotFoundError, match=r"nowhere.*--data.download=true"):
        dm.setup("fit")


def test_synthetic_data_is_seeded_and_learnable_shaped() -> None:
    first, second = SyntheticDataModule(num_samples=40, seed=1), SyntheticDataModule(num_samples=40, seed=1)
    first.setup()
    second.setup()
    assert torch.equal(first.train_set.inputs, second.train_set.inputs)  # type: ignore[union-attr]
    x, y = next(iter(first.train_dataloader()))
    assert x.shape == (40, 3, 32, 32) and y.dtype == torch.int64
    assert len(first.val_set) == len(first.test_set) == 10  # type: ignore[arg-type]
    assert len(set(first.train_set.targets.tolist())) > 1  # type: ignore[union-attr]
