# {% raw %}
"""cookiecutter ``post_gen_project`` hook: turn the copied reference project into the user's repo.

cookiecutter copies the reference project (the repo root, reached through the symlinks in
``{{cookiecutter.project_slug}}/``) without rendering it, then renders this file with Jinja and runs it
in the new repo. It renames the package folder ``project/`` to ``<package_name>/`` and rewrites the
references to it with the precise rules of :func:`rename_references` (imports, dotted paths such as
``class_path: project.models.X``, ``python -m project``, ``project/`` paths), fills in
``pyproject.toml``, the README title, the license, the default logger and the CI Python versions, drops
the template-only files, and optionally makes the first git commit. Any rule that no longer matches
the reference project raises :class:`TemplateDriftError`, so the bake tests catch template drift.

The only Jinja in this file is the context string under ``if __name__ == "__main__"``, so the module
imports as plain Python and ``tests/test_template_hooks.py`` tests each rule directly.
"""

from __future__ import annotations

import ast
import datetime
import json
import re
import shutil
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

#: The package name of the reference project.
OLD_PACKAGE = "project"

#: Files (relative to the repo root) that exist only for the template and are deleted (the staged
#: license folder goes after ``LICENSE`` is written).
TEMPLATE_ONLY_PATHS = (
    "tests/test_template_hooks.py",
    "tests/test_template_bake.py",
)

#: Files staged under another name (git refuses to read a ``.gitignore`` that is a symlink, so the
#: template links the root's ``.gitignore`` as ``gitignore.template``).
STAGED_NAMES = {"gitignore.template": ".gitignore"}

#: Tool caches that the copy may have picked up from the template checkout (deleted).
CACHE_DIRS = ("__pycache__", ".pytest_cache", ".ruff_cache", ".mypy_cache")

#: Folder (a symlink to ``hooks/licenses`` in the template) holding one text per license choice.
LICENSES_DIR = ".template_licenses"

#: License choices and their SPDX identifiers in ``pyproject.toml`` (``none``: no license file).
LICENSES = ("MIT", "Apache-2.0", "BSD-3-Clause")

#: Newest Python version that the CI matrix tests.
NEWEST_PYTHON = (3, 12)

#: Files whose text is rewritten (others, such as images, are copied as they are).
TEXT_SUFFIXES = frozenset({".py", ".md", ".toml", ".yaml", ".yml", ".cfg", ".ini", ".txt", ".json", ".sh"})
TEXT_NAMES = frozenset({"Makefile", "run", ".gitignore"})

#: Logger choice -> (the default ``TRAINER_DEFAULTS["logger"]`` value in ``cli.py``, its logger class).
#: Written as ``class_path`` dicts (jsonargparse parses them, ``--print_config`` prints them, and the
#: CLI's run-folder logic sees them as namespaces). The CLI adds a ``CSVLogger`` beside any logger
#: that is not one, so every run folder keeps its ``metrics.csv``. W&B is offline (no account, no
#: network; ``wandb sync`` uploads later).
LOGGER_EXPRESSIONS: dict[str, tuple[str, str]] = {
    "csv": (
        '{"class_path": "lightning.pytorch.loggers.CSVLogger", "init_args": {"save_dir": "logs"}}',
        "CSVLogger",
    ),
    "tensorboard": (
        "{\n"
        '        "class_path": "lightning.pytorch.loggers.TensorBoardLogger",\n'
        '        "init_args": {"save_dir": "logs"},\n'
        "    }",
        "TensorBoardLogger",
    ),
    "wandb": (
        "{\n"
        '        "class_path": "lightning.pytorch.loggers.WandbLogger",\n'
        '        "init_args": {"save_dir": "logs", "offline": True},\n'
        "    }",
        "WandbLogger",
    ),
}

#: Longest line ruff allows in the generated repo (``[tool.ruff] line-length``).
LINE_LENGTH = 110

TEMPLATE_ONLY_BLOCK = re.compile(r"<!-- template-only -->.*?<!-- /template-only -->\n?", re.S)
GITHUB_ACTIONS_BLOCK = re.compile(r"<!-- github-actions -->\n(.*?)<!-- /github-actions -->\n?", re.S)


class TemplateDriftError(RuntimeError):
    """A rewrite rule no longer matches the reference project (the rule or the file needs updating)."""


