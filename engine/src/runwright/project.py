"""The user's package that the engine is handed at start-up (``main(package="acme_vision")``): its
classes imported (so their short names work in YAML) and its default config files, and the engine's
extras a command needs.

Nothing in the engine imports a user's package by name; every command gets the name from
``<package>/__main__.py``.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path

from .errors import ConfigError

#: The engine's own defaults, loaded before the package's config files.
ENGINE_DEFAULTS = Path(__file__).resolve().with_name("defaults.yaml")
#: The engine's distribution name (the one a user's ``pyproject.toml`` depends on).
DISTRIBUTION = "runwright"
#: The engine's extras (``pip install 'runwright[sweep]'``) and the modules each brings.
EXTRAS = {
    "sweep": ("optuna", "optuna_integration", "matplotlib", "pandas"),
    "plots": ("matplotlib",),
    "export": ("onnx", "onnxruntime", "onnxscript"),
    "postgres": ("psycopg2",),
}


def config_files(package: str) -> list[Path]:
    """The default config files of ``package``'s runs, in the order they are loaded: the engine's
    ``defaults.yaml``, then ``<package>/configs/default.yaml`` (the experiment) and
    ``<package>/configs/logger.yaml`` (the default logger), each only if it exists. Importing ``package``
    imports the user's classes (its ``__init__.py``).

    Raises:
        ConfigError: the package cannot be imported.
    """
    try:
        module = importlib.import_module(package)
    except ModuleNotFoundError as error:
        if error.name != package.split(".")[0]:
            raise
        raise ConfigError(
            f"package {package!r} is not importable: install the repo (pip install -e .) or run from its root"
        ) from None
    folder = Path(str(module.__file__)).resolve().parent / "configs"
    return [
        ENGINE_DEFAULTS,
        *(path for path in (folder / "default.yaml", folder / "logger.yaml") if path.is_file()),
    ]


def missing_modules(extra: str) -> list[str]:
    """The modules of the engine's ``extra`` (:data:`EXTRAS`) that are not installed (or that
    ``sys.modules`` blocks: ``None`` there)."""
    imported = dict(sys.modules)  # (find_spec fails on a lazily imported module, optuna_integration's)
    return [
        name
        for name in EXTRAS[extra]
        if imported.get(name) is None and importlib.util.find_spec(name) is None
    ]
