"""scikit-learn's bundled diabetes data: 442 real patients, 10 features, a regression target."""

from __future__ import annotations

import csv
from collections.abc import Sequence
from pathlib import Path

import torch
from runwright import (
    BaseDataModule,
    DataError,
    InputTensors,
    PredictInputs,
    channel_mean_std,
    check_fractions,
    input_files,
    seeded_split,
)
from torch import Tensor
from torch.utils.data import TensorDataset


class DiabetesDataModule(BaseDataModule):
    """Diabetes progression (``sklearn.datasets.load_diabetes``; Efron et al. 2004, "Least Angle
    Regression"), shipped inside scikit-learn: no download.

    442 patients, 10 baseline features (age, sex, body-mass index, mean blood pressure and six blood
    serum measurements) and the target: disease progression one year later (integers 25..346, mean
    about 152). Batches are ``(features [B, 10] float32, target [B] float32)``. The raw features
    (``scaled=False``; scikit-learn's scaled version is centred with statistics of all 442 rows) are
    standardised with the train split's mean and std; so is the target (``standardize_target``), so
    that an MLP trains with a loss near 1 instead of ~2e4:
    :class:`~project.models.TabularRegressor` reads :attr:`target_mean` and :attr:`target_std`
    and reports in the original units. The split (default 65/15/20 %: 288/66/88 rows) is a seeded
    permutation (``split_seed``), independent of the global seed.

    Args:
        val_fraction: Share of the 442 rows used for validation.
        test_fraction: Share used for the test split.
        split_seed: Seed of the split permutation.
        standardize_target: Standardise the target with the train split's mean and std.
        batch_size, num_workers, pin_memory, persistent_workers, prefetch_factor, predict_path: see
            :class:`~project.data.base.BaseDataModule`; ``predict_path``: a CSV file (or a folder
            of them) of raw feature rows, see :meth:`read_predict_inputs`.

    Attributes (after :meth:`setup`):
        feature_mean, feature_std: ``[10]`` float32 train-split statistics.
        target_mean, target_std: floats; the target in a batch is ``(y - target_mean) / target_std``
            (``0.0`` and ``1.0`` when ``standardize_target`` is false).
    """

    num_features = 10
    #: The feature columns in order (``load_diabetes().feature_names``): a predict CSV's header.
    feature_names = ("age", "sex", "bmi", "bp", "s1", "s2", "s3", "s4", "s5", "s6")

    def __init__(
        self,
        val_fraction: float = 0.15,
        test_fraction: float = 0.2,
        split_seed: int = 0,
        standardize_target: bool = True,
        batch_size: int = 32,
        num_workers: int = 0,
        pin_memory: bool = False,
        persistent_workers: bool = False,
        prefetch_factor: int | None = None,
        predict_path: str | None = None,
    ) -> None:
        super().__init__(
            batch_size, num_workers, pin_memory, persistent_workers, prefetch_factor, predict_path
        )
        self.save_hyperparameters(ignore=["predict_path"])
        check_fractions(val_fraction=val_fraction, test_fraction=test_fraction)
        self.val_fraction = val_fraction
        self.test_fraction = test_fraction
        self.split_seed = split_seed
        self.standardize_target = standardize_target
        self.target_mean = 0.0
        self.target_std = 1.0

    def setup(self, stage: str | None = None) -> None:
        """Load the data, split it and build the three standardised splits (for every stage)."""
        from sklearn.datasets import load_diabetes

        data = load_diabetes(scaled=False)
        features = torch.tensor(data.data, dtype=torch.float32)
        target = torch.tensor(data.target, dtype=torch.float32)
        test, val, train = seeded_split(len(target), [self.test_fraction, self.val_fraction], self.split_seed)
        self.feature_mean, self.feature_std = (s.float() for s in channel_mean_std(features[train]))
        features = (features - self.feature_mean) / self.feature_std
        if self.standardize_target:
            self.target_mean, self.target_std = (float(s) for s in channel_mean_std(target[train, None]))
        target = (target - self.target_mean) / self.target_std
        self.train_set = TensorDataset(features[train], target[train])
        self.val_set = TensorDataset(features[val], target[val])
        self.test_set = TensorDataset(features[test], target[test])

    def read_predict_inputs(self, path: Path) -> PredictInputs:
        """CSV rows at ``path`` (a file, or a folder of ``*.csv`` files): 10 numbers per row in the
        original units and the order of :attr:`feature_names`, with or without that header,
        standardised like every split. A bad row stops with an error naming the file and line
        (:func:`read_csv_rows`)."""
        rows, names, skipped = read_csv_rows(path, self.feature_names)
        return PredictInputs(InputTensors((rows - self.feature_mean) / self.feature_std), names, skipped)


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
