"""User sequences found to break after the engine's rewrite in less code (each test names what a user
did and what must hold)."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

from conftest import RunCLI


def test_a_resume_after_a_deleted_record_overwrites_no_other_record(
    run_cli: RunCLI, fitted: Callable[..., Path]
) -> None:
    """A run resumed twice (``config.resume-1.yaml``, ``config.resume-2.yaml``) whose first resume's records
    the user deleted resumes again: it writes a record under a free name and leaves every other record
    byte for byte (it must not fail on, nor overwrite, ``*.resume-2.yaml``)."""
    run = fitted()
    for stem in ("config", "provenance"):  # as after two resumes and deleting the first one's records
        shutil.copy(run / f"{stem}.yaml", run / f"{stem}.resume-2.yaml")
    before = {path.name: path.read_bytes() for path in run.glob("*.yaml")}
    cli = run_cli("fit", "--trainer.max_epochs=2", "--ckpt_path=last")
    assert cli.run_dir == run
    assert {name: (run / name).read_bytes() for name in before} == before
    for stem in ("config", "provenance"):
        assert len(list(run.glob(f"{stem}*.yaml"))) == 3, sorted(p.name for p in run.glob(f"{stem}*.yaml"))
