"""The user's package that the engine is handed at start-up (``main(package="acme_vision")``): its
classes imported (so their short names work in YAML), its default config files, and the engine version
its distribution requires.

Nothing in the engine imports a user's package by name; every command gets the name from
``<package>/__main__.py``.
"""

from __future__ import annotations

import importlib
import importlib.util
import re
import sys
from importlib import metadata
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement

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


def package_dir(package: str) -> Path:
    """Import ``package`` (its ``__init__.py`` imports the user's classes) and return its folder.

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
    return Path(str(module.__file__)).resolve().parent


def config_files(package: str) -> list[Path]:
    """The default config files of ``package``'s runs, in the order they are loaded: the engine's
    ``defaults.yaml``, then ``<package>/configs/default.yaml`` (the experiment) and
    ``<package>/configs/logger.yaml`` (the default logger), each only if it exists."""
    folder = package_dir(package) / "configs"
    return [
        ENGINE_DEFAULTS,
        *(path for path in (folder / "default.yaml", folder / "logger.yaml") if path.is_file()),
    ]


def required_engine(package: str) -> Requirement | None:
    """The requirement on the engine that the installed distribution of ``package`` declares (its
    ``pyproject.toml``: ``runwright~=0.1``), or ``None`` when the package is not installed as a
    distribution or does not name the engine. Reads every distribution's requirements and the top-level
    names only of those that name the engine (``metadata.packages_distributions()`` reads every file
    list: 0.3 CPU-s against 0.08 in a virtual environment of 180 distributions)."""
    top = package.split(".")[0]
    for distribution in metadata.distributions():
        for text in distribution.requires or []:
            if DISTRIBUTION not in text.lower():
                continue
            try:
                requirement = Requirement(text)
            except InvalidRequirement:
                continue
            if (
                re.sub(r"[-_.]+", "-", requirement.name).lower() == DISTRIBUTION
                and not requirement.marker
                and top in top_level_names(distribution)
            ):
                return requirement
    return None


def top_level_names(distribution: metadata.Distribution) -> set[str]:
    """The importable top-level names ``distribution`` installs: its ``top_level.txt``, else the first
    part of each file it lists (as ``metadata.packages_distributions`` infers them)."""
    declared = (distribution.read_text("top_level.txt") or "").split()
    files = distribution.files or []
    return set(declared) or {file.parts[0].removesuffix(".py") for file in files if file.suffix == ".py"}


def missing_modules(extra: str) -> list[str]:
    """The modules of the engine's ``extra`` (:data:`EXTRAS`) that are not installed (or that
    ``sys.modules`` blocks: ``None`` there)."""
    imported = dict(sys.modules)  # (find_spec fails on a lazily imported module, optuna_integration's)
    return [
        name
        for name in EXTRAS[extra]
        if imported.get(name) is None and importlib.util.find_spec(name) is None
    ]


def check_engine_version(package: str, version: str) -> None:
    """Refuse to run ``package`` on an engine ``version`` outside the range its distribution requires.

    Raises:
        ConfigError: naming the range, the installed version and the command that installs a fitting one.
    """
    requirement = required_engine(package)
    if requirement is None or not requirement.specifier or requirement.specifier.contains(version, True):
        return
    raise ConfigError(
        f"{package} needs {DISTRIBUTION}{requirement.specifier} (its pyproject.toml), but {DISTRIBUTION} "
        f"{version} is installed: pip install -r requirements/engine.txt -e . (or pip install -U "
        f"'{DISTRIBUTION}{requirement.specifier}')"
    )
