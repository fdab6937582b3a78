"""scikit-learn's bundled diabetes data: 442 real patients, 10 features, a regression target."""

from __future__ import annotations

from pathlib import Path

import torch
from torch import Tensor

from .base import BaseDataModule, TensorDataset, check_fractions, seeded_split
from .predict_files import InputTensors, PredictInputs, read_csv_rows


def column_mean_std(features: Tensor) -> tuple[Tensor, Tensor]:
    """Per-column mean and standard deviation (Bessel-corrected) of ``features`` ``[N, F]``.

    Compute them on the training split only, then standardise every split with them (PRACTICES.md
    row 16). Returns two ``float32`` tensors of shape ``[F]``. Raises ``ValueError`` for a tensor that
    is not ``[N, F]`` with ``N >= 2``, or for a constant column (its std is 0).
    """
    if features.ndim != 2 or features.shape[0] < 2:
        raise ValueError(f"expected an [N, F] tensor with N >= 2, got shape {tuple(features.shape)}")
    mean, std = features.double().mean(dim=0), features.double().std(dim=0)
    if bool((std == 0).any()):
        constant = torch.nonzero(std == 0).flatten().tolist()
        raise ValueError(
            f"columns {constant} are constant on the training split; they cannot be standardised"
        )
    return mean.float(), std.float()


class DiabetesDataModule(BaseDataModule):
    """Diabetes progression (``sklearn.datasets.load_diabetes``; Efron et al. 2004, "Least Angle
    Regression"), shipped inside scikit-learn: no download.

    442 patients, 10 baseline features (age, sex, body-mass index, mean blood pressure and six blood
    serum measurements) and the target: a quantitative measure of disease progression one year later
    (integers 25..346, mean about 152). The raw features are loaded (``scaled=False``, not scikit-learn's
    version that is centred with statistics of all 442 rows) and standardised with the mean and std of
    the train split only. The train/val/test split (default 65/15/20 %: 288/66/88 rows) is a seeded
    permutation (``split_seed``) that does not depend on the global seed; the same indices are used by
    ``benchmarks/diabetes_baseline.py``.

    The target is standardised too (``standardize_target=True``, train-split mean and std) so that an
    MLP trains with a loss near 1 instead of ~2e4;
    :class:`~project.models.TabularRegressor` reads :attr:`target_mean` and :attr:`target_std` at
    setup and reports its metrics and predictions in the original units.

    Batches are ``(features [B, 10] float32, target [B] float32)``.

    Args:
        val_fraction: Share of the 442 rows used for validation.
        test_fraction: Share used for the test split.
        split_seed: Seed of the split permutation.
        standardize_target: Standardise the target with the train split's mean and std.
        batch_size, num_workers, pin_memory, persistent_workers, prefetch_factor, predict_path: see
            :class:`~project.data.base.BaseDataModule`. ``predict_path`` is a CSV file
            (or a folder of
            them) of raw feature rows, see :meth:`read_predict_inputs`.

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

    @staticmethod
    def load() -> tuple[Tensor, Tensor]:
        """The raw data: features ``[442, 10]`` float32 and target ``[442]`` float32 (original units)."""
        from sklearn.datasets import load_diabetes

        data = load_diabetes(scaled=False)
        return (
            torch.tensor(data.data, dtype=torch.float32),
            torch.tensor(data.target, dtype=torch.float32),
        )

    def split_indices(self, num_samples: int) -> tuple[Tensor, Tensor, Tensor]:
        """The ``(train, val, test)`` row indices (int64) of this module's seeded split."""
        test_idx, val_idx, train_idx = seeded_split(
            num_samples, [self.test_fraction, self.val_fraction], self.split_seed
        )
        return train_idx, val_idx, test_idx

    def setup(self, stage: str | None = None) -> None:
        """Load the data, split it and build the standardised train/val/test datasets (all at once);
        for ``predict`` with ``predict_path``, read those rows too."""
        if self.train_set is None:
            self._setup_splits()
        if stage == "predict":
            self.setup_predict_inputs()

    def read_predict_inputs(self, path: Path) -> PredictInputs:
        """CSV rows at ``path`` (a file, or a folder of ``*.csv`` files): 10 numbers per row in the
        original units and the order of :attr:`feature_names` (as ``load_diabetes(scaled=False)``),
        with or without that header, standardised with the train split's mean and std like every
        split. A row with another column count or a non-number stops with an error naming the file
        and line (:func:`~project.data.predict_files.read_csv_rows`)."""
        rows, names, skipped = read_csv_rows(path, self.feature_names)
        features = (rows - self.feature_mean) / self.feature_std
        return PredictInputs(InputTensors(features), names, skipped)

    def _setup_splits(self) -> None:
        features, target = self.load()
        train_idx, val_idx, test_idx = self.split_indices(len(features))
        self.feature_mean, self.feature_std = column_mean_std(features[train_idx])
        features = (features - self.feature_mean) / self.feature_std
        if self.standardize_target:
            train_target = target[train_idx].double()
            self.target_mean = float(train_target.mean())
            self.target_std = float(train_target.std())
        target = (target - self.target_mean) / self.target_std
        self.train_set = TensorDataset(features[train_idx], target[train_idx])
        self.val_set = TensorDataset(features[val_idx], target[val_idx])
        self.test_set = TensorDataset(features[test_idx], target[test_idx])
