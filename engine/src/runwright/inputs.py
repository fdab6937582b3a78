"""Read new inputs for ``predict --data.predict_path PATH``.

A DataModule's ``read_predict_inputs(path)`` (:class:`~runwright.base.BaseDataModule`)
returns a :class:`PredictInputs`: image files through :func:`read_image_files`, anything else (e.g.
CSV rows) from the files that :func:`input_files` lists.
"""

from __future__ import annotations

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
    """In-memory inputs ``[N, ...]``; item ``i`` is ``inputs[i]`` alone (no target, unlike
    ``torch.utils.data.TensorDataset``, whose items are tuples)."""

    def __init__(self, inputs: Tensor) -> None:
        self.inputs = inputs

    def __len__(self) -> int:
        return len(self.inputs)

    def __getitem__(self, index: int) -> Tensor:
        return self.inputs[index]


def input_files(path: Path) -> list[Path]:
    """``[path]`` for a file (``BaseDataModule`` checked that it exists); for a folder, the files in it
    (not hidden, not in subfolders), sorted by name. Raises ``DataError`` for a folder without files."""
    if path.is_file():
        return [path]
    files = sorted(p for p in path.iterdir() if p.is_file() and not p.name.startswith("."))
    if not files:
        raise DataError(f"predict_path={str(path)!r}: the folder holds no file to predict on")
    return files


class ImageFiles(Dataset[Tensor]):
    """Image files read one at a time (in the loader's workers, so a folder larger than memory can be
    predicted) with PIL, converted to ``mode`` (``"L"``, ``"RGB"``), then ``transform``.

    Raises:
        DataError: (from ``__getitem__``) a file cannot be decoded; the message names it.
    """

    def __init__(self, files: Sequence[Path], mode: str, transform: Callable[[Any], Tensor]) -> None:
        self.files, self.mode, self.transform = list(files), mode, transform

    def __len__(self) -> int:
        return len(self.files)

    def __getitem__(self, index: int) -> Tensor:
        from PIL import Image

        try:
            with Image.open(self.files[index]) as image:
                return self.transform(image.convert(self.mode))
        except (OSError, ValueError, SyntaxError) as error:
            reason = f"{type(error).__name__}: {error}"
            raise DataError(f"{self.files[index]}: not a readable image: {reason}") from error


def read_image_files(path: Path, channels: int, transform: Callable[[Any], Tensor]) -> PredictInputs:
    """The images at ``path`` (a file or a folder), converted to ``channels`` (1: grayscale, 3: RGB),
    then ``transform``, read lazily (:class:`ImageFiles`). Each file is checked first with PIL
    (``Image.open`` and ``verify``: header and, for PNG, every chunk's checksum); one that fails (a
    text file, a truncated or corrupt image) is skipped and listed with the reason.

    Args:
        path: An image file (PNG, JPEG or anything else PIL reads) or a folder of them.
        channels: 1 or 3.
        transform: Takes a PIL image of any size; returns the model's input ``[C, H, W]`` float32.

    Raises:
        DataError: no file at ``path`` is a readable image.
    """
    from PIL import Image

    good: list[Path] = []
    skipped: list[tuple[str, str]] = []
    for file in input_files(path):
        try:
            with Image.open(file) as image:
                image.verify()
            good.append(file)
        except (OSError, ValueError, SyntaxError) as error:
            skipped.append((str(file), f"not a readable image: {type(error).__name__}: {error}"))
    if not good:
        reasons = "; ".join(f"{file}: {reason}" for file, reason in skipped[:3])
        raise DataError(f"predict_path={str(path)!r}: no readable image ({reasons})")
    mode = {1: "L", 3: "RGB"}[channels]
    return PredictInputs(ImageFiles(good, mode, transform), [file.name for file in good], skipped)
