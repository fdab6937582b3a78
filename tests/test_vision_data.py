"""The torchvision DataModules (MNIST, Fashion-MNIST, CIFAR-10), on tiny files written here in each
dataset's own format. (Left out of generated repos with ``examples=minimal``, with the DataModules.)"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
import torchvision.datasets.cifar
from fake_datasets import write_cifar10, write_mnist

from project.data import CIFAR10DataModule, FashionMNISTDataModule, MNISTDataModule


@pytest.fixture
def cifar_without_md5(monkeypatch: pytest.MonkeyPatch) -> None:
    """The tiny CIFAR files cannot match the real archive's md5 sums: check existence only."""
    monkeypatch.setattr(
        torchvision.datasets.cifar, "check_integrity", lambda path, md5=None: os.path.isfile(path)
    )


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
