# {% raw %}
"""cookiecutter ``post_gen_project`` hook: turn the copied reference project (the repo root, through the
symlinks in ``{{cookiecutter.project_slug}}/``, not rendered) into the user's repo: rename the package,
fill in the answers, keep the chosen logger and examples, say where the engine comes from (or copy it
in), drop what is template-only and what git does not track. A rule that no longer matches raises
:class:`TemplateDriftError`. The only Jinja is the context string under ``__main__``, so
``tests/test_template_hooks.py`` imports this module and tests each rule directly."""

from __future__ import annotations

import datetime
import functools
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Mapping
from importlib import metadata
from pathlib import Path
from typing import Any, NamedTuple

OLD_PACKAGE = "project"
#: Paths (relative to the repo root) that only the template has (the tests of its hooks and of the
#: engine's benchmarks, which are in the engine's folder).
TEMPLATE_ONLY_PATHS = (
    "tests/test_template_hooks.py",
    "tests/test_template_bake.py",
    "tests/test_benchmarks.py",
)
#: Paths that only ``examples=full`` keeps: the example's benchmarks (its data loaders, the diabetes
#: baseline), the diabetes regression task and the torchvision DataModules with their configs and tests
#: (``minimal`` keeps the digits classifier).
# fmt: off
FULL_EXAMPLES_ONLY = (
    "benchmarks", "project/data/diabetes.py", "project/data/vision.py", "project/models/regressor.py",
    "configs/experiment/diabetes.yaml", "configs/experiment/mnist.yaml", "configs/data/mnist.yaml",
    "configs/experiment/fashion_mnist.yaml", "configs/data/fashion_mnist.yaml", "configs/model/resnet18.yaml",
    "configs/experiment/cifar10.yaml", "configs/data/cifar10.yaml", "configs/sweep",
    "tests/test_regression.py", "tests/test_vision_data.py", "tests/fake_datasets.py",
    "tests/test_diabetes_tools.py", "tests/test_example_sweep.py",
)
# fmt: on
#: Files staged under another name (git refuses to read a ``.gitignore`` that is a symlink).
STAGED_NAMES = {"gitignore.template": ".gitignore"}
#: Tool caches, deleted from every generated repo (from a git checkout, every untracked file goes too).
CACHE_DIRS = ("__pycache__", ".pytest_cache", ".ruff_cache", ".mypy_cache", "*.egg-info")
#: The template folder (cookiecutter copies it, links followed), in the template's root.
TEMPLATE_FOLDER = "{{cookiecutter.project_slug}}"
#: Folder (a symlink to ``hooks/licenses`` in the template) with ``<license>.txt`` per license choice.
LICENSES_DIR = ".template_licenses"
#: Folder (a symlink to the template's ``engine/``, the engine's distribution): ``engine_source=copy``
#: makes it the repo's ``engine/``; otherwise it is deleted.
ENGINE_DIR = ".template_engine"
#: The engine's distribution name, and its folder in the template (and in a repo it is copied into).
ENGINE, ENGINE_FOLDER = "runwright", "engine"
#: The extras of the engine that each ``examples`` answer asks for (``minimal``: none).
ENGINE_EXTRAS = {"full": "[sweep,plots,export]", "minimal": ""}
#: The default logger's dependency, by ``logger`` answer (``csv``: Lightning's own CSVLogger, none).
LOGGER_DEPENDENCIES = {"wandb": "wandb>=0.17", "tensorboard": "tensorboard>=2.14", "csv": None}
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
    ``license`` or none, Python versions, script, package, mypy files, the package ``runwright.testing``
    runs, the engine's extras and the logger's package); drop the template-only lines
    (``# template-only`` ... ``# /template-only``)."""
    package = answers["package_name"]
    major, minor = (int(part) for part in str(answers["python_version"]).split("."))
    mypy_files = [package] + (["benchmarks"] if answers["examples"] == "full" else [])
    string = json.dumps  # a JSON string is a valid TOML basic string
    author, email = string(answers["author_name"]), string(answers["author_email"])
    license_name = string(answers["license"])
    logger, extras = LOGGER_DEPENDENCIES[answers["logger"]], ENGINE_EXTRAS[answers["examples"]]
    rules = [
        (r'^license = ".*"\n', "" if answers["license"] == "none" else f"license = {license_name}\n"),
        (r'^name = "project"$', f"name = {string(answers['project_slug'])}"),
        (r"^description = .*$", f"description = {string(answers['description'])}"),
        (r"^authors = \[.*\]$", f"authors = [{{ name = {author}, email = {email} }}]"),
        (r'^requires-python = ".*"$', f'requires-python = ">={major}.{minor}"'),
        (r'^    "runwright\[sweep,plots,export\](?=>=)', f'    "{ENGINE}{extras}'),
        (
            r'^    "wandb>=[\d.]+",  # the default logger\n',
            f'    "{logger}",  # the default logger\n' if logger else "",
        ),
        (r'^project = "project\.__main__:main"$', f'{package} = "{package}.__main__:main"'),
        (r'^include = \["project\*"\]$', f'include = ["{package}*"]'),
        (r'^project = (?=\["configs/)', f"{package} = "),
        (r'^files = \["project", "hooks", "benchmarks", "engine/.*\]$', f"files = {string(mypy_files)}"),
        (r'^runwright_package = "project"(?=  # )', f"runwright_package = {string(package)}"),
        (r"^ *# template-only\n(.*\n)*? *# /template-only\n", ""),
        (r'^    "generated_suite: .*\n', ""),
        (r'^target-version = "py3\d+"$', f'target-version = "py{major}{minor}"'),
        (r'^python_version = "3\.\d+"$', f'python_version = "{major}.{minor}"'),
    ]
    for pattern, replacement in rules:
        text = sub_once(text, pattern, replacement, "pyproject.toml")
    return text


def rewrite_lowest(text: str, answers: Mapping[str, Any]) -> str:
    """``requirements/lowest.txt`` for the answers: the default logger's floor (or none), and the
    engine's floors (``# engine`` ... ``# /engine``) only where the engine is copied in."""
    logger = LOGGER_DEPENDENCIES[answers["logger"]]
    text = sub_once(
        text,
        r"^wandb==[\d.]+\n(?=pytest)",
        f"{logger.replace('>=', '==')}.0\n" if logger else "",
        "lowest.txt",
    )
    if answers["engine_source"] != "copy":
        text = sub_once(text, r"^# engine: .*\n(.*\n)*?# /engine\n", "", "lowest.txt")
    return text


def template_root(answers: Mapping[str, Any]) -> Path | None:
    """The absolute folder cookiecutter generated from (``_repo_dir``: a local template, cookiecutter's
    clone of a git URL or its unpacked archive); ``None`` where the answers name none (cruft). A
    relative ``_repo_dir`` is relative to the folder cookiecutter was started in, which this hook (run
    in the new repo) knows as the shell's ``PWD``. Raises :class:`FileNotFoundError` when no template
    is there."""
    repo_dir = answers.get("_repo_dir")
    if not repo_dir:
        return None
    folder, started_in = Path(str(repo_dir)), os.environ.get("PWD")
    if folder.is_absolute():
        return folder.resolve()
    if started_in and (Path(started_in) / folder / "cookiecutter.json").is_file():
        return (Path(started_in) / folder).resolve()
    where = started_in or "the folder cookiecutter was started in (the shell's PWD is not set)"
    raise FileNotFoundError(
        f"no template {repo_dir!r} in {where}: give cookiecutter the template's absolute path"
    )


def tracked_files(template: Path) -> set[str] | None:
    """The files git tracks in ``template`` (``/``-separated paths relative to it, submodules'
    files included; a tracked symlink is one file); ``None`` where ``template`` is not a git checkout
    of a template (an unpacked zip or tarball, a folder no repository tracks), or with a warning
    where git cannot list it."""
    if not any((folder / ".git").exists() for folder in (template, *template.parents)):
        return None
    command = ["git", "-C", str(template), "ls-files", "-z", "--recurse-submodules"]
    try:
        listed = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError) as error:
        reason = (getattr(error, "stderr", None) or str(error)).strip().splitlines()[0]
        print(
            f"WARNING: git cannot list the template's files ({reason}); untracked ones were copied too.",
            file=sys.stderr,
        )
        return None
    tracked = set(listed.split("\0")) - {""}
    return tracked if "cookiecutter.json" in tracked else None


