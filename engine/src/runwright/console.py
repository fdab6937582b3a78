"""The console while a command runs: what needs the user's attention and little else."""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import warnings
from collections.abc import Iterator

#: Lightning's info messages (device lines, "Seed set", "`Trainer.fit` stopped", its tips): the loggers
#: they come from are set to WARNING while a command runs, so its warnings still show.
INFO_LOGGERS = (
    "lightning.pytorch.utilities.rank_zero",
    "lightning.fabric.utilities.seed",
    "lightning.pytorch.trainer.connectors.signal_connector",
)
#: Warnings that need no action here: the CSV logger and checkpoint callbacks finding the run folder they
#: share (or a continued run's) not empty, and LightningCLI's note on the ``args`` the extra commands pass.
NO_ACTION = (
    "Experiment logs directory .* exists and is not empty|Checkpoint directory .* exists and is not empty|"
    "The dirpath has changed from|LightningCLI's args parameter is intended to run from within"
)


def stdout_is_terminal() -> bool:
    """True when ``sys.stdout`` is an interactive terminal (not a pipe, file or CI log)."""
    return bool(getattr(sys.stdout, "isatty", lambda: False)())


@contextlib.contextmanager
def quiet_console() -> Iterator[None]:
    """While a command runs, hide Lightning's info messages (:data:`INFO_LOGGERS`), W&B's own console
    output (``WANDB_SILENT`` unless set; the CLI prints the one line that matters, how to upload an
    offline run), the warnings of :data:`NO_ACTION` and the deprecations raised inside Lightning's own
    ``_pytree`` helper; everything is put back afterwards (a command may run inside another program, or
    a test)."""
    with warnings.catch_warnings(), contextlib.ExitStack() as restore:
        warnings.filterwarnings("ignore", NO_ACTION)
        warnings.filterwarnings("ignore", category=FutureWarning, module=r"lightning\..*\._pytree")
        for logger in map(logging.getLogger, INFO_LOGGERS):
            restore.callback(logger.setLevel, logger.level)
            logger.setLevel(logging.WARNING)
        if "WANDB_SILENT" not in os.environ:
            os.environ["WANDB_SILENT"] = "true"
            restore.callback(os.environ.pop, "WANDB_SILENT", None)
        yield
