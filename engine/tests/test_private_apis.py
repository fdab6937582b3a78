"""The private Lightning (and jsonargparse, torch) attributes that ``runwright/private.py`` lists (its
``PRIVATE_ATTRIBUTES``): each exists in the installed version, and the behaviour it is used for still
holds, so an upgrade that renames or changes one fails here, loudly, instead of silently breaking a resume."""

from __future__ import annotations

import importlib
import inspect
import os
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from fixture_task import TinyImages
from helpers import SyncDistClassifier
from jsonargparse import ArgumentParser
from lightning.pytorch import Callback, LightningModule, Trainer
from lightning.pytorch.callbacks import EMAWeightAveraging, ModelCheckpoint
from lightning.pytorch.loops.training_epoch_loop import _TrainingEpochLoop
from lightning.pytorch.trainer.connectors.signal_connector import _SignalConnector
from lightning.pytorch.utilities.exceptions import SIGTERMException
from support import RunCLI, every_step, metric_rows

from runwright import private
from runwright.callbacks import Interruption
from runwright.cli import ProjectCLI
from runwright.private import PRIVATE_ATTRIBUTES, synced_logs

#: 3 epochs of 4 batches, every step checkpointed into ``<workdir>/steps`` as ``step=N.ckpt``.
RUN = ["--trainer.max_epochs=3", "--trainer.limit_train_batches=4", "--trainer.limit_val_batches=1"]