def drop_untracked(root: Path, template: Path, tracked: set[str]) -> None:
    """Delete from the copy in ``root`` of ``template``'s template folder every file whose source is
    not in ``tracked`` (:func:`tracked_files`), and every folder with no tracked file in it. A file's
    source is its path in the template folder with the links of its folders followed, relative to
    ``template``: ``project/x.py`` is ``project/x.py`` (through the link ``project -> ../project``),
    ``Makefile`` the tracked link ``{{cookiecutter.project_slug}}/Makefile``."""
    top = template.resolve()
    tracked_folders = {parent.as_posix() for path in tracked for parent in Path(path).parents}

    def source(path: Path) -> str:
        return Path(os.path.relpath(path, top)).as_posix()

    for folder, folders, files in os.walk(root):
        here = (template / TEMPLATE_FOLDER / Path(folder).relative_to(root)).resolve()
        for name in files:
            if source(here / name) not in tracked:
                (Path(folder) / name).unlink()
        for name in [name for name in folders if source((here / name).resolve()) not in tracked_folders]:
            shutil.rmtree(Path(folder) / name)
            folders.remove(name)


def pip_url(template: str) -> str:
    """The ``git+`` URL that pip clones for a template's git URL (``https://``, ``ssh://``, ``file://``,
    scp-like ``git@host:owner/repo.git``, or already ``git+...``)."""
    if template.startswith("git+"):
        return template
    if scp := re.fullmatch(r"([\w.-]+)@([\w.-]+):(?!//)(.+)", template):
        return f"git+ssh://{scp[1]}@{scp[2]}/{scp[3]}"
    return f"git+{template}"


