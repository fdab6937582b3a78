"""Generate repos from the template with cookiecutter's Python API and check what comes out.

Four option combinations cover each logger, each license, GitHub Actions on and off, git on and off,
short and maximal-length package names. Each generated repo is checked for its files, names, leftover
template markers or ``project`` references, a parsing ``pyproject.toml``, ruff, and a working
``python -m <package> --help`` and ``fit --print_config``; the first one also runs its own test suite.
Subprocesses see a stub ``project`` package that raises on import, so a leftover reference to the
template's package cannot pass by importing the installed template.

(Template-only: the post-gen hook deletes this file from generated repos.)
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import REPO_ROOT

cookiecutter_main = pytest.importorskip("cookiecutter.main")
from cookiecutter.exceptions import FailedHookException  # noqa: E402

COMMON = {"author_name": "Ada Lovelace", "author_email": "ada@example.com", "description": "Acme's models."}
COMBINATIONS: dict[str, dict[str, Any]] = {
    "csv-mit-gha-git": {
        "project_name": "Acme Vision",
        "package_name": "acme_vision",
        "logger": "csv",
        "license": "MIT",
        "python_version": "3.10",
        "github_actions": True,
        "init_git": True,
    },
    "tensorboard-apache-nogha": {
        "project_name": "Board Games",
        "logger": "tensorboard",
        "license": "Apache-2.0",
        "python_version": "3.11",
        "github_actions": False,
        "init_git": False,
    },
    "wandb-bsd-longname-git": {
        "project_name": "Long Name",
        "package_name": "abcdefghij_klmnopqrs",  # the longest name the pre-gen hook allows (20)
        "logger": "wandb",
        "license": "BSD-3-Clause",
        "python_version": "3.12",
        "github_actions": True,
        "init_git": True,
    },
    "csv-none-shortname": {
        "project_name": "CV",
        "package_name": "cv",
        "logger": "csv",
        "license": "none",
        "python_version": "3.10",
        "github_actions": False,
        "init_git": False,
    },
}
#: Logger class names expected in ``fit --print_config`` (first the default logger).
LOGGER_CLASSES = {
    "csv": ["CSVLogger"],
    "tensorboard": ["TensorBoardLogger"],
    "wandb": ["WandbLogger"],
}
#: A reference to the template's package that generation must have rewritten.
LEFTOVER = re.compile(
    r"(?m)^\s*(from|import) project\b|class_path:\s*project\.|-m\s+project\b|[\"'`~]project[./]|\"project\""
)


def bake(output_dir: Path, **answers: Any) -> Path:
    """Generate a repo from the template in ``output_dir`` (no prompts); returns the repo folder."""
    config = output_dir / "cookiecutter-config.yaml"
    config.write_text(
        yaml.safe_dump(
            {"cookiecutters_dir": str(output_dir / "cache"), "replay_dir": str(output_dir / "replay")}
        )
    )
    return Path(
        cookiecutter_main.cookiecutter(
            str(REPO_ROOT),
            no_input=True,
            extra_context={**COMMON, **answers},
            output_dir=str(output_dir / "out"),
            config_file=str(config),
        )
    )


def subprocess_env(repo: Path, tmp: Path) -> dict[str, str]:
    """Environment whose ``PYTHONPATH`` is the generated repo, then a stub ``project`` that raises."""
    stub = tmp / "stub"
    (stub / "project").mkdir(parents=True, exist_ok=True)
    (stub / "project" / "__init__.py").write_text(
        "raise ImportError('leftover reference to the template package `project`')\n"
    )
    env = {key: value for key, value in os.environ.items() if key != "LIGHTNING_TEMPLATE_RUN_DIR"}
    env.update(PYTHONPATH=os.pathsep.join([str(repo), str(stub)]), WANDB_MODE="offline", PYTHONUNBUFFERED="1")
    return env


def run(args: list[str], cwd: Path, env: dict[str, str], timeout: float = 300) -> str:
    """Run ``args``; return stdout, or fail with the whole output."""
    result = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0, f"{args} exited {result.returncode}\n{result.stdout}\n{result.stderr}"
    return result.stdout


@pytest.fixture(scope="module")
def baked(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Every combination of :data:`COMBINATIONS`, generated once for this module."""
    return {name: bake(tmp_path_factory.mktemp(name), **answers) for name, answers in COMBINATIONS.items()}


