"""A clean stop with a resumable checkpoint on SIGINT (Ctrl-C) or SIGTERM (a scheduler's preemption)."""

from __future__ import annotations

import signal
import sys
import threading
from pathlib import Path
from types import FrameType
from typing import Any

from lightning.pytorch import LightningModule, Trainer
from lightning.pytorch.callbacks import Checkpoint
from lightning.pytorch.utilities.exceptions import SIGTERMException

from ..checkpointing import LastCheckpoint
from ..errors import TrainingInterrupted


class Interruption(Checkpoint):
    """A checkpoint on SIGINT and SIGTERM only, into the run's ``last.ckpt``.

    SIGTERM is Lightning's own: it stops at the end of the current training batch (every process of a
    DDP run). SIGINT is made to act the same way: a flag set by the signal, acted on at the end of the
    current batch (agreed across DDP processes), so the optimizer step is whole and the checkpoint
    resumes exactly; a second Ctrl-C aborts at once. The command then says in one line where it stopped
    and how to resume (``--ckpt_path last``) and exits with 130 (SIGINT) or 143 (SIGTERM). Any other
    exception (a failed health check) leaves the last saved checkpoint as it is. Not Lightning's
    ``OnExceptionCheckpoint``: with one in the trainer, Lightning turns a ``fit`` without a checkpoint
    into one from the newest ``last.ckpt`` it finds (``./checkpoints/`` included), and warns twice
    when it finds none.

    Args:
        enabled: Leave signals to Python and Lightning (no checkpoint on SIGINT/SIGTERM).
    """

    def __init__(self, enabled: bool = True) -> None:
        self.dirpath: str | Path = "checkpoints"
        self.enabled = enabled
        self.requested = False
        self._previous: Any = None

    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        """Save into the folder of the run's ``last.ckpt`` (never one of a user's ``ModelCheckpoint``)."""
        last = next((cb for cb in trainer.callbacks if isinstance(cb, LastCheckpoint)), None)  # type: ignore[attr-defined]
        self.dirpath = (last.dirpath if last is not None else None) or str(
            Path(trainer.default_root_dir) / "checkpoints"
        )

    @property
    def ckpt_path(self) -> str:
        """The run's ``last.ckpt``."""
        return str(Path(self.dirpath) / "last.ckpt")

    def _on_sigint(self, signum: int, frame: FrameType | None) -> None:
        if self.requested:  # a second Ctrl-C: give up waiting
            signal.signal(signal.SIGINT, self._previous or signal.default_int_handler)
            raise KeyboardInterrupt
        self.requested = True

    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        """Take SIGINT over (main thread only)."""
        self.requested = False
        if self.enabled and threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGINT, self._on_sigint)

    def on_train_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        """Give SIGINT back."""
        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)
            self._previous = None

    def on_train_batch_end(self, trainer: Trainer, pl_module: LightningModule, *args: Any) -> None:
        """Stop on a pending SIGINT, now that the batch's optimizer step is complete."""
        stop = self.requested
        if self.enabled and trainer.world_size > 1:
            stop = trainer.strategy.reduce_boolean_decision(stop, all=False)
        if stop:
            raise TrainingInterrupted(f"interrupted by SIGINT at global step {trainer.global_step}")

    def on_exception(self, trainer: Trainer, pl_module: LightningModule, exception: BaseException) -> None:
        """On SIGINT/SIGTERM, save ``last.ckpt`` (atomically: the engine's checkpoint writer) and say how
        to resume."""
        self.on_train_end(trainer, pl_module)
        if not self.enabled or not isinstance(exception, (TrainingInterrupted, SIGTERMException)):
            return
        trainer.save_checkpoint(self.ckpt_path)
        name = "SIGTERM" if isinstance(exception, SIGTERMException) else "SIGINT"
        epochs = f"/{trainer.max_epochs}" if (trainer.max_epochs or 0) > 0 else ""
        message = (
            f"interrupted by {name} in epoch {trainer.current_epoch + 1}{epochs} (step "
            f"{trainer.global_step}); saved a resumable checkpoint, {self.ckpt_path}: resume with the same "
            "command plus --ckpt_path last"
        )
        if isinstance(exception, TrainingInterrupted):
            exception.args = (message,)  # the command's one error line
        elif trainer.is_global_zero:  # (SIGTERM ends the command without an error line of its own)
            print(f"error: {message}", file=sys.stderr, flush=True)