def web_url(url: str) -> str | None:
    """The web address of a git URL (``https://host/owner/repo``, from ``https://``, ``git+https://``,
    ``ssh://git@host/...`` or scp-like ``git@host:owner/repo.git``), or ``None`` for a local one."""
    url = url.removeprefix("git+")
    if scp := re.fullmatch(r"[\w.-]+@([\w.-]+):(?!//)(.+)", url):
        url = f"https://{scp[1]}/{scp[2]}"
    url = re.sub(r"^ssh://(?:[\w.-]+@)?([\w.-]+)(?::\d+)?/", r"https://\1/", url)
    return url.removesuffix(".git").rstrip("/") if url.startswith(("https://", "http://")) else None


class EngineSource(NamedTuple):
    """Where a generated repo installs the engine from: the line of ``requirements/engine.txt`` (the bare
    name when an index serves it; with ``wheel``, the wheel that generation builds into
    :data:`WHEEL_FOLDER`), one sentence for the README, and the address of the engine's folder for the
    Markdown links to its manual and CHANGELOG: a web address, :data:`MANUAL_FOLDER` (a copy in the repo,
    relative to its root) or ``None`` (the repo's own ``engine/``)."""

    line: str
    where: str
    docs: str | None
    wheel: bool = False


#: Where generation from a local template (a clone, an unpacked archive, a ``file://`` URL) puts the
#: engine: its wheel, named in ``requirements/engine.txt`` relative to the repo's root, and a copy of
#: its manual and CHANGELOG (a path of the generating machine would be dead anywhere else).
WHEEL_FOLDER, MANUAL_FOLDER = "requirements", "docs/runwright/"
#: The files of the engine's manual that :data:`MANUAL_FOLDER` gets (its README links its CHANGELOG).
MANUAL_FILES = ("README.md", "CHANGELOG.md")


class EngineBuildError(RuntimeError):
    """The engine's wheel could not be built (no pip, or no setuptools to build it with)."""


def head_commit(folder: Path) -> str | None:
    """The commit checked out in ``folder`` when it is the top of a git checkout, else ``None``."""
    command = ["git", "-C", str(folder), "rev-parse", "--show-toplevel", "HEAD"]
    try:
        top, commit = subprocess.run(command, capture_output=True, text=True, check=True).stdout.split()
    except (OSError, subprocess.CalledProcessError, ValueError):
        return None
    return commit if Path(top).resolve() == folder.resolve() else None


