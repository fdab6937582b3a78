"""Any LightningModule works: a module and a DataModule written as Lightning's docs write them (no class
of ours, a metric logged as ``val_acc``) run fit, validate and ``test --ckpt_path best`` with only a config,
and no data link writes a ``None`` into a model that lacks the argument."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
import torch
import yaml
from support import PLAIN_DATA, PLAIN_MODEL, RunCLI, kept_environ, metric_rows, run_dirs, run_main

PLAIN = [
    f"--model={PLAIN_MODEL}",
    f"--data={PLAIN_DATA}",
    "--checkpoint.monitor=val_acc",
    "--checkpoint.mode=max",
    "--trainer.max_epochs=4",
    "--trainer.limit_val_batches=3",  # all of the 45 validation samples
]


def test_a_plain_module_fits_validates_and_tests_its_best_checkpoint(
    run_cli: RunCLI, workdir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run_main(["fit", *PLAIN], capsys)  # (pytest's stdout is no terminal: epoch lines)
    assert code == 0, err
    (run,) = [p for p in (workdir / "logs").iterdir()]
    best = run / "checkpoints" / "best.ckpt"
    scores = [value for _, _, value in metric_rows(run, "val_acc")]
    best_epoch = scores.index(max(scores))  # the first epoch with the best score
    assert f"Best checkpoint (val_acc={max(scores):.4f}): {best}" in out
    epochs = [line for line in out.splitlines() if line.startswith("epoch ")]
    assert len(epochs) == 4 and all(" val_acc=" in line for line in epochs), out  # its own metric names
    assert [value for _, _, value in metric_rows(run, "best/val_acc")] == pytest.approx(
        [max(scores[: i + 1]) for i in range(4)]
    )
    checkpoint = torch.load(best, weights_only=True)
    assert checkpoint["epoch"] == best_epoch
    # the links have no source in PlainData and no target in PlainClassifier but num_classes: none is set
    saved = {k: v for k, v in checkpoint["hyper_parameters"].items() if not k.startswith("_")}
    assert saved == {"num_classes": 4, "lr": 0.01}
    hparams = yaml.safe_load((run / "hparams.yaml").read_text()) or {}
    assert not {"in_channels", "in_features"} & set(hparams) and None not in hparams.values(), hparams

    validate = run_cli("validate", "--ckpt_path=best", "--trainer.limit_val_batches=3")
    assert float(validate.trainer.callback_metrics["val_acc"]) == pytest.approx(scores[best_epoch])
    test = run_cli("test", "--ckpt_path=best", "--trainer.limit_test_batches=3")
    assert type(test.model).__name__ == "PlainClassifier" and type(test.datamodule).__name__ == "PlainData"
    assert Path(test.config.test.ckpt_path).resolve() == best  # the best epoch's checkpoint is the one tested
    for name, tensor in test.model.state_dict().items():
        assert torch.equal(tensor, checkpoint["state_dict"][name]), name
    assert 0.0 <= float(test.trainer.callback_metrics["test_acc"]) <= 1.0


def test_a_plain_module_may_not_be_given_a_linked_value_it_lacks(
    workdir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A link is declared for the classes that take it: PlainClassifier has no in_channels, so giving
    one is an unknown argument (one error line), not a value written into it."""
    code, _, err = run_main(["fit", *PLAIN, "--model.in_channels=3"], capsys)
    assert code == 2 and "in_channels" in err
    assert not (workdir / "logs").exists() or not any((workdir / "logs").iterdir())


def test_a_link_applies_only_where_the_model_names_the_argument(
    run_cli: RunCLI, workdir: Path, capsys: pytest.CaptureFixture[str], recwarn: pytest.WarningsRecorder
) -> None:
    """TinyImages has ``num_classes`` and ``dims``; a model with ``**kwargs`` and neither argument gets
    neither, in its arguments or its checkpoint's hyperparameters, and every later command takes the
    checkpoint. A checkpoint in which an earlier engine wrote them still loads, with one warning."""
    fit = run_cli("fit", "--model=helpers.KeywordsClassifier", "--checkpoint.monitor=val_acc")
    best = fit.run_dir / "checkpoints" / "best.ckpt"
    checkpoint = torch.load(best, weights_only=True)
    assert {k: v for k, v in checkpoint["hyper_parameters"].items() if not k.startswith("_")} == {"lr": 0.01}
    assert float(run_cli("test", "--ckpt_path=best").trainer.callback_metrics["test_acc"]) >= 0
    checkpoint["hyper_parameters"].update(num_classes=4, in_channels=1)  # as the engine wrote it before
    torch.save(checkpoint, old := fit.run_dir / "checkpoints" / "old.ckpt")
    recwarn.clear()
    tested = run_cli("test", f"--ckpt_path={old}")
    warned = [str(w.message) for w in recwarn if "does not take" in str(w.message)]
    assert warned == [
        "the checkpoint's hyperparameters hold num_classes, in_channels, which helpers.KeywordsClassifier "
        "does not take (an earlier runwright saved the DataModule's value there): left out"
    ]
    assert "num_classes" not in tested.model.hparams and "test_acc" in tested.trainer.callback_metrics


