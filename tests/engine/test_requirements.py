"""The pinned environments: ``requirements/constraints.txt`` (the exact versions CI installs) agrees
with the ranges in ``pyproject.toml``, and ``requirements/lowest.txt`` pins every direct dependency at
its floor, which CI's ``lowest`` job installs."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version
from support import REPO_ROOT

tomllib = pytest.importorskip("tomllib")
REQUIREMENTS = REPO_ROOT / "requirements"


def _project() -> dict:
    """The ``[project]`` table of pyproject.toml (found by its ``dependencies``: a generated repo
    must not keep the package's own name as a string)."""
    tables = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text()).values()
    return next(table for table in tables if "dependencies" in table)


def _direct_requirements() -> list[Requirement]:
    project = _project()
    return [
        Requirement(text) for text in [*project["dependencies"], *project["optional-dependencies"]["dev"]]
    ]


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


def test_constraints_pin_every_dependency_inside_its_range_and_not_the_package_itself() -> None:
    pins = _pins(REQUIREMENTS / "constraints.txt")
    for requirement in _direct_requirements():
        name = canonicalize_name(requirement.name)
        assert name in pins, f"{name} is not pinned: run `make constraints`"
        assert requirement.specifier.contains(pins[name], prereleases=True), (
            f"constraints.txt pins {name}=={pins[name]}, outside pyproject.toml's {requirement}: "
            "run `make constraints`"
        )
    assert (
        canonicalize_name(_project()["name"]) not in pins
    )  # (the editable package; renamed by the generator)


def test_lowest_pins_every_direct_dependency_at_its_floor_and_ci_installs_them() -> None:
    """Each requirement of pyproject.toml (the dependencies and the dev extra) with a ``>=`` floor is
    pinned at exactly that floor, and nothing else is pinned (torchdata 0.10's floor once went untested
    and broke exact resume: issue 25, finding 9)."""
    pins = {name: Version(version) for name, version in _pins(REQUIREMENTS / "lowest.txt").items()}
    floors = {}
    for requirement in _direct_requirements():
        lower = [spec.version for spec in requirement.specifier if spec.operator == ">="]
        if lower:
            floors[canonicalize_name(requirement.name)] = Version(lower[0])
    assert {"torch", "lightning", "torchdata", "numpy"} <= set(floors)
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
