"""Generate repos from the template with cookiecutter's Python API and check what comes out.

Four option combinations cover each value of every choice (logger, license, python_version,
examples, engine_source, GitHub Actions, git) and short and maximal-length package names. Each
generated repo is checked cheaply: files, names, leftover template markers or ``project`` references,
wording that contradicts its options, links that resolve, no empty folders, a parsing
``pyproject.toml``, ruff, ``--help`` and one short fit. The complete suite (ruff, mypy, every test,
slow ones included) of one repo per logger value, the tensorboard one minimal, runs under the
``generated_suite`` marker (``make test-generated``; the template's CI, ``.ci/run``, runs the
tensorboard/minimal one). The slow tests install generated repos into new environments: against the
engine's wheel, and against a newer engine built from a changed copy. Subprocesses see a stub
``project`` package that raises on import, so a leftover reference to the template's package cannot
pass by importing the installed template.

(Template-only: the post-gen hook deletes this file from generated repos.)
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from runwright import __version__ as ENGINE_VERSION
from runwright.testing import FAST
from support import REPO_ROOT
from test_template_hooks import UNTRACKED, files_of, git, post_gen, private_engine_uses, snapshot_template

cookiecutter_main = pytest.importorskip("cookiecutter.main")
from cookiecutter.exceptions import FailedHookException  # noqa: E402

COMMON = {"author_name": "Ada Lovelace", "author_email": "ada@example.com", "description": "Acme's models."}
COMBINATIONS: dict[str, dict[str, Any]] = {
    "csv-full-mit-gha-git": {
        "project_name": "Acme Vision",
        "package_name": "acme_vision",
        "logger": "csv",
        "license": "MIT",
        "python_version": "3.10",
        "github_actions": True,
        "init_git": True,
        "examples": "full",
        "engine_source": "template",
    },
    "tensorboard-minimal-apache-nogha": {
        "project_name": "Board Games",
        "logger": "tensorboard",
        "license": "Apache-2.0",
        "python_version": "3.10",  # (the template's: its mypy cache fits, see seed_mypy_cache)
        "github_actions": False,
        "init_git": False,
        "examples": "minimal",
        "engine_source": "template",
    },
    "wandb-full-bsd-longname-git": {
        "project_name": "Long Name",
        "package_name": "abcdefghij_klmnopqrs",  # the longest name the pre-gen hook allows (20)
        "logger": "wandb",
        "license": "BSD-3-Clause",
        "python_version": "3.12",
        "github_actions": True,
        "init_git": True,
        "examples": "full",
        "engine_source": "copy",
    },
    "csv-minimal-none-shortname": {
        "project_name": "CV",
        "package_name": "cv",
        "logger": "csv",
        "license": "none",
        "python_version": "3.11",
        "github_actions": False,
        "init_git": False,
        "examples": "minimal",
        "engine_source": "index",
    },
}
#: Logger class names expected in ``fit --print_config`` (first the default logger).
LOGGER_CLASSES = {
    "csv": ["CSVLogger"],
    "tensorboard": ["TensorBoardLogger"],
    "wandb": ["WandbLogger"],
}
#: The engine's range in the template's pyproject.toml (one minor release), which generated repos get.
ENGINE_RANGE = re.search(
    r'"runwright\[sweep,plots,export\](>=[^"]+)"', (REPO_ROOT / "pyproject.toml").read_text()
)[1]  # type: ignore[index]
#: The engine's own files in a generated repo (a copy in ``engine/``, its manual in ``docs/runwright/``):
#: the engine's text, not renamed and not about the repo's options.
ENGINE_FILES = ("engine/", post_gen.MANUAL_FOLDER)
#: A reference to the template's package that generation must have rewritten.
LEFTOVER = re.compile(
    r"(?m)^\s*(from|import) project\b|class_path:\s*project\.|-m\s+project\b|[\"'`~]project[./]|\"project\""
)


def bake(output_dir: Path, template: str = str(REPO_ROOT), **answers: Any) -> Path:
    """Generate a repo from ``template`` in ``output_dir`` (no prompts); returns the repo folder."""
    config = output_dir / "cookiecutter-config.yaml"
    config.write_text(
        yaml.safe_dump(
            {"cookiecutters_dir": str(output_dir / "cache"), "replay_dir": str(output_dir / "replay")}
        )
    )
    return Path(
        cookiecutter_main.cookiecutter(
            template,
            no_input=True,
            extra_context={**COMMON, **answers},
            output_dir=str(output_dir / "out"),
            config_file=str(config),
        )
    )


def subprocess_env(repo: Path, tmp: Path) -> dict[str, str]:
    """Environment whose ``PYTHONPATH`` is the generated repo (its copied engine first, where it has
    one), then a stub ``project`` that raises."""
    stub = tmp / "stub"
    (stub / "project").mkdir(parents=True, exist_ok=True)
    (stub / "project" / "__init__.py").write_text(
        "raise ImportError('leftover reference to the template package `project`')\n"
    )
    env = {key: value for key, value in os.environ.items() if not key.endswith("_RUN_DIR")}
    paths = [*([str(repo / "engine" / "src")] if (repo / "engine").is_dir() else []), str(repo), str(stub)]
    env.update(PYTHONPATH=os.pathsep.join(paths), WANDB_MODE="offline", PYTHONUNBUFFERED="1")
    return env


def run(args: list[str], cwd: Path, env: dict[str, str], timeout: float = 300) -> str:
    """Run ``args``; return stdout, or fail with the whole output."""
    result = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0, f"{args} exited {result.returncode}\n{result.stdout}\n{result.stderr}"
    return result.stdout


def seed_mypy_cache(env: dict[str, str], tmp_path: Path, seed: Path) -> None:
    """Point mypy at a cache folder of its own in ``tmp_path`` (``MYPY_CACHE_DIR`` in ``env``), a copy of
    ``seed``, the cache that the template's ``make typecheck`` left, where there is one. mypy takes from
    it only modules checked with the same options whose files' contents (hashes) are unchanged, and
    checks the rest: the same result, without re-reading torch and Lightning (about 20 CPU-s a run)."""
    cache = tmp_path / "mypy_cache"
    if seed.is_dir():
        shutil.copytree(seed, cache)
    env["MYPY_CACHE_DIR"] = str(cache)


@pytest.fixture(scope="module")
def baked(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Every combination of :data:`COMBINATIONS` by name, generated once for this module when a test first
    asks for it (``make test-generated SUITE=...`` needs one)."""

    class Baked(dict[str, Path]):
        def __missing__(self, name: str) -> Path:
            self[name] = bake(tmp_path_factory.mktemp(name), **COMBINATIONS[name])
            return self[name]

    return Baked()


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

    files = [
        p
        for p in repo.rglob("*")
        if p.is_file()
        and ".git" not in p.parts
        and p.suffix != ".whl"
        and not p.relative_to(repo).as_posix().startswith(ENGINE_FILES)
    ]
    for path in files:
        text = path.read_text(encoding="utf-8")
        if path.parent.name == "workflows":
            text = re.sub(r"\$\{\{.*?\}\}", "", text)  # GitHub expressions survive, by design
        assert "{{" not in text and "{%" not in text, f"template marker left in {path}"
        assert not LEFTOVER.search(text), f"{path}: {LEFTOVER.search(text)}"

    pyproject = tomllib.loads((repo / "pyproject.toml").read_text())
    assert pyproject["project"]["name"] == repo.name
    assert pyproject["project"]["scripts"] == {package: f"{package}.__main__:main"}
    assert pyproject["project"]["requires-python"] == f">={answers['python_version']}"
    full = answers["examples"] == "full"
    assert pyproject["tool"]["mypy"]["files"] == [package, *(["benchmarks"] if full else [])]
    assert pyproject["tool"]["setuptools"]["package-data"] == {package: ["configs/*.yaml"]}
    # the engine: a dependency by version, from where requirements/engine.txt says (or copied in)
    dependencies = pyproject["project"]["dependencies"]
    assert dependencies[0] == f"runwright{'[sweep,plots,export]' if full else ''}{ENGINE_RANGE}"
    assert any(d.startswith("wandb") for d in dependencies) == (answers["logger"] == "wandb")
    assert any(d.startswith("tensorboard") for d in dependencies) == (answers["logger"] == "tensorboard")
    assert not (repo / package / "engine").exists() and not (repo / ".template_engine").exists()
    assert (repo / "engine").is_dir() == (answers["engine_source"] == "copy")
    source = [
        line for line in (repo / "requirements" / "engine.txt").read_text().splitlines() if line[:1] != "#"
    ]
    wheel = f"runwright-{ENGINE_VERSION}-py3-none-any.whl"  # (generated from this clone: its engine, built)
    expected = {
        "template": [f"./requirements/{wheel}"],
        "index": ["runwright"],
        "copy": ["-e ./engine[test]"],
    }
    assert source == expected[answers["engine_source"]]
    built = answers["engine_source"] == "template"
    assert [p.name for p in (repo / "requirements").glob("*.whl")] == ([wheel] if built else [])
    manual = [p.name for p in (repo / post_gen.MANUAL_FOLDER).glob("*")]
    assert sorted(manual) == (["CHANGELOG.md", "README.md"] if built else [])
    if answers["engine_source"] == "copy":  # the engine's own distribution, not renamed
        assert (repo / "engine" / "src" / "runwright" / "cli.py").is_file()
        assert (repo / "engine" / "tests" / "fixture_task" / "__init__.py").is_file()
        assert not list((repo / "engine").rglob("*.egg-info"))
    for relative in post_gen.FULL_EXAMPLES_ONLY:
        assert (repo / relative.replace("project/", f"{package}/")).exists() == full, relative
    logger_yaml = (repo / package / "configs" / "logger.yaml").read_text()
    assert logger_yaml == (repo / "configs" / "logger" / f"{answers['logger']}.yaml").read_text()
    license_file = repo / "LICENSE"
    if answers["license"] == "none":
        assert not license_file.exists() and "license" not in pyproject["project"]
    else:
        assert pyproject["project"]["license"] == answers["license"]  # an SPDX expression
        first_lines = license_file.read_text()[:600]
        title = {"MIT": "MIT License", "Apache-2.0": "Apache License", "BSD-3-Clause": "BSD 3-Clause License"}
        assert title[answers["license"]] in first_lines
        assert "[yyyy]" not in license_file.read_text()
    readme = (repo / "README.md").read_text()
    assert readme.startswith(f"# {answers['project_name']}\n\n{answers['description']}")
    assert "<!--" not in readme and ("GitHub Actions" in readme) == answers["github_actions"]

    # the repo's CI script runs only targets its Makefile has (the template's own ones are dropped)
    makefile = (repo / "Makefile").read_text().replace("$(VENV)", ".venv")
    for target in re.findall(r"(?m)^make (\S+)", (repo / ".ci" / "run").read_text()):
        assert re.search(rf"(?m)^{re.escape(target)}:", makefile), f".ci/run: no Makefile target {target}"

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


