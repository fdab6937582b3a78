"""Provenance: every run folder and checkpoint records the code (git commit, dirty flag, diff), the
command, the library versions and the seed; a checkpoint from other torch/Lightning versions warns."""

from __future__ import annotations

import subprocess
import warnings
from collections.abc import Callable
from pathlib import Path

import jsonargparse
import lightning
import pytest
import torch
import torchmetrics
import yaml
from lightning.pytorch.loggers import CSVLogger, WandbLogger
from support import FAST, RunCLI, checkpoint_model, kept_environ, project_cli, run_dirs, run_main, run_module

import runwright
from runwright import provenance

GIT = ["git", "-c", "user.name=Test", "-c", "user.email=test@example.com"]


def _git(repo: Path, *args: str) -> str:
    return subprocess.run([*GIT, *args], cwd=repo, check=True, capture_output=True, text=True).stdout


@pytest.fixture
def not_in_git(monkeypatch: pytest.MonkeyPatch, workdir: Path) -> Path:
    """The working directory, with git told not to look above it (so it is outside any checkout)."""
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(workdir.parent))
    return workdir


@pytest.mark.slow
def test_fit_in_a_git_repo_records_commit_dirty_flag_and_diff(
    not_in_git: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A user keeps configs in a git repo, edits one without committing, and trains."""
    repo = not_in_git
    config = repo / "experiment.yaml"
    config.write_text("trainer:\n  max_epochs: 1\n")
    _git(repo, "init", "--quiet")
    _git(repo, "add", "experiment.yaml")
    _git(repo, "commit", "--quiet", "-m", "experiment")
    commit = _git(repo, "rev-parse", "HEAD").strip()
    config.write_text("trainer:\n  max_epochs: 1\nseed_everything: 7\n")  # the uncommitted change

    run_module(["fit", "--config=experiment.yaml", *FAST, "--trainer.logger=false"], cwd=repo)

    (run_dir,) = run_dirs(repo / "logs")
    facts = yaml.safe_load((run_dir / "provenance.yaml").read_text())
    working = facts["git"]["working_dir"]
    assert (working["path"], working["commit"], working["dirty"]) == (str(repo.resolve()), commit, True)
    diff = (run_dir / working["diff"].split()[0]).read_text()
    assert "+seed_everything: 7" in diff and diff == _git(repo, "diff", "HEAD")
    assert set(working["untracked"]) <= {"logs/"}  # at most the run folders: not a change of tracked code
    assert facts["seed"] == 7 and "-m fixture_task fit --config=experiment.yaml" in facts["command"]
    # the same facts, with the diff itself, in the checkpoint (readable with weights_only=True)
    saved = torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=True)["provenance"]
    assert saved["git"]["working_dir"]["diff"] == diff
    assert {key: saved[key] for key in ("command", "seed", "versions")} == {
        key: facts[key] for key in ("command", "seed", "versions")
    }

    code, out, _ = run_main(["report", str(run_dir), "--print_provenance"], capsys)
    assert code == 0 and f"commit: {commit}" in out and "+seed_everything: 7" in out


def test_outside_git_it_says_so_and_versions_are_the_imported_ones(run_cli: RunCLI, not_in_git: Path) -> None:
    cli = run_cli("validate", "--trainer.logger=false")
    facts = provenance.read_provenance(cli.run_dir)
    assert facts is not None
    assert facts["git"]["working_dir"] == {"path": str(not_in_git.resolve()), "git": "not a git checkout"}
    assert provenance.git_state(not_in_git / "logs") == {
        "path": str((not_in_git / "logs").resolve()),
        "git": "not a git checkout",
    }
    found = facts["versions"]
    assert found["runwright"] == runwright.__version__
    assert found["torch"] == torch.__version__ and found["torch_cuda"] == torch.version.cuda
    assert found["lightning"] == lightning.__version__
    assert found["torchmetrics"] == torchmetrics.__version__
    assert found["jsonargparse"] == jsonargparse.__version__
    assert found["wandb"] == __import__("wandb").__version__
    assert facts["devices"]["accelerator"] == "CPUAccelerator"


def test_a_long_diff_is_cut_and_says_so(not_in_git: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _git(not_in_git, "init", "--quiet")
    (not_in_git / "a.txt").write_text("a\n")
    _git(not_in_git, "add", "a.txt")
    _git(not_in_git, "commit", "--quiet", "-m", "a")
    (not_in_git / "a.txt").write_text("b\n" * 100)
    monkeypatch.setattr(provenance, "MAX_DIFF_CHARS", 50)
    state = provenance.git_state(not_in_git)
    full = _git(not_in_git, "diff", "HEAD")
    assert state["diff"] == full[:50] and f"cut at 50 of {len(full)} characters" in state["diff_cut"]


def _with_lightning_version(source: Path, target: Path, saved_version: str) -> Path:
    checkpoint = torch.load(source, weights_only=True)
    checkpoint["pytorch-lightning_version"] = saved_version
    torch.save(checkpoint, target)
    return target


def test_a_checkpoint_saved_under_another_lightning_minor_version_warns_once(
    run_cli: RunCLI, fitted: Callable[..., Path]
) -> None:
    """Train, then test and export a checkpoint whose saved Lightning version is another minor one."""
    checkpoints = fitted() / "checkpoints"
    major, minor = (int(part) for part in lightning.__version__.split(".")[:2])
    other = f"{major}.{minor + 1}.0"
    edited = _with_lightning_version(checkpoints / "last.ckpt", checkpoints / "edited.ckpt", other)

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run_cli("test", f"--ckpt_path={edited}", "--trainer.logger=false")
    mismatches = [w for w in caught if issubclass(w.category, provenance.VersionChangeWarning)]
    assert len(mismatches) == 1
    assert f"lightning {other} (now {lightning.__version__})" in str(mismatches[0].message)

    # export (load_model) of another such file warns once too; the same minor version does not warn
    last = checkpoints / "last.ckpt"
    second = _with_lightning_version(last, checkpoints / "second.ckpt", other)
    same = _with_lightning_version(last, checkpoints / "same.ckpt", f"{major}.{minor}.99")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        checkpoint_model(second)
        checkpoint_model(same)
    messages = [str(w.message) for w in caught if w.category is provenance.VersionChangeWarning]
    assert len(messages) == 1
    assert messages[0].startswith(f"checkpoint {str(second)!r} was saved under lightning {other} (now ")


def test_export_run_folder_records_the_checkpoint_and_versions(
    fitted: Callable[..., Path], workdir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = fitted()
    code, _, _ = run_main(
        ["export", "--ckpt_path=best", "--format=torchscript", "--run_name=exported"], capsys
    )
    assert code == 0
    facts = provenance.read_provenance(workdir / "logs" / "exported")
    assert facts is not None
    assert facts["checkpoint"] == str((run / "checkpoints" / "best.ckpt").resolve())
    assert facts["versions"]["torch"] == torch.__version__
    assert [path.name for path in run_dirs(workdir / "logs")] == sorted([run.name, "exported"])


class _RecordingWandbRun:
    """Stands in for ``wandb.Run``: records what ``config.update`` receives."""

    def __init__(self) -> None:
        self.config = self
        self.updates: list[dict[str, object]] = []

    def update(self, values: dict[str, object], allow_val_change: bool = False) -> None:
        self.updates.append(values)


def test_wandb_run_config_gets_the_same_facts_as_the_file(workdir: Path) -> None:
    with kept_environ():
        cli = project_cli([*FAST, "--trainer.logger=false"], run=False)
    (callback,) = [cb for cb in cli.trainer.callbacks if isinstance(cb, provenance.Provenance)]
    wandb_logger = WandbLogger.__new__(WandbLogger)  # no wandb.init: its run is the recorder
    run = _RecordingWandbRun()
    wandb_logger._experiment = run
    cli.trainer.loggers = [CSVLogger(cli.run_dir, name="", version=""), wandb_logger]
    callback.setup(cli.trainer, cli.model, "fit")
    facts = provenance.read_provenance(cli.run_dir)
    assert facts is not None and run.updates == [{"provenance": callback.facts}]
    assert {key: facts[key] for key in ("command", "seed", "versions")} == {
        key: run.updates[0]["provenance"][key]
        for key in ("command", "seed", "versions")  # type: ignore[index]
    }


def test_a_continued_run_keeps_the_first_commands_provenance(
    run_cli: RunCLI, fitted: Callable[..., Path]
) -> None:
    """``fit --ckpt_path last`` writes its own ``provenance.resume-1.yaml`` (the second command line)
    and leaves the first ``provenance.yaml`` byte for byte; a second continuation adds ``-2``."""
    first = fitted()
    original = (first / "provenance.yaml").read_bytes()
    run_cli("fit", "--trainer.logger=false", "--trainer.max_epochs=2", "--ckpt_path=last")
    run_cli("fit", "--trainer.logger=false", "--trainer.max_epochs=3", "--ckpt_path=last")
    assert (first / "provenance.yaml").read_bytes() == original
    names = sorted(path.name for path in first.glob("provenance*.yaml"))
    assert names == ["provenance.resume-1.yaml", "provenance.resume-2.yaml", "provenance.yaml"]
    second = yaml.safe_load((first / "provenance.resume-1.yaml").read_text())
    assert second["versions"] == yaml.safe_load(original)["versions"] and second["started"]
