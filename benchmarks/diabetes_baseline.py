"""scikit-learn's ``LinearRegression`` on exactly the diabetes split that the MLP experiment uses.

    python benchmarks/diabetes_baseline.py                # split_seed 0, the experiment's split
    python benchmarks/diabetes_baseline.py --seeds 0-19   # the spread over 20 seeded splits

Prints test R2, MAE and RMSE (original target units) per split seed, and the median over the seeds.
The split, the train-only feature standardisation and the test rows come from
``project.data.DiabetesDataModule``, so the numbers are comparable with
``python -m project test``.
"""

from __future__ import annotations

import argparse
import statistics

import numpy as np
from sklearn.linear_model import LinearRegression
from sklearn.metrics import mean_absolute_error, mean_squared_error, r2_score
from torch.utils.data import TensorDataset

from project.data import DiabetesDataModule


def evaluate(split_seed: int) -> dict[str, float]:
    """Fit ``LinearRegression`` on the train split of ``split_seed``; return its test R2, MAE, RMSE."""
    data = DiabetesDataModule(split_seed=split_seed, standardize_target=False)
    data.setup("fit")
    train_set, test_set = data.train_set, data.test_set
    assert isinstance(train_set, TensorDataset) and isinstance(test_set, TensorDataset)
    x_train, y_train = (t.numpy() for t in train_set.tensors)
    x_test, y_test = (t.numpy() for t in test_set.tensors)
    pred = LinearRegression().fit(x_train, y_train).predict(x_test)
    return {
        "r2": float(r2_score(y_test, pred)),
        "mae": float(mean_absolute_error(y_test, pred)),
        "rmse": float(np.sqrt(mean_squared_error(y_test, pred))),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--seeds", default="0", help="a seed (0) or an inclusive range (0-19)")
    args = parser.parse_args()
    first, _, last = args.seeds.partition("-")
    seeds = range(int(first), int(last or first) + 1)
    r2s = []
    for seed in seeds:
        result = evaluate(seed)
        r2s.append(result["r2"])
        print(
            f"split_seed={seed:3d}  LinearRegression  test/r2={result['r2']:.4f}  "
            f"test/mae={result['mae']:.2f}  test/rmse={result['rmse']:.2f}"
        )
    if len(r2s) > 1:
        print(f"median test/r2 over {len(r2s)} splits: {statistics.median(r2s):.4f}")


if __name__ == "__main__":
    main()