def assert_same_weights(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert a.keys() == b.keys()
    assert not [name for name in a if not torch.equal(a[name], b[name])], "not bit-identical"


def test_every_private_attribute_exists_in_the_installed_lightning(run_cli: RunCLI) -> None:
    trainer = Trainer(logger=False, enable_progress_bar=False, enable_model_summary=False)
    fit_loop = trainer.fit_loop
    owners: dict[str, Any] = {
        "LightningCLI": run_cli("fit"),  # (its parsers are attributes of an instance)
        "_FitLoop": fit_loop,
        "_TrainingEpochLoop": fit_loop.epoch_loop,
        "Trainer": trainer,
        "ArgumentParser": ArgumentParser,
        "jsonargparse._typehints": importlib.import_module("jsonargparse._typehints"),
        "jsonargparse._util": importlib.import_module("jsonargparse._util"),
        "lightning.pytorch.tuner.lr_finder": importlib.import_module("lightning.pytorch.tuner.lr_finder"),
        "WeightAveraging": EMAWeightAveraging(),
        "_SignalConnector": trainer._signal_connector,
        "ModelCheckpoint": ModelCheckpoint(),
        "torch._inductor.cpp_builder": importlib.import_module("torch._inductor.cpp_builder"),
        "optuna.storages._heartbeat": importlib.import_module("optuna.storages._heartbeat"),
        "BaseHeartbeat": importlib.import_module("optuna.storages._heartbeat").BaseHeartbeat,
        "FrozenTrial": importlib.import_module("optuna").trial.create_trial(value=1.0),
    }
    assert (type(fit_loop).__name__, type(fit_loop.epoch_loop).__name__) == ("_FitLoop", "_TrainingEpochLoop")
    for owner, attribute, why in PRIVATE_ATTRIBUTES:
        assert hasattr(owners[owner], attribute), (
            f"{owner}.{attribute} is gone ({why}): see runwright/private.py"
        )
    assert {owner for owner, _, _ in PRIVATE_ATTRIBUTES} == set(owners)


def test_lightning_cli_still_reads_the_checkpoint_in_parse_ckpt_path_which_the_engine_skips(
    run_cli: RunCLI, monkeypatch: pytest.MonkeyPatch, fitted: Callable[..., Path]
) -> None:
    """``LightningCLI._parse_ckpt_path``: LightningCLI calls it once per command, and the engine's override
    makes it read nothing, so ``test --ckpt_path FILE`` deserializes the file twice in all: once in the
    engine, once in Lightning's own restore."""
    ckpt = fitted() / "checkpoints" / "last.ckpt"
    calls: list[str] = []
    skip = ProjectCLI._parse_ckpt_path
    monkeypatch.setattr(ProjectCLI, "_parse_ckpt_path", lambda self: calls.append("cli") or skip(self))
    load = torch.load
    monkeypatch.setattr(torch, "load", lambda *args, **kwargs: calls.append("load") or load(*args, **kwargs))
    run_cli("test", f"--ckpt_path={ckpt}")
    assert sorted(calls) == ["cli", "load", "load"]


def test_a_loader_built_before_the_restore_resumes_mid_epoch_exactly(run_cli: RunCLI, workdir: Path) -> None:
    """``_FitLoop._combined_loader_states_to_load``, ``_load_combined_loader_states`` and ``_data_fetcher``:
    a model that reads ``trainer.estimated_stepping_batches`` in ``configure_optimizers`` (OneCycleLR sized
    by BaseModule) makes Lightning build the training loader before the checkpoint is restored (#20550);
    the engine loads the missed loader state, so a mid-epoch resume sees the batches it had left."""
    one_cycle = [
        "--model.lr_scheduler=torch.optim.lr_scheduler.OneCycleLR",
        "--model.lr_scheduler.max_lr=0.01",
    ]
    full = run_cli("fit", *RUN, *one_cycle, "--run_name=full", *every_step(workdir / "steps"))
    resumed = run_cli(
        "fit", *RUN, *one_cycle, "--run_name=resumed", f"--ckpt_path={workdir}/steps/step=6.ckpt"
    )
    assert_same_weights(full.model.state_dict(), resumed.model.state_dict())
    losses = {step: value for _, step, value in metric_rows(full.run_dir, "train/loss")}
    assert {step: value for _, step, value in metric_rows(resumed.run_dir, "train/loss")} == {
        step: value for step, value in losses.items() if step >= 6
    }


def test_a_checkpoint_of_an_epochs_last_batch_resumes_with_the_next_epochs_batches(
    run_cli: RunCLI, workdir: Path
) -> None:
    """``_FitLoop._data_fetcher``: a checkpoint saved at the end of an epoch's last batch makes Lightning
    start the next epoch with the finished iterator; the engine gives it a new one (else a whole epoch is
    skipped: 8 steps instead of 12)."""
    full = run_cli("fit", *RUN, "--run_name=full", *every_step(workdir / "steps"))
    resumed = run_cli("fit", *RUN, "--run_name=resumed", f"--ckpt_path={workdir}/steps/step=4.ckpt")
    assert resumed.trainer.global_step == 12
    assert_same_weights(full.model.state_dict(), resumed.model.state_dict())


def test_the_loggers_step_after_a_resume_at_max_steps_is_the_global_step(run_cli: RunCLI) -> None:
    """``_TrainingEpochLoop._batches_that_stepped`` (the loggers' step): a checkpoint saved when max_steps
    ended an epoch restores it one ahead; the engine sets it to ``global_step``, so the resumed run logs
    step ``k`` at ``k`` (as the uninterrupted run), not ``k + 1``.

    As a user meets it: a run stopped by max_steps at an epoch's end, extended (twice) with a larger
    max_steps, has the same steps and epochs in metrics.csv as one uninterrupted run, no row for the
    finished epoch's (empty) end. The data order of the next epoch is not restored exactly in this case
    (README, "Checkpoints and exact resume"), so the values are compared up to the first stop."""
    steps = ["--trainer.limit_train_batches=4", "--trainer.max_epochs=-1"]
    steps += ["--model.lr_scheduler=null"]  # its length follows max_steps, which differs here
    first = run_cli("fit", *steps, "--trainer.max_steps=4", "--run_name=resumed")
    run_cli("fit", *steps, "--trainer.max_steps=8", "--ckpt_path=last")
    assert [step for _, step, _ in metric_rows(first.run_dir, "train/loss")] == list(range(8))
    run_cli("fit", *steps, "--trainer.max_steps=12", "--ckpt_path=last")  # and once more
    straight = run_cli("fit", *steps, "--trainer.max_steps=12", "--run_name=straight")
    assert [step for _, step, _ in metric_rows(straight.run_dir, "train/loss")] == list(range(12))
    for key in ("train/loss", "train/acc", "val/acc"):
        assert [row[:2] for row in metric_rows(first.run_dir, key)] == [
            row[:2] for row in metric_rows(straight.run_dir, key)
        ], key
    assert metric_rows(first.run_dir, "train/loss")[:4] == metric_rows(straight.run_dir, "train/loss")[:4]
    assert [epoch for epoch, _, _ in metric_rows(first.run_dir, "train/acc")] == [0, 1, 2]
    assert all(value > 0 for _, _, value in metric_rows(first.run_dir, "train/acc"))


class RecordSigterm(Callback):
    """Sends this process SIGTERM at the end of the first training batch and records, when training
    stops, whether Lightning's own SIGTERM flag was set and which signal the engine's flag holds."""

    seen: list[tuple[bool, int]] = []

    def on_train_batch_end(self, trainer: Trainer, *args: Any) -> None:
        if trainer.global_step == 1:
            os.kill(os.getpid(), signal.SIGTERM)

    def on_exception(self, trainer: Trainer, pl_module: LightningModule, exception: BaseException) -> None:
        interruption = next(cb for cb in trainer.callbacks if isinstance(cb, Interruption))  # type: ignore[attr-defined]
        RecordSigterm.seen.append((trainer.received_sigterm, interruption.requested))


def test_sigterm_in_fit_is_the_engines_handler_and_lightnings_stop_broadcast_carries_it(
    run_cli: RunCLI,
) -> None:
    """``_SignalConnector._sigterm_notifier_fn``: the SIGTERM handler Lightning registers in ``fit`` is the
    engine's (it sets the engine's flag; Lightning's, whose handler broadcasts, stays unset), and it is
    given back after the fit. ``_TrainingEpochLoop._broadcast_sigterm_tensor``: under DDP Lightning calls
    it at the start of every training batch (the DDP runs themselves: test_ddp_resume.py)."""
    RecordSigterm.seen.clear()
    with pytest.raises(SIGTERMException):
        run_cli(
            "fit", "--trainer.limit_train_batches=3", "--trainer.callbacks+=test_private_apis.RecordSigterm"
        )
    assert RecordSigterm.seen == [(False, signal.SIGTERM)]
    assert signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, None)
    assert "self._sigterm_notifier_fn" in inspect.getsource(_SignalConnector.register_signal_handlers)
    advance = inspect.getsource(_TrainingEpochLoop.advance)
    assert advance.index("self._broadcast_sigterm_tensor()") < advance.index("next(data_fetcher)")


