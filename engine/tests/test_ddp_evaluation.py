"""Evaluation under DDP (2 CPU processes, gloo): every sample of a split counted exactly once, so
``test``/``validate``/``predict`` equal a single process, for any DataModule; the edge cases end with
one clear line instead of a bare assertion, a silently wrong value or a hang (SIGTERM during DDP training
and its resume: test_ddp_resume.py). Each DDP run is a subprocess with a timeout."""

from __future__ import annotations

import csv
import time
from pathlib import Path

import pytest
import torch
from support import FAST, RunCLI, run_dirs, run_module

DDP = [
    "--trainer.accelerator=cpu",
    "--trainer.strategy=ddp",
    "--trainer.devices=2",
    "--trainer.enable_progress_bar=false",
]
COUNT = ["--trainer.callbacks+=helpers.CountTestSamples", "--trainer.enable_progress_bar=false"]
#: A short fit, in-process, without the test and predict limits.
FIT = [
    *(a for a in FAST if "limit_test" not in a and "limit_predict" not in a),
    "--trainer.limit_train_batches=6",
]


def metrics(run_dir: Path, prefix: str) -> dict[str, float]:
    """The last logged value of every ``<prefix>...`` key in a run's metrics.csv."""
    with (run_dir / "metrics.csv").open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    return {
        key: float(value) for row in rows for key, value in row.items() if key.startswith(prefix) and value
    }


def error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("error:")]


@pytest.mark.slow
def test_two_process_test_and_predict_equal_one_process_and_count_each_sample_once(
    run_cli: RunCLI, workdir: Path
) -> None:
    ckpt = run_cli("fit", *FIT, "--trainer.logger=false").run_dir / "checkpoints" / "best.ckpt"
    single = run_cli("test", f"--ckpt_path={ckpt}", *COUNT, fast=False).run_dir
    run_module(["test", f"--ckpt_path={ckpt}", *COUNT, *DDP], cwd=workdir, timeout=300)
    ddp = run_dirs(workdir / "logs")[-1]
    # the 47 test images: 24 + 23 on the two ranks, none repeated (Lightning's sampler would count 48)
    assert (single / "test_samples.txt").read_text() == (ddp / "test_samples.txt").read_text() == "47\n"
    one, two = metrics(single, "test/"), metrics(ddp, "test/")
    assert set(one) == set(two) == {"test/acc", "test/f1", "test/loss"}
    for key in one:
        assert two[key] == pytest.approx(one[key], abs=1e-6), key
    # predict: one predictions.csv (rank 0 gathers), the single-process rows in the same order
    single_run = run_cli(
        "predict", f"--ckpt_path={ckpt}", "--trainer.enable_progress_bar=false", fast=False
    ).run_dir
    run_module(["predict", f"--ckpt_path={ckpt}", *DDP], cwd=workdir, timeout=300)
    ddp_run = run_dirs(workdir / "logs")[-1]
    assert sorted(path.name for path in ddp_run.glob("predictions*.csv")) == ["predictions.csv"]
    one_rows, two_rows = (
        list(csv.DictReader((run / "predictions.csv").open())) for run in (single_run, ddp_run)
    )
    assert len(one_rows) == len(two_rows) == 47
    assert len({r["pred"] for r in one_rows}) > 1, (
        "predictions that vary, so a miscount would change the metrics"
    )
    assert [r["index"] for r in two_rows] == [str(i) for i in range(47)]
    assert [(r["pred"], r["target"]) for r in two_rows] == [(r["pred"], r["target"]) for r in one_rows]
    assert [float(r["prob"]) for r in two_rows] == pytest.approx(
        [float(r["prob"]) for r in one_rows], abs=1e-6
    )


def test_a_command_closes_its_process_group(run_cli: RunCLI) -> None:
    """A command of the DDP strategy (here one process, in-process) ends with its process group closed:
    a gloo group left to the interpreter's exit aborts the process at random (exit -6 after the results)."""
    run_cli("test", "--trainer.strategy=ddp", "--trainer.devices=1", "--trainer.accelerator=cpu")
    assert not torch.distributed.is_initialized()


