"""``predict --data.predict_path PATH``: a trained model on new image files, each input named in
``predictions.csv``, bad files listed or named in one error line."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import FAST, RunCLI
from PIL import Image
from sklearn.datasets import load_digits

from project.cli import main
from project.data.predict_files import read_csv_rows
from project.loading import load_model

QUIET = ["--trainer.logger=false"]


def _rows(run_dir: Path, name: str = "predictions.csv") -> list[dict[str, str]]:
    return list(csv.DictReader((run_dir / name).open()))


def _write_digit_pngs(folder: Path, count: int = 20) -> list[int]:
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
def test_predict_on_a_folder_of_pngs_names_each_file_and_classifies_them(
    run_cli: RunCLI, workdir: Path
) -> None:
    labels = _write_digit_pngs(workdir / "pngs")
    fit = run_cli(
        "fit",
        *QUIET,
        "--trainer.max_epochs=10",
        "--trainer.limit_train_batches=1.0",
        "--trainer.limit_val_batches=1.0",
    )
    cli = run_cli("predict", *QUIET, "--ckpt_path=best", "--data.predict_path=pngs")
    rows = _rows(cli.run_dir)
    assert [row["input"] for row in rows] == [f"digit_{i:02d}.png" for i in range(20)]
    assert list(rows[0])[:4] == ["index", "input", "pred", "prob"]
    assert [key for key in rows[0] if key.startswith("probs_")] == [f"probs_{k}" for k in range(10)]
    for row in rows:
        probs = [float(row[f"probs_{k}"]) for k in range(10)]
        assert sum(probs) == pytest.approx(1.0, abs=1e-5) and int(row["pred"]) == int(np.argmax(probs))
    right = sum(int(row["pred"]) == label for row, label in zip(rows, labels, strict=True))
    assert right >= 17, f"{right}/20 right"
    # the files were converted as the data (up to the PNGs' 8-bit rounding): the same probabilities
    # as on the dataset's own tensors
    model = load_model(fit.run_dir / "checkpoints" / "best.ckpt")  # what predict --ckpt_path best used
    normalize = fit.datamodule.normalize  # type: ignore[attr-defined]
    images = torch.tensor(load_digits().images[:20], dtype=torch.float32).unsqueeze(1) / 16
    with torch.no_grad():
        expected = torch.softmax(model(normalize(images)), dim=-1)
    actual = torch.tensor([[float(row[f"probs_{k}"]) for k in range(10)] for row in rows])
    torch.testing.assert_close(actual, expected, atol=0.02, rtol=0)


def test_a_corrupt_file_is_listed_as_skipped_and_the_others_are_predicted(
    run_cli: RunCLI, workdir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _write_digit_pngs(workdir / "pngs", count=3)
    (workdir / "pngs" / "broken.png").write_bytes(b"\x89PNG\r\n\x1a\n" + b"not really a png" * 4)
    (workdir / "pngs" / "notes.txt").write_text("not an image\n")
    run_cli("fit", *QUIET)
    cli = run_cli("predict", *QUIET, "--ckpt_path=best", "--data.predict_path=pngs")
    assert [row["input"] for row in _rows(cli.run_dir)] == ["digit_00.png", "digit_01.png", "digit_02.png"]
    skipped = _rows(cli.run_dir, "skipped.csv")
    assert [Path(row["input"]).name for row in skipped] == ["broken.png", "notes.txt"]
    assert all(row["reason"].startswith("not a readable image") for row in skipped)
    out = capsys.readouterr().out
    assert "Skipped pngs/broken.png: not a readable image" in out and "2 input files skipped" in out
    # a single unreadable file: one error line naming it, no traceback
    with pytest.raises(SystemExit) as exit_info:
        main(["predict", *FAST, *QUIET, "--ckpt_path=best", "--data.predict_path=pngs/broken.png"])
    assert exit_info.value.code == 1
    err = capsys.readouterr().err
    assert (
        err.strip()
        .splitlines()[-1]
        .startswith("error: predict_path='pngs/broken.png': no readable image (pngs/broken.png: ")
    )
    assert "Traceback" not in err
    with pytest.raises(SystemExit) as exit_info:
        main(["predict", *FAST, *QUIET, "--ckpt_path=best", "--data.predict_path=nothing_here"])
    assert exit_info.value.code == 2
    assert "predict_path='nothing_here': no such file or folder" in capsys.readouterr().err


def test_a_csv_folder_lists_every_file_it_did_not_read(tmp_path: Path) -> None:
    """A file without data rows (only a header, or empty) is skipped with a reason, not silently."""
    (tmp_path / "a.csv").write_text("x,y\n1,2\n3,4\n")
    (tmp_path / "header_only.csv").write_text("x,y\n")
    (tmp_path / "empty.csv").write_text("")
    (tmp_path / "notes.txt").write_text("1,2\n")
    values, names, skipped = read_csv_rows(tmp_path, ["x", "y"])
    assert values.tolist() == [[1.0, 2.0], [3.0, 4.0]] and names == ["a.csv:2", "a.csv:3"]
    assert sorted((Path(file).name, reason) for file, reason in skipped) == [
        ("empty.csv", "no data rows"),
        ("header_only.csv", "no data rows"),
        ("notes.txt", "not a .csv file"),
    ]
