# {% raw %}
"""cookiecutter ``pre_gen_project`` hook: refuse bad answers before any file is written.

cookiecutter renders this file with Jinja and runs it in the new (still empty) project folder; a
non-zero exit makes cookiecutter delete that folder, so a refused answer leaves nothing behind. The
only Jinja in this file is the context string under ``if __name__ == "__main__"``, so the module
imports as plain Python and ``tests/test_template_hooks.py`` tests :func:`check_answers` directly.
"""

from __future__ import annotations

import json
import keyword
import re
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

#: Import names of the generated repo's dependencies (``pyproject.toml``: dependencies and the dev
#: extra) and of packages they pull in that a user would import. A package of one of these names
#: would shadow the real one (``import torch`` would find the user's package first).
#: ``tests/test_template_hooks.py`` checks that every dependency in ``pyproject.toml`` is listed.
DEPENDENCY_IMPORT_NAMES = frozenset(
    {
        "runwright",
        "torch",
        "torchvision",
        "lightning",
        "lightning_fabric",
        "lightning_utilities",
        "pytorch_lightning",
        "torchmetrics",
        "jsonargparse",
        "torchdata",
        "optuna",
        "optuna_integration",
        "psycopg2",
        "sklearn",
        "scipy",
        "numpy",
        "wandb",
        "tensorboard",
        "matplotlib",
        "rich",
        "psutil",
        "yaml",
        "PIL",
        "pytest",
        "xdist",
        "ruff",
        "mypy",
        "pre_commit",
        "cookiecutter",
        "cruft",
        "onnx",
        "onnxruntime",
        "onnxscript",
        "pandas",
        "packaging",
        "build",
        "twine",
        "setuptools",
        "pip",
    }
)

#: Folder names the generated repo already uses at its root (a package there would collide).
RESERVED_NAMES = frozenset(
    {
        "tests",
        "configs",
        "docs",
        "logs",
        "data",
        "hooks",
        "build",
        "dist",
        "engine",
        "requirements",
        "benchmarks",
    }
)

#: Longest ``package_name``: every line of the reference project that names the package leaves room
#: for this many characters within ruff's line length (the bake tests check it with a name this long).
MAX_PACKAGE_NAME_LENGTH = 20

PACKAGE_NAME_PATTERN = re.compile(r"^[a-z_][a-z0-9_]*$")
SLUG_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
EMAIL_PATTERN = re.compile(r"^[^@\s]+@[^@\s]+$")


def check_answers(answers: Mapping[str, Any]) -> list[str]:
    """Return one message per bad answer (an empty list when every answer is usable).

    Args:
        answers: The cookiecutter context (``project_name``, ``project_slug``, ``package_name``,
            ``description``, ``author_name``, ``author_email``, ...).

    Each message names the field, the bad value and what would be right. ``package_name`` must be a
    lowercase ASCII identifier (PEP 8 package names) of at most
    :data:`MAX_PACKAGE_NAME_LENGTH` characters, not a Python keyword, not the name of a
    standard-library module (``sys.stdlib_module_names``) or of a dependency
    (:data:`DEPENDENCY_IMPORT_NAMES`), and not a folder name the repo already uses
    (:data:`RESERVED_NAMES`).
    """
    errors: list[str] = []
    package = str(answers.get("package_name", ""))
    if not PACKAGE_NAME_PATTERN.match(package):
        errors.append(
            f"package_name={package!r} is not a valid Python package name: use lowercase ASCII letters, "
            "digits and underscores, starting with a letter or underscore (for example 'acme_vision')."
        )
    elif len(package) > MAX_PACKAGE_NAME_LENGTH:
        errors.append(
            f"package_name={package!r} is {len(package)} characters long; use at most "
            f"{MAX_PACKAGE_NAME_LENGTH} (the renamed code must stay within the 110-character line length)."
        )
    elif keyword.iskeyword(package):
        errors.append(
            f"package_name={package!r} is a Python keyword; pick another name (e.g. 'my_{package}')."
        )
    elif package in DEPENDENCY_IMPORT_NAMES:
        errors.append(
            f"package_name={package!r} would shadow the dependency {package!r} (its imports would find "
            f"your package instead); pick another name (e.g. 'my_{package}')."
        )
    elif package in getattr(sys, "stdlib_module_names", ()):
        errors.append(
            f"package_name={package!r} would shadow the standard-library module {package!r}; "
            f"pick another name (e.g. 'my_{package}')."
        )
    elif package in RESERVED_NAMES:
        errors.append(
            f"package_name={package!r} collides with the repo's own {package}/ folder; "
            f"pick another name (e.g. 'my_{package}')."
        )
    slug = str(answers.get("project_slug", ""))
    if not SLUG_PATTERN.match(slug):
        errors.append(
            f"project_slug={slug!r} is not a usable folder and distribution name: use letters, digits, "
            "'-', '_' and '.', starting with a letter or digit (for example 'acme-vision')."
        )
    for field in ("project_name", "description", "author_name"):
        value = str(answers.get(field, ""))
        if not value.strip() or "\n" in value or '"""' in value:
            errors.append(f"{field}={value!r} must be one non-empty line without triple quotes.")
    email = str(answers.get("author_email", ""))
    if not EMAIL_PATTERN.match(email):
        errors.append(f"author_email={email!r} is not an email address (expected name@host, one '@').")
    return errors


def check_target(folder: Path) -> list[str]:
    """One message when the folder cookiecutter renders into is not empty: an earlier render re-run with
    ``cookiecutter -f`` (overwrite) would get the template's ``project/`` next to its renamed package and
    the renaming would fail half-way. Refusing here writes nothing (cookiecutter keeps a folder that
    existed before; the hook runs before any file is copied)."""
    if not any(folder.iterdir()):
        return []
    return [
        f"the folder {folder} exists and is not empty (an earlier render, re-run with cookiecutter -f?): "
        "rendering into it would mix the template's files into your repo. Generate into a new folder "
        "(or delete this one first); to bring template changes into a generated repo, use cruft update."
    ]


def main(answers: Mapping[str, Any], folder: Path | None = None) -> int:
    """Print every problem to stderr and return the exit status (0 when the answers and the target
    folder, default the current one, are fine)."""
    errors = check_answers(answers) + check_target(Path.cwd() if folder is None else folder)
    for error in errors:
        print(f"ERROR: {error}", file=sys.stderr)
    if errors:
        print("Nothing was generated. Run cookiecutter again with corrected answers.", file=sys.stderr)
    return 1 if errors else 0


# {% endraw %}
if __name__ == "__main__":
    sys.exit(main(json.loads(r"""{{ cookiecutter | tojson }}""")))
