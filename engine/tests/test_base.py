"""The engine's optional helpers for a DataModule: splits, train-split statistics, loader settings."""

from __future__ import annotations

import pytest
import torch
from fixture_task import TinyImages

from runwright import channel_mean_std, seeded_split


def test_seeded_split_and_statistics_reject_bad_input() -> None:
    with pytest.raises(ValueError, match="fractions"):
        seeded_split(10, [0.6, 0.5], seed=0)
    with pytest.raises(ValueError, match=r"channels \(dim 1\) \[0\] are constant"):
        channel_mean_std(torch.ones(4, 1, 2, 2))
    with pytest.raises(ValueError, match=r"\[N, C, \.\.\.\] tensor with 2\+ values per channel, got \(4,\)"):
        channel_mean_std(torch.ones(4))


def test_loader_settings_are_exposed_and_validated() -> None:
    dm = TinyImages(
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
        TinyImages(num_workers=0, persistent_workers=True)
    with pytest.raises(ValueError, match="batch_size=0"):
        TinyImages(batch_size=0)