def package_of(name: str, repo: Path) -> str:
    return str(COMBINATIONS[name].get("package_name", repo.name.replace("-", "_")))


def removed_by_minimal() -> list[str]:
    """What ``examples=minimal`` leaves out, as text that must not appear in such a repo: the paths
    (folders with a trailing ``/``), the classes they define, and the diabetes task by name."""
    names = ["diabetes"]
    for relative in post_gen.FULL_EXAMPLES_ONLY:
        path = REPO_ROOT / relative
        names.append(relative.removeprefix("project/") + ("/" if path.is_dir() else ""))
        if path.suffix == ".py":
            names += re.findall(r"(?m)^class (\w+)", path.read_text())
    return names


#: Text about the template itself, and template markers that generation must have removed.
ABOUT_THE_TEMPLATE = r"(?i)\bthis template\b|\bthe template's\b|developed on|seeds/"
MARKERS = r"template-only|<!-- if |endif -->|LIGHTNING_TEMPLATE|generated_suite|test-generated"


def contradictions(repo: Path, answers: dict[str, Any]) -> list[str]:
    """Lines of the generated repo that contradict its options or talk about the template."""
    patterns = [MARKERS]
    loggers = {"wandb": r"W&B|WandbLogger|wandb", "tensorboard": r"TensorBoard\w*", "csv": r"CSVLogger"}
    for logger, words in loggers.items():
        if logger != answers["logger"]:  # another logger called the default
            patterns.append(
                rf"(?i)default logger\W+(is\W+)?[^.|]*?\b(?:{words})\b|\b(?:{words})\b\W*\(the default"
            )
    if answers["license"] != "MIT":
        patterns.append(r"\bMIT\b")
    minimal = [] if answers["examples"] == "full" else removed_by_minimal()
    found = []
    for path in sorted(p for p in repo.rglob("*") if p.is_file() and ".git" not in p.parts):
        relative = path.relative_to(repo).as_posix()
        if relative == "LICENSE":
            continue
        # (a copied engine and the engine's manual are the engine's text as released, with its own license:
        # only template markers count there)
        if relative.startswith(ENGINE_FILES):
            checks, names = [MARKERS], []
        elif relative.endswith(".whl"):
            continue
        else:
            checks, names = [ABOUT_THE_TEMPLATE, *patterns], minimal
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            hits = [p for p in checks if re.search(p, line)]
            hits += [name for name in names if name.lower() in line.lower()]
            if hits:
                found.append(f"{relative}:{number}: {line.strip()[:120]}  <- {hits}")
    return found