@pytest.mark.parametrize("name", list(COMBINATIONS))
def test_generated_repo_files_and_names(name: str, baked: dict[str, Path]) -> None:
    tomllib = pytest.importorskip("tomllib")
    answers = {**COMMON, **COMBINATIONS[name]}
    repo = baked[name]
    package = answers.get("package_name", repo.name.replace("-", "_"))
    assert repo.name == re.sub(r"[^a-z0-9]+", "-", answers["project_name"].lower())
    assert (repo / package / "__main__.py").is_file() and not (repo / "project").exists()
    for absent in (
        "cookiecutter.json",
        "hooks",
        "CONTRIBUTING.md",
        ".template_licenses",
        "gitignore.template",
    ):
        assert not (repo / absent).exists(), absent
    assert not list(repo.glob("tests/test_template_*.py")) and not list(repo.rglob("__pycache__"))
    assert (repo / ".gitignore").is_file() and (repo / ".pre-commit-config.yaml").is_file()
    assert (repo / "requirements" / "constraints.txt").is_file() and (
        repo / "requirements" / "lowest.txt"
    ).is_file()

    files = [p for p in repo.rglob("*") if p.is_file() and ".git" not in p.relative_to(repo).parts]
    for path in files:
        text = path.read_text(encoding="utf-8")
        if path.parent.name == "workflows":
            text = re.sub(r"\$\{\{.*?\}\}", "", text)  # GitHub expressions survive, by design
        assert "{{" not in text and "{%" not in text, f"template marker left in {path}"
        assert not LEFTOVER.search(text), f"{path}: {LEFTOVER.search(text)}"

    pyproject = tomllib.loads((repo / "pyproject.toml").read_text())
    assert pyproject["project"]["name"] == repo.name
    assert pyproject["project"]["scripts"] == {package: f"{package}.cli:main"}
    assert pyproject["project"]["requires-python"] == f">={answers['python_version']}"
    assert pyproject["tool"]["mypy"]["files"] == [package, "benchmarks"]
    license_file = repo / "LICENSE"
    if answers["license"] == "none":
        assert not license_file.exists() and "license" not in pyproject["project"]
    else:
        assert pyproject["project"]["license"] == {"text": answers["license"]}
        first_lines = license_file.read_text()[:600]
        title = {"MIT": "MIT License", "Apache-2.0": "Apache License", "BSD-3-Clause": "BSD 3-Clause License"}
        assert title[answers["license"]] in first_lines
        assert "[yyyy]" not in license_file.read_text()
    readme = (repo / "README.md").read_text()
    assert readme.startswith(f"# {answers['project_name']}\n\n{answers['description']}")
    assert "<!--" not in readme and ("GitHub Actions" in readme) == answers["github_actions"]

    workflow = repo / ".github" / "workflows" / "ci.yml"
    assert workflow.is_file() == answers["github_actions"]
    assert not (repo / ".github" / "workflows" / "template.yml").exists()
    if answers["github_actions"]:
        jobs = yaml.safe_load(workflow.read_text())["jobs"]
        matrix = jobs["tests"]["strategy"]["matrix"]["python-version"]
        assert matrix[0] == answers["python_version"] and matrix[-1] == "3.12"
        assert "${{ matrix.python-version }}" in workflow.read_text()

    if answers["init_git"] and shutil.which("git"):
        git = ["git", "-C", str(repo)]
        assert (
            subprocess.run([*git, "rev-list", "--count", "HEAD"], capture_output=True, text=True).stdout
            == "1\n"
        )
        assert subprocess.run([*git, "status", "--porcelain"], capture_output=True, text=True).stdout == ""
    elif not answers["init_git"]:
        assert not (repo / ".git").exists()


@pytest.mark.parametrize("name", list(COMBINATIONS))
def test_generated_repo_lints_and_its_cli_starts(name: str, baked: dict[str, Path], tmp_path: Path) -> None:
    """ruff passes as generated; ``python -m <package> --help`` and ``fit --print_config`` work from an
    empty directory, and the chosen logger is the default."""
    answers = COMBINATIONS[name]
    repo = baked[name]
    package = answers.get("package_name", repo.name.replace("-", "_"))
    env = subprocess_env(repo, tmp_path)
    run([sys.executable, "-m", "ruff", "check", "--no-cache", "."], cwd=repo, env=env)
    run([sys.executable, "-m", "ruff", "format", "--check", "--no-cache", "."], cwd=repo, env=env)
    if name == "csv-mit-gha-git":
        return  # its own test suite (below) runs --help and --print_config
    workdir = tmp_path / "empty"
    workdir.mkdir()
    script = (
        f"from {package}.cli import main\n"
        "try:\n    main(['--help'])\nexcept SystemExit as exit:\n    assert exit.code == 0, exit.code\n"
        "print('=== print_config ===')\nmain(['fit', '--print_config'])\n"
    )
    help_text, printed = run([sys.executable, "-c", script], cwd=workdir, env=env).split(
        "=== print_config ==="
    )
    assert f"python -m {package}" in help_text and "fit" in help_text
    config = yaml.safe_load(printed)
    loggers = config["trainer"]["logger"]
    loggers = loggers if isinstance(loggers, list) else [loggers]
    assert [item["class_path"].rsplit(".", 1)[-1] for item in loggers] == LOGGER_CLASSES[answers["logger"]]
    assert config["model"]["class_path"] == f"{package}.models.ImageClassifier"
    assert not (workdir / "logs").exists()


