"""Read new inputs for ``predict --data.predict_path PATH``.

A DataModule's ``read_predict_inputs(path)`` (:class:`~runwright.base.BaseDataModule`) returns a
:class:`PredictInputs`: image files through :func:`read_image_files`, anything else (e.g. CSV rows) from
the files that :func:`input_files` lists.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NamedTuple

from torch import Tensor
from torch.utils.data import Dataset

from .errors import DataError


class PredictInputs(NamedTuple):
    """What a DataModule read from ``predict_path``: ``dataset[i]`` is the ``i``-th input tensor (what
    ``forward`` takes for one sample, no target), ``names[i]`` names it in the predictions CSV (file
    name, ``file:line``), ``skipped`` lists ``(file, reason)`` for every file that was not read."""

    dataset: Dataset[Tensor]
    names: list[str]
    skipped: list[tuple[str, str]]


class InputTensors(Dataset[Tensor]):
    """Item ``i`` is ``read(inputs[i])``, or ``inputs[i]`` alone without ``read``: in-memory inputs
    ``[N, ...]`` (no target, unlike ``torch.utils.data.TensorDataset``, whose items are tuples), or, say,
    file paths that ``read`` turns into input tensors when the loader asks for them (``read`` must pickle
    for the loader's workers)."""

    def __init__(self, inputs: Tensor | Sequence[Any], read: Callable[[Any], Tensor] | None = None) -> None:
        self.inputs, self.read = inputs, read

    def __len__(self) -> int:
        return len(self.inputs)

    def __getitem__(self, index: int) -> Tensor:
        return self.inputs[index] if self.read is None else self.read(self.inputs[index])


def input_files(path: Path) -> list[Path]:
    """``[path]`` for a file (``BaseDataModule`` checked that it exists); for a folder, the files in it
    (not hidden, not in subfolders), sorted by name. Raises ``DataError`` for a folder without files."""
    if path.is_file():
        return [path]
    if not (files := sorted(p for p in path.iterdir() if p.is_file() and not p.name.startswith("."))):
        raise DataError(f"predict_path={str(path)!r}: the folder holds no file to predict on")
    return files


def _read_image(file: Path, mode: str | None = None, transform: Callable[[Any], Tensor] | None = None) -> Any:
    """``transform`` of the image in ``file`` converted to ``mode`` (``"L"``, ``"RGB"``); without
    ``mode``, only check the file (PIL's ``verify``: header and, for PNG, every chunk's checksum).

    Raises:
        DataError: PIL cannot read the file (``<file>: not a readable image: <reason>``).
    """
    from PIL import Image

    try:
        with Image.open(file) as image:
            return transform(image.convert(mode)) if mode and transform else image.verify()
    except (OSError, ValueError, SyntaxError) as error:
        raise DataError(f"{file}: not a readable image: {type(error).__name__}: {error}") from error


def read_image_files(path: Path, channels: int, transform: Callable[[Any], Tensor]) -> PredictInputs:
    """The images at ``path`` (a file or a folder), read lazily with PIL (in the loader's workers, so a
    folder larger than memory can be predicted), converted to ``channels`` (1: grayscale, 3: RGB), then
    ``transform``. Each file is checked first (:func:`_read_image` without a mode); one that fails (a
    text file, a truncated or corrupt image) is skipped and listed with the reason.

    Args:
        path: An image file (PNG, JPEG or anything else PIL reads) or a folder of them.
        channels: 1 or 3.
        transform: Takes a PIL image of any size; returns the model's input ``[C, H, W]`` float32.

    Raises:
        DataError: no file at ``path`` is a readable image.
    """
    good, skipped = list[Path](), list[tuple[str, str]]()
    for file in input_files(path):
        try:
            _read_image(file)
            good.append(file)
        except DataError as error:
            skipped.append((str(file), str(error).removeprefix(f"{file}: ")))
    if not good:
        reasons = "; ".join(map(": ".join, skipped[:3]))
        raise DataError(f"predict_path={str(path)!r}: no readable image ({reasons})")
    read = functools.partial(_read_image, mode={1: "L", 3: "RGB"}[channels], transform=transform)
    return PredictInputs(InputTensors(good, read), [file.name for file in good], skipped)
