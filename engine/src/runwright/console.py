"""The console while a command runs: what needs the user's attention and little else."""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import warnings
from collections.abc import Iterator

from lightning.pytorch.utilities import rank_zero_only

#: The names Lightning's packages go by: a module that imports ``pytorch_lightning`` or ``lightning_fabric``
#: (as older code does) routes Lightning's messages to the loggers under that name.
LIGHTNING_NAMES = {"lightning.pytorch": "pytorch_lightning", "lightning.fabric": "lightning_fabric"}
#: Lightning's info messages (device lines, "Seed set", "`Trainer.fit` stopped", its tips; the default
#: of a checkpoint save's ``weights_only`` and the batch size finder's last line, which the tuners would
#: print before their own): the loggers
#: they come from, under every name of :data:`LIGHTNING_NAMES`, are set to WARNING while a command runs,
#: so its warnings still show.
INFO_LOGGERS = tuple(
    f"{name}.{module}"
    for package, module in (
        ("lightning.pytorch", "utilities.rank_zero"),
        ("lightning.fabric", "utilities.rank_zero"),
        ("lightning.fabric", "utilities.seed"),
        ("lightning.pytorch", "trainer.connectors.signal_connector"),
        ("lightning.pytorch", "trainer.connectors.checkpoint_connector"),
        ("lightning.pytorch", "tuner.batch_size_scaling"),
    )
    for name in (package, LIGHTNING_NAMES[package])
)
#: In the other processes of a DDP run (rank > 0) all of Lightning's info is set to WARNING: what they
#: would say ("Initializing distributed: GLOBAL_RANK: 1, ...") rank 0 says for the run.
OTHER_RANKS_LOGGERS = (*LIGHTNING_NAMES, *LIGHTNING_NAMES.values())
#: Warnings raised in these modules need no action here (a regular expression of module names): the
#: constructor of torchdata's ``StatefulDataLoader``, the engine's training loader, calls
#: ``torch.set_vital``, which recent torch deprecates, in each process that builds one (Lightning
#: rebuilds it under DDP).
NO_ACTION_MODULES = r"torchdata\.stateful_dataloader\.stateful_dataloader$"
#: Warnings that need no action here: the CSV logger and checkpoint callbacks finding the run folder they
#: share (or a continued run's) not empty, LightningCLI's note on the ``args`` the extra commands pass, and
#: Lightning's hint on a machine with ``srun`` on the PATH (every SLURM login node) that a command not
#: started by ``srun`` is not a SLURM job (it is not: the command runs where it was started).
NO_ACTION = (
    "Experiment logs directory .* exists and is not empty|Checkpoint directory .* exists and is not empty|"
    "The dirpath has changed from|LightningCLI's args parameter is intended to run from within|"
    "Couldn't infer the batch indices fetched|"  # (an IterableDataset's: the writer counts them itself)
    "The `srun` command is available on your system but is not used"
)


def stdout_is_terminal() -> bool:
    """True when ``sys.stdout`` is an interactive terminal (not a pipe, file or CI log)."""
    return bool(getattr(sys.stdout, "isatty", lambda: False)())


@contextlib.contextmanager
def quiet_console() -> Iterator[None]:
    """While a command runs, hide Lightning's info messages (:data:`INFO_LOGGERS`; in a DDP process of
    rank > 0 :data:`OTHER_RANKS_LOGGERS`), W&B's own console output (``WANDB_SILENT`` unless set; the
    CLI prints the one line that matters, how to upload an offline run), the warnings of
    :data:`NO_ACTION` and :data:`NO_ACTION_MODULES` and the deprecations raised inside Lightning's own
    ``_pytree`` helper; everything is put back afterwards (a command may run inside another program, or
    a test). The rank is the one Lightning reads from the environment at import (``LOCAL_RANK``,
    ``RANK``: set by Lightning's launcher, torchrun or SLURM for each process it starts)."""
    loggers = INFO_LOGGERS + (OTHER_RANKS_LOGGERS if getattr(rank_zero_only, "rank", 0) > 0 else ())
    with warnings.catch_warnings(), contextlib.ExitStack() as restore:
        warnings.filterwarnings("ignore", NO_ACTION)
        warnings.filterwarnings("ignore", module=NO_ACTION_MODULES)
        warnings.filterwarnings("ignore", category=FutureWarning, module=r"lightning\..*\._pytree")
        for logger in map(logging.getLogger, loggers):
            restore.callback(logger.setLevel, logger.level)
            logger.setLevel(logging.WARNING)
        if "WANDB_SILENT" not in os.environ:
            os.environ["WANDB_SILENT"] = "true"
            restore.callback(os.environ.pop, "WANDB_SILENT", None)
        yield
