"""MNIST as Lightning's examples read it, from tiny synthetic files instead of a download.

:func:`write_tiny_mnist` writes the four files of ``torchvision.datasets.MNIST`` (its raw IDX format:
uint8 images ``[N, 28, 28]``, uint8 labels ``[N]``) with 96 training and 45 test images whose labels are
learnable (the arg-max of a fixed linear map of the pixels); the DataModules below are the sources' own,
reading those files through torchvision, with only the download replaced by that call.

- :class:`TinyMNISTDataModule`: ``lightning.pytorch.demos.mnist_datamodule.MNISTDataModule`` (a
  ``num_classes`` property), its ``prepare_data`` writing the files.
- :class:`MyDataModule`: the ``MyDataModule`` of Lightning's ``examples/pytorch/basics/autoencoder.py`` and
  ``backbone_image_classifier.py`` (the same class in both), its split scaled to 64 + 32 images.
"""

import struct
from pathlib import Path

import torch
from lightning.pytorch import LightningDataModule
from lightning.pytorch.demos.mnist_datamodule import _DATASETS_PATH, MNIST, MNISTDataModule
from torch.utils.data import DataLoader, random_split
from torchvision import transforms

NUM_TRAIN, NUM_TEST = 96, 45
DATASETS_PATH = _DATASETS_PATH


def write_tiny_mnist(root):
    """Write ``<root>/MNIST/raw/{train,t10k}-{images-idx3,labels-idx1}-ubyte`` (the same bytes each time)."""
    raw = Path(root) / "MNIST" / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    generator = torch.Generator().manual_seed(0)
    images = torch.randint(0, 256, (NUM_TRAIN + NUM_TEST, 28, 28), generator=generator, dtype=torch.uint8)
    teacher = torch.randn(28 * 28, 10, generator=generator)
    labels = ((images.flatten(1).float() - 127.5) @ teacher).argmax(dim=1).to(torch.uint8)
    for prefix, part in (("train", slice(0, NUM_TRAIN)), ("t10k", slice(NUM_TRAIN, None))):
        for kind, tensor in (("images-idx3", images[part]), ("labels-idx1", labels[part])):
            header = struct.pack(f">I{tensor.ndim}I", 0x800 + tensor.ndim, *tensor.shape)
            (raw / f"{prefix}-{kind}-ubyte").write_bytes(header + tensor.numpy().tobytes())


class TinyMNISTDataModule(MNISTDataModule):
    """Lightning's demo ``MNISTDataModule`` on the tiny files (pass ``val_split`` < 96, ``num_workers=0``)."""

    def prepare_data(self) -> None:
        write_tiny_mnist(DATASETS_PATH)  # the demo's MNIST() looks there too
        write_tiny_mnist(self.data_dir)


class MyDataModule(LightningDataModule):
    def __init__(self, batch_size: int = 32):
        super().__init__()
        write_tiny_mnist(DATASETS_PATH)  # in place of download=True
        dataset = MNIST(DATASETS_PATH, train=True, download=False, transform=transforms.ToTensor())
        self.mnist_test = MNIST(DATASETS_PATH, train=False, download=False, transform=transforms.ToTensor())
        self.mnist_train, self.mnist_val = random_split(
            dataset, [64, 32], generator=torch.Generator().manual_seed(42)
        )
        self.batch_size = batch_size

    def train_dataloader(self):
        return DataLoader(self.mnist_train, batch_size=self.batch_size)

    def val_dataloader(self):
        return DataLoader(self.mnist_val, batch_size=self.batch_size)

    def test_dataloader(self):
        return DataLoader(self.mnist_test, batch_size=self.batch_size)

    def predict_dataloader(self):
        return DataLoader(self.mnist_test, batch_size=self.batch_size)
