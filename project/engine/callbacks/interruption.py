"""Stop cleanly on SIGINT (Ctrl-C) or SIGTERM (a scheduler's preemption) with a resumable checkpoint."""

from __future__ import annotations

import signal
import sys
import threading
from pathlib import Path
from types import FrameType
from typing import Any

from lightning.pytorch import Callback, LightningModule, Trainer
from lightning.pytorch.utilities.exceptions import SIGTERMException

from ..checkpointing import LastCheckpoint
from ..errors import TrainingInterrupted


class GracefulInterruption(Callback):
    """Turn SIGINT and SIGTERM during ``fit`` into a clean stop that keeps the progress.

    SIGINT sets a flag that is acted on at the end of the current training batch (a second Ctrl-C
    interrupts at once, as usual); SIGTERM is handled the same way by Lightning's own signal
    connector. Either way the weights are consistent (a whole optimizer step is done), a checkpoint is
    written atomically as ``checkpoints/last.ckpt`` of the run, the command says in one line where it
    stopped (the epoch counted from 1, as the progress lines count) and how to resume (``--ckpt_path
    last``), and exits with 130 (SIGINT) or 143 (SIGTERM). With several processes the
    flag is agreed across ranks (one all-reduce of a bool per step) so all stop at the same step.

    Args:
        enabled: Leave signal handling to Python and Lightning (no checkpoint on SIGINT/SIGTERM).
    """

    def __init__(self, enabled: bool = True) -> None:
        self.enabled = enabled
        self.requested: int | None = None
        self._previous_handler: Any = None

    def _on_sigint(self, signum: int, frame: FrameType | None) -> None:
        if self.requested is not None:  # second Ctrl-C: give up waiting
            signal.signal(signal.SIGINT, self._previous_handler or signal.default_int_handler)
            raise KeyboardInterrupt
        self.requested = signum  # (the one message comes when the run has stopped and saved)

    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        """Install the SIGINT handler (main thread only)."""
        self.requested = None
        if self.enabled and threading.current_thread() is threading.main_thread():
            self._previous_handler = signal.signal(signal.SIGINT, self._on_sigint)

    def on_train_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        """Put the previous SIGINT handler back."""
        if self._previous_handler is not None:
            signal.signal(signal.SIGINT, self._previous_handler)
            self._previous_handler = None

    def on_train_batch_end(
        self, trainer: Trainer, pl_module: LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        """Act on a pending SIGINT now that the batch's optimizer step is complete."""
        if not self.enabled:
            return
        stop = self.requested is not None
        if trainer.world_size > 1:
            stop = trainer.strategy.reduce_boolean_decision(stop, all=False)
        if stop:
            raise TrainingInterrupted(f"interrupted by SIGINT at global step {trainer.global_step}")

    def on_exception(self, trainer: Trainer, pl_module: LightningModule, exception: BaseException) -> None:
        """On SIGINT/SIGTERM, save ``last.ckpt`` atomically and say how to resume."""
        self.on_train_end(trainer, pl_module)
        if not self.enabled or not isinstance(exception, (TrainingInterrupted, SIGTERMException)):
            return
        # the run's own last.ckpt, never the folder of a ModelCheckpoint the user added
        last = next((cb for cb in trainer.callbacks if isinstance(cb, LastCheckpoint)), None)  # type: ignore[attr-defined]
        folder = (
            Path(last.dirpath)
            if last is not None and last.dirpath
            else Path(trainer.default_root_dir) / "checkpoints"
        )
        path = folder / "last.ckpt"
        trainer.save_checkpoint(path, weights_only=False)  # (a full, resumable checkpoint)
        name = "SIGTERM" if isinstance(exception, SIGTERMException) else "SIGINT"
        epochs = f"/{trainer.max_epochs}" if trainer.max_epochs is not None and trainer.max_epochs > 0 else ""
        message = (
            f"interrupted by {name} in epoch {trainer.current_epoch + 1}{epochs} (step "
            f"{trainer.global_step}); saved a resumable checkpoint, {path}: resume with the same command "
            "plus --ckpt_path last"
        )
        if isinstance(exception, TrainingInterrupted):
            exception.args = (message,)  # printed as the command's one error line
        elif trainer.is_global_zero:  # (SIGTERM ends the command without an error line of its own)
            print(f"error: {message}", file=sys.stderr, flush=True)