def rename_references(text: str, package: str) -> str:
    """Rewrite references to the ``project`` package in ``text`` to ``package``.

    Rules (each needs the package-name context, so prose such as "this project." or "pyproject.toml"
    is left alone):

    - dotted module paths: ``project.models.X`` (imports, ``class_path`` values, ``:class:`` roles,
      ``"project.cli:main"``) when ``project`` is not preceded by a name character, ``.``, ``-`` or ``/``;
    - ``from project import`` and ``import project`` at the start of a line;
    - ``-m project`` (``python -m project``, ``$(PY) -m project``) and ``"-m", "project"`` in argv lists;
    - ``project/`` paths (``project/cli.py``) not preceded by a name character, ``.``, ``-`` or ``/``.
    """
    text = re.sub(r"(?<![\w.\-/])project(?=\.[A-Za-z_])", package, text)
    text = re.sub(r"(?m)^(\s*)from project import\b", rf"\g<1>from {package} import", text)
    text = re.sub(r"(?m)^(\s*)import project\b", rf"\g<1>import {package}", text)
    text = re.sub(r"(?<![\w.\-])(-m\s+)project\b", rf"\g<1>{package}", text)
    text = re.sub(r"""(["'])-m\1(\s*,\s*)(["'])project\3""", rf"\1-m\1\2\3{package}\3", text)
    return re.sub(r"(?<![\w.\-/])project/", f"{package}/", text)


def rename_wandb_project(text: str, package: str) -> str:
    """Name the W&B project after the package in ``configs/logger/wandb.yaml`` (as the built-in
    default logger does with ``project=__package__``)."""
    where = "configs/logger/wandb.yaml"
    return _sub_once(text, r"^      project: project$", f"      project: {package}", where)


def _sub_once(text: str, pattern: str, replacement: str, where: str) -> str:
    """Replace the single match of ``pattern`` (multiline) by ``replacement`` taken literally.

    Raises:
        TemplateDriftError: when ``pattern`` matches zero or several times in ``where``.
    """
    new, count = re.subn(pattern, lambda _: replacement, text, flags=re.M)
    if count != 1:
        raise TemplateDriftError(f"{where}: expected exactly one match of {pattern!r}, found {count}")
    return new


def _toml_string(value: str) -> str:
    """A TOML basic string for ``value`` (JSON string syntax is valid TOML for it)."""
    return json.dumps(value, ensure_ascii=False)


def rewrite_pyproject(text: str, answers: Mapping[str, Any]) -> str:
    """Fill the answers into the reference ``pyproject.toml``.

    Sets the distribution name (``project_slug``), description, author, license (removed for
    ``none``), ``requires-python``, the console script, the package include, mypy's files and the
    ruff/mypy target versions. The package-name references are handled by the caller with
    :func:`rename_references`. Raises :class:`TemplateDriftError` when a line is not found once.
    """
    package = answers["package_name"]
    major, minor = (int(part) for part in str(answers["python_version"]).split("."))
    rules = [
        (r'^name = "project"$', f"name = {_toml_string(answers['project_slug'])}"),
        (r"^description = .*$", f"description = {_toml_string(answers['description'])}"),
        (
            r"^authors = \[.*\]$",
            f"authors = [{{ name = {_toml_string(answers['author_name'])}, "
            f"email = {_toml_string(answers['author_email'])} }}]",
        ),
        (r'^requires-python = ".*"$', f'requires-python = ">={major}.{minor}"'),
        (r'^project = "project\.cli:main"$', f'{package} = "{package}.cli:main"'),
        (r'^include = \["project\*"\]$', f'include = ["{package}*"]'),
        (r'^files = \["project", "hooks", "benchmarks"\]$', f'files = ["{package}", "benchmarks"]'),
        (r'^    "cookiecutter>=[\d.]+",\n', ""),  # (template-only tools)
        (r'^    "cruft>=[\d.]+",\n', ""),
        (r'^target-version = "py3\d+"$', f'target-version = "py{major}{minor}"'),
        (r'^python_version = "3\.\d+"$', f'python_version = "{major}.{minor}"'),
    ]
    for pattern, replacement in rules:
        text = _sub_once(text, pattern, replacement, "pyproject.toml")
    license_name = answers["license"]
    if license_name == "none":
        return _sub_once(text, r"^license = \{ text = .* \}\n", "", "pyproject.toml")
    return _sub_once(
        text,
        r"^license = \{ text = .* \}$",
        f"license = {{ text = {_toml_string(license_name)} }}",
        "pyproject.toml",
    )


