"""The cookiecutter template's parts, tested without generating a repo: answer checks, rename rules,
file rewrites, the symlinked template folder and the workflow files.

(Template-only: the post-gen hook deletes this file from generated repos.)
"""

from __future__ import annotations

import ast
import importlib.util
import json
import re
import subprocess
from types import ModuleType
from typing import Any

import pytest
import yaml
from conftest import REPO_ROOT

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
    import_names = {"scikit-learn": "sklearn", "pyyaml": "yaml", "pillow": "PIL", "pytest-xdist": "xdist"}
    for requirement in requirements:
        name = re.match(r"[A-Za-z0-9_.\-]+", requirement)
        assert name is not None, requirement
        distribution = name.group(0).lower()
        if distribution == project["name"]:  # the dev extra includes this package's own extras
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
    assert project["license"] == {"text": "Apache-2.0"}
    assert project["requires-python"] == ">=3.11"
    assert project["scripts"] == {"acme_vision": "acme_vision.cli:main"}
    assert not any(r.startswith(("cookiecutter", "cruft")) for r in project["optional-dependencies"]["dev"])
    assert config["tool"]["setuptools"]["packages"]["find"]["include"] == ["acme_vision*"]
    assert config["tool"]["mypy"]["files"] == ["acme_vision", "benchmarks"]
    assert config["tool"]["mypy"]["python_version"] == "3.11"
    assert config["tool"]["ruff"]["target-version"] == "py311"
    unlicensed = tomllib.loads(post_gen.rewrite_pyproject(text, {**GOOD_ANSWERS, "license": "none"}))
    assert "license" not in unlicensed["project"]


def test_wandb_preset_names_the_project_after_the_package() -> None:
    text = (REPO_ROOT / "configs" / "logger" / "wandb.yaml").read_text()
    config = yaml.safe_load(post_gen.rename_wandb_project(text, "acme_vision"))
    assert config["trainer"]["logger"]["init_args"]["project"] == "acme_vision"


def test_a_rule_that_no_longer_matches_is_an_error() -> None:
    text = (REPO_ROOT / "pyproject.toml").read_text().replace('project = "project.cli:main"', "")
    with pytest.raises(post_gen.TemplateDriftError, match="cli:main"):
        post_gen.rewrite_pyproject(text, GOOD_ANSWERS)


def _default_logger(source: str) -> Any:
    """Execute ``source`` (imports of jsonargparse/lightning allowed) and return its default logger."""
    namespace: dict[str, Any] = {}
    exec(compile(source, "cli_under_test.py", "exec"), namespace)
    return namespace["TRAINER_DEFAULTS"]["logger"]


@pytest.mark.parametrize(
    ("logger", "classes"),
    [("wandb", ["WandbLogger"]), ("tensorboard", ["TensorBoardLogger"])],
)
def test_logger_choice_replaces_a_default_of_another_logger(logger: str, classes: list[str]) -> None:
    """Whatever the reference default is (here a lazy W&B or CSV logger), the choice replaces it and
    the imports that only the old default used go, so ruff stays clean."""
    for old in ("CSVLogger, save_dir='logs'", "WandbLogger, save_dir='logs', offline=True"):
        old_class = old.split(",")[0]
        if old_class == classes[0]:
            continue
        source = (
            "from jsonargparse import lazy_instance\n"
            f"from lightning.pytorch.loggers import {old_class}\n\n"
            f'TRAINER_DEFAULTS = {{"max_epochs": 3, "logger": lazy_instance({old})}}\n'
        )
        new = post_gen.set_default_logger(source, logger)
        assert "import" not in new, new  # both imports were only used by the old default
        value = _default_logger(new)
        value = value if isinstance(value, list) else [value]
        assert [item["class_path"].rsplit(".", 1)[-1] for item in value] == classes
        assert value[0]["init_args"]["save_dir"] == "logs"
        assert value[0]["init_args"].get("offline", True) is True


def test_logger_choice_on_the_real_cli() -> None:
    source = (REPO_ROOT / "project" / "cli.py").read_text()
    current = post_gen._mentioned_names(post_gen._trainer_defaults_logger(ast.parse(source)))
    for logger, (expression, logger_class) in post_gen.LOGGER_EXPRESSIONS.items():
        new = post_gen.set_default_logger(source, logger)
        if logger_class in current:
            assert new == source, "a default that already is the chosen logger must stay as it is"
        else:
            assert expression in new
            compile(new, "cli.py", "exec")
    with pytest.raises(ValueError, match="logger='mlflow'"):
        post_gen.set_default_logger(source, "mlflow")


def test_readme_gets_the_title_and_loses_the_template_sections() -> None:
    readme = post_gen.rewrite_readme((REPO_ROOT / "README.md").read_text(), GOOD_ANSWERS)
    assert readme.startswith('# Acme Vision\n\nVision models for "Acme".\n')
    assert "template-only" not in readme and "cookiecutter" not in readme
    assert "Python >= 3.11" in readme and "Python >= 3.10" not in readme
    assert "GitHub Actions (`.github/workflows/ci.yml`)" in readme and "<!--" not in readme
    without_ci = post_gen.rewrite_readme(
        (REPO_ROOT / "README.md").read_text(), {**GOOD_ANSWERS, "github_actions": False}
    )
    assert "GitHub Actions" not in without_ci


def test_ci_matrix_follows_the_oldest_python_and_keeps_github_expressions() -> None:
    text = (REPO_ROOT / ".github" / "workflows" / "ci.yml").read_text()
    new = post_gen.rewrite_ci(text, "3.11")
    workflow = yaml.safe_load(new)
    assert workflow["jobs"]["tests"]["strategy"]["matrix"]["python-version"] == ["3.11", "3.12"]
    assert workflow["jobs"]["lint"]["steps"][1]["with"]["python-version"] == "3.11"
    assert re.findall(r"\$\{\{.*?\}\}", new) == re.findall(r"\$\{\{.*?\}\}", text) != []
    with pytest.raises(ValueError, match=r"3\.13"):
        post_gen.python_versions("3.13")


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
    assert set(config["license"]) == {*post_gen.LICENSES, "none"}
    assert set(config["logger"]) == set(post_gen.LOGGER_EXPRESSIONS)
    assert config["python_version"] == post_gen.python_versions(config["python_version"][0])
    assert set(config["__prompts__"]) <= set(config)
    assert config["_copy_without_render"] == ["*"], "the reference project is copied, never rendered"
    for license_name in post_gen.LICENSES:
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
    staged = {post_gen.STAGED_NAMES.get(p.name, p.name) for p in TEMPLATE_DIR.iterdir()}
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