@pytest.mark.parametrize("name", list(COMBINATIONS))
def test_generated_repo_has_no_wording_against_its_options(name: str, baked: dict[str, Path]) -> None:
    """No text about the template, no other logger called the default, no other license, and in a
    minimal repo no mention of what it left out (the diabetes task, the torchvision DataModules,
    benchmarks/, their classes and files)."""
    found = contradictions(baked[name], {**COMMON, **COMBINATIONS[name]})
    assert not found, "\n".join(found)


def test_the_wording_check_finds_what_it_looks_for(tmp_path: Path) -> None:
    """A file with each kind of contradiction: the check names exactly those lines."""
    (tmp_path / "README.md").write_text(
        "Built with this template.\nThe default logger is `WandbLogger`.\nMIT licensed.\n"
        "See configs/experiment/diabetes.yaml and `TabularRegressor`.\nW&B, TensorBoard or CSV.\n"
    )
    answers = {"logger": "csv", "license": "none", "examples": "minimal"}
    assert [line.split(":")[1] for line in contradictions(tmp_path, answers)] == ["1", "2", "3", "4"]
    answers = {"logger": "wandb", "license": "MIT", "examples": "full"}
    assert [line.split(":")[1] for line in contradictions(tmp_path, answers)] == ["1"]


#: A Markdown link target (inline links; images too), without its title.
LINK = re.compile(r"\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


@pytest.mark.parametrize("name", list(COMBINATIONS))
def test_every_relative_link_in_a_generated_markdown_file_resolves(name: str, baked: dict[str, Path]) -> None:
    repo = baked[name]
    broken = []
    for path in sorted(p for p in repo.rglob("*.md") if ".git" not in p.parts):
        for target in LINK.findall(path.read_text(encoding="utf-8")):
            if re.match(r"[a-z][a-z+.-]*:", target) or target.startswith("#"):
                continue  # an absolute address, or a section of the same file
            file = (path.parent / target.split("#", 1)[0]).resolve()
            if not file.exists():
                broken.append(f"{path.relative_to(repo)}: {target}")
    assert not broken, "\n".join(broken)


@pytest.mark.parametrize("name", list(COMBINATIONS))
def test_a_generated_repo_has_no_empty_folder_and_no_example_tags_in_its_presets(
    name: str, baked: dict[str, Path]
) -> None:
    repo = baked[name]
    empty = [p for p in repo.rglob("*") if p.is_dir() and ".git" not in p.parts and not any(p.iterdir())]
    assert not empty, empty
    for preset in (repo / "configs" / "logger").glob("*.yaml"):
        logger = yaml.safe_load(preset.read_text())["trainer"]["logger"]
        assert not (logger.get("dict_kwargs") or {}).get("tags"), preset


def test_a_generated_repo_links_the_engine_s_manual_where_it_comes_from(baked: dict[str, Path]) -> None:
    """The README's links into the engine point at the template's folder (generated from it here), a
    package index's page, or the repo's own ``engine/``; the README says in one line where it comes from."""
    expected = {
        "template": "docs/runwright/README.md",  # (generated from a local clone: a copy of its manual)
        "index": "https://pypi.org/project/runwright/",
        "copy": "engine/README.md",
    }
    for name, answers in COMBINATIONS.items():
        readme = (baked[name] / "README.md").read_text()
        link = rf"\[the engine's\s+README\]\({re.escape(expected[answers['engine_source']])}\)"
        assert re.search(link, readme), name
        where = re.search(
            r"- \*\*Where the engine comes from:\*\* (.*?), as\s+`requirements/engine.txt` says", readme, re.S
        )
        said = post_gen.engine_source(
            {**answers, "_template": str(REPO_ROOT), "_repo_dir": str(REPO_ROOT)}
        ).where
        assert where and where[1] == said, name


def machine_paths(repo: Path, *folders: Path) -> list[str]:
    """The files of ``repo`` (not ``.git``; a wheel's members included) that hold the path of one of
    ``folders`` (as given or resolved; a ``file://`` address holds it too)."""
    needles = {str(path).encode() for folder in folders for path in (folder, folder.resolve())}
    found = []
    for path in sorted(p for p in repo.rglob("*") if p.is_file() and ".git" not in p.relative_to(repo).parts):
        contents = [path.read_bytes()]
        if path.suffix == ".whl":
            with zipfile.ZipFile(path) as wheel:
                contents += [wheel.read(name) for name in wheel.namelist()]
        if any(needle in content for needle in needles for content in contents):
            found.append(path.relative_to(repo).as_posix())
    return found


@pytest.mark.parametrize("name", list(COMBINATIONS))
def test_a_generated_repo_names_no_folder_of_the_machine_that_generated_it(
    name: str, baked: dict[str, Path]
) -> None:
    """Neither the template's folder nor the one the repo was generated into is in any file of it, for
    every logger, examples and engine_source answer: pushed elsewhere, the repo installs and its links
    work."""
    repo = baked[name]
    assert machine_paths(repo, REPO_ROOT, repo.parent) == []


def test_the_machine_path_check_finds_a_path_in_a_file_and_in_a_wheel(tmp_path: Path) -> None:
    (tmp_path / "README.md").write_text(f"[manual]({(REPO_ROOT / 'engine').as_uri()}/README.md)\n")
    with zipfile.ZipFile(tmp_path / "x-1.0-py3-none-any.whl", "w", zipfile.ZIP_DEFLATED) as wheel:
        wheel.writestr("x/__init__.py", f"ROOT = {str(REPO_ROOT)!r}\n" * 20)
    (tmp_path / "clean.txt").write_text("nothing here\n")
    assert machine_paths(tmp_path, REPO_ROOT) == ["README.md", "x-1.0-py3-none-any.whl"]


#: The combination whose lint-start-fit check is in the fast suite (``make test``); the others are
#: marked slow (``make test-all``, CI), which keeps ``make test`` within 5 minutes on 2 cores.
FAST_COMBINATION = "wandb-full-bsd-longname-git"


@pytest.mark.parametrize(
    "name",
    [n if n == FAST_COMBINATION else pytest.param(n, marks=pytest.mark.slow) for n in COMBINATIONS],
)
def test_generated_repo_lints_starts_and_fits(name: str, baked: dict[str, Path], tmp_path: Path) -> None:
    """ruff passes as generated; from an empty directory ``python -m <package> --help`` works and one
    short ``fit`` writes a run folder with its metrics and checkpoints, with the chosen logger."""
    answers = COMBINATIONS[name]
    repo = baked[name]
    package = package_of(name, repo)
    env = subprocess_env(repo, tmp_path)
    run([sys.executable, "-m", "ruff", "check", "--no-cache", "."], cwd=repo, env=env)
    run([sys.executable, "-m", "ruff", "format", "--check", "--no-cache", "."], cwd=repo, env=env)
    workdir = tmp_path / "empty"
    workdir.mkdir()
    env["WANDB_MODE"] = "disabled"
    script = (  # (one interpreter for both: each start-up imports torch and Lightning)
        "from runwright import main\n"
        f"try:\n    main(['--help'], package={package!r})\nexcept SystemExit as exit:\n"
        "    assert exit.code == 0, exit.code\n"
        f"print('=== fit ===')\nmain(['fit', *{FAST!r}], package={package!r})\n"
    )
    help_text = run([sys.executable, "-c", script], cwd=workdir, env=env).split("=== fit ===")[0]
    assert f"python -m {package}" in help_text and "fit" in help_text
    (run_dir,) = (workdir / "logs").iterdir()
    config = yaml.safe_load((run_dir / "config.yaml").read_text())
    assert config["model"]["class_path"].startswith(f"{package}.models.")
    assert (run_dir / "metrics.csv").is_file()
    assert {p.name for p in (run_dir / "checkpoints").iterdir()} == {"best.ckpt", "last.ckpt"}
    loggers = config["trainer"]["logger"]
    loggers = loggers if isinstance(loggers, list) else [loggers]
    assert loggers[0]["class_path"].rsplit(".", 1)[-1] == LOGGER_CLASSES[answers["logger"]][0]
    assert bool(list(run_dir.glob("events.out.tfevents.*"))) == (answers["logger"] == "tensorboard")


@pytest.mark.parametrize("name", list(COMBINATIONS))
def test_a_generated_repo_uses_only_the_engine_s_public_surface(name: str, baked: dict[str, Path]) -> None:
    """Every Python file of the repo (its package, tests, benchmarks; an engine copied in excepted)
    imports only ``runwright`` and ``runwright.testing``, and only names they export; its YAML names only
    public engine classes."""
    copied = COMBINATIONS[name]["engine_source"] == "copy"
    assert private_engine_uses(baked[name], (f"{post_gen.ENGINE_FOLDER}/",) if copied else ()) == []


#: One complete suite per logger value, the tensorboard one a minimal repo: ``make test-generated``
#: runs all three, ``.ci/run`` the tensorboard one (``make test-generated SUITE=tensorboard-minimal``).
SUITES = ["csv-full-mit-gha-git", "tensorboard-minimal-apache-nogha", "wandb-full-bsd-longname-git"]


@pytest.mark.slow
@pytest.mark.generated_suite
@pytest.mark.parametrize("name", SUITES)
def test_generated_repo_passes_its_complete_suite(name: str, baked: dict[str, Path], tmp_path: Path) -> None:
    """The generated repo's own checks as its CI runs them: ruff (above), mypy and every test, the
    slow ones included."""
    repo = baked[name]
    env = subprocess_env(repo, tmp_path)
    seed_mypy_cache(env, tmp_path, REPO_ROOT / ".mypy_cache")
    run([sys.executable, "-m", "mypy"], cwd=repo, env=env, timeout=900)
    output = run(
        [sys.executable, "-m", "pytest", "-q", "-n", "2", "-p", "no:cacheprovider", "-W", "ignore"],
        cwd=repo,
        env=env,
        timeout=3600,
    )
    assert re.search(r"\b\d+ passed\b", output) and " failed" not in output, output[-2000:]


@pytest.mark.slow
def test_a_repo_with_the_engine_copied_in_checks_and_tests_that_copy(
    baked: dict[str, Path], tmp_path: Path
) -> None:
    """``engine_source=copy``: the repo's ``engine/`` is the engine that runs (not the template's), its
    strict mypy passes, and its own tests run from there (a representative part: the CLI, a plain
    LightningModule)."""
    name = next(n for n, answers in COMBINATIONS.items() if answers["engine_source"] == "copy")
    repo = baked[name]
    env = subprocess_env(repo, tmp_path)
    found = "import importlib.util; print(importlib.util.find_spec('runwright').origin)"  # (what imports)
    used = run([sys.executable, "-c", found], cwd=tmp_path, env=env)
    assert Path(used.strip()).is_relative_to(repo / "engine")
    seed_mypy_cache(env, tmp_path, REPO_ROOT / "engine" / ".mypy_cache")
    run([sys.executable, "-m", "mypy"], cwd=repo / "engine", env=env, timeout=900)
    output = run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "tests/test_cli.py",
            "tests/test_plain_module.py",
        ],
        cwd=repo / "engine",
        env=env,
        timeout=1800,
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


