"""The export, predict and tuning commands on the diabetes regression task: ONNX names and the
quantization check's MAE, predictions for CSV rows, ``lr_find`` and ``scale_batch_size``."""

from __future__ import annotations

import csv
import re
import shlex
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from runwright import ProjectCLI
from runwright.testing import FAST, RunCLI, RunMain, rebuilt
from sklearn.datasets import load_diabetes
from support import CONFIGS, PACKAGE

from project.data.diabetes import read_csv_rows

DIABETES = str(CONFIGS / "experiment" / "diabetes.yaml")
QUIET = ["--trainer.logger=false"]
NO_BARS = ["--trainer.enable_progress_bar=false", "--trainer.enable_model_summary=false"]


def _rows(run_dir: Path, name: str = "predictions.csv") -> list[dict[str, str]]:
    return list(csv.DictReader((run_dir / name).open()))


def fit_with_batch_size_1(logs: Path, *args: str) -> Path:
    """A fast fit with ``--data.batch_size=1`` (8 training steps, 4 validation batches: an R2 needs 2+
    samples) and no logger, after ``args`` (e.g. an experiment's ``--config``); returns the run folder."""
    common = [f"--logs_dir={logs}", "--trainer.logger=false", *FAST, "--data.batch_size=1"]
    common += ["--trainer.limit_train_batches=8", "--trainer.limit_val_batches=4"]
    return ProjectCLI(args=["fit", *args, *common], package=PACKAGE).run_dir


def tune(run_main: RunMain, command: str) -> tuple[str, dict[str, object], list[str]]:
    """Run the tuning ``command`` (``lr_find``, ``scale_batch_size``) on the diabetes experiment; returns
    what it printed, the suggestion config it wrote and the ``fit`` arguments of the ``Use it: python -m
    <package> fit ...`` command it printed (that config last)."""
    code, out, err = run_main(command, *NO_BARS, "--config", DIABETES)
    assert code == 0, err
    (line,) = [line for line in out.splitlines() if line.startswith("Use it: ")]
    words = shlex.split(line.removeprefix("Use it: "))
    assert words[:4] == ["python", "-m", PACKAGE, "fit"] and words[-2] == "--config", line
    return out, yaml.safe_load(Path(words[-1]).read_text()), words[4:]


def quantized_export_line(ckpt: Path, output: Path, run_main: RunMain) -> str:
    """Run ``export --format=torchscript --quantize=dynamic`` on ``ckpt`` and return the ``Test ...``
    line it prints (fp32 vs int8 on the test split)."""
    options = ["--format=torchscript", "--quantize=dynamic", f"--output={output}"]
    code, out, err = run_main("export", f"--ckpt_path={ckpt}", *options)
    assert code == 0, err
    return next(line for line in out.splitlines() if line.startswith("Test "))


