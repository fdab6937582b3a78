# {% raw %}
"""cookiecutter ``post_gen_project`` hook: turn the copied reference project (the repo root, through the
symlinks in ``{{cookiecutter.project_slug}}/``, not rendered) into the user's repo: rename the package,
fill in the answers, keep the chosen logger and examples, drop what is template-only. A rule that no
longer matches raises :class:`TemplateDriftError`. The only Jinja is the context string under
``__main__``, so ``tests/test_template_hooks.py`` imports this module and tests each rule directly."""

from __future__ import annotations

import datetime
import functools
import json
import re
import shutil
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

OLD_PACKAGE = "project"
#: Paths (relative to the repo root) that only the template has.
TEMPLATE_ONLY_PATHS = ("tests/test_template_hooks.py", "tests/test_template_bake.py")
#: Paths that only ``examples=full`` keeps: the template's benchmarks, the diabetes regression task and
#: the torchvision DataModules with their configs and tests (``minimal`` keeps the digits classifier).
# fmt: off
FULL_EXAMPLES_ONLY = (
    "benchmarks", "project/data/diabetes.py", "project/data/vision.py", "project/models/regressor.py",
    "configs/experiment/diabetes.yaml", "configs/experiment/mnist.yaml", "configs/data/mnist.yaml",
    "configs/experiment/fashion_mnist.yaml", "configs/data/fashion_mnist.yaml", "configs/model/resnet18.yaml",
    "configs/experiment/cifar10.yaml", "configs/data/cifar10.yaml", "tests/test_regression.py",
    "tests/test_vision_data.py", "tests/fake_datasets.py", "tests/test_benchmarks.py",
    "tests/test_diabetes_tools.py",
)
# fmt: on
#: Files staged under another name (git refuses to read a ``.gitignore`` that is a symlink).
STAGED_NAMES = {"gitignore.template": ".gitignore"}
CACHE_DIRS = ("__pycache__", ".pytest_cache", ".ruff_cache", ".mypy_cache")
#: Folder (a symlink to ``hooks/licenses`` in the template) with ``<license>.txt`` per license choice.
LICENSES_DIR = ".template_licenses"
NEWEST_PYTHON = (3, 12)  # the newest Python version that the CI matrix tests

#: ``<!-- template-only -->...<!-- /template-only -->`` (or ``# ...`` lines): never in a generated repo.
TEMPLATE_ONLY_BLOCK = re.compile(r"(<!-- |# )template-only( -->)?\n.*?\1/template-only( -->)?\n?", re.S)
#: ``<!-- if KEY=V1,V2 -->...<!-- endif -->`` (shown in the template too) or, hidden in the template,
#: ``<!-- if KEY!=V\n...\nendif -->``; kept without its markers when the answer matches, else dropped.
CONDITION_BLOCK = re.compile(
    r"<!-- if (\w+)(!?=)([\w.,-]+)(?P<shown> -->)?\n(.*?)(?(shown)<!-- endif -->|endif -->)\n?", re.S
)


class TemplateDriftError(RuntimeError):
    """A rewrite rule no longer matches the reference project (the rule or the file needs updating)."""


def rename_references(text: str, package: str) -> str:
    """Rewrite references to the ``project`` package in ``text`` to ``package``: dotted paths
    (``project.models.X``) and ``project/`` paths not preceded by a name character, ``.``, ``-`` or
    ``/``; ``from project import``/``import project`` lines; ``-m project``, ``"-m", "project"``.
    Prose ("this project.", "pyproject.toml") stays."""
    text = re.sub(r"(?<![\w.\-/])project(?=\.[A-Za-z_])", package, text)
    text = re.sub(r"(?m)^(\s*)from project import\b", rf"\g<1>from {package} import", text)
    text = re.sub(r"(?m)^(\s*)import project\b", rf"\g<1>import {package}", text)
    text = re.sub(r"(?<![\w.\-])(-m\s+)project\b", rf"\g<1>{package}", text)
    text = re.sub(r"""(["'])-m\1(\s*,\s*)(["'])project\3""", rf"\1-m\1\2\3{package}\3", text)
    return re.sub(r"(?<![\w.\-/])project/", f"{package}/", text)


def sub_once(text: str, pattern: str, replacement: str, where: str, once: bool = True) -> str:
    """Replace the match of ``pattern`` (multiline) by ``replacement`` taken literally; raise
    :class:`TemplateDriftError` when it matches zero times in ``where`` (or several, with ``once``)."""
    new, count = re.subn(pattern, lambda _: replacement, text, flags=re.M)
    if count == 0 or (once and count > 1):
        raise TemplateDriftError(f"{where}: expected {'one match' if once else 'matches'} of {pattern!r}")
    return new


