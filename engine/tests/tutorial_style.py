"""A user's module as older tutorials write one: it imports ``pytorch_lightning``, Lightning's package
under its former name, whose import routes Lightning's messages to loggers under that name."""

from __future__ import annotations

import pytorch_lightning  # noqa: F401
from fixture_task import TinyImages


class TutorialImages(TinyImages):
    """``TinyImages`` from a module that imports ``pytorch_lightning``."""
