"""Progress for long loops outside the Trainer: a tqdm bar on a terminal, plain lines otherwise."""

from __future__ import annotations

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


def quiet_known_noise() -> None:
    """Hide, for this process, warnings that need no action from the user of this CLI: the CSV logger
    and checkpoint callbacks finding the run folder they share (or a continued run's) not empty,
    Lightning's note on epochs shorter than ``log_every_n_steps`` (``TrainingMonitor`` writes each
    epoch's last step), and LightningCLI's note on ``args`` that the extra commands pass on."""
    for message in (
        "Experiment logs directory .* exists and is not empty",
        "Checkpoint directory .* exists and is not empty",
        "The dirpath has changed from",
        "The number of training batches .* is smaller than the logging interval",
        "LightningCLI's args parameter is intended to run from within",
    ):
        warnings.filterwarnings("ignore", message)