def test_cruft_create_then_update_brings_template_changes_in_renamed(tmp_path: Path) -> None:
    """``cruft create`` generates the same repo (cruft runs the hooks too), and after a change to the
    template ``cruft update`` applies it with the package name already rewritten."""
    cruft = pytest.importorskip("cruft")
    if shutil.which("git") is None or not (REPO_ROOT / ".git").exists():
        pytest.skip("needs git and a git checkout of the template")
    template = tmp_path / "template"
    snapshot_template(template)
    repo = cruft.create(
        str(template),
        output_dir=tmp_path / "out",
        extra_context={**COMMON, "project_name": "Acme Vision", "logger": "tensorboard", "init_git": True},
        no_input=True,
    )
    assert (repo / "acme_vision" / "__main__.py").is_file() and (repo / ".cruft.json").is_file()
    commit = json.loads((repo / ".cruft.json").read_text())["commit"]
    engine = (repo / "requirements" / "engine.txt").read_text().splitlines()[-1]
    assert engine == f"./requirements/runwright-{ENGINE_VERSION}-py3-none-any.whl"
    assert commit[:12] in (repo / "README.md").read_text()
    assert machine_paths(repo, template) == [".cruft.json"]  # (cruft's own record of the template)
    assert not (repo / ".git").exists(), "under cruft the hook leaves `git init` to the user"
    git(repo, "init", "--quiet")
    git(repo, "add", "--all")
    git(repo, "commit", "--quiet", "-m", "generated")

    models = template / "project" / "models" / "__init__.py"
    models.write_text(models.read_text() + '\n#: Added upstream.\nUPSTREAM = "project.models.classifier"\n')
    git(template, "commit", "--quiet", "--all", "-m", "upstream change")
    assert cruft.update(repo, skip_apply_ask=True)
    updated = (repo / "acme_vision" / "models" / "__init__.py").read_text()
    assert 'UPSTREAM = "acme_vision.models.classifier"' in updated
    wheel = f"requirements/runwright-{ENGINE_VERSION}-py3-none-any.whl"
    assert git(repo, "status", "--porcelain", wheel) == ""  # (the same engine: the same bytes)


