"""The EMA preset, ``configs/callbacks/ema.yaml`` (Lightning's ``EMAWeightAveraging``): the average is
the closed form, it is what validation, ``test``, ``predict`` and ``export`` use and what the
checkpoints' ``state_dict`` holds, it survives a resume bit for bit, DDP ranks agree on it, and a resume
that switches it on or off stops (README, "Weight averaging (EMA)")."""

from __future__ import annotations

import csv
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from fixture_task import TinyClassifier
from lightning.pytorch import Callback, LightningModule, Trainer
from support import FAST, every_step, hashes, main, metric_rows, run_module
from torch import Tensor

#: The preset with a short average (decay 0.5), so that averaged and trained weights differ clearly.
#: What a user's EMA preset (configs/callbacks/ema.yaml) adds, with a shorter average for short runs.
EMA = ["--trainer.callbacks+=lightning.pytorch.callbacks.EMAWeightAveraging", "--trainer.callbacks.decay=0.5"]


def checkpoint(path: Path) -> dict[str, Any]:
    return torch.load(path, map_location="cpu", weights_only=True)


def model_with(state_dict: dict[str, Tensor]) -> TinyClassifier:
    model = TinyClassifier()
    model.load_state_dict(state_dict)
    return model.eval()


def assert_same(a: dict[str, Tensor], b: dict[str, Tensor]) -> None:
    assert a.keys() == b.keys()
    different = [key for key in a if not torch.equal(a[key], b[key])]
    assert not different, f"not bit-identical: {different[:5]}"


class WeightRecorder(Callback):
    """Keeps the trained weights after every optimizer step."""

    runs: list[WeightRecorder] = []

    def __init__(self) -> None:
        self.steps: list[dict[str, Tensor]] = []
        WeightRecorder.runs.append(self)

    def on_train_batch_end(self, trainer: Trainer, pl_module: LightningModule, *args: Any) -> None:
        self.steps.append({key: value.detach().clone() for key, value in pl_module.state_dict().items()})


class SaveRankWeights(Callback):
    """At the end of training (after the average was copied into the model) each rank saves its weights
    as ``<folder>/rank<N>.pt``."""

    def __init__(self, folder: str) -> None:
        self.folder = folder

    def on_train_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        torch.save(pl_module.state_dict(), Path(self.folder) / f"rank{trainer.global_rank}.pt")


def test_the_average_is_the_closed_form_and_validation_test_predict_and_export_use_it(
    run_cli: Any, workdir: Path
) -> None:
    """After K steps with decay d: ``d^(K-1) w_1 + sum_{k=2..K} (1 - d) d^(K-k) w_k`` of the trained
    weights ``w_k`` (parameters and BatchNorm's float statistics), in ``best.ckpt``/``last.ckpt``; that
    average is what validation (during fit and ``validate``), ``test``, ``predict`` and ``export`` use."""
    decay, steps = 0.8, 6
    fit = run_cli(
        "fit", *EMA, f"--trainer.callbacks.decay={decay}", f"--trainer.limit_train_batches={steps}",
        "--trainer.limit_val_batches=3", "--trainer.callbacks+=test_ema.WeightRecorder",
    )  # fmt: skip
    trained_steps = WeightRecorder.runs[-1].steps
    assert len(trained_steps) == steps
    last = fit.run_dir / "checkpoints/last.ckpt"
    saved = checkpoint(last)
    assert_same(saved["current_model_state"], trained_steps[-1])  # the trained weights are kept as well
    for key, value in saved["state_dict"].items():
        if not value.is_floating_point():  # BatchNorm's num_batches_tracked (averaged and truncated)
            continue
        expected = decay ** (steps - 1) * trained_steps[0][key].double()
        for k in range(2, steps + 1):
            expected += (1 - decay) * decay ** (steps - k) * trained_steps[k - 1][key].double()
        torch.testing.assert_close(value.double(), expected, rtol=1e-5, atol=1e-7)
        assert not torch.allclose(value, trained_steps[-1][key]), key  # really an average
    assert_same(checkpoint(fit.run_dir / "checkpoints/best.ckpt")["state_dict"], saved["state_dict"])
    assert int(saved["averaging_state"]["n_averaged"]) == steps

    average, trained = model_with(saved["state_dict"]), model_with(saved["current_model_state"])
    # a plain checkpoint of the trained weights, to show that they give other results
    plain = workdir / "trained.ckpt"
    torch.save({**saved, "state_dict": saved["current_model_state"]}, plain)

    # validation during fit (so best.ckpt's choice) was of the average: validate reproduces it
    (logged,) = [value for epoch, _, value in metric_rows(fit.run_dir, "val/loss")]
    validate = run_cli("validate", f"--ckpt_path={last}", "--trainer.limit_val_batches=3")
    assert float(validate.trainer.callback_metrics["val/loss"]) == pytest.approx(logged, rel=1e-6)
    other = run_cli("validate", f"--ckpt_path={plain}", "--trainer.limit_val_batches=3")
    assert float(other.trainer.callback_metrics["val/loss"]) != pytest.approx(logged, rel=1e-3)

    # test: the loss of the averaged weights on the test batch
    images, labels = (t[:16] for t in fit.datamodule.test_set.tensors)
    tested = run_cli("test", f"--ckpt_path={last}")
    expected = torch.nn.functional.cross_entropy(average(images), labels)
    assert float(tested.trainer.callback_metrics["test/loss"]) == pytest.approx(float(expected), rel=1e-5)
    assert float(torch.nn.functional.cross_entropy(trained(images), labels)) != pytest.approx(float(expected))

    # predict: the averaged weights' probabilities
    predicted = run_cli("predict", f"--ckpt_path={last}")
    with (predicted.run_dir / "predictions.csv").open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    probs = torch.tensor([[float(row[f"probs_{k}"]) for k in range(4)] for row in rows])
    torch.testing.assert_close(probs, torch.softmax(average(images), dim=-1).detach(), rtol=0, atol=1e-5)

    # export: the exported model computes the averaged weights' outputs
    main(["export", f"--ckpt_path={last}", "--format=torchscript", f"--output={workdir / 'model.pt'}"])
    exported = torch.jit.load(str(workdir / "model.pt"))(images)
    torch.testing.assert_close(exported, average(images).detach(), rtol=0, atol=1e-5)
    assert (exported - trained(images)).abs().max() > 1e-3