def test_predict_without_a_predict_step_on_input_target_batches_is_one_error_line(
    workdir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Lightning's default ``predict_step`` hands ``forward`` the whole ``(x, y)`` batch: one line saying
    what to add (it was a TypeError traceback from inside the model)."""
    model = [*PLAIN[1:], "--model=helpers.NoPredictStep", "--trainer.max_epochs=1"]
    code, _, err = run_main(["fit", *model], capsys)
    assert code == 0, err
    code, _, err = run_main(["predict", "--ckpt_path=best", f"--data={PLAIN_DATA}"], capsys)
    assert code == 2 and "Traceback" not in err
    assert err.strip().splitlines()[-1].startswith("error: predict: NoPredictStep has no predict_step"), err
    assert len(run_dirs(workdir / "logs")) == 1  # the predict run's folder is not left behind


def test_a_module_that_saves_no_hyperparameters_is_rebuilt_by_every_command_that_reads_its_run(
    run_cli: RunCLI, workdir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Its checkpoints name no class: ``test``, ``export`` and ``report`` rebuild it from the run's
    ``config.yaml`` with the linked ``num_classes`` (4, the data's; its own default is 10)."""
    fit = run_cli("fit", "--model=helpers.NoHparamsClassifier", "--checkpoint.monitor=val_acc")
    assert "hyper_parameters" not in torch.load(fit.run_dir / "checkpoints/best.ckpt", weights_only=True)
    tested = run_cli("test", "--ckpt_path=best")
    assert tested.model.net[-1].out_features == 4 and "test_acc" in tested.trainer.callback_metrics
    output = workdir / "model.pt"
    assert (
        run_main(["export", "--ckpt_path=best", "--format=torchscript", f"--output={output}"], capsys)[0] == 0
    )
    images = torch.zeros(3, 1, 8, 8)
    torch.testing.assert_close(torch.jit.load(str(output))(images), fit.model.eval()(images).detach())
    code, out, _ = run_main(["report", str(fit.run_dir)], capsys)
    assert code == 0 and (fit.run_dir / "report/confusion_matrix.png").is_file(), out


def test_a_monitor_the_model_does_not_log_stops_at_the_sanity_check_with_one_line(
    workdir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The default ``checkpoint.monitor`` (``val/acc``) with a module that logs ``val_acc``: exit 2 at the
    sanity check, before any training step, one line naming the option, the closest logged key and
    the keys; no run folder. A monitor of training (logged from the first step on) is found (one logged
    in the module's own ``on_validation_epoch_end``: the next test's last fit)."""
    plain = [f"--model={PLAIN_MODEL}", f"--data={PLAIN_DATA}", "--trainer.max_epochs=1"]
    code, _, err = run_main(["fit", *plain, "--trainer.limit_train_batches=2"], capsys)
    assert code == 2 and err.count("\n") == 1, err
    assert err.startswith("error: --checkpoint.monitor=val/acc: the model logs no such value; did you mean")
    assert "`val_acc`" in err and "(it logged val_loss, val_acc)" in err
    assert not (workdir / "logs").exists()
    args = [*plain, "--checkpoint.monitor=train_loss", "--trainer.limit_train_batches=2"]
    assert run_main(["fit", *args], capsys)[0] == 0


def test_an_early_stopping_monitor_the_model_does_not_log_stops_with_one_line(
    workdir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An ``EarlyStopping`` in ``trainer.callbacks`` whose ``val...`` monitor the model does not log: exit 2
    at the sanity check (or, with ``--trainer.num_sanity_val_steps=0``, at the first validation), one
    line naming the callback, the closest logged key and the keys, no run folder (not Lightning's
    ``RuntimeError`` traceback after an epoch). One logged in ``on_validation_epoch_end`` is found, by the
    callback and by ``--checkpoint.monitor`` alike."""
    stop = ["--trainer.callbacks+=EarlyStopping", "--trainer.callbacks.monitor=val/los"]
    args = ["--trainer.max_epochs=1", "--trainer.limit_train_batches=2", *stop]
    for sanity in ([], ["--trainer.num_sanity_val_steps=0"]):
        code, _, err = run_main(["fit", *args, *sanity], capsys)
        assert code == 2 and err.count("\n") == 1, err
        assert err.startswith(
            "error: trainer.callbacks: EarlyStopping(monitor=val/los): the model logs no such"
        )
        assert "did you mean `val/loss`?" in err
        assert not (workdir / "logs").exists()
    score = [
        "--model=helpers.EpochEndScore",
        "--checkpoint.monitor=val/score",
        "--trainer.callbacks.monitor=val/score",
    ]
    assert run_main(["fit", *args, *score], capsys)[0] == 0


def test_without_a_monitor_best_is_the_latest_epoch_for_fit_and_test_alike(
    run_cli: RunCLI, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--checkpoint.monitor=null``: fit names ``best.ckpt`` as the latest epoch's, and ``test
    --ckpt_path best`` takes that file."""
    args = ["--checkpoint.monitor=null", "--trainer.max_epochs=2", "--trainer.limit_train_batches=2"]
    code, out, err = run_main(["fit", *args], capsys)
    assert code == 0, err
    (line,) = [line for line in out.splitlines() if line.startswith("Best checkpoint")]
    assert line.startswith("Best checkpoint (no --checkpoint.monitor: the latest epoch's): ")
    best = Path(line.rpartition(": ")[2])
    assert torch.load(best, weights_only=True)["epoch"] == 1
    assert Path(run_cli("test", "--ckpt_path=best").trainer.ckpt_path).resolve() == best.resolve()


BORING = "lightning.pytorch.demos.boring_classes.BoringModel"


def test_a_model_with_its_own_loaders_runs_every_command_without_a_datamodule(
    run_cli: RunCLI, capsys: pytest.CaptureFixture[str]
) -> None:
    """Lightning's ``BoringModel`` brings its loaders (bare tensor batches): ``--data=null`` and every
    command runs on them, ``--ckpt_path`` rebuilding the run without a DataModule."""
    fit = run_cli("fit", f"--model={BORING}", "--data=null", "--checkpoint.monitor=null")
    assert fit.datamodule is None and (fit.run_dir / "checkpoints" / "best.ckpt").is_file()
    assert run_cli("validate", "--ckpt_path=best").datamodule is None
    assert run_cli("test", "--ckpt_path=best").datamodule is None
    predict = run_cli("predict", "--ckpt_path=best", "--trainer.limit_predict_batches=2")
    rows = (predict.run_dir / "predictions.csv").read_text().splitlines()
    assert rows[0] == "index,pred_0,pred_1" and len(rows) == 1 + 2  # 2 batches of 1 sample


def test_without_validation_best_is_the_latest_epoch_and_fit_says_so_in_one_line(
    run_cli: RunCLI, capsys: pytest.CaptureFixture[str]
) -> None:
    """The default monitor (a ``val...`` key) and a model without ``validation_step``: fit says at its
    start, in one line, that ``best.ckpt`` is the latest epoch's, writes it, and ``test --ckpt_path best``
    takes it."""
    args = ["--model=helpers.NoValidation", "--data=null", "--trainer.max_epochs=2"]
    code, out, err = run_main(["fit", *args, "--trainer.limit_train_batches=2"], capsys)
    assert code == 0, err
    assert (
        "--checkpoint.monitor=val/acc: NoValidation has no validation loop, so best.ckpt is the latest "
        "epoch's (set --checkpoint.monitor to a value training_step logs to choose by it)\n" in out
    )
    (line,) = [line for line in out.splitlines() if line.startswith("Best checkpoint")]
    best = Path(line.rpartition(": ")[2])
    assert torch.load(best, weights_only=True)["epoch"] == 1
    assert Path(run_cli("test", "--ckpt_path=best").trainer.ckpt_path).resolve() == best.resolve()


def test_a_model_that_optimizes_by_hand_gets_no_warning_about_scheduler_keys(
    run_cli: RunCLI,
) -> None:
    """A manual-optimization model with the default warmup-cosine schedule trains without Lightning's
    warning that its lr scheduler dict has keys it ignores (the engine's own ``monitor``, which only a
    ReduceLROnPlateau reads): the user set nothing to be warned about."""
    with kept_environ(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cli = run_cli("fit", "--model=helpers.ManualClassifier")
    assert cli.trainer.global_step == 2
    assert not [str(w.message) for w in caught if "lr scheduler dict contains the key" in str(w.message)]
