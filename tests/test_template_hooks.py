"""The cookiecutter template's parts, tested without generating a repo: answer checks, rename rules,
file rewrites, the symlinked template folder and the workflow files.

(Template-only: the post-gen hook deletes this file from generated repos.)
"""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import runwright
import runwright.testing
import yaml
from support import REPO_ROOT

HOOKS = REPO_ROOT / "hooks"
TEMPLATE_DIR = REPO_ROOT / "{{cookiecutter.project_slug}}"
#: Top-level paths of the template repo that generated repos do not get.
TEMPLATE_ONLY_TOP_LEVEL = {"cookiecutter.json", "hooks", "CONTRIBUTING.md", "LICENSE", TEMPLATE_DIR.name}


def load_hook(name: str) -> ModuleType:
    """Import ``hooks/<name>.py`` as a module (its Jinja is only inside a string under ``__main__``)."""
    spec = importlib.util.spec_from_file_location(name, HOOKS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


pre_gen = load_hook("pre_gen_project")
post_gen = load_hook("post_gen_project")

GOOD_ANSWERS: dict[str, Any] = {
    "project_name": "Acme Vision",
    "project_slug": "acme-vision",
    "package_name": "acme_vision",
    "description": 'Vision models for "Acme".',
    "author_name": "Ada Lovelace",
    "author_email": "ada@example.com",
    "python_version": "3.11",
    "license": "Apache-2.0",
    "logger": "tensorboard",
    "examples": "full",
    "engine_source": "index",
    "github_actions": True,
    "init_git": False,
}


def test_good_answers_pass() -> None:
    assert pre_gen.check_answers(GOOD_ANSWERS) == []


@pytest.mark.parametrize(
    ("field", "value", "expected"),
    [
        ("package_name", "Acme-Vision", "not a valid Python package name"),
        ("package_name", "2d_vision", "not a valid Python package name"),
        ("package_name", "class", "Python keyword"),
        ("package_name", "torch", "shadow the dependency 'torch'"),
        ("package_name", "lightning", "shadow the dependency 'lightning'"),
        ("package_name", "json", "standard-library module 'json'"),
        ("package_name", "tests", "collides with the repo's own tests/ folder"),
        ("package_name", "a" * 21, "21 characters long"),
        ("project_slug", "../escape", "not a usable folder"),
        ("author_email", "ada.example.com", "not an email address"),
        ("author_email", "a@b@c", "not an email address"),
        ("project_name", "  ", "must be one non-empty line"),
    ],
)
def test_bad_answers_are_named(field: str, value: str, expected: str) -> None:
    errors = pre_gen.check_answers({**GOOD_ANSWERS, field: value})
    assert len(errors) == 1, errors
    assert expected in errors[0] and f"{field}={value!r}" in errors[0]


def test_every_dependency_is_protected_from_shadowing() -> None:
    """Each requirement of pyproject.toml (dependencies and extras) has its import name listed."""
    tomllib = pytest.importorskip("tomllib")
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
    requirements = [
        *project["dependencies"],
        *(r for extra in project["optional-dependencies"].values() for r in extra),
    ]
    import_names = {
        "scikit-learn": "sklearn",
        "pyyaml": "yaml",
        "pillow": "PIL",
        "pytest-xdist": "xdist",
        "psycopg2-binary": "psycopg2",
    }
    for requirement in requirements:
        name = re.match(r"[A-Za-z0-9_.\-]+", requirement)
        assert name is not None, requirement
        distribution = name.group(0).lower()
        if distribution in (project["name"], "runwright"):  # this package, the engine (its own name)
            continue
        if distribution.startswith("types-"):
            continue  # stub-only packages have no import name of their own
        module = import_names.get(distribution, distribution.replace("-", "_"))
        assert module in pre_gen.DEPENDENCY_IMPORT_NAMES, f"{requirement}: add {module!r} to the pre-gen hook"


def test_rename_rules_change_package_references_and_leave_prose() -> None:
    text = "\n".join(
        [
            '"""Entry point for ``python -m project``; see :class:`~project.models.ImageClassifier`."""',
            "from project.cli import main",
            "import project",
            "from project import runs",
            "model:",
            "  class_path: project.models.SimpleCNN",
            '[sys.executable, "-m", "project", *args]',
            "| `project/cli.py` | mypy (strict on project/) |",
            "$(PY) -m project fit",
            "Prose stays: this project. A project's defaults, projects, pyproject.toml, ProjectCLI.",
            "my-project/x",
            "project = 1 and data from project import settings",
        ]
    )
    renamed = post_gen.rename_references(text, "acme_vision").splitlines()
    assert renamed == [
        '"""Entry point for ``python -m acme_vision``; see :class:`~acme_vision.models.ImageClassifier`."""',
        "from acme_vision.cli import main",
        "import acme_vision",
        "from acme_vision import runs",
        "model:",
        "  class_path: acme_vision.models.SimpleCNN",
        '[sys.executable, "-m", "acme_vision", *args]',
        "| `acme_vision/cli.py` | mypy (strict on acme_vision/) |",
        "$(PY) -m acme_vision fit",
        "Prose stays: this project. A project's defaults, projects, pyproject.toml, ProjectCLI.",
        "my-project/x",
        "project = 1 and data from project import settings",
    ]


def test_pyproject_is_filled_in_and_still_parses() -> None:
    tomllib = pytest.importorskip("tomllib")
    text = (REPO_ROOT / "pyproject.toml").read_text()
    config = tomllib.loads(post_gen.rewrite_pyproject(text, GOOD_ANSWERS))
    project = config["project"]
    assert project["name"] == "acme-vision"
    assert project["description"] == 'Vision models for "Acme".'
    assert project["authors"] == [{"name": "Ada Lovelace", "email": "ada@example.com"}]
    assert project["license"] == "Apache-2.0"  # an SPDX expression (PEP 639)
    assert project["requires-python"] == ">=3.11"
    assert project["scripts"] == {"acme_vision": "acme_vision.__main__:main"}
    dev = project["optional-dependencies"]["dev"]
    assert not any(r.startswith(("cookiecutter", "cruft", "build", "twine")) for r in dev)
    assert "# template-only" not in post_gen.rewrite_pyproject(text, GOOD_ANSWERS)
    engine_range = re.search(r'"runwright\[sweep,plots,export\](>=[^"]+)"', text)[1]  # type: ignore[index]
    assert project["dependencies"][0] == f"runwright[sweep,plots,export]{engine_range}"
    assert "tensorboard>=2.14" in project["dependencies"]  # the chosen default logger
    assert not any(r.startswith("wandb") for r in project["dependencies"])
    assert config["tool"]["setuptools"]["packages"]["find"]["include"] == ["acme_vision*"]
    assert config["tool"]["setuptools"]["package-data"] == {"acme_vision": ["configs/*.yaml"]}
    assert config["tool"]["mypy"]["files"] == ["acme_vision", "benchmarks"]
    assert config["tool"]["mypy"]["python_version"] == "3.11"
    assert config["tool"]["ruff"]["target-version"] == "py311"
    assert config["tool"]["pytest"]["ini_options"]["runwright_package"] == "acme_vision"
    unlicensed = tomllib.loads(post_gen.rewrite_pyproject(text, {**GOOD_ANSWERS, "license": "none"}))
    assert "license" not in unlicensed["project"]
    minimal = tomllib.loads(post_gen.rewrite_pyproject(text, {**GOOD_ANSWERS, "examples": "minimal"}))
    assert minimal["tool"]["mypy"]["files"] == ["acme_vision"]
    assert minimal["project"]["dependencies"][0] == f"runwright{engine_range}"  # none of the engine's extras
    csv = tomllib.loads(post_gen.rewrite_pyproject(text, {**GOOD_ANSWERS, "logger": "csv"}))
    assert not any(r.startswith(("wandb", "tensorboard")) for r in csv["project"]["dependencies"])


@pytest.mark.parametrize(
    ("line", "named"),
    [
        ('project = "project.__main__:main"', "__main__:main"),
        ('runwright_package = "project"', "runwright_package"),
    ],
)
def test_a_rule_that_no_longer_matches_is_an_error(line: str, named: str) -> None:
    text = (REPO_ROOT / "pyproject.toml").read_text()
    assert line in text
    with pytest.raises(post_gen.TemplateDriftError, match=named):
        post_gen.rewrite_pyproject(text.replace(line, ""), GOOD_ANSWERS)


def copy_reference_project(target: Path, template: Path = REPO_ROOT) -> Path:
    """The files the template folder of ``template`` links, copied (links followed) as cookiecutter does."""
    target.mkdir()
    for link in (template / TEMPLATE_DIR.name).iterdir():
        destination = target / link.name
        if link.is_dir():
            shutil.copytree(link, destination, ignore=shutil.ignore_patterns("__pycache__", "logs"))
        else:
            shutil.copy(link, destination)
    for cache in target.rglob(".*_cache"):
        shutil.rmtree(cache)
    return target


def git(cwd: Path, *args: str) -> str:
    """``git ARGS`` in ``cwd`` (with an identity); returns its stdout."""
    command = ["git", "-c", "user.name=Test", "-c", "user.email=test@example.com", *args]
    return subprocess.run(command, cwd=cwd, check=True, capture_output=True, text=True).stdout


def snapshot_template(destination: Path) -> None:
    """Copy the template's tracked files as they are on disk (links kept) into a new one-commit repo."""
    if shutil.which("git") is None or not (REPO_ROOT / ".git").exists():
        pytest.skip("needs git and a git checkout of the template")
    for relative in filter(None, git(REPO_ROOT, "ls-files", "-z").split("\0")):
        source, target = REPO_ROOT / relative, destination / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_symlink():
            target.symlink_to(os.readlink(source))
        elif source.is_file():
            shutil.copy2(source, target)
    git(destination, "init", "--quiet")
    git(destination, "add", "--all")
    git(destination, "commit", "--quiet", "-m", "template")


#: Files a clone of the template gets and git does not track: scratch files and what the tools and runs
#: write (``.gitignore`` ignores the second kind), in the folders a generated repo copies.
UNTRACKED = (
    "project/scratch.py",
    "docs/notes.ipynb",
    "configs/local.yaml",
    "tests/lightning_logs/version_0/metrics.csv",
    "project/models/best.ckpt",
    "engine/.venv/pyvenv.cfg",
    "engine/dist/runwright-0.1.0-py3-none-any.whl",
    "engine/build/lib/runwright/cli.py",
    "engine/src/runwright.egg-info/PKG-INFO",
    "hooks/licenses/notes.txt",
)


def files_of(repo: Path) -> set[str]:
    return {p.relative_to(repo).as_posix() for p in repo.rglob("*") if p.is_file() and ".git" not in p.parts}


def test_generate_from_a_git_checkout_copies_only_what_git_tracks(tmp_path: Path) -> None:
    """From a clone with untracked and ignored files in its linked folders and a tracked file edited, the
    repo has exactly the files it has from the clean clone, the edit included: ``.gitignore`` (staged
    as ``gitignore.template``), the engine moved in, the files the hook writes."""
    template = tmp_path / "template"
    snapshot_template(template)
    answers = {**GOOD_ANSWERS, "engine_source": "copy"}
    clean = copy_reference_project(tmp_path / "clean", template)
    post_gen.generate(clean, answers)
    for relative in UNTRACKED:
        (template / relative).parent.mkdir(parents=True, exist_ok=True)
        (template / relative).write_text("untracked\n")
    with (template / "docs" / "extending.md").open("a") as edited:
        edited.write("\nA line of one's own.\n")
    repo = copy_reference_project(tmp_path / "acme-vision", template)
    assert (repo / "project" / "scratch.py").is_file()  # (copied, as cookiecutter copies it)
    post_gen.generate(repo, {**answers, "_repo_dir": str(template)})
    assert files_of(repo) == files_of(clean)
    assert (repo / "docs" / "extending.md").read_text().endswith("\nA line of one's own.\n")
    kept = {".gitignore", "LICENSE", "requirements/engine.txt", "engine/src/runwright/cli.py"}
    assert kept <= files_of(repo)


def test_only_a_git_checkout_of_the_template_lists_its_tracked_files(tmp_path: Path) -> None:
    """An unpacked archive, or one inside a repository that does not track it: ``None`` (every file
    stays); a checkout: the files in its index, a tracked link as one file."""
    if shutil.which("git") is None:
        pytest.skip("needs git")
    archive = tmp_path / "outer" / "template"
    archive.mkdir(parents=True)
    (archive / "cookiecutter.json").write_text("{}")
    assert post_gen.tracked_files(archive) is None
    git(tmp_path / "outer", "init", "--quiet")
    assert post_gen.tracked_files(archive) is None
    (archive / "README.md").symlink_to("cookiecutter.json")
    (archive / "scratch.py").write_text("")
    git(archive, "add", "cookiecutter.json", "README.md")
    assert post_gen.tracked_files(archive) == {"cookiecutter.json", "README.md"}


def test_a_relative_template_path_is_where_cookiecutter_was_started(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``cookiecutter clone`` run in a folder: the hook, run in the new repo, finds ``clone`` in the
    shell's ``PWD``; where that has no template, one error naming the path and the fix."""
    (tmp_path / "clone").mkdir()
    (tmp_path / "clone" / "cookiecutter.json").write_text("{}")
    monkeypatch.chdir(tmp_path / "clone")  # (the hook's folder is the new repo, not where it started)
    monkeypatch.setenv("PWD", str(tmp_path))
    answers = {"engine_source": "template", "_template": "clone", "_repo_dir": "clone"}
    source = post_gen.engine_source(answers)  # (a local template: its engine's wheel, nothing of its path)
    assert source.wheel and source.docs == post_gen.MANUAL_FOLDER and str(tmp_path) not in source.where
    assert post_gen.template_root(answers) == (tmp_path / "clone").resolve()
    monkeypatch.setenv("PWD", str(tmp_path / "clone"))
    message = f"no template 'clone' in {tmp_path / 'clone'}: give cookiecutter the template's absolute path"
    with pytest.raises(FileNotFoundError, match=re.escape(message)):
        post_gen.engine_source(answers)
    monkeypatch.delenv("PWD")
    with pytest.raises(FileNotFoundError, match="PWD is not set"):
        post_gen.template_root({**answers, "engine_source": "index"})


def test_the_package_default_logger_is_the_wandb_preset() -> None:
    """``project/configs/logger.yaml`` (the CLI's default logger) is an exact copy of the W&B preset,
    which the hook replaces by the chosen preset."""
    default = (REPO_ROOT / "project" / "configs" / "logger.yaml").read_text()
    assert default == (REPO_ROOT / "configs" / "logger" / "wandb.yaml").read_text()


@pytest.mark.parametrize(
    ("logger", "examples"), [("wandb", "full"), ("tensorboard", "minimal"), ("csv", "minimal")]
)
def test_generate_copies_the_chosen_logger_and_keeps_the_chosen_examples(
    logger: str, examples: str, tmp_path: Path
) -> None:
    """The hook's file operations on a copy of the reference project, without cookiecutter."""
    repo = copy_reference_project(tmp_path / "acme-vision")
    post_gen.generate(repo, {**GOOD_ANSWERS, "logger": logger, "examples": examples})
    preset = yaml.safe_load((repo / "configs" / "logger" / f"{logger}.yaml").read_text())
    default = (repo / "acme_vision" / "configs" / "logger.yaml").read_text()
    assert default == (repo / "configs" / "logger" / f"{logger}.yaml").read_text()
    assert yaml.safe_load(default) == preset
    if logger == "wandb":
        assert preset["trainer"]["logger"]["init_args"]["project"] == "acme_vision"
    kept = examples == "full"
    for relative in post_gen.FULL_EXAMPLES_ONLY:
        assert (repo / relative.replace("project/", "acme_vision/")).exists() == kept, relative
    data_init = (repo / "acme_vision" / "data" / "__init__.py").read_text()
    models_init = (repo / "acme_vision" / "models" / "__init__.py").read_text()
    assert ("DiabetesDataModule" in data_init) == kept and ("TabularRegressor" in models_init) == kept
    assert ("MNISTDataModule" in data_init) == kept and "DigitsDataModule" in data_init
    for init in (data_init, models_init):
        compile(init, "__init__.py", "exec")
    assert not (repo / "tests" / "test_template_bake.py").exists() and not (repo / "project").exists()
    assert (repo / ".gitignore").is_file() and not (repo / post_gen.LICENSES_DIR).exists()
    readme = (repo / "README.md").read_text()
    assert readme.startswith('# Acme Vision\n\nVision models for "Acme".\n')
    assert "Python >= 3.11" in readme and "Python >= 3.10" not in readme
    assert (
        (repo / "acme_vision" / "__init__.py").read_text().startswith('"""Vision models for \\"Acme\\"."""')
    )
    assert "Apache License" in (repo / "LICENSE").read_text()[:200]


def test_drop_imports_removes_statements_and_all_entries() -> None:
    source = (
        "from project.data.base import Base\n"
        "from .diabetes import Diabetes, column_mean_std\n"
        "from project.data.vision import (\n    CIFAR,\n    MNIST,\n)\n\n"
        '__all__ = [\n    "Base",\n    "CIFAR",\n    "Diabetes",\n    "MNIST",\n    "column_mean_std",\n]\n'
        '__all__ += ["Base", "Diabetes"]\n'
    )
    assert post_gen.drop_imports(source, {"diabetes", "vision"}) == (
        'from project.data.base import Base\n\n__all__ = [\n    "Base",\n]\n__all__ += ["Base"]\n'
    )


@pytest.mark.parametrize(
    ("answers", "shown"),
    [
        ({"logger": "wandb", "examples": "full"}, ["W&B default", "full only"]),
        ({"logger": "csv", "examples": "minimal"}, ["not W&B", "CSV or TensorBoard"]),
        ({"logger": "tensorboard", "examples": "full"}, ["not W&B", "CSV or TensorBoard", "full only"]),
    ],
)
def test_markdown_blocks_follow_the_answers(answers: dict[str, str], shown: list[str]) -> None:
    text = (
        "<!-- template-only -->\nabout the template\n<!-- /template-only -->\n"
        "<!-- if logger=wandb -->\nW&B default\n<!-- endif -->\n"
        "<!-- if logger!=wandb\nnot W&B\nendif -->\n"
        "<!-- if logger=csv,tensorboard\nCSV or TensorBoard\nendif -->\n"
        "<!-- if examples=full -->\nfull only\n<!-- endif -->\n"
        "| `configs/experiment/diabetes.yaml` | a row |\n| `configs/experiment/digits.yaml` | a row |\n"
    )
    removed = ("configs/experiment/diabetes.yaml",) if answers["examples"] == "minimal" else ()
    rendered = post_gen.render_markdown(text, {**GOOD_ANSWERS, **answers}, removed)
    rows = ["| `configs/experiment/digits.yaml` | a row |"]
    if not removed:
        rows.insert(0, "| `configs/experiment/diabetes.yaml` | a row |")
    assert rendered.splitlines() == [*shown, *rows]
    code = "Text.\n\n<!-- template-only -->\nx\n<!-- /template-only -->\n\n```python\na = 1\n\n\nb = 2\n```\n"
    assert post_gen.render_markdown(code, GOOD_ANSWERS) == "Text.\n\n```python\na = 1\n\n\nb = 2\n```\n"


def test_readme_loses_the_template_sections_and_follows_the_answers() -> None:
    readme = post_gen.render_markdown((REPO_ROOT / "README.md").read_text(), GOOD_ANSWERS)
    assert "template-only" not in readme and "## Start a new project" not in readme
    assert "**Where the engine comes from:**" in readme and "engine_source" not in readme
    assert "**TensorBoard by default" not in readme and "The default logger is TensorBoard" in readme
    assert "GitHub Actions (`.github/workflows/ci.yml`)" in readme and "<!-- if" not in readme
    assert "The default logger is W&B" not in readme
    without_ci = post_gen.render_markdown(
        (REPO_ROOT / "README.md").read_text(), {**GOOD_ANSWERS, "github_actions": False}
    )
    assert "GitHub Actions" not in without_ci


def test_ci_matrix_follows_the_oldest_python_and_keeps_github_expressions() -> None:
    text = (REPO_ROOT / ".github" / "workflows" / "ci.yml").read_text()
    new = post_gen.rewrite_ci(text, "3.11", copy=True)
    workflow = yaml.safe_load(new)
    assert workflow["jobs"]["tests"]["strategy"]["matrix"]["python-version"] == ["3.11", "3.12"]
    assert workflow["jobs"]["lint"]["steps"][1]["with"]["python-version"] == "3.11"
    assert re.findall(r"\$\{\{.*?\}\}", new) == re.findall(r"\$\{\{.*?\}\}", text) != []


@pytest.mark.parametrize("copy", [True, False])
def test_only_a_repo_with_the_engine_copied_in_checks_it_in_ci_and_make(copy: bool, tmp_path: Path) -> None:
    """The steps and Makefile lines that check a copied ``engine/`` are in a ``copy`` repo alone, the
    other steps and targets stay, and the generated Makefile uses no variable it does not define."""
    ci = post_gen.rewrite_ci((REPO_ROOT / ".github" / "workflows" / "ci.yml").read_text(), "3.10", copy)
    steps = {
        job: [s.get("run", s.get("uses")) for s in spec["steps"]]
        for job, spec in yaml.safe_load(ci)["jobs"].items()
    }
    engine_steps = [step for job in steps.values() for step in job if "[ -d engine ]" in step]
    assert len(engine_steps) == (3 if copy else 0)
    assert "mypy" in steps["types"] and "python -m pytest" in steps["tests"]
    makefile = post_gen.TEMPLATE_ONLY_BLOCK.sub("", (REPO_ROOT / "Makefile").read_text())
    makefile = post_gen.rewrite_makefile(makefile, copy)
    assert ("ENGINE" in makefile) == copy and ("engine/" in makefile) == copy
    (tmp_path / "Makefile").write_text(makefile)
    (tmp_path / "requirements").mkdir()
    for prerequisite in ("pyproject.toml", "requirements/constraints.txt", "requirements/engine.txt"):
        (tmp_path / prerequisite).touch()
    if copy:
        (tmp_path / "engine").mkdir()
        (tmp_path / "engine" / "pyproject.toml").touch()
    make = ["make", "--warn-undefined-variables", "-n", f"VENV={tmp_path / 'venv'}", "test-all"]
    dry = subprocess.run(make, cwd=tmp_path, capture_output=True, text=True, check=True)  # (prints only)
    assert "undefined" not in dry.stderr, dry.stderr
    assert ("cd engine" in dry.stdout) == copy and "pip install --upgrade -c" in dry.stdout


@pytest.mark.parametrize(
    "path", [".github/workflows/ci.yml", ".github/workflows/template.yml", ".pre-commit-config.yaml"]
)
def test_workflow_files_are_valid_yaml(path: str) -> None:
    document = yaml.safe_load((REPO_ROOT / path).read_text())
    if path.startswith(".github"):
        assert {"name", "jobs"} <= set(document) and True in document  # PyYAML reads `on:` as True
        for job in document["jobs"].values():
            assert job["runs-on"] and job["steps"]
            setups = [
                step for step in job["steps"] if step.get("uses", "").startswith("actions/setup-python")
            ]
            assert setups and all(step["with"]["cache"] == "pip" for step in setups)
    else:
        hooks = {hook["id"] for repo in document["repos"] for hook in repo["hooks"]}
        assert {"check-added-large-files", "check-merge-conflict", "detect-private-key"} <= hooks
        assert {"ruff-check", "ruff-format", "mypy"} <= hooks


def test_cookiecutter_json_matches_the_hooks() -> None:
    config = json.loads((REPO_ROOT / "cookiecutter.json").read_text())
    licenses = {path.stem for path in (HOOKS / "licenses").glob("*.txt")}
    assert set(config["license"]) == {*licenses, "none"}
    assert config["examples"] == ["full", "minimal"]
    for logger in config["logger"]:
        assert (REPO_ROOT / "configs" / "logger" / f"{logger}.yaml").is_file()
    for relative in post_gen.FULL_EXAMPLES_ONLY:
        assert (REPO_ROOT / relative).exists(), relative
    newest = f"3.{post_gen.NEWEST_PYTHON[1]}"
    assert config["python_version"][-1] == newest, "the CI matrix tests every choice up to the newest"
    assert set(config["__prompts__"]) <= set(config)
    assert config["_copy_without_render"] == ["*"], "the reference project is copied, never rendered"
    for license_name in licenses:
        text = (HOOKS / "licenses" / f"{license_name}.txt").read_text()
        assert "[yyyy]" in text and "[name of copyright owner]" in text


def test_template_folder_links_every_tracked_top_level_path() -> None:
    """The template folder is a set of symlinks into the root: one per tracked top-level path
    (the template-only ones excepted), each resolving inside the repo."""
    try:
        tracked = subprocess.run(
            ["git", "ls-files"], cwd=REPO_ROOT, capture_output=True, text=True, check=True
        ).stdout.split()
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("needs a git checkout of the template")
    top_level = {path.split("/", 1)[0] for path in tracked} - TEMPLATE_ONLY_TOP_LEVEL
    names = {**post_gen.STAGED_NAMES, post_gen.ENGINE_DIR: post_gen.ENGINE_FOLDER}
    staged = {names.get(p.name, p.name) for p in TEMPLATE_DIR.iterdir()}
    assert top_level <= staged, f"link these from {TEMPLATE_DIR.name}/: {sorted(top_level - staged)}"
    for link in [*TEMPLATE_DIR.iterdir(), *TEMPLATE_DIR.rglob("*.yml")]:
        if link.is_symlink():
            target = link.resolve()
            assert target.exists() and REPO_ROOT.resolve() in target.parents, link
    assert not (TEMPLATE_DIR / ".github" / "workflows" / "template.yml").exists()


def test_hooks_render_to_themselves_apart_from_the_context() -> None:
    """cookiecutter renders the hooks with Jinja: only the context line may change."""
    from cookiecutter.environment import StrictEnvironment

    environment = StrictEnvironment(keep_trailing_newline=True)
    for name in ("pre_gen_project", "post_gen_project"):
        source = (HOOKS / f"{name}.py").read_text()
        rendered = environment.from_string(source).render(cookiecutter=GOOD_ANSWERS)
        changed = [(a, b) for a, b in zip(source.splitlines(), rendered.splitlines(), strict=True) if a != b]
        assert [a.strip() for a, _ in changed] == [
            "# {% raw %}",
            "# {% endraw %}",
            'sys.exit(main(json.loads(r"""{{ cookiecutter | tojson }}""")))',
        ]
        assert json.loads(re.search(r'r"""(.*)"""', changed[-1][1]).group(1)) == GOOD_ANSWERS  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("answers", "line", "docs"),
    [
        ({"engine_source": "index"}, "runwright", "https://pypi.org/project/runwright/"),
        ({"engine_source": "copy"}, "-e ./engine[test]", None),
        (
            {"_template": "gh:acme/template", "_commit": "0123456789abcdef"},
            "runwright @ git+https://github.com/acme/template.git@0123456789abcdef#subdirectory=engine",
            "https://github.com/acme/template/blob/0123456789abcdef/engine/",
        ),
        (
            {"_template": "git@gitlab.com:acme/template.git", "_commit": "abc"},
            "runwright @ git+ssh://git@gitlab.com/acme/template.git@abc#subdirectory=engine",
            "https://gitlab.com/acme/template/blob/abc/engine/",
        ),
        (  # a local template: its engine's wheel, built by write_engine_requirement, and its manual copied
            {"_template": "/srv/template", "_repo_dir": "/srv/template"},
            "",
            "docs/runwright/",
        ),
        (  # cruft from a local clone: its commit
            {"_template": "/srv/template", "_commit": "abc"},
            "",
            "docs/runwright/",
        ),
        (  # a file:// URL: cookiecutter's clone, local too
            {"_template": "file:///srv/template", "_commit": "abc"},
            "",
            "docs/runwright/",
        ),
    ],
)
def test_the_engine_source_follows_the_answer_and_where_the_template_came_from(
    answers: dict[str, str], line: str, docs: str | None
) -> None:
    source = post_gen.engine_source({"engine_source": "template", **answers})
    assert (source.line, source.docs) == (line, docs) and source.where
    assert source.wheel == (docs == post_gen.MANUAL_FOLDER) and "/srv" not in source.where
    if answers.get("_commit"):
        assert answers["_commit"][:12] in source.where


def test_the_engine_source_of_a_cloned_template_is_the_clone_s_commit(tmp_path: Path) -> None:
    clone = tmp_path / "clone"
    clone.mkdir()
    git = ["git", "-C", str(clone), "-c", "user.name=T", "-c", "user.email=t@example.com"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "commit", "-q", "--allow-empty", "-m", "x"], check=True)
    commit = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    answers = {"engine_source": "template", "_template": "https://example.com/t.git", "_repo_dir": str(clone)}
    source = post_gen.engine_source(answers)
    assert source.line == f"runwright @ git+https://example.com/t.git@{commit}#subdirectory=engine"
    assert source.docs == f"https://example.com/t/blob/{commit}/engine/" and commit[:12] in source.where