def test_a_local_clone_with_files_of_one_s_own_generates_the_same_repo(
    baked: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``cd work && cookiecutter template`` (a relative path) from a clone with untracked and ignored
    files in the folders a repo gets (a scratch module, a notebook, run logs, the engine's venv, build
    and egg-info): the repo has the files of the one generated from this checkout, and so does its
    first commit, the copied engine included."""
    name = "wandb-full-bsd-longname-git"  # (the engine copied in, a first commit)
    template = tmp_path / "work" / "template"
    snapshot_template(template)
    for relative in UNTRACKED:
        (template / relative).parent.mkdir(parents=True, exist_ok=True)
        (template / relative).write_text("untracked\n")
    monkeypatch.chdir(tmp_path / "work")
    monkeypatch.setenv("PWD", str(tmp_path / "work"))  # (what a shell sets)
    repo = bake(tmp_path, "template", **COMBINATIONS[name])
    # (the reference's first commit: other tests run commands in the shared reference repo)
    generated = set(git(baked[name], "ls-files", "-z").split("\0")) - {""}
    assert files_of(repo) == generated
    assert set(git(repo, "ls-files", "-z").split("\0")) - {""} == generated


def test_cookiecutter_from_a_git_url_generates_the_same_repo(tmp_path: Path) -> None:
    """``cookiecutter <git URL>`` (as the README shows; here a ``git+file://`` URL of a one-commit copy
    of the template) clones the template with its symlink folder and generates the repo; a ``file://``
    URL is a folder of this machine, so the engine comes as a wheel built into the repo. The direct
    reference the hook writes for a remote URL installs too (pip clones the URL at the commit)."""
    if shutil.which("git") is None or not (REPO_ROOT / ".git").exists():
        pytest.skip("needs git and a git checkout of the template")
    template = tmp_path / "template"
    snapshot_template(template)
    config = tmp_path / "cookiecutter-config.yaml"
    config.write_text(yaml.safe_dump({"cookiecutters_dir": str(tmp_path / "clones")}))
    repo = Path(
        cookiecutter_main.cookiecutter(
            f"git+file://{template}",
            no_input=True,
            extra_context={**COMMON, "project_name": "Acme Vision", "examples": "minimal", "init_git": False},
            output_dir=str(tmp_path / "out"),
            config_file=str(config),
        )
    )
    assert (repo / "acme_vision" / "__main__.py").is_file() and (repo / "acme_vision" / "configs").is_dir()
    assert not (repo / "benchmarks").exists() and not (repo / "hooks").exists()
    assert not (repo / "engine").exists() and not (repo / ".template_engine").exists()
    assert (tmp_path / "clones" / "template" / "{{cookiecutter.project_slug}}" / "project").is_symlink()
    commit = git(template, "rev-parse", "HEAD").strip()
    engine = (repo / "requirements" / "engine.txt").read_text().splitlines()[-1]
    assert engine == f"./requirements/runwright-{ENGINE_VERSION}-py3-none-any.whl"
    assert machine_paths(repo, template, tmp_path / "clones") == []
    # pip installs the engine from that line, and from the line of a remote URL (its form, with this
    # file:// URL: a clone at the commit, offline)
    remote = f"runwright @ {post_gen.pip_url(f'file://{template}')}@{commit}#subdirectory=engine"
    pip = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation"]
    for number, line in enumerate((engine, remote)):
        target = tmp_path / f"site{number}"
        run([*pip, "--target", str(target), line], cwd=repo, env=dict(os.environ), timeout=600)
        assert (target / "runwright" / "cli.py").is_file()


#: A task written as Lightning's docs write one (no class of the template), for a repo whose example
#: was deleted: ``<package>/models/lit_model.py`` and ``<package>/data/random_data.py``.
OWN_MODEL = '''"""My model: a LightningModule as Lightning's docs write one."""

import lightning as L
import torch
from torch import nn
from torch.nn import functional as F


class LitModel(L.LightningModule):
    """An MLP classifier of 16 features into 3 classes."""

    def __init__(self, hidden: int = 32, lr: float = 0.01):
        super().__init__()
        self.save_hyperparameters()
        self.net = nn.Sequential(nn.Linear(16, hidden), nn.ReLU(), nn.Linear(hidden, 3))

    def forward(self, x):
        return self.net(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self(x), y)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        logits = self(x)
        self.log("val_loss", F.cross_entropy(logits, y))
        self.log("val_acc", (logits.argmax(dim=1) == y).float().mean())

    def test_step(self, batch, batch_idx):
        x, y = batch
        self.log("test_acc", (self(x).argmax(dim=1) == y).float().mean())

    def predict_step(self, batch, batch_idx):
        return self(batch[0]).softmax(dim=1)

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=self.hparams.lr)
'''
OWN_DATA = '''"""My data: a LightningDataModule as Lightning's docs write one."""

