"""Batching variable-length sequences: padding, a boolean mask and the true lengths."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, NamedTuple

import torch
from torch import Tensor
from torch.nn.utils.rnn import pad_sequence
from torch.utils.data import default_collate


class PaddedBatch(NamedTuple):
    """Output of :func:`pad_sequences`.

    Attributes:
        padded: ``[B, L_max, ...]`` with the input dtype; positions ``t >= lengths[b]`` hold the padding
            value.
        mask: ``[B, L_max]`` bool, ``True`` where ``padded`` holds real data. The mask, not the padding
            value, is what a model should use (e.g. ``~mask`` as ``key_padding_mask`` of
            ``nn.MultiheadAttention``, or ``mask`` to average over real positions only).
        lengths: ``[B]`` int64, the true length of each sequence (``mask.sum(1)``; on the CPU, as
            ``torch.nn.utils.rnn.pack_padded_sequence`` wants it).
    """

    padded: Tensor
    mask: Tensor
    lengths: Tensor


def default_padding_value(dtype: torch.dtype) -> float | int:
    """The padding value used when none is given: NaN for floating dtypes, -1 for signed integers.

    Both are outside the usual range of real data (NaN is not a measurement, -1 is not a token index or
    class id); :func:`pad_sequences` still checks that the data does not contain it. Unsigned integer
    and bool dtypes have no value that is safe by convention, so they raise ``ValueError`` asking for an
    explicit ``padding_value``.
    """
    if dtype.is_floating_point or dtype.is_complex:
        return math.nan
    if dtype == torch.bool or not dtype.is_signed:
        raise ValueError(
            f"no default padding value for dtype {dtype}: pass padding_value= a value that never occurs "
            "in the data (e.g. the vocabulary size for token ids)"
        )
    return -1


def _occurs_in(sequence: Tensor, value: float | int) -> bool:
    if isinstance(value, float) and math.isnan(value):
        return bool(torch.isnan(sequence).any())
    return bool((sequence == value).any())


def pad_sequences(sequences: Sequence[Tensor], padding_value: float | int | None = None) -> PaddedBatch:
    """Pad ``B`` sequences of shapes ``[L_i, ...]`` into one ``[B, L_max, ...]`` tensor, with a mask and
    the lengths.

    The padding value must not collide with real data: if it did, padded and real positions could be
    mistaken for each other wherever the padding value is used instead of the mask (a padding token id
    ``0`` that is also a real word id is the classic case). So every sequence is checked (one pass over
    the batch) and a collision is an error. Padding uses ``torch.nn.utils.rnn.pad_sequence``.

    Args:
        sequences: ``B >= 1`` tensors with the same dtype, device and trailing dims ``[...]``; ``L_i``
            may be 0.
        padding_value: Written at padded positions; ``None`` picks :func:`default_padding_value` for the
            dtype (NaN for floats, -1 for signed integers).

    Returns:
        :class:`PaddedBatch` ``(padded [B, L_max, ...], mask [B, L_max] bool, lengths [B] int64)``.

    Raises:
        ValueError: for an empty batch, 0-dim tensors, mismatched dtypes or trailing dims, a padding
            value the dtype cannot hold (e.g. 0.5 or -1 for ``uint8``), or a padding value that occurs
            in the data (the message names the sequence and the value).
    """
    if len(sequences) == 0:
        raise ValueError("pad_sequences got an empty batch; need at least one sequence")
    first = sequences[0]
    for index, sequence in enumerate(sequences):
        if not isinstance(sequence, Tensor) or sequence.ndim == 0:
            raise ValueError(
                f"sequence {index} is {type(sequence).__name__} with shape "
                f"{tuple(getattr(sequence, 'shape', ()))}; each must be a tensor of shape [L, ...]"
            )
        if sequence.dtype != first.dtype or sequence.shape[1:] != first.shape[1:]:
            raise ValueError(
                f"sequence {index} has dtype {sequence.dtype} and trailing shape {tuple(sequence.shape[1:])}"
                f", but sequence 0 has {first.dtype} and {tuple(first.shape[1:])}; all must match"
            )
    value = default_padding_value(first.dtype) if padding_value is None else padding_value
    nan = isinstance(value, float) and math.isnan(value)
    if nan and not (first.dtype.is_floating_point or first.dtype.is_complex):
        raise ValueError(f"padding_value=nan cannot be stored in dtype {first.dtype}; pass a number")
    if not nan and torch.tensor(value).to(first.dtype).item() != value:
        raise ValueError(f"padding_value={value!r} cannot be stored exactly in dtype {first.dtype}")
    for index, sequence in enumerate(sequences):
        if _occurs_in(sequence, value):
            raise ValueError(
                f"padding_value={value!r} occurs in the data (sequence {index}), so padding could not be "
                "told apart from real values; pass a padding_value that never occurs in the data"
            )
    lengths = torch.tensor([len(sequence) for sequence in sequences], dtype=torch.int64)
    padded = pad_sequence(list(sequences), batch_first=True, padding_value=value)
    mask = torch.arange(padded.shape[1]) < lengths.unsqueeze(1)
    return PaddedBatch(padded, mask.to(padded.device), lengths)


class PadCollate:
    """A DataLoader ``collate_fn`` for samples ``(sequence [L_i, ...], *rest)`` or bare sequences.

    The sequences are padded with :func:`pad_sequences`; the other fields of the samples (targets, ids)
    are batched with PyTorch's ``default_collate``. A batch is ``(padded, mask, lengths, *rest)``, or
    the :class:`PaddedBatch` ``(padded, mask, lengths)`` for bare sequences.

    Example::

        loader = DataLoader(dataset, batch_size=32, collate_fn=PadCollate(padding_value=vocab_size))
        for padded, mask, lengths, target in loader: ...

    Args:
        padding_value: See :func:`pad_sequences` (``None``: NaN for floats, -1 for signed integers).
    """

    def __init__(self, padding_value: float | int | None = None) -> None:
        self.padding_value = padding_value

    def __call__(self, samples: Sequence[Any]) -> tuple[Any, ...]:
        """Collate a list of samples (see the class docstring for the batch layout)."""
        if len(samples) == 0 or isinstance(samples[0], Tensor):
            return pad_sequences(samples, self.padding_value)
        sequences = [sample[0] for sample in samples]
        rest = default_collate([tuple(sample[1:]) for sample in samples]) if len(samples[0]) > 1 else []
        return (*pad_sequences(sequences, self.padding_value), *rest)
