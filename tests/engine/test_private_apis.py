"""Every private Lightning attribute the engine uses (``project.engine.resume.PRIVATE_ATTRIBUTES``, all
of them in that one module) still exists with the shape the engine reads: an upgrade that moves one
fails here, loudly, instead of silently breaking a resume or a DDP check. What each one is for is
proven by the behaviour tests (test_exact_resume.py, test_ddp_evaluation.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from fixture_task import TinyImages
from helpers import SyncDistClassifier
from lightning.pytorch import Callback, LightningModule, Trainer
from lightning.pytorch.cli import LightningCLI

from project.engine.resume import PRIVATE_ATTRIBUTES, synced_logs


def test_each_private_attribute_is_where_the_engine_reads_it(tmp_path: Path) -> None:
    trainer = Trainer(default_root_dir=tmp_path, logger=False, enable_progress_bar=False)
    owners: dict[str, Any] = {
        "LightningCLI": LightningCLI,
        "_FitLoop": trainer.fit_loop,
        "_TrainingEpochLoop": trainer.fit_loop.epoch_loop,
        "Trainer": trainer,
    }
    assert {owner for owner, _, _ in PRIVATE_ATTRIBUTES} == set(owners)
    for owner, attribute, _ in PRIVATE_ATTRIBUTES:
        assert type(owners[owner]).__name__ == owner or owners[owner] is LightningCLI
        assert hasattr(owners[owner], attribute), f"{owner}.{attribute} is gone: see project/engine/resume.py"
    assert callable(LightningCLI._parse_ckpt_path) and callable(trainer.fit_loop._load_combined_loader_states)
    assert trainer.fit_loop._combined_loader_states_to_load == []
    assert isinstance(trainer.fit_loop.epoch_loop._batches_that_stepped, int)


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
