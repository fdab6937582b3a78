"""Train-loader throughput (samples/s) of every DataModule for ``num_workers`` 0, 1, 2, with and
without ``persistent_workers``: the numbers behind the README's advice on workers.

    python benchmarks/data_loading.py                  # 10,000 training images per torchvision dataset
    python benchmarks/data_loading.py --num-train 500 --epochs 1   # quick check of the script

The torchvision DataModules read files that ``tests/fake_datasets.py`` writes in the real on-disk
formats (MNIST IDX files, CIFAR-10 pickles) into a temporary folder, ``--num-train`` training images
each after the 5,000-image validation split; the digits are sklearn's 1,168 training images, the
synthetic set ``--num-train`` CIFAR-shaped tensors. Each configuration iterates its train loader for
``--epochs`` epochs (creating the workers is part of the time; persistent workers are created once),
alternating the configurations over ``--repeats`` rounds; the table holds medians. Nothing else runs
in the loop (no model), so this is the loader's ceiling, not a training speed.
"""

from __future__ import annotations

import argparse
import datetime
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torchvision.datasets.cifar

REPO_ROOT = Path(__file__).resolve().parents[1]
for path in (REPO_ROOT, REPO_ROOT / "tests"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

from fake_datasets import write_cifar10, write_mnist  # noqa: E402
from runwright import BaseDataModule  # noqa: E402

from project.data import (  # noqa: E402
    CIFAR10DataModule,
    DigitsDataModule,
    FashionMNISTDataModule,
    MNISTDataModule,
    SyntheticDataModule,
)

VAL_SIZE = 5000
SETTINGS: list[tuple[int, bool]] = [(0, False), (1, False), (1, True), (2, False), (2, True)]


def datamodules(root: Path, num_train: int) -> dict[str, Callable[..., BaseDataModule]]:
    """Factories ``(num_workers=, persistent_workers=) -> DataModule`` for each DataModule."""
    write_mnist(root, "MNIST", n_train=num_train + VAL_SIZE, n_test=10)
    write_mnist(root, "FashionMNIST", n_train=num_train + VAL_SIZE, n_test=10)
    # The written CIFAR files cannot match the real archive's md5 sums: check that they exist only
    # (what tests/test_data.py does). Workers inherit the patch (fork) or never call it (spawn: the
    # dataset object is already built).
    torchvision.datasets.cifar.check_integrity = lambda path, md5=None: os.path.isfile(path)
    per_batch = -(-(num_train + VAL_SIZE) // 5)
    write_cifar10(root, n_per_batch=per_batch, n_test=10)
    common: dict[str, Any] = {"data_dir": str(root), "val_size": VAL_SIZE, "batch_size": 128}
    return {
        "DigitsDataModule (batch 64)": lambda **kw: DigitsDataModule(batch_size=64, **kw),
        "SyntheticDataModule [3,32,32] (batch 128)": lambda **kw: SyntheticDataModule(
            num_samples=num_train, batch_size=128, **kw
        ),
        "MNISTDataModule (batch 128)": lambda **kw: MNISTDataModule(**common, **kw),
        "FashionMNISTDataModule (batch 128)": lambda **kw: FashionMNISTDataModule(**common, **kw),
        "CIFAR10DataModule (batch 128)": lambda **kw: CIFAR10DataModule(**common, **kw),
    }


def throughput(make: Callable[..., BaseDataModule], workers: int, persistent: bool, epochs: int) -> float:
    """Samples/s over ``epochs`` passes of the train loader (setup excluded, worker start included)."""
    data = make(num_workers=workers, persistent_workers=persistent)
    data.setup("fit")
    loader = data.train_dataloader()
    samples = 0
    start = time.perf_counter()
    for _ in range(epochs):
        for inputs, _target in loader:
            samples += len(inputs)
    seconds = time.perf_counter() - start
    del loader  # shut persistent workers down
    return samples / seconds


def main(argv: list[str] | None = None) -> dict[str, dict[str, float]]:
    """Print a Markdown table (samples/s, median over the repeats) and return it."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--num-train", type=int, default=10000)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    table: dict[str, dict[str, list[float]]] = {}
    with tempfile.TemporaryDirectory(prefix="data_loading_") as tmp:
        makers = datamodules(Path(tmp), args.num_train)
        for _ in range(args.repeats):
            for name, make in makers.items():
                for workers, persistent in SETTINGS:
                    column = f"{workers}{' persistent' if persistent else ''}"
                    value = throughput(make, workers, persistent, args.epochs)
                    table.setdefault(name, {}).setdefault(column, []).append(value)
    medians = {name: {col: statistics.median(v) for col, v in cols.items()} for name, cols in table.items()}
    columns = list(next(iter(medians.values())))
    print(
        f"Train-loader samples/s, {args.epochs} epochs per run, median of {args.repeats} alternating rounds, "
        f"{os.cpu_count()} CPUs, torch {torch.__version__}, {datetime.date.today()}, "
        f"load average {os.getloadavg()[0]:.1f}\n"
    )
    print("| DataModule | " + " | ".join(f"workers={c}" for c in columns) + " |")
    print("|---|" + "---:|" * len(columns))
    for name, cols in medians.items():
        print(f"| {name} | " + " | ".join(f"{cols[c]:,.0f}" for c in columns) + " |")
    return medians


if __name__ == "__main__":
    main()