def test_before_the_first_update_validation_checkpoints_and_test_use_trained_weights(
    run_cli: Any,
) -> None:
    """``update_starting_at_step`` past the first epochs: until the average has its first update, every
    validation, ``best.ckpt``/``last.ckpt`` and ``test`` use the trained weights, exactly as the same run
    without averaging does (not the initial weights, the average that was never updated); from the first
    update on, the average."""
    run = ["--trainer.max_epochs=3", "--trainer.limit_train_batches=4", "--trainer.limit_val_batches=2"]
    plain = run_cli("fit", *run, "--run_name=plain")
    never = run_cli("fit", *run, *EMA, "--trainer.callbacks.update_starting_at_step=100", "--run_name=never")
    late = run_cli("fit", *run, *EMA, "--trainer.callbacks.update_starting_at_step=6", "--run_name=late")
    val = {cli: [v for _, _, v in metric_rows(cli.run_dir, "val/loss")] for cli in (plain, never, late)}
    assert len(val[plain]) == 3
    assert val[never] == val[plain]  # no average yet in any epoch: the trained weights, every epoch
    assert val[late][0] == val[plain][0]  # epoch 1 (steps 1-4) before the first update (step 7)
    assert val[late][2] != val[plain][2]  # the average from then on
    for name in ("best.ckpt", "last.ckpt"):
        saved = checkpoint(never.run_dir / "checkpoints" / name)
        assert_same(saved["state_dict"], checkpoint(plain.run_dir / "checkpoints" / name)["state_dict"])
        assert_same(saved["state_dict"], saved["current_model_state"])
    assert_same(never.model.state_dict(), plain.model.state_dict())  # the model after fit (test, export)
    tested = [run_cli("test", f"--ckpt_path={cli.run_dir}/checkpoints/best.ckpt") for cli in (plain, never)]
    assert len({float(cli.trainer.callback_metrics["test/loss"]) for cli in tested}) == 1