import lightning as L
import torch
from torch.utils.data import DataLoader, TensorDataset, random_split


class RandomData(L.LightningDataModule):
    """Random features whose class is the arg-max of their first three."""

    def __init__(self, batch_size: int = 32):
        super().__init__()
        self.batch_size = batch_size

    def setup(self, stage):
        x = torch.randn(400, 16, generator=torch.Generator().manual_seed(0))
        data = TensorDataset(x, x[:, :3].argmax(dim=1))
        self.train, self.val, self.test = random_split(data, [300, 50, 50], torch.Generator().manual_seed(0))

    def train_dataloader(self):
        return DataLoader(self.train, batch_size=self.batch_size, shuffle=True)

    def val_dataloader(self):
        return DataLoader(self.val, batch_size=self.batch_size)

    def test_dataloader(self):
        return DataLoader(self.test, batch_size=self.batch_size)

    def predict_dataloader(self):
        return DataLoader(self.test, batch_size=self.batch_size)
'''
OWN_TEST = '''"""My task trains."""

from runwright.testing import RunCLI


def test_my_task_fits(run_cli: RunCLI) -> None:
    cli = run_cli("fit", "--trainer.logger=false")
    assert cli.trainer.state.finished and (cli.run_dir / "checkpoints" / "best.ckpt").is_file()
