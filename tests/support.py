"""What this project's tests share besides the engine's fixtures (``runwright.testing``): the package's
name and where the repo and its configs are."""

from __future__ import annotations

from pathlib import Path

import project

PACKAGE = project.__name__
REPO_ROOT = Path(__file__).resolve().parents[1]
CONFIGS = REPO_ROOT / "configs"
__all__ = ["CONFIGS", "PACKAGE", "REPO_ROOT"]
