"""Stop cleanly on SIGINT (Ctrl-C) or SIGTERM (a scheduler's preemption) with a resumable checkpoint."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
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

    With several processes a process that does not respond to SIGTERM within ``sigterm_timeout``
    seconds (blocked in a collective operation that another process never joins, which no Python
    signal handler can interrupt) is ended anyway, with its DDP processes and exit code 143, without a
    checkpoint: Python runs signal handlers in the main thread, between bytecodes, so a process blocked
    inside C code never runs Lightning's SIGTERM handler; but the C part of Python's handling still
    writes the signal's number to a wakeup file descriptor (``signal.set_wakeup_fd``), which a thread
    (:meth:`_watch`) reads, and when ``trainer.received_sigterm`` (set at the end of Lightning's
    handler) is still false ``sigterm_timeout`` seconds later, it ends the process (:meth:`_end_hung`).

    Args:
        enabled: Leave signal handling to Python and Lightning (no checkpoint on SIGINT/SIGTERM).
        sigterm_timeout: Seconds a DDP process may take to respond to SIGTERM before it is ended
            anyway; 0 waits forever.
    """

    def __init__(self, enabled: bool = True, sigterm_timeout: float = 10.0) -> None:
        self.enabled = enabled
        self.sigterm_timeout = sigterm_timeout
        self.requested = False
        self._previous_handler: Any = None
        #: While the watchdog runs: the write end of its pipe and the wakeup descriptor it replaced.
        self._wakeup: tuple[int, int] | None = None

    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        """With several processes, start the SIGTERM watchdog (main thread only)."""
        main = threading.current_thread() is threading.main_thread()
        if self.enabled and self.sigterm_timeout > 0 and trainer.world_size > 1 and main:
            read, write = os.pipe()
            os.set_blocking(write, False)
            self._wakeup = write, signal.set_wakeup_fd(write, warn_on_full_buffer=False)
            threading.Thread(target=self._watch, args=(trainer, read), daemon=True).start()

    def _watch(self, trainer: Trainer, read: int) -> None:
        while data := os.read(read, 64):  # signal numbers, one byte each; b"" once teardown closed it
            if signal.SIGTERM in data:
                time.sleep(self.sigterm_timeout)
                if not trainer.received_sigterm:
                    self._end_hung(trainer)
        os.close(read)

    def teardown(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        """Stop the watchdog: put the previous wakeup descriptor back and end the thread."""
        if self._wakeup is not None:
            write, previous = self._wakeup
            signal.set_wakeup_fd(previous)
            os.close(write)
            self._wakeup = None

    def _end_hung(self, trainer: Trainer) -> None:
        """The watchdog's verdict: end this process and the ones it launched, exit code 143."""
        if trainer.is_global_zero:
            print(
                f"error: SIGTERM: no response within {self.sigterm_timeout:g} s (blocked, e.g. in a "
                "collective operation another process never joined); ended without a checkpoint. The run's "
                "last checkpoint resumes it (--ckpt_path last).",
                file=sys.stderr,
                flush=True,
            )
        sys.stdout.flush()
        if trainer.strategy.launcher is not None:
            trainer.strategy.launcher.kill(signal.SIGKILL)  # the DDP processes this one started
        os._exit(143)

    def _on_sigint(self, signum: int, frame: FrameType | None) -> None:
        if self.requested:  # second Ctrl-C: give up waiting
            signal.signal(signal.SIGINT, self._previous_handler or signal.default_int_handler)
            raise KeyboardInterrupt
        self.requested = True  # (the one message comes when the run has stopped and saved)

    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        """Install the SIGINT handler (main thread only)."""
        self.requested = False
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
        stop = self.requested
        if self.enabled and trainer.world_size > 1:
            stop = trainer.strategy.reduce_boolean_decision(stop, all=False)
        if stop:
            raise TrainingInterrupted(f"interrupted by SIGINT at global step {trainer.global_step}")

    def on_exception(self, trainer: Trainer, pl_module: LightningModule, exception: BaseException) -> None:
        """On SIGINT/SIGTERM, save ``last.ckpt`` atomically and say how to resume."""
        self.on_train_end(trainer, pl_module)
        self.teardown(trainer, pl_module, "")
        if not self.enabled or not isinstance(exception, (TrainingInterrupted, SIGTERMException)):
            return
        # the run's own last.ckpt, never the folder of a ModelCheckpoint the user added
        last = next((cb.dirpath for cb in trainer.callbacks if isinstance(cb, LastCheckpoint)), None)  # type: ignore[attr-defined]
        path = Path(last or Path(trainer.default_root_dir) / "checkpoints") / "last.ckpt"
        trainer.save_checkpoint(path, weights_only=False)  # (a full, resumable checkpoint)
        name = "SIGTERM" if isinstance(exception, SIGTERMException) else "SIGINT"
        epochs = f"/{trainer.max_epochs}" if (trainer.max_epochs or 0) > 0 else ""
        message = (
            f"interrupted by {name} in epoch {trainer.current_epoch + 1}{epochs} (step {trainer.global_step}"
            f"); saved a resumable checkpoint, {path}: resume with the same command plus --ckpt_path last"
        )
        if isinstance(exception, TrainingInterrupted):
            exception.args = (message,)  # printed as the command's one error line
        elif trainer.is_global_zero:  # (SIGTERM ends the command without an error line of its own)
            print(f"error: {message}", file=sys.stderr, flush=True)