@pytest.mark.slow
@pytest.mark.parametrize("num_workers", [0, 2])
def test_the_average_survives_a_resume_bit_for_bit(run_cli: Any, workdir: Path, num_workers: int) -> None:
    """3 epochs of 4 batches, dropout, augmentation and shuffling on: resumed mid-epoch (step 6) and at
    an epoch's end (after epoch 1), the run ends with the uninterrupted run's average and trained
    weights, bit for bit."""
    run = [
        *EMA,
        "--trainer.max_epochs=3",
        "--trainer.limit_train_batches=4",
        f"--data.num_workers={num_workers}",
    ]
    full = run_cli("fit", *run, "--run_name=full", *every_step(workdir / "steps"))
    mid = run_cli("fit", *run, "--run_name=mid", f"--ckpt_path={workdir}/steps/step=6.ckpt")
    stopped = run_cli("fit", *run, "--run_name=epoch", "--trainer.callbacks+=helpers.StopAfterEpoch")
    assert stopped.trainer.global_step == 4
    end = run_cli("fit", *run, f"--ckpt_path={stopped.run_dir}/checkpoints/last.ckpt")
    expected = checkpoint(full.run_dir / "checkpoints/last.ckpt")
    for resumed in (mid, end):
        assert resumed.trainer.global_step == 12
        got = checkpoint(resumed.run_dir / "checkpoints/last.ckpt")
        assert_same(got["state_dict"], expected["state_dict"])  # the average
        assert_same(got["current_model_state"], expected["current_model_state"])
        assert_same(got["averaging_state"], expected["averaging_state"])
        assert_same(resumed.model.state_dict(), full.model.state_dict())  # the average, after fit


@pytest.mark.slow
def test_ddp_ranks_keep_the_same_average(workdir: Path) -> None:
    """2 CPU processes (gloo): each rank's average at the end of training is the same, and it is the one
    in ``last.ckpt``.

    The averaged parameters are equal on every rank at every step (DDP keeps the parameters equal).
    BatchNorm's statistics are per process under DDP (without SyncBatchNorm), and so are their
    averages between validations; each validation's forward takes rank 0's (DDP broadcasts buffers),
    and checkpoints are rank 0's, so what is validated and saved is one average."""
    args = [
        *FAST, *EMA, "--trainer.strategy=ddp", "--trainer.devices=2", "--trainer.accelerator=cpu",
        "--trainer.max_epochs=2", "--trainer.limit_train_batches=4", "--run_name=ddp",
        "--trainer.callbacks+=test_ema.SaveRankWeights", f"--trainer.callbacks.folder={workdir}",
    ]  # fmt: skip
    run_module(["fit", *args], cwd=workdir, env={"OMP_NUM_THREADS": "1"})
    rank0, rank1 = (torch.load(workdir / f"rank{rank}.pt", weights_only=True) for rank in (0, 1))
    assert_same(rank0, rank1)
    assert_same(checkpoint(workdir / "logs/ddp/checkpoints/last.ckpt")["state_dict"], rank0)


def test_a_resume_that_switches_averaging_on_or_off_stops_with_one_line(
    workdir: Path, fitted: Callable[..., Path], capsys: pytest.CaptureFixture[str]
) -> None:
    def resume(run: str, *args: str) -> list[str]:
        before = hashes(workdir / "logs" / run)
        capsys.readouterr()
        with pytest.raises(SystemExit) as caught:
            main(
                [
                    "fit",
                    *FAST,
                    "--trainer.max_epochs=2",
                    f"--ckpt_path=logs/{run}/checkpoints/last.ckpt",
                    *args,
                ]
            )
        assert caught.value.code == 2
        assert hashes(workdir / "logs" / run) == before  # the run is untouched
        return [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]

    main(["fit", *FAST, *EMA, "--run_name=averaged"])
    fitted("plain")
    (error,) = resume("averaged")
    assert "the run averaged its weights" in error and "--config configs/callbacks/ema.yaml" in error
    (error,) = resume("plain", *EMA)
    assert "saved without weight averaging, but this fit averages (EMAWeightAveraging)" in error
    # with the run's own setting both resume
    main(["fit", *FAST, "--trainer.max_epochs=2", "--ckpt_path=logs/averaged/checkpoints/last.ckpt", *EMA])
    main(["fit", *FAST, "--trainer.max_epochs=2", "--ckpt_path=logs/plain/checkpoints/last.ckpt"])


@pytest.mark.slow
def test_ema_and_compile_together(run_cli: Any) -> None:
    """Compiled and averaged: the validation during fit is of the average (validate reproduces it
    uncompiled) and the checkpoint keeps the eager keys."""
    fit = run_cli("fit", *EMA, "--compile.enabled=true", "--trainer.limit_val_batches=3")
    last = fit.run_dir / "checkpoints/last.ckpt"
    (logged,) = [value for _, _, value in metric_rows(fit.run_dir, "val/loss")]
    validate = run_cli("validate", f"--ckpt_path={last}", "--trainer.limit_val_batches=3")
    assert float(validate.trainer.callback_metrics["val/loss"]) == pytest.approx(logged, rel=1e-5)
    assert list(checkpoint(last)["state_dict"]) == list(TinyClassifier().state_dict())