def rewrite_readme(text: str, answers: Mapping[str, Any]) -> str:
    """Title the README with ``project_name`` and ``description``, state the oldest Python version,
    drop the template-only blocks, and keep the GitHub Actions blocks (their content, without the
    markers) only when ``github_actions`` is on.

    Template-only blocks are delimited by ``<!-- template-only -->`` and ``<!-- /template-only -->``.
    Raises :class:`TemplateDriftError` when the README has no ``# `` title line or no such block.
    """
    text = _sub_once(
        text, r"\A# .*$", f"# {answers['project_name']}\n\n{answers['description']}", "README.md"
    )
    oldest = str(answers["python_version"])
    text, count = re.subn(r"Python >= 3\.\d+", f"Python >= {oldest}", text)
    if count == 0:
        raise TemplateDriftError("README.md: no 'Python >= 3.x' requirement found")
    text, count = TEMPLATE_ONLY_BLOCK.subn("", text)
    if count == 0:
        raise TemplateDriftError("README.md: no <!-- template-only --> block found")
    keep = _truthy(answers["github_actions"])
    text, count = GITHUB_ACTIONS_BLOCK.subn(lambda match: match.group(1) if keep else "", text)
    if count == 0:
        raise TemplateDriftError("README.md: no <!-- github-actions --> block found")
    return re.sub(r"\n{3,}", "\n\n", text)


def python_versions(oldest: str) -> list[str]:
    """The CI matrix: every ``3.x`` from ``oldest`` up to :data:`NEWEST_PYTHON`, e.g. ``['3.11', '3.12']``."""
    major, minor = (int(part) for part in oldest.split("."))
    if (major, minor) > NEWEST_PYTHON:
        raise ValueError(f"python_version={oldest!r} is newer than the newest tested {NEWEST_PYTHON}")
    return [f"{major}.{m}" for m in range(minor, NEWEST_PYTHON[1] + 1)]


def rewrite_ci(text: str, oldest: str) -> str:
    """Set the Python versions of the CI workflow: the test matrix (``oldest`` up to
    :data:`NEWEST_PYTHON`) and the single-version jobs (``oldest``).

    GitHub expressions (``${{ ... }}``) are left as they are. Raises :class:`TemplateDriftError` when
    the matrix line (exactly one) or the single-version lines (at least one) are missing.
    """
    matrix = ", ".join(f'"{version}"' for version in python_versions(oldest))
    text, count = re.subn(r"(?m)^(\s*python-version: )\[.*\]$", rf"\g<1>[{matrix}]", text)
    if count != 1:
        raise TemplateDriftError(f".github/workflows/ci.yml: expected one matrix line, found {count}")
    text, count = re.subn(r'(?m)^(\s*python-version: )"3\.\d+"$', rf'\g<1>"{oldest}"', text)
    if count == 0:
        raise TemplateDriftError('.github/workflows/ci.yml: no `python-version: "3.x"` line found')
    return text


def set_default_logger(source: str, logger: str) -> str:
    """Make ``logger`` the default of ``TRAINER_DEFAULTS["logger"]`` in the source of ``cli.py``.

    The value is left as it is when it already names the chosen logger class (so a reference project
    whose default is that logger keeps its exact settings); otherwise it becomes the expression in
    :data:`LOGGER_EXPRESSIONS`, and the module-level ``from ... import`` names that only the old
    value used are removed (ruff would flag them). Found with :mod:`ast`, not by text search.

    Raises:
        ValueError: for an unknown ``logger``.
        TemplateDriftError: when ``TRAINER_DEFAULTS`` has no ``"logger"`` entry.
    """
    if logger not in LOGGER_EXPRESSIONS:
        raise ValueError(f"logger={logger!r}; expected one of {sorted(LOGGER_EXPRESSIONS)}")
    expression, logger_class = LOGGER_EXPRESSIONS[logger]
    tree = ast.parse(source)
    value = _trainer_defaults_logger(tree)
    if logger_class in _mentioned_names(value):
        return source
    return _drop_unused_imports(_replace_node(source, value, expression), _used_names(tree))


def _mentioned_names(node: ast.AST) -> set[str]:
    """Names in ``node``: identifiers, attributes, and the last part of dotted strings (``class_path``)."""
    names: set[str] = set()
    for child in ast.walk(node):
        if isinstance(child, ast.Name):
            names.add(child.id)
        elif isinstance(child, ast.Attribute):
            names.add(child.attr)
        elif isinstance(child, ast.Constant) and isinstance(child.value, str):
            names.add(child.value.rsplit(".", 1)[-1])
    return names