def test_the_engine_names_its_private_attributes_in_one_module() -> None:
    """Nothing else in the engine reads these attributes: private.py is the one place to update."""
    engine = Path(private.__file__).parent
    names = {attribute for _, attribute, _ in PRIVATE_ATTRIBUTES}
    for path in engine.rglob("*.py"):
        if path.name != "private.py":
            text = path.read_text()
            assert not [name for name in names if f".{name}" in text], path


class RecordLogged(Callback):
    """Records, after every test batch, what ``synced_logs`` reads of each logged value in
    ``trainer._results``, and what it returns."""

    def __init__(self) -> None:
        self.logged: list[set[tuple[str, bool, bool, bool, bool]]] = []
        self.synced: list[list[str]] = []

    def on_test_batch_end(self, trainer: Trainer, pl_module: LightningModule, *args: Any) -> None:
        self.logged.append(
            {
                (m.meta.name, m.is_tensor, m.meta.sync.should, m.meta.on_step, m.meta.is_mean_reduction)
                for m in trainer._results.values()  # type: ignore[union-attr]
            }
        )
        self.synced.append(synced_logs(trainer))


def test_synced_logs_reads_what_the_model_logged_and_how(tmp_path: Path) -> None:
    """``trainer._results``: each value logged so far, whether it is a tensor (not a Metric object),
    synced (``sync_dist=True``, only ever true with several processes), logged on every step, and
    averaged. The DDP case itself: test_ddp_evaluation.py."""
    record = RecordLogged()
    trainer = Trainer(
        default_root_dir=tmp_path,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        limit_test_batches=1,
        callbacks=[record],
    )
    torch.manual_seed(0)
    trainer.test(SyncDistClassifier(on_step=True), TinyImages(), verbose=False)
    (logged,) = record.logged
    assert ("test/synced_loss", True, False, True, True) in logged  # one process: Lightning drops sync_dist
    assert ("test/loss", False, False, False, True) in logged  # BaseModule's MeanMetric
    assert record.synced == [[]]


def test_the_loggers_rows_reach_a_teed_csv_logger_that_is_not_one_of_the_loggers(tmp_path: Path) -> None:
    """``Trainer._logger_connector``: a ``CSVLogger`` teed in (``tee_logged_metrics``) gets exactly the rows
    a ``CSVLogger`` among the trainer's loggers gets (the model's and the engine's values, at the same
    steps), while the model's ``self.loggers`` holds only the trainer's own."""
    from lightning.pytorch.demos.boring_classes import BoringModel
    from lightning.pytorch.loggers import CSVLogger

    class Logging(BoringModel):
        def training_step(self, batch: Any, batch_idx: int) -> Any:
            output = super().training_step(batch, batch_idx)
            self.log("train_loss", output["loss"])
            return output

        def on_train_epoch_end(self) -> None:
            private.log_metrics(self.trainer, {"engine/value": 1.5}, epoch_end=True)
            assert self.loggers == [own]

    own, teed = (
        CSVLogger(tmp_path / "own", name="", version=""),
        CSVLogger(tmp_path / "teed", name="", version=""),
    )
    trainer = Trainer(
        logger=own, max_epochs=2, limit_train_batches=3, limit_val_batches=1, log_every_n_steps=1,
        enable_progress_bar=False, enable_model_summary=False, enable_checkpointing=False,
    )  # fmt: skip
    private.tee_logged_metrics(trainer, teed)
    trainer.fit(Logging())
    rows = (tmp_path / "own" / "metrics.csv").read_text()
    assert rows == (tmp_path / "teed" / "metrics.csv").read_text()
    assert "train_loss" in rows and "engine/value" in rows
