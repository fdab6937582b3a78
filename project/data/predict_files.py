"""Read new inputs for ``predict --data.predict_path PATH``: image files or CSV rows.

A DataModule that can read new inputs implements ``read_predict_inputs(path)`` (see
:class:`~project.data.base.BaseDataModule`) with the helpers here:
:func:`read_image_files` for image
DataModules and :func:`read_csv_rows` for tabular ones. Both return a :class:`PredictInputs`: a
dataset of input tensors (no targets), one name per input (the file name, or ``file:line`` for a CSV
row) for the predictions CSV, and the files that were skipped with the reason.
"""

from __future__ import annotations

import csv
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import Tensor
from torch.utils.data import Dataset

from ..errors import DataError


@dataclass
class PredictInputs:
    """What a DataModule read from ``predict_path``.

    ``dataset[i]`` is the ``i``-th input tensor (what ``forward`` takes for one sample, no target),
    ``names[i]`` names it in the predictions CSV, and ``skipped`` lists ``(file, reason)`` for every
    file that was not read.
    """

    dataset: Dataset[Tensor]
    names: list[str]
    skipped: list[tuple[str, str]] = field(default_factory=list)


class InputTensors(Dataset[Tensor]):
    """In-memory inputs ``[N, ...]``; item ``i`` is ``inputs[i]`` alone (no target)."""

    def __init__(self, inputs: Tensor) -> None:
        self.inputs = inputs

    def __len__(self) -> int:
        return len(self.inputs)

    def __getitem__(self, index: int) -> Tensor:
        return self.inputs[index]


def input_files(path: str | Path) -> list[Path]:
    """``[path]`` for a file; the files directly inside a folder (sorted by name, hidden files left
    out) for a folder.

    Raises:
        DataError: ``path`` does not exist, or the folder holds no file.
    """
    path = Path(path).expanduser()
    if path.is_file():
        return [path]
    if not path.is_dir():
        raise DataError(f"predict_path={str(path)!r}: no such file or folder (absolute: {path.resolve()})")
    files = sorted(p for p in path.iterdir() if p.is_file() and not p.name.startswith("."))
    if not files:
        raise DataError(f"predict_path={str(path)!r}: the folder holds no file to predict on")
    return files


class ImageFiles(Dataset[Tensor]):
    """Image files read with PIL, converted to ``mode`` (``"L"`` grayscale, ``"RGB"``), then ``transform``
    (which resizes them and makes the ``[C, H, W]`` float32 tensor the model takes).

    Raises:
        DataError: (from ``__getitem__``) a file cannot be decoded; the message names it.
    """

    def __init__(self, files: Sequence[Path], mode: str, transform: Callable[[Any], Tensor]) -> None:
        self.files = list(files)
        self.mode = mode
        self.transform = transform

    def __len__(self) -> int:
        return len(self.files)

    def __getitem__(self, index: int) -> Tensor:
        from PIL import Image

        path = self.files[index]
        try:
            with Image.open(path) as image:
                converted = image.convert(self.mode)
        except (OSError, ValueError, SyntaxError) as error:
            raise DataError(f"{path}: not a readable image: {type(error).__name__}: {error}") from error
        return self.transform(converted)


def read_image_files(path: str | Path, channels: int, transform: Callable[[Any], Tensor]) -> PredictInputs:
    """The images at ``path`` (a file or a folder), checked with PIL (``Image.open`` and ``verify``:
    header and, for PNG, every chunk's checksum). Files PIL cannot identify or that fail the check
    (a text file, a truncated or corrupt image) are skipped and listed with the reason.

    Args:
        path: An image file (PNG, JPEG or anything else PIL reads) or a folder of them.
        channels: 1 (converted to grayscale) or 3 (RGB).
        transform: Takes a PIL image of any size; returns the model's input ``[C, H, W]`` float32.

    Raises:
        DataError: ``path`` is missing, or no file in it is a readable image.
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


def read_csv_rows(
    path: str | Path, columns: Sequence[str]
) -> tuple[Tensor, list[str], list[tuple[str, str]]]:
    """Rows of numbers from the CSV file ``path`` (or every ``*.csv`` file in the folder ``path``).

    Each row holds ``len(columns)`` numbers in the order of ``columns``. A first row that is not all
    numbers is taken as a header and must name exactly ``columns`` (in that order). Read with
    Python's ``csv`` module. Returns the values ``[N, len(columns)]`` float32, one name per row
    (``file:line``) and the files that were skipped (in a folder, files not ending in ``.csv``).

    Raises:
        DataError: a row with the wrong number of columns or a value that is not a number (the message
            names the file, the line and what was expected), a header that does not match, or no rows.
    """
    expected = len(columns)
    files = input_files(path)
    skipped = [
        (str(f), "not a .csv file") for f in files if Path(path).is_dir() and f.suffix.lower() != ".csv"
    ]
    rows: list[list[float]] = []
    names: list[str] = []
    for file in files:
        if Path(path).is_dir() and file.suffix.lower() != ".csv":
            continue
        with file.open(newline="") as handle:
            for line, row in enumerate(csv.reader(handle), start=1):
                if not row or all(not cell.strip() for cell in row):
                    continue
                try:
                    values = [float(cell) for cell in row]
                except ValueError:
                    if line == 1 and [cell.strip() for cell in row] == list(columns):
                        continue  # the header
                    raise DataError(
                        f"{file} line {line}: {row!r} is not {expected} numbers; expected the columns "
                        f"{', '.join(columns)}"
                    ) from None
                if len(values) != expected:
                    raise DataError(
                        f"{file} line {line}: {len(values)} columns, expected {expected} "
                        f"({', '.join(columns)})"
                    )
                rows.append(values)
                names.append(f"{file.name}:{line}")
    if not rows:
        raise DataError(f"predict_path={str(path)!r}: no CSV rows to predict on")
    return torch.tensor(rows, dtype=torch.float32), names, skipped
