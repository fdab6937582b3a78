"""``test``/``validate``/``predict`` under DDP evaluate every sample of the split exactly once, so their
metrics (and predictions) equal the single-process ones."""

from __future__ import annotations

import csv
import os
from pathlib import Path

import pytest
from conftest import FAST, REPO_ROOT, run_dirs, run_module

TESTS = str(REPO_ROOT / "tests")
COUNT = ["--trainer.callbacks+=eval_helpers.CountTestSamples", "--trainer.enable_progress_bar=false"]
DDP = ["--trainer.accelerator=cpu", "--trainer.strategy=ddp", "--trainer.devices=2"]


def _metrics(run_dir: Path) -> dict[str, float]:
    rows = list(csv.DictReader((run_dir / "metrics.csv").open()))
    return {
        key: float(value) for row in rows for key, value in row.items() if key.startswith("test/") and value
    }


@pytest.mark.slow
def test_two_process_test_and_predict_equal_one_process_and_count_each_sample_once(tmp_path: Path) -> None:
    env = {"PYTHONPATH": os.pathsep.join(filter(None, [TESTS, str(REPO_ROOT), os.environ.get("PYTHONPATH")]))}
    fit = [a for a in FAST if "limit_test" not in a]
    run_module(
        ["fit", *fit, "--trainer.logger=false", "--trainer.limit_train_batches=6"], cwd=tmp_path, env=env
    )
    ckpt = str(run_dirs(tmp_path / "logs")[0] / "checkpoints" / "best.ckpt")
    run_module(["test", f"--ckpt_path={ckpt}", *COUNT], cwd=tmp_path, env=env)
    run_module(["test", f"--ckpt_path={ckpt}", *COUNT, *DDP], cwd=tmp_path, env=env, timeout=300)
    _, single, ddp = run_dirs(tmp_path / "logs")
    # the digits test split: 20 % of 1,797 images; 180 + 179 on the two ranks, none repeated
    assert (single / "test_samples.txt").read_text() == "359\n"
    assert (ddp / "test_samples.txt").read_text() == "359\n"
    one, two = _metrics(single), _metrics(ddp)
    assert set(one) == set(two) == {"test/acc", "test/f1", "test/loss"}
    assert two["test/acc"] == pytest.approx(one["test/acc"], abs=1e-6)
    assert two["test/f1"] == pytest.approx(one["test/f1"], abs=1e-6)
    assert two["test/loss"] == pytest.approx(one["test/loss"], abs=1e-6)
    assert 0.3 < one["test/acc"] < 1.0  # a model that learned something, so the check can differ
    # predict: one predictions.csv (rank 0 gathers), the single-process rows in the same order
    predict = ["predict", f"--ckpt_path={ckpt}", "--trainer.limit_predict_batches=1.0"]
    run_module(predict, cwd=tmp_path, env=env)
    run_module([*predict, *DDP], cwd=tmp_path, env=env, timeout=300)
    single_run, ddp_run = run_dirs(tmp_path / "logs")[3:]
    assert sorted(path.name for path in ddp_run.glob("predictions*.csv")) == ["predictions.csv"]
    one_rows, two_rows = (
        list(csv.DictReader((run / "predictions.csv").open())) for run in (single_run, ddp_run)
    )
    assert len(one_rows) == len(two_rows) == 359
    assert [r["index"] for r in two_rows] == [str(i) for i in range(359)]
    assert [(r["pred"], r["target"]) for r in two_rows] == [(r["pred"], r["target"]) for r in one_rows]
    assert [float(r["prob"]) for r in two_rows] == pytest.approx(
        [float(r["prob"]) for r in one_rows], abs=1e-6
    )