def test_links_into_the_engine_follow_the_engine_source() -> None:
    text = "See [the manual](engine/README.md#run-folders), [it](../engine/CHANGELOG.md), [x](docs/x.md)."
    web = "https://github.com/a/t/blob/abc/engine/"
    assert post_gen.link_engine_docs(text, web) == (
        f"See [the manual]({web}README.md#run-folders), [it]({web}CHANGELOG.md), [x](docs/x.md)."
    )
    pypi = "https://pypi.org/project/runwright/"
    assert post_gen.link_engine_docs(text, pypi) == f"See [the manual]({pypi}), [it]({pypi}), [x](docs/x.md)."
    assert post_gen.link_engine_docs(text, None) == text  # the engine copied in: relative links resolve
    copied = "docs/runwright/"  # (its manual copied into the repo: relative links, from any folder)
    assert post_gen.link_engine_docs(text, copied) == (
        "See [the manual](docs/runwright/README.md#run-folders), [it](../docs/runwright/CHANGELOG.md), "
        "[x](docs/x.md)."
    )


@pytest.mark.parametrize(
    ("logger", "pin"), [("wandb", "wandb==0.17.0"), ("tensorboard", "tensorboard==2.14.0")]
)
def test_lowest_pins_the_chosen_logger_and_the_engine_only_where_it_is_copied(logger: str, pin: str) -> None:
    text = (REPO_ROOT / "requirements" / "lowest.txt").read_text()
    answers = {**GOOD_ANSWERS, "logger": logger}
    indexed = post_gen.rewrite_lowest(text, {**answers, "engine_source": "index"})
    assert pin in indexed.splitlines() and "torch==2.6.0" not in indexed
    copied = post_gen.rewrite_lowest(text, {**answers, "engine_source": "copy"})
    assert "torch==2.6.0" in copied and pin in copied
    csv = post_gen.rewrite_lowest(text, {**answers, "logger": "csv", "engine_source": "index"})
    assert not any(line.startswith(("wandb", "tensorboard")) for line in csv.splitlines())


