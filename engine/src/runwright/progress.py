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
    return bool(getattr(sys.stdout, "isatty", lambda: False)())


def track(iterable: Iterable[T], total: int, desc: str) -> Iterator[T]:
    """Yield from ``iterable`` (``total`` items) while showing progress.

    On a terminal this is a ``tqdm`` bar. Otherwise (CI logs, ``| tee``) it prints about 4 plain
    one-line updates ``<desc>: <done>/<total> (<elapsed> s)`` plus a final one, so logs stay readable.
    """
    if stdout_is_terminal():
        from tqdm import tqdm

        yield from tqdm(iterable, total=total, desc=desc, leave=False)
        return
    start = time.perf_counter()
    every = max(1, -(-total // 4))  # ceil(total / 4)
    for done, item in enumerate(iterable, 1):
        yield item
        if done % every == 0 and done != total:
            print(f"{desc}: {done}/{total} ({time.perf_counter() - start:.1f} s)", flush=True)
    print(f"{desc}: {total}/{total} done ({time.perf_counter() - start:.1f} s)")


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
    levels = {name: logging.getLogger(name).level for name in INFO_LOGGERS}
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
        for name in INFO_LOGGERS:
            logging.getLogger(name).setLevel(logging.WARNING)
        os.environ.setdefault("WANDB_SILENT", "true")
        try:
            yield
        finally:
            for name, level in levels.items():
                logging.getLogger(name).setLevel(level)
            if silent is None:
                os.environ.pop("WANDB_SILENT", None)
