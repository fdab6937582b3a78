"""Read new inputs for ``predict --data.predict_path PATH``: image files or CSV rows.

A DataModule's ``read_predict_inputs(path)`` (:class:`~project.data.base.BaseDataModule`)
uses :func:`read_image_files` or :func:`read_csv_rows` and returns a :class:`PredictInputs`.
"""

from __future__ import annotations

import csv
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import torch
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


def read_csv_rows(path: Path, columns: Sequence[str]) -> tuple[Tensor, list[str], list[tuple[str, str]]]:
    """Rows of ``len(columns)`` numbers (in the order of ``columns``) from the CSV file ``path``, or
    from every ``*.csv`` file in the folder ``path``; a first row that is exactly ``columns`` is taken
    as a header. Returns the values ``[N, len(columns)]`` float32, one name per row (``file:line``) and
    the files that were skipped (in a folder, those not ending in ``.csv``; any without data rows).

    Raises:
        DataError: a row with the wrong number of columns or a value that is not a number (the message
            names the file, the line and what was expected), or no rows at all.
    """
    expected, cols = len(columns), ", ".join(columns)
    files, skipped = input_files(path), []
    if path.is_dir():
        skipped = [(str(f), "not a .csv file") for f in files if f.suffix.lower() != ".csv"]
        files = [f for f in files if f.suffix.lower() == ".csv"]
    rows: list[list[float]] = []
    names: list[str] = []
    for file in files:
        before = len(rows)
        with file.open(newline="") as handle:
            for line, row in enumerate(csv.reader(handle), start=1):
                if not any(cell.strip() for cell in row):
                    continue
                try:
                    values = [float(cell) for cell in row]
                except ValueError:
                    if line == 1 and [cell.strip() for cell in row] == list(columns):
                        continue  # the header
                    raise DataError(
                        f"{file} line {line}: {row!r} is not {expected} numbers; expected the columns {cols}"
                    ) from None
                if len(values) != expected:
                    raise DataError(
                        f"{file} line {line}: {len(values)} columns, expected {expected} ({cols})"
                    )
                rows.append(values)
                names.append(f"{file.name}:{line}")
        if len(rows) == before:
            skipped.append((str(file), "no data rows"))
    if not rows:
        raise DataError(f"predict_path={str(path)!r}: no CSV rows to predict on")
    return torch.tensor(rows, dtype=torch.float32), names, skipped
