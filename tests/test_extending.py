"""docs/extending.md, followed mechanically: its marked code blocks are added to a copy of the repo,
which then trains the new task and runs the new task's test."""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from runwright.testing import run_dirs
from support import PACKAGE, REPO_ROOT

GUIDE = REPO_ROOT / "docs" / "extending.md"
#: ``<!-- new file: PATH -->`` or ``<!-- add after the last import in: PATH -->``, then a fenced block.
STEP = re.compile(r"<!-- (new file|add after the last import in): (\S+) -->\n```\w*\n(.*?)```", re.DOTALL)


def copy_repo(target: Path) -> Path:
    """Copy the repo's files (tracked, plus new ones git does not ignore) into ``target``."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
    )
    if listed.returncode == 0:
        files = [REPO_ROOT / name for name in listed.stdout.splitlines()]
    else:  # not a git checkout: the parts a task touches, and pytest's settings (pythonpath)
        files = [REPO_ROOT / "pyproject.toml"]
        files += [p for d in (PACKAGE, "configs", "tests", "docs") for p in (REPO_ROOT / d).rglob("*")]
    for source in files:
        if source.is_file() and "__pycache__" not in source.parts:
            destination = target / source.relative_to(REPO_ROOT)
            destination.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, destination)
    return target


def apply_guide(repo: Path) -> list[str]:
    """Do what the guide's marked blocks say in ``repo``; returns the paths touched."""
    steps = STEP.findall(GUIDE.read_text())
    touched = []
    for action, path, code in steps:
        file = repo / path
        if action == "new file":
            assert not file.exists(), f"the guide's new file {path} already exists"
            file.parent.mkdir(parents=True, exist_ok=True)
            file.write_text(code)
        else:
            source = file.read_text()
            imports = [n for n in ast.parse(source).body if isinstance(n, (ast.Import, ast.ImportFrom))]
            end = max(node.end_lineno or node.lineno for node in imports)
            lines = source.splitlines(keepends=True)
            file.write_text("".join([*lines[:end], code, *lines[end:]]))
        touched.append(path)
    return touched


@pytest.mark.slow
def test_the_guide_adds_a_task_that_trains(tmp_path: Path) -> None:
    repo = copy_repo(tmp_path / "repo")
    touched = apply_guide(repo)
    expected = {f"{PACKAGE}/models/__init__.py", f"{PACKAGE}/data/__init__.py"}
    assert expected <= set(touched), touched
    new_files = {path for path in touched if not path.endswith("__init__.py")}
    assert len(new_files) == 4, touched  # model, data, config, test
    config = next(path for path in new_files if path.startswith("configs/"))
    env = {**os.environ, "PYTHONPATH": str(repo), "WANDB_MODE": "disabled"}
    workdir = tmp_path / "run"
    workdir.mkdir()
    fit = subprocess.run(
        [sys.executable, "-m", PACKAGE, "fit", "--config", str(repo / config), "--trainer.fast_dev_run=true"],
        cwd=workdir,
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert fit.returncode == 0, fit.stdout + fit.stderr
    # fast_dev_run trains one batch, validates one batch and stops: the one epoch's line, with both losses
    assert re.search(r"epoch 1/1 done .*train/loss=.*val/loss=", fit.stdout), fit.stdout + fit.stderr
    assert len(run_dirs(workdir / "logs")) == 1
    new_test = next(path for path in new_files if path.startswith("tests/"))
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", new_test],
        cwd=repo,
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