@pytest.fixture(scope="module")
def batch_size_1_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A diabetes run trained with ``--data.batch_size=1`` (a few steps)."""
    return fit_with_batch_size_1(tmp_path_factory.mktemp("export_bs1") / "logs", "--config", DIABETES)


def test_regressor_export_names_and_quantization_check_fit_the_task(
    batch_size_1_run: Path, workdir: Path, run_main: RunMain, package: str
) -> None:
    import onnx

    ckpt = batch_size_1_run / "checkpoints" / "best.ckpt"
    code, out, err = run_main("export", f"--ckpt_path={ckpt}", "--format=onnx", "--output=model.onnx")
    assert code == 0, err
    graph = onnx.load(str(workdir / "model.onnx")).graph
    assert [graph.input[0].name, graph.output[0].name] == ["features", "predictions"]
    assert "batch 64:" in out  # 88 test rows: 64 checked at once, then 1
    line = quantized_export_line(ckpt, workdir / "q.pt", run_main)
    fp32 = float(re.search(r"Test MAE: fp32 ([0-9.]+)", line).group(1))  # type: ignore[union-attr]
    # MAE in the target's units (disease progression 25..346): an untrained-ish model is tens off
    assert 10 < fp32 < 200, line
    # the same number computed here from the checkpoint's predictions on the test split
    run = rebuilt(ckpt, package)
    model, datamodule = run.model, run.datamodule
    features, target = datamodule.test_set.tensors  # type: ignore[attr-defined]
    with torch.no_grad():
        mae = (model.to_original_units(model(features)) - model.to_original_units(target)).abs().mean()
    assert fp32 == pytest.approx(float(mae), abs=1e-3)


def test_predict_on_csv_rows_standardises_them_like_training(
    run_cli: RunCLI, run_main: RunMain, workdir: Path, package: str
) -> None:
    data = load_diabetes(scaled=False)
    with (workdir / "rows.csv").open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(data.feature_names)
        writer.writerows(data.data[:6].tolist())
    fit = run_cli("fit", "--config", DIABETES, *QUIET, "--trainer.limit_val_batches=2")
    cli = run_cli("predict", *QUIET, "--ckpt_path=best", "--data.predict_path=rows.csv")
    assert type(cli.datamodule).__name__ == "DiabetesDataModule"  # restored from the checkpoint
    rows = _rows(cli.run_dir)
    assert list(rows[0]) == ["index", "input", "pred"]
    assert [row["input"] for row in rows] == [f"rows.csv:{line}" for line in range(2, 8)]
    dm, model = fit.datamodule, rebuilt(fit.run_dir / "checkpoints" / "best.ckpt", package).model
    features = (torch.tensor(data.data[:6], dtype=torch.float32) - dm.feature_mean) / dm.feature_std  # type: ignore[attr-defined]
    with torch.no_grad():
        expected = model.to_original_units(model(features))  # type: ignore[operator]
    np.testing.assert_allclose([float(row["pred"]) for row in rows], expected.numpy(), rtol=1e-5)
    # a row with a column missing: one error line naming the file and the line
    (workdir / "bad.csv").write_text(
        "59,2,32.1,101,157,93.2,38,4,4.8598,87\n48,1,21.6,87,183,103.2,70,3,3.8918\n"
    )
    code, _, err = run_main("predict", *FAST, *QUIET, "--ckpt_path=best", "--data.predict_path=bad.csv")
    assert code == 2  # bad input
    assert "error: bad.csv line 2: 9 columns, expected 10 (age, sex, bmi, bp, s1, s2, s3, s4, s5, s6)" in err


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


def test_lr_find_on_diabetes_suggests_the_steep_part_and_its_command_reruns_the_experiment(
    run_main: RunMain, run_cli: RunCLI
) -> None:
    out, saved, fit_args = tune(run_main, "lr_find")
    optimizer = saved["model"]["init_args"]["optimizer"]  # type: ignore[index]
    assert optimizer["class_path"] == "torch.optim.AdamW" and list(optimizer["init_args"]) == ["lr"]
    lr = optimizer["init_args"]["lr"]
    # 3e-3 trains this experiment well; Lightning's own rule said 1.3e-4 (on the flat start)
    assert 5e-4 <= lr <= 1e-2, out
    (line,) = [line for line in out.splitlines() if line.startswith("Suggested LR: ")]
    assert line.startswith(f"Suggested LR: {lr:.3g} for torch.optim.AdamW on "), line
    cli = run_cli("fit", "--trainer.logger=false", *fit_args)
    assert type(cli.model).__name__ == "TabularRegressor"
    assert type(cli.datamodule).__name__ == "DiabetesDataModule"
    (group,) = cli.trainer.optimizers[0].param_groups
    assert group["weight_decay"] == 0.1  # the experiment's own, kept next to the suggested LR
    assert cli.config.fit.model.init_args.optimizer.init_args.lr == pytest.approx(lr)


def test_scale_batch_size_stops_at_the_training_split_and_its_command_reruns_the_experiment(
    run_main: RunMain, run_cli: RunCLI
) -> None:
    out, saved, fit_args = tune(run_main, "scale_batch_size")
    # 288 training rows: 64, 128, 256 fit; 512 would be larger than the split (Lightning tries it)
    assert "Batch size: 256 (doubled from 64; stopped because the next size (512) would exceed the " in out
    assert "training split of 288 samples)" in out
    data_class = "project.data.DiabetesDataModule"
    assert saved == {"data": {"class_path": data_class, "init_args": {"batch_size": 256}}}
    cli = run_cli("fit", "--trainer.logger=false", *fit_args)
    assert type(cli.model).__name__ == "TabularRegressor"
    assert cli.datamodule.batch_size == 256  # type: ignore[attr-defined]
    assert cli.datamodule.hparams["split_seed"] == 0
