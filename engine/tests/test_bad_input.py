"""Bad input found while a run starts: one error line, exit code 2, and no run folder left behind (the
loggers may have started before the data or a setting was found bad); other runs untouched."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from fixture_task import TinyImages
from support import FAST, hashes, main, run_module

from runwright import DataError


class MissingImages(TinyImages):
    """TinyImages whose files are missing, as a torchvision DataModule with a wrong ``data_dir``."""

    def setup(self, stage: str | None = None) -> None:
        raise DataError("the images in data_dir='MISSING' are missing; pass --data.download=true")


def exits(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, list[str]]:
    """Run ``main(args)``; return its exit code and the ``error:`` lines it printed."""
    capsys.readouterr()
    with pytest.raises(SystemExit) as caught:
        main(args)
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    return int(caught.value.code or 0), errors


@pytest.mark.parametrize("logger", ["CSVLogger", "WandbLogger"])
def test_missing_data_exits_2_and_leaves_no_run_folder(
    logger: str,
    workdir: Path,
    fitted: Callable[..., Path],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("WANDB_MODE", "offline")
    fitted("earlier")
    before = hashes(workdir / "logs" / "earlier")
    code, errors = exits(
        ["fit", *FAST, "--data=test_bad_input.MissingImages", f"--trainer.logger={logger}"], capsys
    )
    assert code == 2 and len(errors) == 1 and "data_dir='MISSING'" in errors[0]
    assert [p.name for p in (workdir / "logs").iterdir()] == ["earlier"]
    assert hashes(workdir / "logs" / "earlier") == before


def test_a_bad_run_deletes_only_a_logs_folder_it_made(
    workdir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An empty logs folder the user made (behind a symlink, or given as ``--logs_dir``) stays after a run
    that bad input stopped; one the run itself made goes with its run folder."""
    target, mine = workdir / "disk" / "logs", workdir / "mine"
    target.mkdir(parents=True)
    mine.mkdir()
    (workdir / "logs").symlink_to(target)
    missing = ["fit", *FAST, "--data=test_bad_input.MissingImages"]
    for logs_dir in ("logs", mine, workdir / "new"):
        code, errors = exits([*missing, f"--logs_dir={logs_dir}"], capsys)
        assert code == 2 and len(errors) == 1, errors
    assert target.is_dir() and mine.is_dir() and not any(target.iterdir()) and not any(mine.iterdir())
    assert not (workdir / "new").exists()


@pytest.mark.slow
def test_wandb_online_without_an_api_key_is_one_line(workdir: Path) -> None:
    """In a process of its own: W&B's settings are fixed for a process once a W&B run started."""
    env = {"WANDB_MODE": "online", "WANDB_API_KEY": "", "NETRC": str(workdir / "no-netrc")}
    args = ["fit", *FAST, "--trainer.logger=WandbLogger", "--trainer.logger.offline=false"]
    result = run_module(args, cwd=workdir, env=env, check=False, timeout=300)
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert result.returncode == 2 and len(errors) == 1 and "W&B could not start the run" in errors[0], (
        result.stderr
    )
    assert not (workdir / "logs").exists() or not list((workdir / "logs").iterdir())


def test_a_logger_whose_package_is_missing_is_one_line(
    workdir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("lightning.pytorch.loggers")
    code, errors = exits(["fit", *FAST, "--trainer.logger=lightning.pytorch.loggers.MLFlowLogger"], capsys)
    assert code == 2 and len(errors) == 1 and "MLFlowLogger" in errors[0] and "mlflow" in errors[0], errors
    assert not (workdir / "logs").exists() or not list((workdir / "logs").iterdir())


def test_a_traceback_before_any_checkpoint_leaves_no_run_folder(
    workdir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A bug in the user's code at the first step is the user's traceback (not an engine line), and the new
    run folder, which holds no checkpoint, goes with it."""
    with pytest.raises(RuntimeError, match="boom"):
        main(["fit", *FAST, "--model=helpers.CrashingClassifier", "--model.crash_at_step=0"])
    assert not (workdir / "logs").exists()


def test_a_missing_logger_package_and_pl_trainer_variables_are_one_line_each(
    workdir: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The W&B preset without ``wandb`` installed: one error line naming the package, exit 2, no folder.
    A ``PL_TRAINER_*`` variable, which the CLI cannot honour (it sets every Trainer argument), is named
    in one warning line with the option to use."""
    monkeypatch.setitem(sys.modules, "wandb", None)  # (as if not installed)
    code, errors = exits(["fit", *FAST, "--trainer.logger=lightning.pytorch.loggers.WandbLogger"], capsys)
    assert code == 2 and errors == [
        "error: trainer.logger WandbLogger needs the wandb package: pip install wandb, or log elsewhere "
        "(e.g. --config configs/logger/tensorboard.yaml)"
    ]
    assert not (workdir / "logs").exists()
    monkeypatch.setenv("PL_TRAINER_MAX_EPOCHS", "3")
    with pytest.warns(UserWarning, match=r"PL_TRAINER_MAX_EPOCHS is not read here .* --trainer.max_epochs="):
        main(["fit", *FAST])