'''


def replace_the_example(repo: Path, package: str) -> None:
    """Delete the example (its model, backbones, data, their tests and the configs that name them) and
    add a LightningModule, a LightningDataModule, the experiment config and a test of one's own."""
    example = [f"{package}/models/{name}.py" for name in ("classifier", "backbones")]
    example += [f"{package}/data/{name}.py" for name in ("digits", "synthetic")]
    example += [f"tests/{name}.py" for name in ("test_models", "test_data", "test_extending")]
    for relative in [*example, "configs/model", "configs/data", "configs/experiment", "configs/sweep"]:
        path = repo / relative
        if path.exists():
            shutil.rmtree(path) if path.is_dir() else path.unlink()
    for test in repo.glob("tests/test_example*.py"):
        test.unlink()
    (repo / package / "models" / "lit_model.py").write_text(OWN_MODEL)
    (repo / package / "models" / "__init__.py").write_text(
        '"""My models."""\n\nfrom .lit_model import LitModel\n\n__all__ = ["LitModel"]\n'
    )
    (repo / package / "data" / "random_data.py").write_text(OWN_DATA)
    (repo / package / "data" / "__init__.py").write_text(
        '"""My data."""\n\nfrom .random_data import RandomData\n\n__all__ = ["RandomData"]\n'
    )
    (repo / package / "configs" / "default.yaml").write_text(
        "seed_everything: 0\ntrainer:\n  max_epochs: 3\nmodel:\n  class_path: LitModel\n"
        "data:\n  class_path: RandomData\ncheckpoint:\n  monitor: val_acc\n  mode: max\n"
    )
    (repo / "tests" / "test_my_task.py").write_text(OWN_TEST)


@pytest.mark.slow
def test_a_repo_whose_example_is_replaced_by_a_plain_lightning_task_stays_green(
    baked: dict[str, Path], tmp_path: Path
) -> None:
    """A minimal repo, its example deleted and a LightningModule and LightningDataModule written as in
    Lightning's docs added (no class of the template): ``fit``, ``test --ckpt_path best``, ``predict``,
    ``export`` and the repo's ``make test`` (ruff, mypy, the fast tests with the engine's own) pass."""
    name = "tensorboard-minimal-apache-nogha"
    repo = tmp_path / "repo"
    shutil.copytree(baked[name], repo, symlinks=True)
    package = package_of(name, baked[name])  # (the name comes from the baked folder's, not the copy's)
    replace_the_example(repo, package)
    env = subprocess_env(repo, tmp_path)
    env["WANDB_MODE"] = "disabled"
    workdir = tmp_path / "empty"
    workdir.mkdir()
    python = [sys.executable, "-m", package]
    fit = run([*python, "fit"], cwd=workdir, env=env)
    assert "Best checkpoint (val_acc=" in fit
    tested = run([*python, "test", "--ckpt_path", "best"], cwd=workdir, env=env)
    assert "test_acc" in tested
    run([*python, "predict", "--ckpt_path", "best"], cwd=workdir, env=env)
    (predictions,) = (workdir / "logs").glob("*_predict/predictions.csv")
    assert predictions.read_text().splitlines()[0] == "index,pred_0,pred_1,pred_2"
    exported = run(
        [*python, "export", "--ckpt_path", "best", "--format", "torchscript"], cwd=workdir, env=env
    )
    assert "Parity check passed" in exported
    venv = tmp_path / "venv"  # `make test` with this interpreter: a stamp says it is installed
    (venv / "bin").mkdir(parents=True)
    python_ = venv / "bin" / "python"  # (a script, not a link: a link outside a venv loses its packages)
    python_.write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
    python_.chmod(0o755)
    (venv / ".installed").touch()
    seed_mypy_cache(env, tmp_path, REPO_ROOT / ".mypy_cache")
    output = run(["make", "test", f"VENV={venv}"], cwd=repo, env=env, timeout=1800)
    assert re.search(r"\b\d+ passed\b", output) and " failed" not in output, output[-3000:]


def build_wheel(engine: Path, wheels: Path) -> Path:
    """Build the wheel of the engine distribution in ``engine`` (copied first: a build writes next to its
    sources) into ``wheels``; returns it."""
    source = wheels.parent / f"{wheels.name}-source"
    shutil.copytree(
        engine, source, ignore=shutil.ignore_patterns("*.egg-info", "build", "__pycache__", "logs")
    )
    pip = [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation"]
    run([*pip, "--wheel-dir", str(wheels), str(source)], cwd=wheels.parent, env=dict(os.environ), timeout=600)
    (wheel,) = wheels.glob("runwright-*.whl")
    return wheel


def fresh_venv(folder: Path) -> tuple[str, dict[str, str]]:
    """A new venv that sees this environment's dependencies (torch, Lightning, pip, pytest, ...) but
    neither the template's project nor its engine (their files or their metadata: pip would take that
    for an installed engine); returns its python and an environment for it."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(folder)], check=True)
    site_packages = next(Path(p) for p in sys.path if p.endswith("site-packages") and Path(p).is_dir())
    dependencies = folder / "dependencies"
    dependencies.mkdir()
    ours = re.compile(r"(__editable__[._-]*)?(runwright|project)([-_.].*)?$", re.I)
    for entry in site_packages.iterdir():
        if not ours.match(entry.name):
            (dependencies / entry.name).symlink_to(entry)
    (next(folder.glob("lib/python*/site-packages")) / "dependencies.pth").write_text(f"{dependencies}\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH" and not k.endswith("_RUN_DIR")}
    env.update(WANDB_MODE="disabled", PYTHONUNBUFFERED="1")
    return str(folder / "bin" / "python"), env


def install(python: str, env: dict[str, str], *requirements: str, wheels: Path) -> None:
    """``pip install`` ``requirements`` into ``python``'s venv from ``wheels`` alone (no index: the
    dependencies come from this environment)."""
    pip = [python, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation", "--no-index"]
    run([*pip, "--find-links", str(wheels), *requirements], cwd=wheels.parent, env=env, timeout=600)


@pytest.mark.slow
def test_a_repo_installs_against_the_engines_wheel_and_runs_under_its_own_name(tmp_path: Path) -> None:
    """The engine's wheel, served from a folder as an index would serve it (``engine_source=index``), and
    ``acme_vision`` installed non-editable into a new venv: from an empty folder its ``--help`` names it,
    a one-epoch fit writes the TensorBoard file, ``export`` works, the repo's own fast tests pass, and
    nothing it prints or writes says ``project`` where the new name belongs."""
    wheels = tmp_path / "wheels"
    build_wheel(REPO_ROOT / "engine", wheels)
    answers = {"logger": "tensorboard", "examples": "minimal", "engine_source": "index", "init_git": False}
    (tmp_path / "bake").mkdir()
    repo = bake(tmp_path / "bake", project_name="Acme Vision", package_name="acme_vision", **answers)
    python, env = fresh_venv(tmp_path / "venv")
    install(python, env, f"runwright{ENGINE_RANGE}", str(repo), wheels=wheels)
    workdir = tmp_path / "empty"
    workdir.mkdir()
    imported = run(
        [python, "-c", "import acme_vision, runwright, sys; print(runwright.__file__, sorted(sys.modules))"],
        cwd=workdir,
        env=env,
    )
    assert str(tmp_path / "venv") in imported.split()[0] and "'project'" not in imported
    help_text = run([python, "-m", "acme_vision", "--help"], cwd=workdir, env=env)
    assert help_text.startswith("usage: python -m acme_vision ")
    one_epoch = ["--trainer.max_epochs=1", "--trainer.limit_train_batches=2"]
    fit = run([python, "-m", "acme_vision", "fit", *one_epoch], cwd=workdir, env=env)
    (run_dir,) = (workdir / "logs").iterdir()
    assert list(run_dir.glob("events.out.tfevents.*"))
    export = ["export", "--ckpt_path", "best", "--format", "torchscript"]
    exported = run([python, "-m", "acme_vision", *export], cwd=workdir, env=env)
    assert "Parity check passed" in exported
    written = "\n".join(p.read_text() for p in (workdir / "logs").rglob("*.yaml"))
    for text in (help_text, fit, exported, written):
        assert not re.search(r"-m project\b|\bproject\.(engine|models|data)\b", text), text[:2000]
    tests = run(
        [python, "-m", "pytest", "-q", "-m", "not slow", "-p", "no:cacheprovider"],
        cwd=repo,
        env=env,
        timeout=1800,
    )
    assert re.search(r"\b\d+ passed\b", tests) and " failed" not in tests, tests[-2000:]


def next_version(version: str, part: str) -> str:
    """``version`` (``X.Y.Z``) with its ``minor`` or ``patch`` part one higher (and what follows it 0)."""
    major, minor, patch = (int(number) for number in version.split(".")[:3])
    return f"{major}.{minor + 1}.0" if part == "minor" else f"{major}.{minor}.{patch + 1}"


def set_engine_version(engine: Path, version: str) -> None:
    """Set ``runwright.__version__`` in the engine distribution in ``engine``."""
    init = engine / "src" / "runwright" / "__init__.py"
    init.write_text(re.sub(r'__version__ = ".*"', f'__version__ = "{version}"', init.read_text()))


#: The engine's next minor release, which the upgrade test builds from a changed copy.
NEXT_MINOR = next_version(ENGINE_VERSION, "minor")


def next_engine(folder: Path) -> Path:
    """A copy of the engine as its next minor release would be (its version raised)."""
    engine = folder / "engine"
    shutil.copytree(
        REPO_ROOT / "engine",
        engine,
        ignore=shutil.ignore_patterns("*.egg-info", "build", "__pycache__", "logs"),
    )
    set_engine_version(engine, NEXT_MINOR)
    return engine


@pytest.mark.slow
def test_an_upgrade_to_the_next_minor_release_installs_it_and_the_repo_runs_on_it(tmp_path: Path) -> None:
    """A repo generated on engine 0.N (its range: that minor release) moves to 0.N+1: after raising its
    range, as that release's "to do" says, the new engine is installed and the repo's tests pass on it."""
    wheels, next_wheels = tmp_path / "wheels", tmp_path / "next_wheels"
    build_wheel(REPO_ROOT / "engine", wheels)
    build_wheel(next_engine(tmp_path / "next"), next_wheels)
    answers = {"logger": "csv", "examples": "minimal", "engine_source": "index", "init_git": False}
    (tmp_path / "bake").mkdir()
    repo = bake(tmp_path / "bake", project_name="Acme Vision", package_name="acme_vision", **answers)
    python, env = fresh_venv(tmp_path / "venv")
    install(python, env, f"runwright{ENGINE_RANGE}", str(repo), wheels=wheels)
    # the next minor release is outside the range: the repo raises it, then installs again
    major, minor = NEXT_MINOR.split(".")[:2]
    pyproject = repo / "pyproject.toml"
    raised = f">={NEXT_MINOR},<{major}.{int(minor) + 1}"
    pyproject.write_text(pyproject.read_text().replace(ENGINE_RANGE, raised))
    install(python, env, "--force-reinstall", str(repo), wheels=wheels)
    install(python, env, "--upgrade", f"runwright{raised}", wheels=next_wheels)
    workdir = tmp_path / "empty"
    workdir.mkdir()
    version = run([python, "-c", "import runwright; print(runwright.__version__)"], cwd=workdir, env=env)
    assert version.strip() == NEXT_MINOR
    tests = run(
        [python, "-m", "pytest", "-q", "-m", "not slow", "-p", "no:cacheprovider"],
        cwd=repo,
        env=env,
        timeout=1800,
    )
    assert re.search(r"\b\d+ passed\b", tests) and " failed" not in tests, tests[-2000:]


def provenance_engine(run_dir: Path) -> str:
    """The engine's version that ``run_dir``'s ``provenance.yaml`` records."""
    return str(yaml.safe_load((run_dir / "provenance.yaml").read_text())["versions"]["runwright"])


@pytest.mark.slow
def test_the_documented_upgrade_installs_the_engine_of_a_newer_template_commit(tmp_path: Path) -> None:
    """A repo generated from a local clone (the engine's wheel in ``requirements/``) and installed by its
    Makefile runs on that engine. After a commit in the clone that bumps the engine's version, the
    README's upgrade (the newer engine's wheel built into ``requirements/`` in place of the old one and
    named in ``requirements/engine.txt``, then ``make upgrade``) installs it: the next run's
    ``provenance.yaml`` names the new version, the earlier run's still the old one."""
    template = tmp_path / "template"
    snapshot_template(template)
    (tmp_path / "bake").mkdir()
    answers = {"logger": "csv", "examples": "minimal", "init_git": False}  # (engine_source: template)
    repo = bake(
        tmp_path / "bake", str(template), project_name="Acme Vision", package_name="acme_vision", **answers
    )
    venv = tmp_path / "venv"
    python, env = fresh_venv(venv)
    for entry in (venv / "dependencies").glob("pip*"):  # (its own pip: make upgrades pip)
        source = entry.resolve()
        entry.unlink()
        shutil.copytree(source, entry) if source.is_dir() else shutil.copy2(source, entry)
    env = {key: value for key, value in env.items() if not key.startswith("PIP_")}
    # offline, from what this environment has (no index, no build isolation), no pip config of the machine
    env.update(PIP_CONFIG_FILE=os.devnull, PIP_NO_INDEX="1", PIP_NO_BUILD_ISOLATION="0")
    make = ["make", f"VENV={venv}"]
    run([*make, f"{venv}/.installed"], cwd=repo, env=env, timeout=900)
    workdir = tmp_path / "empty"
    workdir.mkdir()
    fit = [python, "-m", "acme_vision", "fit", *FAST, "--trainer.logger=false"]
    run([*fit, "--run_name=before"], cwd=workdir, env=env)
    assert provenance_engine(workdir / "logs" / "before") == ENGINE_VERSION
    newer = next_version(ENGINE_VERSION, "patch")
    set_engine_version(template / "engine", newer)
    git(template, "commit", "--quiet", "--all", "-m", f"runwright {newer}")
    # the README's upgrade, step by step
    old_wheel = repo / "requirements" / f"runwright-{ENGINE_VERSION}-py3-none-any.whl"
    wheel = [python, "-m", "pip", "wheel", "--quiet", "--no-deps", "--wheel-dir", "requirements"]
    run([*wheel, str(template / "engine")], cwd=repo, env=env, timeout=600)
    old_wheel.unlink()
    requirement = repo / "requirements" / "engine.txt"
    requirement.write_text(requirement.read_text().replace(ENGINE_VERSION, newer))
    assert requirement.read_text().splitlines()[-1] == f"./requirements/runwright-{newer}-py3-none-any.whl"
    run([*make, "upgrade"], cwd=repo, env=env, timeout=900)
    run([*fit, "--run_name=after"], cwd=workdir, env=env)
    assert provenance_engine(workdir / "logs" / "after") == newer
    assert provenance_engine(workdir / "logs" / "before") == ENGINE_VERSION


def test_rendering_over_an_existing_repo_is_refused_before_anything_is_written(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """``cookiecutter -f`` (overwrite) into an earlier render stops in the pre-generation hook, with one
    message, and leaves every file of the existing repo as it was (it used to crash half-way through
    the renaming, with ``project/`` back next to the renamed package)."""
    answers = {"project_name": "Acme Vision", "examples": "minimal", "init_git": False}
    repo = bake(tmp_path, **answers)
    before = {p.relative_to(repo): p.read_bytes() for p in repo.rglob("*") if p.is_file()}
    config = tmp_path / "cookiecutter-config.yaml"
    with pytest.raises(FailedHookException):
        cookiecutter_main.cookiecutter(
            str(REPO_ROOT),
            no_input=True,
            extra_context={**COMMON, **answers},
            output_dir=str(tmp_path / "out"),
            config_file=str(config),
            overwrite_if_exists=True,
        )
    assert "exists and is not empty" in capfd.readouterr().err
    assert {p.relative_to(repo): p.read_bytes() for p in repo.rglob("*") if p.is_file()} == before
