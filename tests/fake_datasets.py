"""Write tiny datasets in the real on-disk formats torchvision reads, so no test downloads anything."""

from __future__ import annotations

import pickle
import struct
from pathlib import Path

import numpy as np


def _write_idx(path: Path, array: np.ndarray) -> None:
    """IDX format (LeCun's MNIST files): magic 0x0000 08 <ndim>, big-endian int32 dims, uint8 data."""
    path.parent.mkdir(parents=True, exist_ok=True)
    header = struct.pack(">HBB", 0, 0x08, array.ndim) + struct.pack(f">{array.ndim}I", *array.shape)
    path.write_bytes(header + array.astype(np.uint8).tobytes())


def write_mnist(root: Path, name: str = "MNIST", n_train: int = 60, n_test: int = 20, seed: int = 0) -> Path:
    """Write ``<root>/<name>/raw/{train,t10k}-{images-idx3,labels-idx1}-ubyte`` with random 28x28
    images and labels 0..9 (every class present). ``name`` is ``MNIST`` or ``FashionMNIST``."""
    rng = np.random.default_rng(seed)
    raw = root / name / "raw"
    for prefix, n in (("train", n_train), ("t10k", n_test)):
        _write_idx(raw / f"{prefix}-images-idx3-ubyte", rng.integers(0, 256, (n, 28, 28)))
        _write_idx(raw / f"{prefix}-labels-idx1-ubyte", np.arange(n) % 10)
    return root


def write_cifar10(root: Path, n_per_batch: int = 12, n_test: int = 20, seed: int = 0) -> Path:
    """Write ``<root>/cifar-10-batches-py`` (pickled dicts with ``data`` ``[N, 3072]`` uint8 and
    ``labels``, five train batches, ``test_batch`` and ``batches.meta``), like the real archive."""
    rng = np.random.default_rng(seed)
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True, exist_ok=True)
    names = [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]
    for name in names:
        n = n_test if name == "test_batch" else n_per_batch
        entry = {
            "data": rng.integers(0, 256, (n, 3072), dtype=np.uint8),
            "labels": [i % 10 for i in range(n)],
        }
        with (folder / name).open("wb") as handle:
            pickle.dump(entry, handle)
    labels = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]
    with (folder / "batches.meta").open("wb") as handle:
        pickle.dump({"label_names": labels}, handle)
    return root
