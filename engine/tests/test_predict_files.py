"""``predict --data.predict_path PATH``: a trained model on new files, each input named in
``predictions.csv`` in the order of the files, unreadable files listed (``skipped.csv``) or named in one
error line."""

from __future__ import annotations

import csv
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from support import RunCLI, checkpoint_model, main

from runwright.errors import ConfigError

QUIET = ["--trainer.logger=false"]


def rows_of(run_dir: Path, name: str = "predictions.csv") -> list[dict[str, str]]:
    with (run_dir / name).open(newline="") as handle:
        return list(csv.DictReader(handle))


def write_pngs(folder: Path, count: int) -> list[np.ndarray]:
    """``count`` random 8x8 grayscale PNGs ``image_NN.png`` (every third one saved at 16x16, nearest);
    returns their 8x8 pixels."""
    folder.mkdir()
    generator = np.random.default_rng(0)
    pixels = [generator.integers(0, 256, (8, 8), dtype=np.uint8) for _ in range(count)]
    for i, image in enumerate(pixels):
        side = 16 if i % 3 == 2 else 8
        Image.fromarray(image, mode="L").resize((side, side), Image.Resampling.NEAREST).save(
            folder / f"image_{i:02d}.png"
        )
    return pixels


def test_predict_on_a_folder_of_images_names_each_file_and_converts_it_as_the_reader_says(
    run_cli: RunCLI, workdir: Path, capsys: pytest.CaptureFixture[str], fitted: Callable[..., Path]
) -> None:
    pixels = write_pngs(workdir / "pngs", 6)
    run = fitted()
    cli = run_cli(
        "predict",
        *QUIET,
        "--ckpt_path=best",
        "--data.predict_path=pngs",
        "--trainer.limit_predict_batches=1.0",
    )
    rows = rows_of(cli.run_dir)
    out = capsys.readouterr().out
    assert "predict_path: 6 inputs from pngs" in out and "Predictions (6 rows) written to" in out
    assert [row["input"] for row in rows] == [f"image_{i:02d}.png" for i in range(6)]
    assert list(rows[0]) == ["index", "input", "pred", "prob", *(f"probs_{k}" for k in range(4))]
    assert [row["index"] for row in rows] == [str(i) for i in range(6)]
    probs = torch.tensor([[float(row[f"probs_{k}"]) for k in range(4)] for row in rows])
    torch.testing.assert_close(probs.sum(dim=1), torch.ones(6))
    assert [int(row["pred"]) for row in rows] == probs.argmax(dim=1).tolist()
    assert [float(row["prob"]) for row in rows] == pytest.approx(probs.max(dim=1).values.tolist())
    # each file reached the model as TinyImages.read_predict_inputs converts it (pixel / 255, resized to
    # 8x8), in the order of the files: the same probabilities as the model on those tensors
    model = checkpoint_model(run / "checkpoints" / "best.ckpt")  # what predict --ckpt_path best used
    images = torch.tensor(np.stack(pixels), dtype=torch.float32).unsqueeze(1) / 255
    with torch.no_grad():
        expected = torch.softmax(model(images), dim=-1)
    exact = [i for i in range(6) if i % 3 != 2]  # the 8x8 files; the 16x16 ones went through a resize
    torch.testing.assert_close(probs[exact], expected[exact], atol=1e-5, rtol=0)
    torch.testing.assert_close(probs, expected, atol=0.05, rtol=0)


def test_a_corrupt_file_is_listed_as_skipped_and_the_others_are_predicted(
    run_cli: RunCLI, workdir: Path, capsys: pytest.CaptureFixture[str], fitted: Callable[..., Path]
) -> None:
    write_pngs(workdir / "pngs", 1)
    (workdir / "pngs" / "broken.png").write_bytes(b"\x89PNG\r\n\x1a\n" + b"not really a png" * 4)
    (workdir / "pngs" / "notes.txt").write_text("not an image\n")
    fitted()
    cli = run_cli("predict", *QUIET, "--ckpt_path=best", "--data.predict_path=pngs")
    assert [row["input"] for row in rows_of(cli.run_dir)] == ["image_00.png"]
    skipped = rows_of(cli.run_dir, "skipped.csv")
    assert [Path(row["input"]).name for row in skipped] == ["broken.png", "notes.txt"]
    assert all(row["reason"].startswith("not a readable image") for row in skipped)
    out = capsys.readouterr().out
    assert "predict_path: 1 input from pngs" in out and "Predictions (1 row) written to" in out
    assert "Skipped pngs/broken.png: not a readable image" in out and "2 input files skipped" in out


@pytest.mark.parametrize(
    "args, code, named",
    [
        (
            ["--data.predict_path=pngs/broken.png"],
            2,
            "predict_path='pngs/broken.png': no readable image (pngs/",
        ),
        (["--data.predict_path=nothing_here"], 2, "predict_path='nothing_here': no such file or folder"),
        (["--data.predict_path=empty"], 2, "predict_path='empty': the folder holds no file to predict on"),
        (
            ["--data=helpers.NoPredictImages", "--data.predict_path=pngs"],
            2,
            "NoPredictImages cannot read new",
        ),
    ],
)
def test_inputs_that_cannot_be_predicted_are_one_error_line(
    workdir: Path, capsys: pytest.CaptureFixture[str], args: list[str], code: int, named: str
) -> None:
    (workdir / "pngs").mkdir()
    (workdir / "pngs" / "broken.png").write_bytes(b"\x89PNG\r\n\x1a\n" + b"not really a png" * 4)
    (workdir / "empty").mkdir()
    with pytest.raises(SystemExit) as caught:
        main(["predict", *QUIET, "--trainer.enable_progress_bar=false", *args])
    assert caught.value.code == code
    err = capsys.readouterr().err
    (line,) = [line for line in err.splitlines() if line.startswith("error: ")]
    assert named in line
    assert "Traceback" not in err


def test_each_sample_of_a_batchs_output_is_a_row_whatever_predict_step_returns() -> None:
    """A tensor ``[B]`` or ``[B, K]``, a tuple or dict of them, or a list of B values: a row per sample; a
    value that is not one per sample is one error line."""
    from runwright.callbacks.prediction_writer import sample_rows

    logits = torch.tensor([[0.5, 1.5], [2.0, 3.0]])
    assert sample_rows(logits) == [{"pred_0": 0.5, "pred_1": 1.5}, {"pred_0": 2.0, "pred_1": 3.0}]
    assert sample_rows((torch.tensor([1, 2]), logits[:, 0])) == [
        {"pred_0": 1, "pred_1": 0.5},
        {"pred_0": 2, "pred_1": 2.0},
    ]
    assert sample_rows({"label": ["cat", "dog"], "score": torch.tensor([0.25, 0.75])}) == [
        {"label": "cat", "score": 0.25},
        {"label": "dog", "score": 0.75},
    ]
    with pytest.raises(ConfigError, match=r"returned pred=Tensor .* not a value per sample"):
        sample_rows(torch.tensor(0.5))
    with pytest.raises(ConfigError, match=r"outputs of different lengths \[2, 3\]"):
        sample_rows({"a": torch.zeros(2), "b": [1, 2, 3]})
