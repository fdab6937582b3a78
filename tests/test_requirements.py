"""The pinned environments: ``requirements/constraints.txt`` (the exact versions CI installs) agrees
with the ranges in ``pyproject.toml``, ``requirements/lowest.txt`` pins every direct dependency at its
floor, which CI's ``lowest`` job installs, ``requirements/engine.txt`` says where the engine comes
from, and the project accepts one minor release of the engine. No range or pin admits a release known
to be malicious."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version
from support import REPO_ROOT

tomllib = pytest.importorskip("tomllib")
REQUIREMENTS = REPO_ROOT / "requirements"
#: The engine's distribution: a dependency by version range, installed from requirements/engine.txt.
ENGINE = "runwright"
#: Releases that must never be installed, by distribution, and the advisory that names them.
MALICIOUS = {
    "lightning": ({"2.6.2", "2.6.3"}, "GHSA-w37p-236h-pfx3"),
    "pytorch-lightning": ({"2.6.2", "2.6.3"}, "GHSA-w37p-236h-pfx3"),
}


def _project(path: Path) -> dict[str, Any]:
    """The ``[project]`` table of a pyproject.toml (found by its ``dependencies``: a generated repo
    must not keep the package's own name as a string)."""
    tables = tomllib.loads(path.read_text()).values()
    return next(table for table in tables if "dependencies" in table)


def _direct_requirements() -> list[Requirement]:
    """This repo's dependencies and dev extra, and those of an engine kept in this repo (``engine/``)."""
    project = _project(REPO_ROOT / "pyproject.toml")
    texts = [*project["dependencies"], *project["optional-dependencies"]["dev"]]
    if (engine := REPO_ROOT / "engine" / "pyproject.toml").is_file():
        table = _project(engine)
        texts += [
            *table["dependencies"],
            *(r for extra in table["optional-dependencies"].values() for r in extra),
        ]
    requirements = [Requirement(text) for text in texts]
    return [r for r in requirements if canonicalize_name(r.name) != ENGINE]


def _pins(path: Path) -> dict[str, str]:
    """``{canonical name: version}`` of the ``name==version`` lines of a requirements file."""
    pins: dict[str, str] = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            match = re.fullmatch(r"([A-Za-z0-9._-]+)==([^\s;]+)", line)
            assert match, f"{path.name}: {line!r} is not a plain name==version pin"
            pins[canonicalize_name(match[1])] = match[2]
    return pins


def test_the_project_depends_on_one_minor_release_of_the_engine_and_says_where_it_comes_from() -> None:
    """``runwright>=0.N.p,<0.N+1`` (``>=X.Y.Z,<X+1`` from 1.0 on): an upgrade to the next minor release,
    which may rename an option, is a change of this range. Where the engine is kept in this repo, the
    range starts at its version."""
    (engine,) = [
        r
        for r in map(Requirement, _project(REPO_ROOT / "pyproject.toml")["dependencies"])
        if r.name == ENGINE
    ]
    bounds = {spec.operator: Version(spec.version) for spec in engine.specifier}
    assert set(bounds) == {">=", "<"} and len(engine.specifier) == 2, engine
    lower = bounds[">="]
    assert bounds["<"] == Version(f"0.{lower.minor + 1}" if lower.major == 0 else f"{lower.major + 1}"), (
        engine
    )
    if (init := REPO_ROOT / "engine" / "src" / "runwright" / "__init__.py").is_file():
        version = re.search(r'^__version__ = "(.+)"$', init.read_text(), re.M)
        assert version and lower == Version(version[1]), f"{engine}: start the range at {version}"
    lines = [
        line for line in (REQUIREMENTS / "engine.txt").read_text().splitlines() if not line.startswith("#")
    ]
    assert len([line for line in lines if line.strip()]) == 1, lines  # one source (`runwright`: an index)


def test_constraints_pin_every_dependency_inside_its_range_and_not_the_package_itself() -> None:
    pins = _pins(REQUIREMENTS / "constraints.txt")
    for requirement in _direct_requirements():
        name = canonicalize_name(requirement.name)
        assert name in pins, f"{name} is not pinned: run `make constraints`"
        assert requirement.specifier.contains(pins[name], prereleases=True), (
            f"constraints.txt pins {name}=={pins[name]}, outside pyproject.toml's {requirement}: "
            "run `make constraints`"
        )
    # (the editable package and the engine: installed from this checkout and requirements/engine.txt)
    assert (
        canonicalize_name(_project(REPO_ROOT / "pyproject.toml")["name"]) not in pins and ENGINE not in pins
    )


def test_lowest_pins_every_direct_dependency_at_its_floor_and_ci_installs_them() -> None:
    """Each requirement of pyproject.toml (the dependencies and the dev extra) with a ``>=`` floor is
    pinned at exactly that floor, and nothing else is pinned."""
    pins = {name: Version(version) for name, version in _pins(REQUIREMENTS / "lowest.txt").items()}
    floors = {}
    for requirement in _direct_requirements():
        lower = [spec.version for spec in requirement.specifier if spec.operator == ">="]
        if lower:
            floors[canonicalize_name(requirement.name)] = Version(lower[0])
    assert pins == floors, {
        name: (pins.get(name), floor)
        for name, floor in {**pins, **floors}.items()
        if pins.get(name) != floors.get(name)
    }
    workflow = REPO_ROOT / ".github" / "workflows" / "ci.yml"
    if not workflow.is_file():
        return  # a repo generated without GitHub Actions
    steps = yaml.safe_load(workflow.read_text())["jobs"]["lowest"]["steps"]
    commands = " ".join(str(step.get("run", "")) for step in steps)
    assert "-c requirements/lowest.txt" in commands and '-m "not slow"' in commands


def test_every_range_and_pin_excludes_the_malicious_releases() -> None:
    """Each requirement of pyproject.toml (and of an engine kept here) on a distribution in
    :data:`MALICIOUS` excludes those releases and names the advisory on its line or the line above;
    no requirements file pins one."""
    for path in [REPO_ROOT / "pyproject.toml", REPO_ROOT / "engine" / "pyproject.toml"]:
        if not path.is_file():
            continue
        table, lines = _project(path), path.read_text().splitlines()
        texts = [
            *table["dependencies"],
            *(r for extra in table["optional-dependencies"].values() for r in extra),
        ]
        for text in texts:
            requirement = Requirement(text)
            if canonicalize_name(requirement.name) not in MALICIOUS:
                continue
            versions, advisory = MALICIOUS[canonicalize_name(requirement.name)]
            assert not any(requirement.specifier.contains(v, prereleases=True) for v in versions), text
            number = next(n for n, line in enumerate(lines) if f'"{text}"' in line)
            assert advisory in lines[number] + lines[number - 1], f"{path.name}: name {advisory} by {text}"
    for path in REQUIREMENTS.glob("*.txt"):
        if path.name == "engine.txt":
            continue
        for name, version in _pins(path).items():
            assert version not in MALICIOUS.get(name, (set(), ""))[0], f"{path.name} pins {name}=={version}"


def test_the_engine_s_changelog_has_a_section_for_its_version_and_none_unreleased() -> None:
    """Every change of the engine lands with a version of its own: the CHANGELOG's sections are versions,
    newest first, the first one ``runwright.__version__``."""
    changelog = REPO_ROOT / "engine" / "CHANGELOG.md"
    if not changelog.is_file():
        pytest.skip("no engine in this repo")
    headings = re.findall(r"(?m)^## (.+)$", changelog.read_text())
    versions = [Version(heading) for heading in headings]  # (an "Unreleased" section fails here)
    assert versions == sorted(versions, reverse=True) and len(set(versions)) == len(versions), headings
    init = (REPO_ROOT / "engine" / "src" / "runwright" / "__init__.py").read_text()
    assert f'__version__ = "{versions[0]}"' in init
