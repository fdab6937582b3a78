"""The example's DataModules: the embedded digits and synthetic data (the torchvision loaders:
test_vision_data.py; the engine's helpers they use are tested in the engine's own tests)."""

from __future__ import annotations

import torch
from runwright import channel_mean_std

from project.data import DigitsDataModule, SyntheticDataModule


def test_digits_split_is_deterministic_disjoint_and_complete() -> None:
    first, second = DigitsDataModule(), DigitsDataModule()
    first.setup("fit")
    second.setup("fit")
    sizes = [len(first.train_set), len(first.val_set), len(first.test_set)]  # type: ignore[arg-type]
    assert sum(sizes) == 1797
    assert sizes == [1168, 270, 359]
    tensors = [
        (dm.train_set.dataset.tensors, dm.val_set.tensors, dm.test_set.tensors) for dm in (first, second)
    ]
    for mine, theirs in zip(*tensors, strict=True):
        assert all(torch.equal(a, b) for a, b in zip(mine, theirs, strict=True))
    other = DigitsDataModule(split_seed=1)
    other.setup("fit")
    assert not torch.equal(other.test_set.tensors[0], first.test_set.tensors[0])  # type: ignore[union-attr]


def test_digits_normalised_with_train_statistics_and_train_only_augmentation() -> None:
    plain = DigitsDataModule(augment=False)
    plain.setup("fit")
    assert plain.train_set is not None
    train = torch.stack([plain.train_set[i][0] for i in range(1168)])
    assert abs(train.mean().item()) < 1e-4
    assert abs(train.std().item() - 1.0) < 1e-3
    dm = DigitsDataModule(augment=True)
    dm.setup("fit")
    assert dm.train_set is not None and dm.val_set is not None
    mean, std = channel_mean_std(dm.train_set.dataset.tensors[0])  # type: ignore[attr-defined]
    assert dm.mean == mean.tolist() and dm.std == std.tolist()
    # validation items are the same every time; training items are augmented
    assert torch.equal(dm.val_set[0][0], dm.val_set[0][0])
    torch.manual_seed(0)
    draws = [dm.train_set[0][0] for _ in range(5)]
    assert any(not torch.equal(draws[0], d) for d in draws[1:])
    x, y = next(iter(dm.train_dataloader()))
    assert x.shape == (64, 1, 8, 8) and x.dtype == torch.float32
    assert y.shape == (64,) and y.dtype == torch.int64


def test_synthetic_data_is_seeded_and_learnable_shaped() -> None:
    first, second = SyntheticDataModule(num_samples=40, seed=1), SyntheticDataModule(num_samples=40, seed=1)
    first.setup()
    second.setup()
    assert torch.equal(first.train_set.tensors[0], second.train_set.tensors[0])  # type: ignore[union-attr]
    x, y = next(iter(first.train_dataloader()))
    assert x.shape == (40, 3, 32, 32) and y.dtype == torch.int64
    assert len(first.val_set) == len(first.test_set) == 10  # type: ignore[arg-type]
    assert len(set(first.train_set.tensors[1].tolist())) > 1  # type: ignore[union-attr]