def engine_source(answers: Mapping[str, Any]) -> EngineSource:
    """Where the generated repo installs the engine from (:class:`EngineSource`), by ``engine_source``.

    ``template``: the template's own engine, pinned to the commit generated from, naming nothing of the
    generating machine. From a remote git URL (cookiecutter's clone, or cruft, which records the commit
    as ``_commit``), a direct reference to that URL at that commit, and the manual at its web address;
    from a local template, its engine built into a wheel and a copy of its manual. ``index``: a package
    index serves it (the bare name: the range is pyproject.toml's). ``copy``: the repo's own
    ``engine/`` (editable). Raises :class:`subprocess.CalledProcessError` when git cannot name the
    commit of a cloned template, :class:`FileNotFoundError` when the template is not where
    :func:`template_root` looks."""
    choice = answers["engine_source"]
    if choice == "index":
        index = f"a package index (pip's --index-url or --extra-index-url, e.g. your team's) serves {ENGINE}"
        return EngineSource(ENGINE, index, f"https://pypi.org/project/{ENGINE}/")
    if choice == "copy":
        return EngineSource(
            f"-e ./{ENGINE_FOLDER}[test]", f"this repo's `{ENGINE_FOLDER}/`, yours to edit", None
        )
    from cookiecutter.config import BUILTIN_ABBREVIATIONS
    from cookiecutter.repository import expand_abbreviations, is_repo_url

    template = expand_abbreviations(str(answers.get("_template", "")), BUILTIN_ABBREVIATIONS)
    commit = answers.get("_commit")
    root = template_root(answers)
    if is_repo_url(template) and not pip_url(template).startswith("git+file:"):  # (a remote URL)
        if not commit:
            command = ["git", "-C", str(root or Path.cwd()), "rev-parse", "HEAD"]
            commit = subprocess.run(command, capture_output=True, text=True, check=True).stdout.strip()
        web = web_url(template)
        return EngineSource(
            f"{ENGINE} @ {pip_url(template)}@{commit}#subdirectory={ENGINE_FOLDER}",
            f"the git repository this repo was generated from, at that commit ({commit[:12]})",
            f"{web}/blob/{commit}/{ENGINE_FOLDER}/" if web else MANUAL_FOLDER,
        )
    commit = commit or head_commit(root or Path(template).expanduser().resolve())
    at = f"commit {commit[:12]}" if commit else "a copy outside git"
    where = f"a wheel of the engine of the template this repo was generated from ({at}), in `{WHEEL_FOLDER}/`"
    return EngineSource("", where, MANUAL_FOLDER, wheel=True)


