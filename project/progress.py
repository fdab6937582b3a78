"""Progress for long loops outside the Trainer: a tqdm bar on a terminal, plain lines otherwise."""

from __future__ import annotations

import sys
import time
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
