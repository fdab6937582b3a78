"""Faults of the file system while a command writes: a folder that cannot be created or written, a full
disk, a file where a folder must be. Each is one ``error:`` line naming the path and the cause (the
system's words for it), exit code 2 when the path given is wrong (a file in the way) and 1 for a fault
of the disk; nothing half-written stays behind: no new run folder without a checkpoint, no partial file.
(Checkpoint names built from metric keys, ``{val/acc}``, one file in ``checkpoints/``: test_lifecycle.py.)"""

from __future__ import annotations

import builtins
import errno
import io
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from lightning.pytorch.loggers import CSVLogger
from support import ENGINE_TESTS, FAST, main, run_dirs, run_main

NO_SPACE = os.strerror(errno.ENOSPC)
SWEEP = ENGINE_TESTS / "fixture_sweep.yaml"
TRIAL = ["--trainer.max_epochs=1", "--trainer.limit_train_batches=2", "--trainer.limit_val_batches=1"]


class FullFile:
    """A file being written on a full disk: its first write stores half its data, then raises
    ``OSError(ENOSPC)`` without a file name, as a failed ``write`` does."""

    def __init__(self, handle: Any) -> None:
        self.handle = handle

    def write(self, data: Any) -> int:
        self.handle.write(data[: len(data) // 2])
        self.handle.flush()
        raise OSError(errno.ENOSPC, NO_SPACE)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.handle, name)

    def __enter__(self) -> FullFile:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.handle.close()


def fill_disk(monkeypatch: pytest.MonkeyPatch, where: Callable[[Path], bool], after: int = 0) -> None:
    """Fill the disk for the files opened for writing whose path ``where`` accepts, from the one after
    the first ``after`` of them on (those are written whole)."""
    real_open, matched = builtins.open, []

    def open_on_a_full_disk(file: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        handle = real_open(file, mode, *args, **kwargs)
        if isinstance(file, (str, os.PathLike)) and set(mode) & set("wax+") and where(Path(file)):
            matched.append(file)
            if len(matched) > after:
                return FullFile(handle)
        return handle

    monkeypatch.setattr(builtins, "open", open_on_a_full_disk)
    monkeypatch.setattr(io, "open", open_on_a_full_disk)


def named(name: str) -> Callable[[Path], bool]:
    """Files whose name holds ``name`` (its temporary file's too)."""
    return lambda path: name in path.name


def one_error(err: str) -> str:
    """The one ``error:`` line of ``err``; no traceback."""
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in err, err
    return errors[0]


def files(folder: Path) -> list[str]:
    """Every path under ``folder``, relative, sorted."""
    return sorted(str(path.relative_to(folder)) for path in folder.rglob("*"))


# ---------------------------------------------------------------------------------- a file in the way
@pytest.mark.parametrize("logs_dir", ["blocked", "blocked/runs"])
@pytest.mark.parametrize("command", ["fit", "validate", "lr_find", "export", "sweep"])
def test_a_file_where_the_logs_folder_must_be_is_named_and_nothing_is_written(
    command: str,
    logs_dir: str,
    workdir: Path,
    fitted: Callable[..., Path],
    capsys: pytest.CaptureFixture[str],
) -> None:
    ckpt = fitted() / "checkpoints" / "best.ckpt"
    (workdir / "blocked").write_text("a file\n")
    before = files(workdir)
    args = {
        "fit": ["fit", *FAST],
        "validate": ["validate", *FAST, f"--ckpt_path={ckpt}"],
        "lr_find": ["lr_find", "--tune.num_training=5"],
        "export": ["export", f"--ckpt_path={ckpt}", "--format=torch_export"],
        "sweep": ["sweep", "--config", str(SWEEP), "--n_trials=1", *TRIAL],
    }[command]
    code, _, err = run_main([*args, f"--logs_dir={logs_dir}"], capsys)
    line = one_error(err)
    assert code == 2, err
    assert f"{workdir / 'blocked'} is a file where a folder must be" in line, line
    assert files(workdir) == before and (workdir / "blocked").read_text() == "a file\n"


def test_a_file_where_an_output_folder_must_be_is_named(
    workdir: Path, fitted: Callable[..., Path], capsys: pytest.CaptureFixture[str]
) -> None:
    run = fitted()
    (workdir / "blocked").write_text("a file\n")
    before = files(workdir)
    for args in (
        ["report", str(run), "--output=blocked/report"],
        [
            "export",
            f"--ckpt_path={run}/checkpoints/best.ckpt",
            "--format=torch_export",
            "--output=blocked/m.pt2",
        ],
        ["fit", *FAST, "--checkpoint.dirpath=blocked/checkpoints"],
    ):
        code, _, err = run_main(args, capsys)
        assert code == 2 and "blocked is a file where a folder must be" in one_error(err), args
        assert files(workdir) == before, args


def test_export_creates_the_folder_of_its_output(
    fitted: Callable[..., Path], workdir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ckpt = fitted() / "checkpoints" / "best.ckpt"
    output = workdir / "exports" / "tiny" / "model.pt2"
    main(["export", f"--ckpt_path={ckpt}", "--format=torch_export", f"--output={output}"])
    assert f"Exported model: {output}" in capsys.readouterr().out
    assert torch.export.load(output).module()(torch.zeros(2, 1, 8, 8)).shape == (2, 4)


# ---------------------------------------------------------------------------------- a folder not writable
def test_a_logs_folder_that_cannot_be_written_is_one_line(
    workdir: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The permission the system refuses (as for a folder of another user, or a read-only mount)."""
    logs, real_mkdir = workdir / "logs", os.mkdir
    logs.mkdir()

    def refused(path: Any, *args: Any, **kwargs: Any) -> None:
        if Path(path).parent == logs:
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(path))
        real_mkdir(path, *args, **kwargs)

    monkeypatch.setattr(os, "mkdir", refused)
    code, _, err = run_main(["fit", *FAST, "--run_name=refused"], capsys)
    line = one_error(err)
    assert code == 1 and f"{logs / 'refused'}: {os.strerror(errno.EACCES)}" in line, line
    assert files(workdir) == ["logs"]


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="root may write a read-only folder")
def test_a_read_only_logs_folder_is_one_line(workdir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (logs := workdir / "logs").mkdir()
    logs.chmod(0o555)
    try:
        code, _, err = run_main(["fit", *FAST], capsys)
    finally:
        logs.chmod(0o755)
    line = one_error(err)
    assert code == 1 and str(logs) in line and os.strerror(errno.EACCES) in line, line
    assert files(workdir) == []


# ---------------------------------------------------------------------------------- a full disk
@pytest.mark.parametrize("after", [0, 2])
def test_a_full_disk_while_a_checkpoint_is_written_keeps_the_checkpoints_already_whole(
    after: int, workdir: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``after=0``: the first checkpoint fails, and the run folder goes; ``after=2``: epoch 0's two
    checkpoints are written, epoch 1's fails, and they stay as they were, with no partial file."""
    fill_disk(monkeypatch, lambda path: "checkpoints" in path.parts, after=after)
    code, _, err = run_main(["fit", *FAST, "--trainer.max_epochs=2"], capsys)
    line = one_error(err)
    assert code == 1 and NO_SPACE in line and ".ckpt" in line and "checkpoints" in line, line
    if after == 0:
        assert files(workdir) == []
        return
    (run,) = run_dirs(workdir / "logs")
    assert files(run / "checkpoints") == ["best.ckpt", "last.ckpt"]
    last = torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)
    assert (last["epoch"], last["global_step"]) == (0, 2)


@pytest.mark.parametrize("command", ["fit", "validate", "test", "predict"])
def test_a_full_disk_in_the_loggers_writes_names_the_run_folder_and_removes_it(
    command: str,
    workdir: Path,
    fitted: Callable[..., Path],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    run = fitted()
    before = files(workdir)
    ckpt = [] if command == "fit" else [f"--ckpt_path={run}/checkpoints/best.ckpt"]

    def no_space(self: CSVLogger) -> None:
        raise OSError(errno.ENOSPC, NO_SPACE)  # (a write names no file)

    monkeypatch.setattr(CSVLogger, "save", no_space)
    code, _, err = run_main([command, *FAST, *ckpt, f"--run_name={command}_run"], capsys)
    line = one_error(err)
    assert code == 1 and f"{workdir / 'logs' / f'{command}_run'}: {NO_SPACE}" in line, line
    assert files(workdir) == before


@pytest.mark.parametrize("name", ["predictions.csv", "config.yaml", "provenance.yaml"])
def test_a_full_disk_while_predict_writes_leaves_no_partial_file_and_no_run_folder(
    name: str,
    workdir: Path,
    fitted: Callable[..., Path],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    run = fitted()
    before = files(workdir)
    fill_disk(monkeypatch, named(name))
    code, _, err = run_main(["predict", *FAST, f"--ckpt_path={run}/checkpoints/best.ckpt"], capsys)
    line = one_error(err)
    assert code == 1 and NO_SPACE in line and str(workdir / "logs") in line, line
    assert files(workdir) == before


def test_a_full_disk_while_exporting_leaves_no_partial_model_and_no_run_folder(
    workdir: Path,
    fitted: Callable[..., Path],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ckpt = fitted() / "checkpoints" / "best.ckpt"
    before = files(workdir)
    fill_disk(monkeypatch, named(".pt2"))
    code, _, err = run_main(["export", f"--ckpt_path={ckpt}", "--format=torch_export"], capsys)
    line = one_error(err)
    assert code == 1 and NO_SPACE in line and "model.pt2" in line, line
    assert files(workdir) == before
    code, _, err = run_main(
        ["export", f"--ckpt_path={ckpt}", "--format=torch_export", "--output=m.pt2"], capsys
    )
    assert code == 1 and f"error: m.pt2: {NO_SPACE}" in one_error(err)
    assert files(workdir) == before


def test_a_full_disk_while_the_report_is_drawn_leaves_no_partial_png(
    workdir: Path,
    fitted: Callable[..., Path],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    run = fitted()
    fill_disk(monkeypatch, named("accuracy.png"))
    code, _, err = run_main(["report", str(run)], capsys)
    line = one_error(err)
    assert code == 1 and f"{run / 'report' / 'accuracy.png'}: {NO_SPACE}" in line, line
    assert files(run / "report") == ["loss.png"]  # whole, written before the disk filled


@pytest.mark.parametrize(
    "command, name",
    [
        ("lr_find", "lr_find.csv"),
        ("lr_find", "lr_find.png"),
        ("scale_batch_size", "suggested_batch_size.yaml"),
    ],
)
def test_a_full_disk_while_a_tuner_writes_leaves_no_run_folder(
    command: str,
    name: str,
    workdir: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fill_disk(monkeypatch, named(name))
    tune = ["--tune.num_training=5"] if command == "lr_find" else ["--tune.max_trials=2"]
    args = [command, *tune, "--trainer.enable_progress_bar=false", "--trainer.enable_model_summary=false"]
    code, _, err = run_main(args, capsys)
    line = one_error(err)
    assert code == 1 and NO_SPACE in line and name in line, line
    assert files(workdir) == []


def test_a_full_disk_while_a_sweep_writes_its_results_is_one_line(
    workdir: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    fill_disk(monkeypatch, named("trials.csv"))
    code, _, err = run_main(["sweep", "--config", str(SWEEP), "--n_trials=1", *TRIAL], capsys)
    line = one_error(err)
    sweep = workdir / "logs" / "fixture_sweep_sweep"
    assert code == 1 and f"{sweep / 'trials.csv'}: {NO_SPACE}" in line, line
    assert not [name for name in os.listdir(sweep) if "trials" in name]