def rewrite_pyproject(text: str, answers: Mapping[str, Any]) -> str:
    """Fill the answers into the reference ``pyproject.toml`` (name, description, author, SPDX
    ``license`` or none, Python versions, script, package, mypy files); drop template-only tools."""
    package = answers["package_name"]
    major, minor = (int(part) for part in str(answers["python_version"]).split("."))
    mypy_files = [package] + (["benchmarks"] if answers["examples"] == "full" else [])
    string = json.dumps  # a JSON string is a valid TOML basic string
    author, email = string(answers["author_name"]), string(answers["author_email"])
    license_name = string(answers["license"])
    rules = [
        (r'^license = ".*"\n', "" if answers["license"] == "none" else f"license = {license_name}\n"),
        (r'^name = "project"$', f"name = {string(answers['project_slug'])}"),
        (r"^description = .*$", f"description = {string(answers['description'])}"),
        (r"^authors = \[.*\]$", f"authors = [{{ name = {author}, email = {email} }}]"),
        (r'^requires-python = ".*"$', f'requires-python = ">={major}.{minor}"'),
        (r'^project = "project\.engine\.cli:main"$', f'{package} = "{package}.engine.cli:main"'),
        (r'^include = \["project\*"\]$', f'include = ["{package}*"]'),
        (r'^project = (?=\["configs/)', f"{package} = "),
        (r'^files = \["project", "hooks", "benchmarks"\]$', f"files = {string(mypy_files)}"),
        (r'^    "cookiecutter>=[\d.]+",\n', ""),
        (r'^    "cruft>=[\d.]+",\n', ""),
        (r'^    "generated_suite: .*\n', ""),
        (r'^target-version = "py3\d+"$', f'target-version = "py{major}{minor}"'),
        (r'^python_version = "3\.\d+"$', f'python_version = "{major}.{minor}"'),
    ]
    for pattern, replacement in rules:
        text = sub_once(text, pattern, replacement, "pyproject.toml")
    return text


def render_markdown(text: str, answers: Mapping[str, Any], removed_names: tuple[str, ...] = ()) -> str:
    """Drop the template-only blocks, keep or drop the ``<!-- if ... -->`` blocks by the answers
    (booleans as ``true``/``false``), and drop the table rows (``| ... |`` lines) that name one of
    ``removed_names`` (files and classes that ``examples=minimal`` leaves out)."""

    def condition(match: re.Match[str]) -> str:
        key, operator, values, _, body, *_ = match.groups()
        answer = str(answers[key]).lower() if isinstance(answers[key], bool) else str(answers[key])
        return body if (answer in values.split(",")) == (operator == "=") else ""

    text = CONDITION_BLOCK.sub(condition, TEMPLATE_ONLY_BLOCK.sub("", text))
    parts = re.split(r"(```.*?```)", text, flags=re.S)  # no gap where a block was (outside code)
    text = "".join(part if i % 2 else re.sub(r"\n{3,}", "\n\n", part) for i, part in enumerate(parts))
    lines = text.splitlines(keepends=True)
    return "".join(row for row in lines if not (row[:1] == "|" and any(n in row for n in removed_names)))


def rewrite_ci(text: str, oldest: str) -> str:
    """Set the CI workflow's test matrix (``oldest`` up to :data:`NEWEST_PYTHON`) and single-version
    jobs (``oldest``); GitHub ``${{ ... }}`` expressions stay."""
    minor = int(oldest.split(".")[1])
    matrix = ", ".join(f'"3.{m}"' for m in range(minor, NEWEST_PYTHON[1] + 1))
    text = sub_once(text, r"(?<=python-version: )\[.*\]$", f"[{matrix}]", "ci.yml")
    return sub_once(text, r'(?<=python-version: )"3\.\d+"$', f'"{oldest}"', "ci.yml", once=False)


def drop_imports(text: str, modules: set[str]) -> str:
    """Remove ``from <...>.<module> import ...`` statements of ``modules`` from a package
    ``__init__.py``, and the names they imported from ``__all__``."""
    pattern = rf"(?m)^from [\w.]*?\b(?:{'|'.join(sorted(modules))}) import (\([^)]*\)|.*)\n"
    names = [name for match in re.findall(pattern, text) for name in re.findall(r"\w+", match)]
    text = re.sub(pattern, "", text)
    for name in names:
        text = re.sub(rf'(?m)^\s*"{name}",\n|"{name}", |, "{name}"(?=\])', "", text)
    return text


def edit(path: Path, rewrite: Any, *args: Any) -> None:
    """Replace the text of ``path`` by ``rewrite(text, *args)``."""
    path.write_text(rewrite(path.read_text(encoding="utf-8"), *args), encoding="utf-8")


def drop_examples(root: Path) -> list[str]:
    """Delete :data:`FULL_EXAMPLES_ONLY` from the copied reference project in ``root`` and their imports
    from the subpackages' ``__init__.py``; return the deleted paths and the classes they defined."""
    removed = [*FULL_EXAMPLES_ONLY]
    for relative in FULL_EXAMPLES_ONLY:
        path = root / relative
        if path.suffix == ".py":
            removed += re.findall(r"(?m)^class (\w+)", path.read_text(encoding="utf-8"))
        shutil.rmtree(path) if path.is_dir() else path.unlink()
    for subpackage in ("data", "models"):
        gone = {Path(p).stem for p in FULL_EXAMPLES_ONLY if p.startswith(f"{OLD_PACKAGE}/{subpackage}/")}
        edit(root / OLD_PACKAGE / subpackage / "__init__.py", drop_imports, gone)
    return removed


