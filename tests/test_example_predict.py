"""The example a user replaces, predicting on image files: the digits classifier trained by the
package's own config classifies PNGs of digits it has never seen as files (the engine's part, reading
files, skipping bad ones and the CSV, is tested in the engine's own tests)."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from runwright.testing import RunCLI, rebuilt
from sklearn.datasets import load_digits

QUIET = ["--trainer.logger=false"]


def write_digit_pngs(folder: Path, count: int = 20) -> list[int]:
    """The first ``count`` digits as PNGs of 32x32 or 64x64 pixels (light ink on black, like the data);
    returns their labels."""
    digits = load_digits()
    folder.mkdir()
    for i in range(count):
        pixels = np.round(digits.images[i] / 16 * 255).astype(np.uint8)
        side = 32 if i % 2 else 64
        Image.fromarray(pixels, mode="L").resize((side, side), Image.Resampling.NEAREST).save(
            folder / f"digit_{i:02d}.png"
        )
    return [int(label) for label in digits.target[:count]]


@pytest.mark.slow
def test_predict_on_a_folder_of_digit_pngs_classifies_them(
    run_cli: RunCLI, workdir: Path, package: str
) -> None:
    labels = write_digit_pngs(workdir / "pngs")
    fit = run_cli(
        "fit",
        *QUIET,
        "--trainer.max_epochs=10",
        "--trainer.limit_train_batches=1.0",
        "--trainer.limit_val_batches=1.0",
    )
    cli = run_cli("predict", *QUIET, "--ckpt_path=best", "--data.predict_path=pngs")
    with (cli.run_dir / "predictions.csv").open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert [row["input"] for row in rows] == [f"digit_{i:02d}.png" for i in range(20)]
    assert [key for key in rows[0] if key.startswith("probs_")] == [f"probs_{k}" for k in range(10)]
    right = sum(int(row["pred"]) == label for row, label in zip(rows, labels, strict=True))
    assert right >= 17, f"{right}/20 right"
    # the files were converted as the data (up to the PNGs' 8-bit rounding): the same probabilities
    # as on the dataset's own tensors
    model = rebuilt(fit.run_dir / "checkpoints" / "best.ckpt", package).model  # what predict used
    normalize = fit.datamodule.normalize
    images = torch.tensor(load_digits().images[:20], dtype=torch.float32).unsqueeze(1) / 16
    with torch.no_grad():
        expected = torch.softmax(model(normalize(images)), dim=-1)
    actual = torch.tensor([[float(row[f"probs_{k}"]) for k in range(10)] for row in rows])
    torch.testing.assert_close(actual, expected, atol=0.02, rtol=0)