def build_wheel(engine: Path, folder: Path) -> Path:
    """Build the wheel of the engine distribution in ``engine`` (a copy: a build writes next to its
    sources) into ``folder`` with this interpreter's pip, its setuptools when new enough (else pip
    fetches it); the same sources give the same bytes (``SOURCE_DATE_EPOCH``). Returns the wheel.

    Raises:
        EngineBuildError: pip failed, naming its last line and the other answers.
    """
    try:  # (the engine's build-system.requires: setuptools>=77)
        isolated = int(metadata.version("setuptools").split(".")[0]) < 77
    except (metadata.PackageNotFoundError, ValueError):
        isolated = True
    command = [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--wheel-dir", str(folder)]
    command += [*([] if isolated else ["--no-build-isolation"]), str(engine)]
    env = {**os.environ, "SOURCE_DATE_EPOCH": "315532800"}  # (1980-01-01, the earliest a zip holds)
    result = subprocess.run(command, capture_output=True, text=True, env=env)
    wheels = sorted(folder.glob(f"{ENGINE}-*.whl"))
    if result.returncode != 0 or len(wheels) != 1:
        reason = (result.stderr.strip().splitlines() or ["no wheel written"])[-1]
        raise EngineBuildError(
            f"building the engine's wheel with `python -m pip wheel` failed ({reason}): cookiecutter's "
            f"Python needs pip, and setuptools>=77 or an index to fetch it from; or answer "
            f"engine_source=index or engine_source=copy"
        )
    return wheels[0]


#: A Markdown link into the engine's folder (``engine/README.md#run-folders``, ``../engine/CHANGELOG.md``).
ENGINE_LINK = re.compile(r"\]\(((?:\.\./)*)" + ENGINE_FOLDER + r"/([\w.-]+\.md)?(#[\w-]+)?\)")


def link_engine_docs(text: str, docs: str | None) -> str:
    """Point ``text``'s Markdown links into ``engine/`` at ``docs`` (:class:`EngineSource`): the same file
    and anchor under a web address or, relative as before, under a folder of the repo; a package index's
    page for all of them. ``None``: kept."""
    if docs is None:
        return text

    def link(match: re.Match[str]) -> str:
        up, file, anchor = match[1], match[2] or "", match[3] or ""
        if "pypi.org" in docs:
            return f"]({docs})"
        return f"]({'' if '://' in docs else up}{docs}{file}{anchor})"

    return ENGINE_LINK.sub(link, text)


def write_engine_requirement(root: Path, answers: Mapping[str, Any]) -> EngineSource:
    """Write ``requirements/engine.txt`` (:func:`engine_source`), building the engine's wheel and copying
    its manual where the source says; with ``engine_source=copy`` move the template's engine into
    ``engine/`` (without its benchmarks, which run the template's reference project), else delete it.
    Returns where the engine comes from. Raises :class:`EngineBuildError`."""
    source = engine_source(answers)
    staged = root / ENGINE_DIR
    if source.wheel:
        wheel = build_wheel(staged, root / WHEEL_FOLDER)
        source = source._replace(line=f"./{WHEEL_FOLDER}/{wheel.name}")
    if source.docs == MANUAL_FOLDER:
        (root / MANUAL_FOLDER).mkdir(parents=True)
        for name in MANUAL_FILES:
            shutil.copyfile(staged / name, root / MANUAL_FOLDER / name)
    if answers["engine_source"] == "copy":
        staged.rename(root / ENGINE_FOLDER)
        shutil.rmtree(root / ENGINE_FOLDER / "benchmarks")
    else:
        shutil.rmtree(staged)
    pinned = answers["engine_source"] == "template"
    later = f" Once an index serves {ENGINE}, the line below can be `{ENGINE}`." if pinned else ""
    comment = (
        f"Where the engine ({ENGINE}) comes from: {source.where}. `make` installs it with this repo (a path "
        f"is relative to the repo's root); pyproject.toml gives its version range, and the README how to "
        f"upgrade it.{later}"
    )
    comment = textwrap.fill(comment, width=104, initial_indent="# ", subsequent_indent="# ")
    (root / "requirements" / "engine.txt").write_text(f"{comment}\n{source.line}\n")
    return source


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


def rewrite_ci(text: str, oldest: str, copy: bool) -> str:
    """Set the CI workflow's test matrix (``oldest`` up to :data:`NEWEST_PYTHON`) and single-version
    jobs (``oldest``); without an engine copied in (not ``copy``), drop the steps that check one (``if [
    -d engine ]``). GitHub ``${{ ... }}`` expressions stay."""
    minor = int(oldest.split(".")[1])
    matrix = ", ".join(f'"3.{m}"' for m in range(minor, NEWEST_PYTHON[1] + 1))
    text = sub_once(text, r"(?<=python-version: )\[.*\]$", f"[{matrix}]", "ci.yml")
    text = sub_once(text, r'(?<=python-version: )"3\.\d+"$', f'"{oldest}"', "ci.yml", once=False)
    if not copy:
        step = r"^      - name: .*\n        run: if \[ -d engine \]; then .*\n"
        step += r"(?:        env:\n(?:          .*\n)+)?"  # (the step's environment, if any)
        text = sub_once(text, step, "", "ci.yml", once=False)
    return text


def rewrite_makefile(text: str, copy: bool) -> str:
    """The Makefile without the template's own targets' variable (``$(NOT_GENERATED)``) and, without an
    engine copied in (not ``copy``), without the switches that check one (``ENGINE``)."""
    text = sub_once(text, r" \$\(NOT_GENERATED\)(?= )", "", "Makefile")
    if not copy:
        text = sub_once(text, r"(?<=engine\.txt) \$\(wildcard engine/pyproject\.toml\)$", "", "Makefile")
        text = sub_once(text, r"^# An engine copied into this repo .*\nENGINE := .*\n", "", "Makefile")
        text = sub_once(text, r"^\t\$\(if \$\(ENGINE\),.*\n", "", "Makefile", once=False)
    return text


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
    for folder in {(root / relative).parent for relative in FULL_EXAMPLES_ONLY}:
        if folder.is_dir() and not any(folder.iterdir()):  # (all of its files were full-only)
            folder.rmdir()
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
    choices cookiecutter has checked); from a git checkout of the template, only the files git tracks
    (:func:`drop_untracked`). Raises :class:`TemplateDriftError`, :class:`EngineBuildError` or
    :class:`OSError`."""
    package = answers["package_name"]
    if (template := template_root(answers)) and (tracked := tracked_files(template)) is not None:
        drop_untracked(root, template, tracked)
    removed = drop_examples(root) if answers["examples"] == "minimal" else []
    for relative in TEMPLATE_ONLY_PATHS:
        (root / relative).unlink()
    for staged, name in STAGED_NAMES.items():
        (root / staged).rename(root / name)
    engine, copy = write_engine_requirement(root, answers), answers["engine_source"] == "copy"
    for cache in [path for name in CACHE_DIRS for path in root.rglob(name)]:
        shutil.rmtree(cache, ignore_errors=True)
    if package != OLD_PACKAGE:
        (root / OLD_PACKAGE).rename(root / package)
    removed_names = tuple(rename_references(name, package) for name in removed)
    for path in sorted(root.rglob("*")):
        parts = path.relative_to(root).parts
        skipped = {".git", LICENSES_DIR, ENGINE_FOLDER}  # (a copied engine and its manual are not renamed)
        manual = path.is_relative_to(root / MANUAL_FOLDER)
        if skipped & set(parts) or manual or path.name == "pyproject.toml" or not path.is_file():
            continue
        try:
            text = TEMPLATE_ONLY_BLOCK.sub("", rename_references(path.read_text(encoding="utf-8"), package))
        except UnicodeDecodeError:
            continue  # (not a text file)
        if path.suffix == ".md":
            text = link_engine_docs(render_markdown(text, answers, removed_names), engine.docs)
        path.write_text(text, encoding="utf-8")
    edit(root / "pyproject.toml", rewrite_pyproject, answers)
    edit(root / "Makefile", rewrite_makefile, copy)
    edit(root / "requirements" / "lowest.txt", rewrite_lowest, answers)
    title = f"# {answers['project_name']}\n\n{answers['description']}"
    edit(root / "README.md", sub_once, r"\A# .*$", title, "README.md")
    edit(root / "README.md", sub_once, r"(?<=Python >= )3\.\d+", str(answers["python_version"]), "", False)
    where = r"(?s)(?<=\*\*Where the engine comes from:\*\* ).*?(?=,\s+as\s+`requirements/engine\.txt` says)"
    edit(root / "README.md", sub_once, where, engine.where, "README.md")
    docstring = answers["description"].replace("\\", "\\\\").replace('"', '\\"')
    edit(root / package / "__init__.py", sub_once, r'\A""".*"""$', f'"""{docstring}"""', "__init__.py")
    wandb = root / "configs" / "logger" / "wandb.yaml"
    edit(wandb, sub_once, r"^      project: project$", f"      project: {package}", "wandb.yaml")
    shutil.copyfile(wandb.with_name(f"{answers['logger']}.yaml"), root / package / "configs" / "logger.yaml")
    if answers["github_actions"]:  # (a bool: cookiecutter converts yes/no)
        edit(root / ".github" / "workflows" / "ci.yml", rewrite_ci, str(answers["python_version"]), copy)
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
    except (TemplateDriftError, EngineBuildError, OSError, subprocess.CalledProcessError) as error:
        details = getattr(error, "stderr", None) or ""
        print(f"ERROR: generating {root.name} failed: {error} {details}".rstrip(), file=sys.stderr)
        return 1
    print(
        f"Created {root}. Next: cd {root.name} && make test   (make train: the default experiment)\n"
        "Without a CUDA GPU, take torch's CPU wheels (about 200 MB instead of several GB of CUDA builds):\n"
        "  PIP_EXTRA_INDEX_URL=https://download.pytorch.org/whl/cpu make test"
    )
    return 0


# {% endraw %}
if __name__ == "__main__":
    sys.exit(main(json.loads(r"""{{ cookiecutter | tojson }}""")))
