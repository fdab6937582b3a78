"""The console: progress for long loops outside the Trainer (a tqdm bar on a terminal, plain lines
otherwise) and a quiet console while a command runs."""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import time
import warnings
from collections.abc import Iterable, Iterator
from typing import TypeVar

T = TypeVar("T")


def stdout_is_terminal() -> bool:
    """True when ``sys.stdout`` is an interactive terminal (not a pipe, file or CI log)."""
    isatty = getattr(sys.stdout, "isatty", None)
    return bool(isatty and isatty())


def track(iterable: Iterable[T], total: int | None, desc: str, lines: int = 4) -> Iterator[T]:
    """Yield from ``iterable`` while showing progress.

    On a terminal this is a ``tqdm`` bar. Otherwise (CI logs, ``| tee``) it prints about ``lines``
    plain one-line updates ``<desc>: <done>/<total> (<elapsed> s)`` plus a final one, so logs stay
    readable. ``total`` is the number of items (``None`` if unknown: then only the final line).
    """
    if stdout_is_terminal():
        from tqdm import tqdm

        yield from tqdm(iterable, total=total, desc=desc, leave=False)
        return
    start = time.perf_counter()
    every = -(-total // max(1, lines)) if total else 0  # ceil(total / lines)
    done = 0
    for item in iterable:
        yield item
        done += 1
        if every and done % every == 0 and done != total:
            print(f"{desc}: {done}/{total} ({time.perf_counter() - start:.1f} s)", flush=True)
    print(f"{desc}: {done}/{total if total is not None else done} done ({time.perf_counter() - start:.1f} s)")


#: Lightning's info messages (device lines, "Seed set", "`Trainer.fit` stopped", its tips): the loggers
#: they come from are set to WARNING while a command runs, so its warnings still show.
INFO_LOGGERS = (
    "lightning.pytorch.utilities.rank_zero",
    "lightning.fabric.utilities.seed",
    "lightning.pytorch.trainer.connectors.signal_connector",
)


@contextlib.contextmanager
def quiet_console() -> Iterator[None]:
    """While a command runs, show what needs the user's attention and little else; everything is put
    back afterwards (a command may run inside another program, or a test).

    Hidden: Lightning's info messages (:data:`INFO_LOGGERS`); W&B's own console output (``WANDB_SILENT``
    unless set; the CLI prints the one line that matters, how to upload an offline run); warnings
    that need no action here: the CSV logger and checkpoint callbacks finding the run folder they share
    (or a continued run's) not empty, epochs shorter than ``log_every_n_steps`` (``TrainingMonitor``
    writes each epoch's last step), LightningCLI's note on ``args`` that the extra commands pass on,
    and the deprecations raised inside Lightning's own ``_pytree`` helper.
    """
    loggers = {name: logging.getLogger(name) for name in INFO_LOGGERS}
    levels = {name: logger.level for name, logger in loggers.items()}
    silent = os.environ.get("WANDB_SILENT")
    with warnings.catch_warnings():
        for message in (
            "Experiment logs directory .* exists and is not empty",
            "Checkpoint directory .* exists and is not empty",
            "The dirpath has changed from",
            "The number of training batches .* is smaller than the logging interval",
            "LightningCLI's args parameter is intended to run from within",
        ):
            warnings.filterwarnings("ignore", message)
        warnings.filterwarnings(
            "ignore", category=FutureWarning, module=r"lightning\.pytorch\.utilities\._pytree"
        )
        for logger in loggers.values():
            logger.setLevel(logging.WARNING)
        os.environ.setdefault("WANDB_SILENT", "true")
        try:
            yield
        finally:
            for name, logger in loggers.items():
                logger.setLevel(levels[name])
            if silent is None:
                os.environ.pop("WANDB_SILENT", None)