def test_an_engine_that_cannot_be_built_stops_generation_naming_the_other_answers(tmp_path: Path) -> None:
    """A local template's engine that pip cannot build into a wheel (here: no distribution in the
    folder) is one error naming pip's last line and the answers that need no build."""
    (tmp_path / "engine").mkdir()
    with pytest.raises(
        post_gen.EngineBuildError, match=r"\(ERROR: .*\): .*engine_source=index or engine_source=copy"
    ):
        post_gen.build_wheel(tmp_path / "engine", tmp_path / "requirements")
    assert not list(tmp_path.rglob("*.whl"))


#: The engine's public surface: its public modules, each with the names a project may import from it.
PUBLIC = {
    "runwright": {*runwright.__all__, "__version__", "*"},
    "runwright.testing": {*runwright.testing.__all__, "*"},
}
#: A YAML ``class_path`` into the engine.
ENGINE_CLASS_PATH = re.compile(r"class_path:\s*[\"']?(runwright\.[\w.]+)")


def private_engine_uses(root: Path, skip: tuple[str, ...] = ()) -> list[str]:
    """``path:line: what`` for each use of the engine outside its public surface (:data:`PUBLIC`) in the
    files under ``root`` (links followed; not in ``.git`` or under the relative paths ``skip``): in a
    Python file an import of another runwright module (``import runwright.cli``, ``from runwright.runs
    import ...``) or of a name its public module does not export (``from runwright import cli``); in a
    YAML file a ``class_path`` that is not ``runwright.<public name>``."""
    found = []
    for folder, folders, files in os.walk(root, followlinks=True):
        folders[:] = sorted(name for name in folders if name != ".git")
        for path in sorted(Path(folder) / name for name in files):
            relative = path.relative_to(root).as_posix()
            if relative.startswith(skip):
                continue
            if path.suffix == ".py":
                for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), relative)):
                    if isinstance(node, ast.Import):
                        used = [(alias.name, None) for alias in node.names]
                    elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                        used = [(node.module, alias.name) for alias in node.names]
                    else:
                        continue
                    for module, name in used:
                        public = PUBLIC.get(module, set())
                        if module.split(".")[0] == "runwright" and (
                            not public or (name and name not in public)
                        ):
                            found.append(f"{relative}:{node.lineno}: {module}{f'.{name}' if name else ''}")
            elif path.suffix in (".yaml", ".yml"):
                for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                    for dotted in ENGINE_CLASS_PATH.findall(line):
                        module, _, name = dotted.rpartition(".")
                        if module != "runwright" or name not in PUBLIC["runwright"]:
                            found.append(f"{relative}:{number}: {dotted}")
    return found