@pytest.mark.slow
def test_a_plain_datamodule_is_evaluated_once_per_sample_too(run_cli: RunCLI, workdir: Path) -> None:
    """``PlainData`` is written as Lightning's docs write a DataModule (no class of ours): the engine's
    DistributedEvaluation gives its loaders unrepeated samplers all the same."""
    plain = ["--data=fixture_task.PlainData"]
    ckpt = run_cli("fit", *FIT, *plain, "--trainer.logger=false").run_dir / "checkpoints" / "best.ckpt"
    for command, prefix in (("validate", "val/"), ("test", "test/")):
        single = run_cli(command, f"--ckpt_path={ckpt}", *plain, *COUNT, fast=False).run_dir
        run_module([command, f"--ckpt_path={ckpt}", *plain, *COUNT, *DDP], cwd=workdir, timeout=300)
        one, two = metrics(single, prefix), metrics(run_dirs(workdir / "logs")[-1], prefix)
        assert set(one) == set(two) >= {f"{prefix}acc", f"{prefix}f1", f"{prefix}loss"}
        for key in one:
            assert two[key] == pytest.approx(one[key], abs=1e-6), key
    ddp_test = run_dirs(workdir / "logs")[-1]
    assert (ddp_test / "test_samples.txt").read_text() == "47\n"  # 45 validation images, 47 test images


@pytest.mark.slow
@pytest.mark.parametrize("command", ["test", "predict"])
def test_a_split_smaller_than_the_number_of_processes_is_one_error_line(tmp_path: Path, command: str) -> None:
    """Before: rank 1 died on a bare AssertionError inside Lightning's sampler."""
    result = run_module([command, "--data.num_test=1", *DDP], cwd=tmp_path, timeout=300, check=False)
    assert result.returncode == 2, result.stderr[-3000:]
    (line,) = error_lines(result.stderr)  # rank 0 speaks for both
    assert f"the {command} split has 1 sample(s), fewer than the 2 processes" in line
    assert "AssertionError" not in result.stderr and "Traceback" not in result.stderr


@pytest.mark.slow
@pytest.mark.parametrize(
    "args",
    [
        pytest.param([], id="epoch-mean-batch-16"),  # 24 and 23 samples, 2 batches each: a wrong mean
        pytest.param(
            ["--model.on_step=true", "--data.batch_size=23"], id="every-step-batch-23"
        ),  # 2 and 1 batches
    ],
)
def test_a_value_logged_with_sync_dist_on_uneven_shards_is_one_error_line_not_a_wrong_value_or_a_hang(
    tmp_path: Path, args: list[str]
) -> None:
    """Lightning averages a ``sync_dist=True`` value over the processes with their sample counts
    rounded (47 samples on 2 processes count as 46: the mean came out 2 % too high), and a value synced
    on every step hung for good once one process ran out of batches (SIGTERM did not end it)."""
    test = ["test", "--model=helpers.SyncDistClassifier", *args, *DDP]
    started = time.monotonic()
    result = run_module(test, cwd=tmp_path, timeout=300, check=False)
    assert result.returncode == 2, result.stderr[-3000:]
    assert time.monotonic() - started < 240
    (line,) = error_lines(result.stderr)
    assert "test/synced_loss with self.log(..., sync_dist=True)" in line and "the 47 test samples" in line
    assert "torchmetrics" in line and "Traceback" not in result.stderr


@pytest.mark.slow
def test_a_value_logged_with_sync_dist_on_even_shards_is_right(tmp_path: Path) -> None:
    test = ["test", "--model=helpers.SyncDistClassifier", "--model.on_step=true", "--data.num_test=46", *DDP]
    run_module(test, cwd=tmp_path, timeout=300)
    values = metrics(run_dirs(tmp_path / "logs")[-1], "test/")
    assert values["test/synced_loss_epoch"] == pytest.approx(values["test/loss"], rel=1e-6)  # 23 + 23 samples


def test_each_process_gets_its_share_with_the_loaders_settings() -> None:
    """What ``DistributedEvaluation`` hands each of 2 processes: a map-style loader's every other sample,
    an ``IterableDataset``'s every other item in the order it yields, both batched as the original loader
    batches (its ``batch_size`` and ``collate_fn`` kept)."""
    from types import SimpleNamespace

    import torch
    from torch.utils.data import DataLoader, IterableDataset, TensorDataset

    from runwright.callbacks import DistributedEvaluation

    class Stream(IterableDataset):  # type: ignore[type-arg]
        def __iter__(self):  # type: ignore[no-untyped-def]
            return iter(range(7))

    def collate(items: list[object]) -> list[object]:
        return items

    for rank in (0, 1):
        trainer = SimpleNamespace(
            world_size=2, global_rank=rank, distributed_sampler_kwargs={"num_replicas": 2, "rank": rank}
        )
        share = DistributedEvaluation()._unrepeated
        mapped = share(DataLoader(TensorDataset(torch.arange(7)), batch_size=3), trainer, "val")  # type: ignore[arg-type]
        assert [batch[0].tolist() for batch in mapped] == ([[0, 2, 4], [6]] if rank == 0 else [[1, 3, 5]])
        streamed = share(DataLoader(Stream(), batch_size=2, collate_fn=collate), trainer, "val")  # type: ignore[arg-type]
        assert list(streamed) == ([[0, 2], [4, 6]] if rank == 0 else [[1, 3], [5]])
