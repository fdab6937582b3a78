"""The engine's benchmark scripts (``engine/benchmarks/``, run on this reference project) still run, and
their correctness checks can fail (no timing is asserted).

(Template-only: the post-gen hook deletes this file from generated repos, which have no engine
benchmarks.)
"""

from __future__ import annotations

import ast
import importlib.util
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
import requests  # noqa: F401  # see below
from runwright import ProjectCLI
from support import PACKAGE

# The first W&B run of a process (when W&B is the logger) imports requests and urllib3, whose
# import adds warning filters: the leak check would blame the first test here. Imported now, they are
# part of every test's starting state.

REPO_ROOT = Path(__file__).resolve().parents[1]


def _load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, REPO_ROOT / "engine" / "benchmarks" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # jsonargparse resolves class paths such as parity.SmallResNet
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def parity() -> ModuleType:
    return _load("parity")


@pytest.fixture(autouse=True)
def environment_restored() -> Iterator[None]:
    """Put the environment back after each test: the benchmark builds the template with
    ``ProjectCLI(run=False)``, which leaves ``seed_everything``'s and the run folder's variables set
    for the ``fit`` that follows (a script's process ends there; a test's goes on)."""
    saved = dict(os.environ)
    yield
    os.environ.clear()
    os.environ.update(saved)


@pytest.mark.slow
def test_parity_tiny_run_gives_equal_losses(parity: ModuleType, workdir: Path) -> None:
    summary = parity.main(
        ["--workload", "digits", "--epochs", "1", "--repeats", "1", "--no-ablation", "--no-warmup"]
    )
    losses = summary["final_loss"]
    assert set(losses) == {"plain", "template", "bare"}
    assert abs(losses["plain"] - losses["template"]) < 1.5e-5
    assert abs(losses["plain"] - losses["bare"]) < 1.5e-5
    assert summary["checkpoint_seconds_per_epoch"] > 0  # checkpoint writing was timed on its own


@pytest.mark.slow
def test_parity_breakdown_times_each_callback_and_the_logging(parity: ModuleType, workdir: Path) -> None:
    summary = parity.main(
        ["--workload", "digits", "--epochs", "2", "--repeats", "1", "--no-ablation", "--no-warmup"]
    )
    parts = summary["breakdown_seconds_per_epoch"]
    ours = ("MemoryMonitor", "HealthCheck", "TrainingMonitor", "ExactResume", "Interruption")
    for callback in ours:
        assert f"callback {callback}" in parts, sorted(parts)
    assert parts["LR scheduler steps (warmup-cosine)"] > 0  # the schedule is the model's, not a callback
    assert parts["self.log calls (all, whoever makes them)"] > 0  # the wrappers really ran
    assert parts["metric updates"] > 0
    assert summary["seconds_per_epoch"]["template"] > parts["self.log calls (all, whoever makes them)"]


def test_parity_loss_check_fails_loudly(parity: ModuleType) -> None:
    same = parity.Result(1.0, 0.0, 0.5)
    other = parity.Result(1.0, 0.0, 0.5001)
    with pytest.raises(SystemExit, match="differ beyond 5 decimals"):
        parity.check_losses({"plain": [same], "template": [other]}, ["plain", "template"])


def test_parity_discovers_callback_groups_and_rejects_missing_ones(
    parity: ModuleType, workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = ProjectCLI(args=["--trainer.max_epochs=1"], run=False, package=PACKAGE).config
    groups = parity.discover_groups(config)
    assert {"memory", "exact_resume", "training_monitor", "health", "interruption"} <= set(groups)
    for group in groups:  # every discovered group really is a switchable callback group
        assert "enabled" in config[group]
    monkeypatch.setattr(parity, "CALLBACK_GROUPS", [*parity.CALLBACK_GROUPS, "no_such_callback"])
    with pytest.raises(SystemExit, match="no_such_callback"):
        parity.discover_groups(config)


def test_the_engine_and_its_benchmarks_are_handed_the_package_and_never_import_it() -> None:
    """The engine is a library of any package: its sources and benchmarks name the template's package
    (``PACKAGE = "project"``, imported by name where a workload needs its classes), never import it."""
    importing = []
    for path in sorted((REPO_ROOT / "engine").glob("[bs]*/**/*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            names += [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else []
            if any(name.partition(".")[0] == PACKAGE for name in names):
                importing.append(f"{path.relative_to(REPO_ROOT)}:{node.lineno}")
    assert importing == []