def init_git(root: Path, author: str, email: str) -> None:
    """``git init`` and one commit of everything (with ``author``/``email`` when git has no identity);
    a warning when ``git`` is not installed. Raises :class:`subprocess.CalledProcessError`."""
    if shutil.which("git") is None:
        print("WARNING: git is not installed; the repo was not initialised (init_git).", file=sys.stderr)
        return
    run = functools.partial(subprocess.run, cwd=root, capture_output=True, text=True)
    run(["git", "init", "--quiet"], check=True)
    for key, value in (("user.name", author), ("user.email", email)):
        if run(["git", "config", key]).returncode != 0:
            run(["git", "config", key, value], check=True)
    run(["git", "add", "--all"], check=True)
    run(
        ["git", "commit", "-qm", "Initial commit from the PyTorch Lightning template", "--no-verify"],
        check=True,
    )


def generate(root: Path, answers: Mapping[str, Any]) -> None:
    """Turn the copied reference project in ``root`` into the repo described by ``answers`` (whose
    choices cookiecutter has checked). Raises :class:`TemplateDriftError` or :class:`OSError`."""
    package = answers["package_name"]
    removed = drop_examples(root) if answers["examples"] == "minimal" else []
    for relative in TEMPLATE_ONLY_PATHS:
        (root / relative).unlink()
    for staged, name in STAGED_NAMES.items():
        (root / staged).rename(root / name)
    for cache in [path for name in CACHE_DIRS for path in root.rglob(name)]:
        shutil.rmtree(cache, ignore_errors=True)
    if package != OLD_PACKAGE:
        (root / OLD_PACKAGE).rename(root / package)
    removed_names = tuple(rename_references(name, package) for name in removed)
    for path in sorted(root.rglob("*")):
        parts = path.relative_to(root).parts
        if {".git", LICENSES_DIR} & set(parts) or path.name == "pyproject.toml" or not path.is_file():
            continue
        try:
            text = TEMPLATE_ONLY_BLOCK.sub("", rename_references(path.read_text(encoding="utf-8"), package))
        except UnicodeDecodeError:
            continue  # (not a text file)
        text = render_markdown(text, answers, removed_names) if path.suffix == ".md" else text
        path.write_text(text, encoding="utf-8")
    edit(root / "pyproject.toml", rewrite_pyproject, answers)
    title = f"# {answers['project_name']}\n\n{answers['description']}"
    edit(root / "README.md", sub_once, r"\A# .*$", title, "README.md")
    edit(root / "README.md", sub_once, r"(?<=Python >= )3\.\d+", str(answers["python_version"]), "", False)
    docstring = answers["description"].replace("\\", "\\\\").replace('"', '\\"')
    edit(root / package / "__init__.py", sub_once, r'\A""".*"""$', f'"""{docstring}"""', "__init__.py")
    wandb = root / "configs" / "logger" / "wandb.yaml"
    edit(wandb, sub_once, r"^      project: project$", f"      project: {package}", "wandb.yaml")
    shutil.copyfile(wandb.with_name(f"{answers['logger']}.yaml"), root / package / "configs" / "logger.yaml")
    if answers["github_actions"]:  # (a bool: cookiecutter converts yes/no)
        edit(root / ".github" / "workflows" / "ci.yml", rewrite_ci, str(answers["python_version"]))
    else:
        shutil.rmtree(root / ".github")
    if answers["license"] != "none":  # (the texts have [yyyy] and [name of copyright owner] to fill in)
        text = (root / LICENSES_DIR / f"{answers['license']}.txt").read_text(encoding="utf-8")
        text = text.replace("[yyyy]", str(datetime.date.today().year))
        (root / "LICENSE").write_text(text.replace("[name of copyright owner]", answers["author_name"]))
    shutil.rmtree(root / LICENSES_DIR)
    if answers["init_git"] and "_commit" not in answers:
        # (cruft sets ``_commit`` and generates into a scratch folder: no repository there.)
        init_git(root, answers["author_name"], answers["author_email"])


def main(answers: Mapping[str, Any]) -> int:
    """Run :func:`generate` in the current folder; print what was made; return the exit status."""
    root = Path.cwd()
    try:
        generate(root, answers)
    except (TemplateDriftError, OSError, subprocess.CalledProcessError) as error:
        details = getattr(error, "stderr", None) or ""
        print(f"ERROR: generating {root.name} failed: {error} {details}".rstrip(), file=sys.stderr)
        return 1
    print(
        f"Created {root}. Next: cd {root.name} && python3 -m venv .venv && .venv/bin/pip install -e "
        "'.[dev]'\n"
        "Without a CUDA GPU, take torch's CPU wheels (about 200 MB instead of several GB of CUDA builds):\n"
        "  .venv/bin/pip install --extra-index-url https://download.pytorch.org/whl/cpu -e '.[dev]'"
    )
    return 0


# {% endraw %}
if __name__ == "__main__":
    sys.exit(main(json.loads(r"""{{ cookiecutter | tojson }}""")))
