"""The engine's commands on this project's own task (its default experiment, in
``project/configs/``): ``fit``, ``test --ckpt_path best``, ``predict`` and ``export``.
The engine proves its promises in its own repository; these tests show that they hold for this task,
and stay green when the task is yours."""

from __future__ import annotations

import csv
from pathlib import Path

import torch
import yaml
from runwright.testing import FAST, RunMain, run_dirs


def test_fit_writes_a_run_folder_with_its_config_metrics_and_checkpoints(trained_logs: Path) -> None:
    (run,) = run_dirs(trained_logs)
    for name in (
        "config.yaml",
        "metrics.csv",
        "provenance.yaml",
        "checkpoints/best.ckpt",
        "checkpoints/last.ckpt",
    ):
        assert (run / name).is_file(), name
    last = torch.load(run / "checkpoints" / "last.ckpt", weights_only=True, map_location="cpu")
    assert last["global_step"] == 4 and last["epoch"] == 0  # four training batches, one epoch
    config = yaml.safe_load((run / "config.yaml").read_text())
    monitor = config["checkpoint"]["monitor"]
    with (run / "metrics.csv").open(newline="") as handle:
        assert any(row.get(monitor) for row in csv.DictReader(handle)), f"{monitor} was never logged"


def test_test_best_evaluates_the_run_s_best_checkpoint(logs: Path, run_main: RunMain) -> None:
    (fit,) = run_dirs(logs)
    code, out, err = run_main("test", "--ckpt_path", "best", *FAST)
    assert code == 0, err
    (used,) = [
        line.removeprefix("--ckpt_path: ") for line in out.splitlines() if line.startswith("--ckpt_path: ")
    ]
    assert Path(used).resolve() == fit / "checkpoints" / "best.ckpt"
    monitor = yaml.safe_load((fit / "config.yaml").read_text())["checkpoint"]["monitor"]
    tested = "test" + monitor.removeprefix("val")  # val/acc -> test/acc, val_acc -> test_acc
    (line,) = [line for line in out.splitlines() if line.startswith("test: ")]
    assert f"{tested}=" in line, line
    assert len(run_dirs(logs)) == 2


def test_predict_writes_one_row_per_sample(logs: Path, run_main: RunMain) -> None:
    code, _, err = run_main("predict", "--ckpt_path", "best", *FAST)
    assert code == 0, err
    (predictions,) = logs.glob("*_predict/predictions.csv")
    with predictions.open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert rows and [int(row["index"]) for row in rows] == list(range(len(rows)))


def test_export_writes_a_model_that_matches_eager(logs: Path, run_main: RunMain) -> None:
    code, out, err = run_main("export", "--ckpt_path", "best", "--format", "torch_export")
    assert code == 0, err
    assert "Parity check passed" in out
    (exported,) = logs.glob("*_export/model.pt2")
    assert exported.stat().st_size > 0