def test_the_template_s_project_uses_only_the_engine_s_public_surface() -> None:
    """What the template folder gives a generated repo (the package, its tests, configs, benchmarks; not
    the engine, not the template-only tests) imports only ``runwright`` and ``runwright.testing`` and only
    the names they export, and its YAML names only public engine classes."""
    skip = (post_gen.ENGINE_DIR, post_gen.LICENSES_DIR, *post_gen.TEMPLATE_ONLY_PATHS)
    assert private_engine_uses(TEMPLATE_DIR, skip) == []


def test_the_public_surface_check_finds_each_kind_of_private_use(tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "ok.py").write_text(
        "import runwright\nimport runwright.testing\nfrom runwright import BaseModule, main, __version__\n"
        "from runwright.testing import FAST, rebuilt\nfrom . import runwright\nimport torch.nn\n"
    )
    (tmp_path / "pkg" / "bad.py").write_text(
        "from runwright.cli import main\nimport runwright.runs as runs\nfrom runwright import cli, main\n"
        "from runwright.testing import support\n"
    )
    (tmp_path / "config.yaml").write_text(
        "a:\n  class_path: runwright.schedules.WarmupCosineLR\nb:\n  class_path: runwright.WarmupCosineLR\n"
        "c:\n  class_path: torch.optim.AdamW\n"
    )
    (tmp_path / "engine").mkdir()
    (tmp_path / "engine" / "cli.py").write_text("from runwright.runs import RUN_DIR_ENV\n")
    assert private_engine_uses(tmp_path, ("engine/",)) == [
        "config.yaml:2: runwright.schedules.WarmupCosineLR",
        "pkg/bad.py:1: runwright.cli.main",
        "pkg/bad.py:2: runwright.runs",
        "pkg/bad.py:3: runwright.cli",
        "pkg/bad.py:4: runwright.testing.support",
    ]
    assert len(private_engine_uses(tmp_path)) == 6  # (engine/ checked too)
