"""Stop cleanly on SIGINT (Ctrl-C) or SIGTERM (a scheduler's preemption) with a resumable checkpoint."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

from lightning.pytorch import Callback, LightningModule, Trainer
from lightning.pytorch.utilities.exceptions import SIGTERMException

from ..checkpointing import LastCheckpoint
from ..errors import TrainingInterrupted


class SigtermWatchdog:
    """End the process when Lightning has not handled a SIGTERM within ``timeout`` seconds.

    Python runs signal handlers in the main thread, between bytecodes: a process blocked inside C code,
    such as a collective operation that another process never joins (a DDP hang), never runs Lightning's
    SIGTERM handler, so a cluster's preemption signal would not stop it. The C part of Python's handling
    still writes the signal's number to a wakeup file descriptor (``signal.set_wakeup_fd``); a thread
    reads it and, when ``trainer.received_sigterm`` (set at the end of Lightning's handler) is still false
    ``timeout`` seconds later, calls ``on_hang``, which must end the process. Create it in the main
    thread; :meth:`stop` puts the previous wakeup descriptor back.
    """

    def __init__(self, trainer: Trainer, timeout: float, on_hang: Callable[[], None]) -> None:
        self.trainer, self.timeout, self.on_hang = trainer, timeout, on_hang
        self._read, self._write = os.pipe()
        os.set_blocking(self._write, False)
        self._previous = signal.set_wakeup_fd(self._write, warn_on_full_buffer=False)
        threading.Thread(target=self._watch, name="sigterm-watchdog", daemon=True).start()

    def _watch(self) -> None:
        while data := os.read(self._read, 64):  # signal numbers, one byte each; b"" once stopped
            if signal.SIGTERM not in data:
                continue
            deadline = time.monotonic() + self.timeout
            while not self.trainer.received_sigterm and time.monotonic() < deadline:
                time.sleep(0.05)
            if not self.trainer.received_sigterm:
                self.on_hang()
        os.close(self._read)

    def stop(self) -> None:
        """Put the previous wakeup descriptor back and end the thread."""
        signal.set_wakeup_fd(self._previous)
        os.close(self._write)


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
    checkpoint (:class:`SigtermWatchdog`).

    Args:
        enabled: Leave signal handling to Python and Lightning (no checkpoint on SIGINT/SIGTERM).
        sigterm_timeout: Seconds a DDP process may take to respond to SIGTERM before it is ended
            anyway; 0 waits forever.
    """

    def __init__(self, enabled: bool = True, sigterm_timeout: float = 10.0) -> None:
        self.enabled = enabled
        self.sigterm_timeout = sigterm_timeout
        self.requested: int | None = None
        self._previous_handler: Any = None
        self._watchdog: SigtermWatchdog | None = None

    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        """With several processes, start the :class:`SigtermWatchdog` (main thread only)."""
        main = threading.current_thread() is threading.main_thread()
        if self.enabled and self.sigterm_timeout > 0 and trainer.world_size > 1 and main:
            self._watchdog = SigtermWatchdog(trainer, self.sigterm_timeout, lambda: self._end_hung(trainer))

    def teardown(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        """Stop the watchdog."""
        if self._watchdog is not None:
            self._watchdog.stop()
            self._watchdog = None

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
        self.teardown(trainer, pl_module, "")
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