def test_generated_repo_passes_its_own_test_suite(baked: dict[str, Path], tmp_path: Path) -> None:
    """The generated repo's tests (without the one long end-to-end training run) pass in a subprocess."""
    repo = baked["csv-mit-gha-git"]
    env = subprocess_env(repo, tmp_path)
    output = run(
        [sys.executable, "-m", "pytest", "-q", "-m", "not slow", "-p", "no:cacheprovider", "-W", "ignore"],
        cwd=repo,
        env=env,
        timeout=600,
    )
    assert re.search(r"\b\d+ passed\b", output) and " failed" not in output, output[-2000:]


@pytest.mark.parametrize(
    ("answers", "message"),
    [
        ({"package_name": "torch"}, "would shadow the dependency 'torch'"),
        ({"package_name": "Acme-Vision"}, "not a valid Python package name"),
        ({"package_name": "import"}, "is a Python keyword"),
        ({"author_email": "ada.example.com"}, "is not an email address"),
    ],
)
def test_bad_answers_stop_generation_and_leave_nothing(
    answers: dict[str, str], message: str, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(FailedHookException):
        bake(tmp_path, project_name="Acme Vision", init_git=False, **answers)
    assert message in capfd.readouterr().err
    assert list((tmp_path / "out").iterdir()) == []


def _git(cwd: Path, *args: str) -> str:
    command = ["git", "-c", "user.name=Test", "-c", "user.email=test@example.com", *args]
    return subprocess.run(command, cwd=cwd, check=True, capture_output=True, text=True).stdout


def _snapshot_template(destination: Path) -> None:
    """Copy the template's tracked files as they are on disk (links kept) into a new one-commit repo."""
    tracked = _git(REPO_ROOT, "ls-files", "-z").split("\0")
    for relative in filter(None, tracked):
        source, target = REPO_ROOT / relative, destination / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_symlink():
            target.symlink_to(os.readlink(source))
        elif source.is_file():
            shutil.copy2(source, target)
    _git(destination, "init", "--quiet")
    _git(destination, "add", "--all")
    _git(destination, "commit", "--quiet", "-m", "template")


def test_cruft_create_then_update_brings_template_changes_in_renamed(tmp_path: Path) -> None:
    """``cruft create`` generates the same repo (cruft runs the hooks too), and after a change to the
    template ``cruft update`` applies it with the package name already rewritten."""
    cruft = pytest.importorskip("cruft")
    if shutil.which("git") is None or not (REPO_ROOT / ".git").exists():
        pytest.skip("needs git and a git checkout of the template")
    template = tmp_path / "template"
    _snapshot_template(template)
    repo = cruft.create(
        str(template),
        output_dir=tmp_path / "out",
        extra_context={**COMMON, "project_name": "Acme Vision", "logger": "tensorboard", "init_git": True},
        no_input=True,
    )
    assert (repo / "acme_vision" / "cli.py").is_file() and (repo / ".cruft.json").is_file()
    assert not (repo / ".git").exists(), "under cruft the hook leaves `git init` to the user"
    _git(repo, "init", "--quiet")
    _git(repo, "add", "--all")
    _git(repo, "commit", "--quiet", "-m", "generated")

    runs = template / "project" / "runs.py"
    runs.write_text(runs.read_text() + '\n#: Added upstream.\nUPSTREAM = "project.runs"\n')
    _git(template, "commit", "--quiet", "--all", "-m", "upstream change")
    assert cruft.update(repo, skip_apply_ask=True)
    assert 'UPSTREAM = "acme_vision.runs"' in (repo / "acme_vision" / "runs.py").read_text()