def _used_names(tree: ast.AST) -> set[str]:
    """Identifiers read anywhere in ``tree`` (what an imported name needs to count as used)."""
    return {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)}


def _drop_unused_imports(source: str, used_before: set[str]) -> str:
    """Remove module-level ``from ... import`` names that were used in ``used_before`` but no longer are.

    A statement that keeps some names is rewritten on one line, or parenthesised one name per line
    when one line would exceed :data:`LINE_LENGTH`; one that keeps none is deleted.
    """
    tree = ast.parse(source)
    used = _used_names(tree)
    lines = source.splitlines(keepends=True)
    statements = [
        node for node in tree.body if isinstance(node, ast.ImportFrom) and node.module != "__future__"
    ]
    for node in reversed(statements):
        bound = [(alias, alias.asname or alias.name) for alias in node.names]
        dropped = [name for _, name in bound if name in used_before and name not in used]
        if not dropped:
            continue
        kept = [
            f"{alias.name} as {alias.asname}" if alias.asname else alias.name
            for alias, name in bound
            if name not in dropped
        ]
        statement = ""
        if kept:
            statement = f"from {'.' * node.level}{node.module or ''} import {', '.join(kept)}\n"
            if len(statement) - 1 > LINE_LENGTH:
                body = "".join(f"    {name},\n" for name in kept)
                statement = f"from {'.' * node.level}{node.module or ''} import (\n{body})\n"
        assert node.end_lineno is not None
        lines[node.lineno - 1 : node.end_lineno] = [statement]
    return "".join(lines)


def _trainer_defaults_logger(tree: ast.Module) -> ast.expr:
    """The value node of ``"logger"`` in the module-level ``TRAINER_DEFAULTS = {...}`` dict."""
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            target, value = node.target, node.value
        else:
            continue
        if isinstance(target, ast.Name) and target.id == "TRAINER_DEFAULTS" and isinstance(value, ast.Dict):
            for key, item in zip(value.keys, value.values, strict=True):
                if isinstance(key, ast.Constant) and key.value == "logger":
                    return item
    raise TemplateDriftError('cli.py: no module-level TRAINER_DEFAULTS dict with a "logger" entry')


def _offset(lines: list[str], lineno: int, col: int) -> int:
    """Character offset of (1-based ``lineno``, UTF-8 byte column ``col``) in the joined ``lines``."""
    line = lines[lineno - 1]
    return sum(len(previous) for previous in lines[: lineno - 1]) + len(line.encode()[:col].decode())


def _replace_node(source: str, node: ast.expr, replacement: str) -> str:
    """``source`` with the text of ``node`` replaced by ``replacement``."""
    assert node.end_lineno is not None and node.end_col_offset is not None
    lines = source.splitlines(keepends=True)
    start = _offset(lines, node.lineno, node.col_offset)
    end = _offset(lines, node.end_lineno, node.end_col_offset)
    return source[:start] + replacement + source[end:]


def rewrite_package_docstring(source: str, description: str) -> str:
    """Make the one-line module docstring of ``<package>/__init__.py`` the project description."""
    text = description.replace("\\", "\\\\").replace('"', '\\"')
    return _sub_once(source, r'\A""".*"""$', f'"""{text}"""', "__init__.py")


def write_license(root: Path, license_name: str, author: str, year: int) -> None:
    """Write ``root/LICENSE`` from ``.template_licenses/<license_name>.txt`` (nothing for ``none``).

    The ``[yyyy]`` and ``[name of copyright owner]`` fields of the text are filled in.

    Raises:
        ValueError: for a license that is not one of :data:`LICENSES` or ``none``.
    """
    if license_name == "none":
        return
    if license_name not in LICENSES:
        raise ValueError(f"license={license_name!r}; expected one of {[*LICENSES, 'none']}")
    text = (root / LICENSES_DIR / f"{license_name}.txt").read_text(encoding="utf-8")
    text = text.replace("[yyyy]", str(year)).replace("[name of copyright owner]", author)
    (root / "LICENSE").write_text(text, encoding="utf-8")


