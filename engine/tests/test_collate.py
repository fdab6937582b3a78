"""The variable-length collate helper, on its own."""

from __future__ import annotations

import math

import pytest
import torch
from torch.utils.data import DataLoader

from runwright.collate import PadCollate, pad_sequences


def test_pads_to_the_longest_with_mask_and_lengths() -> None:
    sequences = [torch.randn(3, 4), torch.randn(1, 4), torch.randn(5, 4)]
    padded, mask, lengths = pad_sequences(sequences)
    assert padded.shape == (3, 5, 4) and padded.dtype == torch.float32
    assert mask.shape == (3, 5) and mask.dtype == torch.bool
    assert lengths.dtype == torch.int64 and lengths.tolist() == [3, 1, 5]
    assert mask.tolist() == [
        [True, True, True, False, False],
        [True, False, False, False, False],
        [True, True, True, True, True],
    ]
    for row, sequence in enumerate(sequences):
        torch.testing.assert_close(padded[row, : len(sequence)], sequence)
    # Float padding defaults to NaN: padded positions are exactly the masked-out ones.
    assert torch.equal(torch.isnan(padded).all(dim=-1), ~mask)
    assert torch.equal(mask.sum(dim=1), lengths)


def test_integer_tokens_pad_with_minus_one_or_a_given_value() -> None:
    tokens = [torch.tensor([0, 5, 2]), torch.tensor([7])]
    padded, mask, _ = pad_sequences(tokens)
    assert padded.dtype == torch.int64 and padded.tolist() == [[0, 5, 2], [7, -1, -1]]
    padded, _, _ = pad_sequences(tokens, padding_value=10)  # e.g. the vocabulary size
    assert padded.tolist() == [[0, 5, 2], [7, 10, 10]]
    assert mask.tolist() == [[True, True, True], [True, False, False]]


def test_a_padding_value_that_occurs_in_the_data_is_an_error() -> None:
    with pytest.raises(ValueError, match=r"padding_value=0 occurs in the data \(sequence 1\)"):
        pad_sequences([torch.tensor([3, 4]), torch.tensor([0])], padding_value=0)
    with pytest.raises(ValueError, match="padding_value=nan occurs in the data"):
        pad_sequences([torch.tensor([1.0, math.nan])])
    with pytest.raises(ValueError, match="padding_value=-1 occurs"):
        pad_sequences([torch.tensor([-1, 2])])


def test_bad_input_is_named() -> None:
    with pytest.raises(ValueError, match="empty batch"):
        pad_sequences([])
    with pytest.raises(ValueError, match=r"no default padding value for dtype torch\.uint8"):
        pad_sequences([torch.tensor([1, 2], dtype=torch.uint8)])
    with pytest.raises(ValueError, match=r"padding_value=-1 cannot be stored exactly in dtype torch\.uint8"):
        pad_sequences([torch.tensor([1, 2], dtype=torch.uint8)], padding_value=-1)
    with pytest.raises(ValueError, match=r"padding_value=nan cannot be stored in dtype torch\.int64"):
        pad_sequences([torch.tensor([1, 2])], padding_value=math.nan)
    with pytest.raises(ValueError, match=r"sequence 1 has dtype torch\.float32 and trailing shape"):
        pad_sequences([torch.zeros(2, 3), torch.zeros(2, 4)])
    with pytest.raises(ValueError, match="sequence 0 is Tensor with shape"):
        pad_sequences([torch.tensor(1.0)])


def test_works_as_a_dataloader_collate_fn() -> None:
    samples = [(torch.arange(n, dtype=torch.float32), n % 2) for n in (2, 4, 1, 3)]
    loader = DataLoader(samples, batch_size=2, collate_fn=PadCollate())
    batches = list(loader)
    assert len(batches) == 2
    padded, mask, lengths, target = batches[0]
    assert padded.shape == (2, 4) and lengths.tolist() == [2, 4]
    assert target.dtype == torch.int64 and target.tolist() == [0, 0]
    # The mask lets a model ignore padding: the masked mean equals each sequence's own mean.
    means = torch.where(mask, padded, 0.0).sum(dim=1) / lengths
    torch.testing.assert_close(means, torch.tensor([0.5, 1.5]))
    bare = list(DataLoader([torch.ones(2), torch.ones(1)], batch_size=2, collate_fn=PadCollate()))
    assert bare[0].lengths.tolist() == [2, 1]
