"""Renamed options: for one minor version the old spelling keeps working, with one warning line that names
the new one; the release after removes it (README, "Versions, upgrades and deprecations").

A top-level option (``--logs_dir``) is renamed here, in :data:`RENAMED`; a parameter of one of the
engine's classes (``--checkpoint.<name>``) keeps its old keyword in the class for that release and calls
:func:`warn_renamed` when it is given.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any

from jsonargparse import Namespace
from lightning.pytorch.utilities import rank_zero_only


@dataclass(frozen=True)
class Renamed:
    """An option's new name (a dotted config key), the engine version that renamed it, the version that
    removes the old name, and the option's type (the old name parses as the new one does)."""

    new: str
    since: str
    removed_in: str
    type: Any


#: Top-level options by their old name (e.g. ``"init_from": Renamed("init_weights", "0.2", "0.3",
#: str | None)``). Empty: nothing is renamed in this version.
RENAMED: dict[str, Renamed] = {}


@rank_zero_only
def warn_renamed(old: str, new: str, since: str, removed_in: str) -> None:
    """Print the one line (stderr, rank 0) that says ``old`` is renamed ``new``."""
    print(
        f"warning: `{old}` is deprecated since runwright {since} and goes in {removed_in}: use `{new}`",
        file=sys.stderr,
        flush=True,
    )


def add_renamed_arguments(parser: Any) -> None:
    """Add each old name of :data:`RENAMED` to ``parser`` (a jsonargparse parser), typed as its new name,
    default ``None``, its help naming the new one."""
    for old, renamed in RENAMED.items():
        parser.add_argument(
            f"--{old}", type=renamed.type, default=None, help=f"Deprecated: use --{renamed.new}."
        )


def apply_renamed(config: Namespace, warn: bool = True) -> None:
    """Move each old name's value given in ``config`` (a parsed config) to its new name (with the warning
    line); the old name is left ``None``."""
    for old, renamed in RENAMED.items():
        value = config.get(old)
        if value is not None:
            if warn:
                warn_renamed(f"--{old}", f"--{renamed.new}", renamed.since, renamed.removed_in)
            config[renamed.new] = value
            config[old] = None