def text_files(root: Path) -> list[Path]:
    """Files under ``root`` (outside ``.git``) whose text the rename rules apply to."""
    return sorted(
        path
        for path in root.rglob("*")
        if path.is_file()
        and ".git" not in path.relative_to(root).parts
        and (path.suffix in TEXT_SUFFIXES or path.name in TEXT_NAMES)
    )


def init_git(root: Path, author: str, email: str) -> None:
    """``git init`` and one commit of everything (with ``author``/``email`` when git has no identity).

    Prints a warning instead when ``git`` is not installed. Raises
    :class:`subprocess.CalledProcessError` when a git command fails.
    """
    git = shutil.which("git")
    if git is None:
        print("WARNING: git is not installed; the repo was not initialised (init_git).", file=sys.stderr)
        return

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([git, *args], cwd=root, check=True, capture_output=True, text=True)

    run("init", "--quiet")
    for key, value in (("user.name", author), ("user.email", email)):
        if subprocess.run([git, "config", key], cwd=root, capture_output=True).returncode != 0:
            run("config", key, value)
    run("add", "--all")
    run("commit", "--quiet", "--no-verify", "-m", "Initial commit from the PyTorch Lightning template")


def generate(root: Path, answers: Mapping[str, Any]) -> None:
    """Turn the copied reference project in ``root`` into the repo described by ``answers``."""
    package = answers["package_name"]
    for relative in TEMPLATE_ONLY_PATHS:
        (root / relative).unlink(missing_ok=True)
    for staged, name in STAGED_NAMES.items():
        (root / staged).rename(root / name)
    for cache in [path for name in CACHE_DIRS for path in root.rglob(name)]:
        shutil.rmtree(cache, ignore_errors=True)
    if package != OLD_PACKAGE:
        (root / OLD_PACKAGE).rename(root / package)
    for path in text_files(root):
        if LICENSES_DIR in path.relative_to(root).parts or path == root / "pyproject.toml":
            continue  # (pyproject.toml has its own exact rules in rewrite_pyproject)
        text = path.read_text(encoding="utf-8")
        new = rename_references(text, package)
        if new != text:
            path.write_text(new, encoding="utf-8")

    def edit(relative: str, rewrite: Any, *args: Any) -> None:
        path = root / relative
        path.write_text(rewrite(path.read_text(encoding="utf-8"), *args), encoding="utf-8")

    edit("pyproject.toml", rewrite_pyproject, answers)
    edit("README.md", rewrite_readme, answers)
    edit(f"{package}/cli.py", set_default_logger, answers["logger"])
    edit(f"{package}/__init__.py", rewrite_package_docstring, answers["description"])
    edit("configs/logger/wandb.yaml", rename_wandb_project, package)
    workflow = root / ".github" / "workflows" / "ci.yml"
    if _truthy(answers["github_actions"]):
        edit(".github/workflows/ci.yml", rewrite_ci, str(answers["python_version"]))
    else:
        shutil.rmtree(workflow.parent.parent)
    write_license(root, answers["license"], answers["author_name"], datetime.date.today().year)
    shutil.rmtree(root / LICENSES_DIR)
    if _truthy(answers["init_git"]) and "_commit" not in answers:
        # (cruft sets ``_commit`` and generates into a scratch folder: no repository there.)
        init_git(root, answers["author_name"], answers["author_email"])


def _truthy(value: Any) -> bool:
    """cookiecutter booleans arrive as ``bool`` (or as yes/no strings from old replay files)."""
    if isinstance(value, str):
        return value.strip().lower() in {"1", "true", "t", "yes", "y", "on"}
    return bool(value)


def main(answers: Mapping[str, Any]) -> int:
    """Run :func:`generate` in the current folder; print what was made; return the exit status."""
    root = Path.cwd()
    try:
        generate(root, answers)
    except (TemplateDriftError, ValueError, OSError, subprocess.CalledProcessError) as error:
        details = getattr(error, "stderr", None) or ""
        print(f"ERROR: generating {root.name} failed: {error} {details}".rstrip(), file=sys.stderr)
        return 1
    print(
        f"Created {root} (package {answers['package_name']}, logger {answers['logger']}, "
        f"license {answers['license']}). Next:\n"
        f"  cd {root.name} && python3 -m venv .venv && .venv/bin/pip install -e '.[dev]'\n"
        f"  .venv/bin/python -m {answers['package_name']} fit"
    )
    return 0


# {% endraw %}
if __name__ == "__main__":
    sys.exit(main(json.loads(r"""{{ cookiecutter | tojson }}""")))
