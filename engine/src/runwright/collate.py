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
    """Output of :func:`pad_sequences`: ``padded`` ``[B, L_max, ...]`` (input dtype; padding value at
    ``t >= lengths[b]``), ``mask`` ``[B, L_max]`` bool (``True`` at real data: what a model should use,
    e.g. ``~mask`` as ``key_padding_mask`` of ``nn.MultiheadAttention``), ``lengths`` ``[B]`` int64 on
    the CPU (as ``torch.nn.utils.rnn.pack_padded_sequence`` wants them)."""

    padded: Tensor
    mask: Tensor
    lengths: Tensor


def pad_sequences(sequences: Sequence[Tensor], padding_value: float | int | None = None) -> PaddedBatch:
    """Pad ``B`` sequences ``[L_i, ...]`` into one ``[B, L_max, ...]`` tensor (with
    ``torch.nn.utils.rnn.pad_sequence``), with a mask and the lengths.

    The padding value must never occur in the data, or padded and real positions could be mistaken for
    each other (a padding token id ``0`` that is also a real word id is the classic case); every
    sequence is checked.

    Args:
        sequences: ``B >= 1`` tensors with the same dtype and trailing dims ``[...]``; ``L_i`` may be 0.
        padding_value: Written at padded positions. ``None``: NaN for floating dtypes, -1 for signed
            integers (outside the usual range of measurements, token ids and class ids); unsigned and
            bool dtypes have no safe default and need one.

    Raises:
        ValueError: an empty batch, a 0-dim tensor, mismatched dtypes or trailing dims, no default for
            the dtype, a padding value the dtype cannot hold (e.g. 0.5 or -1 for ``uint8``), or one
            that occurs in the data (the message names the sequence and the value).
    """
    if len(sequences) == 0:
        raise ValueError("pad_sequences got an empty batch; need at least one sequence")
    first = sequences[0]
    for index, seq in enumerate(sequences):
        if not isinstance(seq, Tensor) or seq.ndim == 0:
            shape = tuple(getattr(seq, "shape", ()))
            raise ValueError(f"sequence {index} is {type(seq).__name__} with shape {shape}; need [L, ...]")
        got, want = ((s.dtype, tuple(s.shape[1:])) for s in (seq, first))
        if got != want:
            raise ValueError(f"sequence {index} has dtype {got[0]} and trailing shape {got[1]}, not {want}")
    floating = first.dtype.is_floating_point or first.dtype.is_complex
    if padding_value is None and not floating and not first.dtype.is_signed:  # unsigned, bool
        raise ValueError(f"no default padding value for dtype {first.dtype}; pass one not in the data")
    value = (math.nan if floating else -1) if padding_value is None else padding_value
    nan = math.isnan(value)
    if nan and not floating:
        raise ValueError(f"padding_value=nan cannot be stored in dtype {first.dtype}; pass a number")
    if not nan and torch.tensor(value).to(first.dtype).item() != value:
        raise ValueError(f"padding_value={value!r} cannot be stored exactly in dtype {first.dtype}")
    for index, seq in enumerate(sequences):
        if bool((seq.isnan() if nan else seq == value).any()):
            raise ValueError(f"padding_value={value!r} occurs in the data (sequence {index}); pass another")
    lengths = torch.tensor([len(seq) for seq in sequences], dtype=torch.int64)
    padded = pad_sequence(list(sequences), batch_first=True, padding_value=value)
    mask = torch.arange(padded.shape[1]) < lengths.unsqueeze(1)
    return PaddedBatch(padded, mask.to(padded.device), lengths)


class PadCollate:
    """A DataLoader ``collate_fn`` for samples ``(sequence [L_i, ...], *rest)`` or bare sequences.

    Batches are ``(padded, mask, lengths, *rest)`` (see :func:`pad_sequences`; the other fields, e.g.
    targets, batched by PyTorch's ``default_collate``), or the :class:`PaddedBatch` for bare sequences::

        loader = DataLoader(dataset, batch_size=32, collate_fn=PadCollate(padding_value=vocab_size))
        for padded, mask, lengths, target in loader: ...

    Args:
        padding_value: See :func:`pad_sequences`.
    """

    def __init__(self, padding_value: float | int | None = None) -> None:
        self.padding_value = padding_value

    def __call__(self, samples: Sequence[Any]) -> tuple[Any, ...]:
        """Collate a list of samples into one batch (layout: see the class docstring)."""
        if len(samples) == 0 or isinstance(samples[0], Tensor):
            return pad_sequences(samples, self.padding_value)
        rest = default_collate([tuple(sample[1:]) for sample in samples])
        return (*pad_sequences([sample[0] for sample in samples], self.padding_value), *rest)
