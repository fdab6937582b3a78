"""A clean stop with a resumable checkpoint on SIGINT (Ctrl-C) or SIGTERM (a scheduler's preemption)."""

from __future__ import annotations

import signal
import sys
import threading
from pathlib import Path
from types import FrameType
from typing import Any

from lightning.pytorch import Callback, LightningModule, Trainer
from lightning.pytorch.utilities.exceptions import SIGTERMException

from .. import private
from ..checkpointing import LastCheckpoint
from ..errors import TrainingInterrupted


class Interruption(Callback):
    """A checkpoint on SIGINT and SIGTERM only, into the run's ``last.ckpt`` (what Lightning's
    ``OnExceptionCheckpoint`` does on any exception; not that class, because with one present Lightning
    turns every ``fit`` without ``ckpt_path`` into ``ckpt_path="last"``: it warns twice and resumes from
    any ``last.ckpt`` already in a checkpoint folder).

    During ``fit`` either signal only sets a flag (nothing else runs inside the signal handler: no
    collective, no I/O; this callback's handler replaces Lightning's SIGTERM one, whose broadcast from
    inside the handler could hang every process). Training then stops at a point where the optimizer
    step is whole and every process agrees:

    - one process: at the end of the current training batch; after an epoch's last batch, at the end
      of the next epoch's first batch, so that the epoch's validation and end run first (a signal
      during the last epoch's last batch lets the run finish);
    - several (DDP): at the start of the next training batch, once rank 0 has the flag. Lightning
      already broadcasts rank 0's stop flag there every batch; that broadcast carries this flag
      instead, so no collective is added and all processes stop at the same step. A signal that
      reaches another process but not rank 0 is ignored (Ctrl-C and schedulers signal them all).

    A signal during the sanity check stops at the first training batch in the same way. The command
    then says in one line where it stopped and how to resume (``--ckpt_path last``) and exits with 130
    (SIGINT) or 143 (SIGTERM). A second Ctrl-C aborts at once, without saving (also while the
    checkpoint is being written, which then leaves the previous one whole): one line, exit code 130.
    Ctrl-C in ``validate``, ``test`` or ``predict`` stops at once (one line, exit code 130; they save
    nothing). Any other exception (a failed health check) leaves the last saved checkpoint as it is.

    Args:
        enabled: Leave signals to Python and Lightning (no checkpoint on SIGINT/SIGTERM; the CLI adds no
            callback).
    """

    def __init__(self, enabled: bool = True) -> None:
        self.enabled = enabled
        #: The checkpoint file written on SIGINT/SIGTERM (set at ``setup``).
        self.ckpt_path = str(Path("checkpoints", "last.ckpt"))
        #: The signal whose stop is pending (0: none).
        self.requested = 0
        #: Whether a second Ctrl-C aborted the run.
        self.aborted = False
        #: The stage being run: ``fit``, ``validate``, ``test`` or ``predict``.
        self.stage = "fit"
        self._previous: Any = None

    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        """Save into the folder of the run's ``last.ckpt`` (never one of a user's ``ModelCheckpoint``);
        in ``fit``, make SIGTERM set the flag (before Lightning registers its handlers)."""
        last = next((cb for cb in trainer.callbacks if isinstance(cb, LastCheckpoint)), None)  # type: ignore[attr-defined]
        folder = getattr(last, "dirpath", None) or Path(trainer.default_root_dir, "checkpoints")
        self.ckpt_path = str(Path(folder, "last.ckpt"))
        self.requested, self.aborted, self._previous = 0, False, None
        self.stage = str(getattr(stage, "value", stage))  # (Lightning gives a TrainerFn)
        if stage == "fit":
            private.handle_sigterm(trainer, self._on_signal)

    def teardown(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        """Give SIGTERM back to Lightning."""
        private.handle_sigterm(trainer, None)

    def on_sanity_check_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        """Take SIGINT over (main thread only; after Lightning has noted the handlers it puts back)."""
        if threading.current_thread() is threading.main_thread() and self._previous is None:
            self._previous = signal.signal(signal.SIGINT, self._on_signal)

    on_validation_start = on_test_start = on_predict_start = on_sanity_check_start

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        if signum == signal.SIGINT and (self.requested or self.stage != "fit"):  # stop at once
            signal.signal(signal.SIGINT, self._previous or signal.default_int_handler)
            self.aborted = bool(self.requested)  # (a second Ctrl-C: give up waiting)
            raise TrainingInterrupted("interrupted by SIGINT")
        self.requested = self.requested or signum

    @staticmethod
    def _stop(signum: int) -> BaseException:
        """The exception that stops training for ``signum`` (its message is set in :meth:`on_exception`)."""
        return TrainingInterrupted("interrupted by SIGINT") if signum == signal.SIGINT else SIGTERMException()

    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        """Take SIGINT over, if the sanity check did not; under DDP, let Lightning's per-batch broadcast
        carry the flag of rank 0."""
        self.on_sanity_check_start(trainer, pl_module)
        if trainer.world_size > 1:
            private.broadcast_stop_request(trainer, lambda: self.requested, self._stop)

    def on_train_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        """Give SIGINT and Lightning's broadcast back."""
        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)
            self._previous = None
        private.broadcast_stop_request(trainer, None)

    def on_train_batch_end(
        self, trainer: Trainer, pl_module: LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        """On one process, stop on a pending signal now that the batch's optimizer step is complete
        (not after an epoch's last batch: its validation and end come first)."""
        if self.requested and trainer.world_size == 1 and batch_idx + 1 < trainer.num_training_batches:
            raise self._stop(self.requested)

    def on_exception(self, trainer: Trainer, pl_module: LightningModule, exception: BaseException) -> None:
        """On SIGINT/SIGTERM in ``fit``, save ``last.ckpt`` (atomically: the engine's checkpoint writer;
        on every process at once, as Lightning saves) and say how to resume; after a second Ctrl-C, or
        one in an evaluation, say what happened."""
        private.handle_sigterm(trainer, None)
        if not isinstance(exception, (TrainingInterrupted, SIGTERMException)) or self.stage != "fit":
            self.on_train_end(trainer, pl_module)
            if isinstance(exception, TrainingInterrupted):
                exception.args = (f"interrupted by SIGINT in {self.stage}, which saves nothing",)
            return
        epochs = f"/{trainer.max_epochs}" if (trainer.max_epochs or 0) > 0 else ""
        at = f"epoch {trainer.current_epoch + 1}{epochs} (step {trainer.global_step})"
        resume, last = "the same command plus --ckpt_path last", "no checkpoint of this run was saved before"
        if Path(self.ckpt_path).is_file():
            last = f"{self.ckpt_path}, the last checkpoint saved before, resumes with {resume}"
        aborted = f"aborted by a second SIGINT in {at}, without saving: {last}"
        try:
            if not self.aborted:  # (the whole state: it resumes)
                trainer.save_checkpoint(self.ckpt_path, weights_only=False)
        except TrainingInterrupted as abort:  # a second Ctrl-C while saving (the file is written atomically)
            abort.args = (aborted,)
            raise
        finally:
            self.on_train_end(trainer, pl_module)
        name = "SIGTERM" if isinstance(exception, SIGTERMException) else "SIGINT"
        saved = f"interrupted by {name} in {at}; saved a resumable checkpoint, {self.ckpt_path}"
        message = aborted if self.aborted else f"{saved}: resume with {resume}"
        if isinstance(exception, TrainingInterrupted):
            exception.args = (message,)  # the command's one error line
        elif trainer.is_global_zero:  # (SIGTERM ends the command without an error line of its own)
            print(f"error: {message}", file=sys.stderr, flush=True)
