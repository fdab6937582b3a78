"""Checkpoints and runs as a user meets them over several commands: last is last, best is best, a resume
continues its run, the data values given with ``--ckpt_path`` win, a ModelCheckpoint of the user's never
takes over, and no run writes a file of another run."""

from __future__ import annotations

import functools
import os
import shutil
import signal
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
import yaml
from lightning.pytorch import Trainer
from support import FAST, RunCLI, hashes, main, metric_rows, run_dirs, run_main

from runwright import runs
from runwright.errors import TrainingInterrupted

SCRIPTED = ["--model=helpers.ScriptedClassifier"]


def epoch_of(path: Path) -> int:
    return int(torch.load(path, weights_only=True, map_location="cpu")["epoch"])


def assert_same_rows(run: Path, reference: Path, key: str) -> None:
    """``key`` is logged at the same epochs and steps, with the same values (to 1e-6), in both runs."""
    rows, expected = metric_rows(run, key), metric_rows(reference, key)
    assert [row[:2] for row in rows] == [row[:2] for row in expected], key
    assert [row[2] for row in rows] == pytest.approx([row[2] for row in expected], rel=1e-6, abs=1e-6), key


def test_last_is_the_latest_epoch_and_best_the_best_when_the_metric_gets_worse(run_cli: RunCLI) -> None:
    cli = run_cli("fit", *SCRIPTED, "--model.scores=[0.5,0.7,0.6]", "--trainer.max_epochs=3")
    folder = cli.run_dir / "checkpoints"
    assert epoch_of(folder / "last.ckpt") == 2
    assert epoch_of(folder / "best.ckpt") == 1
    assert [v for _, _, v in metric_rows(cli.run_dir, "best/val/acc")] == pytest.approx([0.5, 0.7, 0.7])


def test_resume_continues_the_run_in_its_folder_with_its_best_so_far(
    run_cli: RunCLI, workdir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # no LR schedule: the warmup-cosine length follows max_epochs, which differs here
    args = [*SCRIPTED, "--model.scores=[0.5,0.7,0.6,0.65,0.6]", "--model.lr_scheduler=null"]
    straight = run_cli("fit", *args, "--trainer.max_epochs=4", "--run_name=straight")
    first = run_cli("fit", *args, "--trainer.max_epochs=2", "--run_name=resumed")
    run_cli("fit", *args, "--trainer.max_epochs=3", "--ckpt_path=last")
    # resume twice; the second time as GracefulInterruption advises: the first command (with its
    # --run_name) plus --ckpt_path last
    again = run_cli("fit", *args, "--trainer.max_epochs=4", "--run_name=resumed", "--ckpt_path=last")
    assert again.run_dir == first.run_dir  # no new run folder
    assert sorted(p.name for p in run_dirs(workdir / "logs")) == ["resumed", "straight"]
    folder = first.run_dir / "checkpoints"
    assert epoch_of(folder / "last.ckpt") == 3 and epoch_of(folder / "best.ckpt") == 1
    for key in ("best/val/acc", "val/acc", "train/loss", "train/acc"):
        assert_same_rows(first.run_dir, straight.run_dir, key)
    assert [v for _, _, v in metric_rows(first.run_dir, "best/val/acc")] == pytest.approx(
        [0.5, 0.7, 0.7, 0.7]
    )
    assert (first.run_dir / "config.yaml").is_file() and (first.run_dir / "config.resume-2.yaml").is_file()
    for name, tensor in straight.model.state_dict().items():
        assert torch.equal(tensor, again.model.state_dict()[name]), name
    # once more at the same max_epochs: nothing to train, said in one line; checkpoints and rows unchanged
    before, rows = hashes(folder), metric_rows(first.run_dir, "val/acc")
    capsys.readouterr()
    run_cli("fit", *args, "--trainer.max_epochs=4", "--ckpt_path=last")
    out = capsys.readouterr().out
    assert "the checkpoint (current_epoch=4, global_step=8) already reached --trainer.max_epochs=4" in out
    assert hashes(folder) == before and metric_rows(first.run_dir, "val/acc") == rows
    # the run folder moved (another disk, another machine): its best so far still counts, and a worse
    # epoch leaves best.ckpt (epoch 1) alone
    moved = first.run_dir.rename(first.run_dir.with_name("moved"))
    again = run_cli("fit", *args, "--trainer.max_epochs=5", "--ckpt_path=last")
    assert again.run_dir == moved and epoch_of(moved / "checkpoints" / "best.ckpt") == 1
    assert again.trainer.checkpoint_callback.best_model_path == str(moved / "checkpoints" / "best.ckpt")
    assert [v for _, _, v in metric_rows(moved, "best/val/acc")] == pytest.approx([0.5, 0.7, 0.7, 0.7, 0.7])


def test_a_resume_from_a_periodic_last_checkpoint_keeps_the_best_of_the_validation_after_it(
    run_cli: RunCLI, capsys: pytest.CaptureFixture[str]
) -> None:
    """``last.ckpt`` saved every training step (``--last_checkpoint.every_n_train_steps=1``) is saved again
    after a validation at its step, so a resume (here of the moved run folder) continues from that
    validation's best score: a worse later epoch leaves ``best.ckpt`` (epoch 1) alone. A resume with
    ``--checkpoint.dirpath`` set to a new, empty folder starts without a best there, as Lightning's does;
    ``--ckpt_path best`` then takes that folder's."""
    args = [*SCRIPTED, "--model.scores=[0.5,0.7,0.6,0.65,0.6]", "--model.lr_scheduler=null"]
    args += ["--last_checkpoint.every_n_train_steps=1"]
    first = run_cli("fit", *args, "--trainer.max_epochs=2")
    moved = first.run_dir.rename(first.run_dir.with_name("moved"))
    run_cli("fit", *args, "--trainer.max_epochs=4", "--ckpt_path=last")
    folder = moved / "checkpoints"
    assert sorted(p.name for p in folder.iterdir()) == ["best.ckpt", "last.ckpt"]
    assert epoch_of(folder / "best.ckpt") == 1 and epoch_of(folder / "last.ckpt") == 3
    assert [v for _, _, v in metric_rows(moved, "best/val/acc")] == pytest.approx([0.5, 0.7, 0.7, 0.7])
    best = hashes(folder)["best.ckpt"]
    elsewhere = moved.parent / "elsewhere"
    run_cli("fit", *args, "--trainer.max_epochs=5", f"--checkpoint.dirpath={elsewhere}", "--ckpt_path=last")
    assert epoch_of(elsewhere / "best.ckpt") == 4 and hashes(folder)["best.ckpt"] == best
    capsys.readouterr()
    run_cli("test", "--ckpt_path=best")  # the run's best is the one in its --checkpoint.dirpath
    assert f"--ckpt_path: {elsewhere / 'best.ckpt'}" in capsys.readouterr().out.splitlines()


@pytest.mark.parametrize(
    "args",
    [
        ["--trainer.limit_train_batches=4", "--trainer.val_check_interval=2", "--trainer.max_steps=6"],
        ["--trainer.max_steps=3"],
        [
            "--trainer.limit_train_batches=3",
            "--last_checkpoint.every_n_train_steps=2",
            "--trainer.max_steps=4",
        ],
    ],
    ids=["validation-within-the-epoch", "no-validation", "every-2-steps"],
)
def test_a_resume_from_a_periodic_last_checkpoint_of_a_stop_within_the_epoch_ends_as_the_uninterrupted_run(
    args: list[str], run_cli: RunCLI
) -> None:
    """A run with a periodic ``last.ckpt`` (``--last_checkpoint.every_n_train_steps``) stopped within an
    epoch (``--trainer.max_steps``), after a validation there or not, resumes within that epoch (its last
    batches are trained, not skipped) with that validation's best score: it ends as the uninterrupted run
    (the training steps and losses, ``best.ckpt``'s step, ``last.ckpt``'s weights bit for bit)."""
    common = [*SCRIPTED, "--model.scores=[0.5,0.7,0.6,0.65]", "--model.lr_scheduler=null"]
    common += ["--last_checkpoint.every_n_train_steps=1", "--trainer.max_epochs=3"]
    full = run_cli("fit", *common, *args[:-1], "--run_name=full").run_dir
    part = run_cli("fit", *common, *args, "--run_name=part").run_dir
    run_cli("fit", *common, *args[:-1], f"--ckpt_path={part / 'checkpoints' / 'last.ckpt'}")
    for key in ("train/loss", "val/acc"):
        assert metric_rows(part, key) == metric_rows(full, key)
    saved = {
        run: {
            name: torch.load(run / "checkpoints" / name, weights_only=True)
            for name in ("best.ckpt", "last.ckpt")
        }
        for run in (full, part)
    }
    assert saved[part]["best.ckpt"]["global_step"] == saved[full]["best.ckpt"]["global_step"]
    last = saved[part]["last.ckpt"]["state_dict"]
    assert all(
        torch.equal(value, last[name]) for name, value in saved[full]["last.ckpt"]["state_dict"].items()
    )


@pytest.mark.parametrize(
    "args, line",
    [
        (["--trainer.max_epochs=0"], "already reached --trainer.max_epochs=0"),
        (
            ["--trainer.limit_train_batches=0", "--model.lr_scheduler=null"],
            "had no training batch (see --trainer.limit_train_batches",
        ),
    ],
)
def test_a_fit_that_trains_no_step_says_so(
    args: list[str], line: str, workdir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A new ``fit`` that can train no step (``max_epochs=0``, no training batch) says so in one line
    naming the setting, as a resume that already reached ``max_epochs`` does; it writes no checkpoint."""
    code, out, err = run_main(["fit", *FAST, *args], capsys)
    assert code == 0, err
    assert f"Nothing trained: the run (current_epoch=0, global_step=0) {line}" in out
    assert not list((workdir / "logs").glob("*/checkpoints/*.ckpt"))


def test_a_run_being_trained_is_not_resumed_by_a_second_command(
    fitted: Callable[..., Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """``fit --ckpt_path last`` typed while another process still trains that run (a hand-typed resume
    beside a requeued job) is refused with one line, exit 2, and leaves the run's files as they were; once
    that process ends, the same command continues the run."""
    run = fitted("A")
    before = hashes(run)
    other = runs.lock_run(run)  # (the engine's hold of a run in another process's fit)
    assert other is not None
    code, _, err = run_main(["fit", *FAST, "--trainer.max_epochs=2", "--ckpt_path=last"], capsys)
    assert code == 2 and err.splitlines()[-1] == (
        f"error: {run} is being trained by another process: wait until it ends, or branch off with "
        "--run_name <a new name>"
    )
    assert hashes(run) == before
    runs.unlock_run(other)
    code, out, err = run_main(["fit", *FAST, "--trainer.max_epochs=2", "--ckpt_path=last"], capsys)
    assert code == 0 and f"Run folder: {run}" in out, err
    assert epoch_of(run / "checkpoints" / "last.ckpt") == 1


def test_a_forked_child_does_not_keep_its_parents_run_lock(tmp_path: Path) -> None:
    """A DataLoader worker (a forked child) outliving its killed fit must not keep the run locked."""
    folder = runs.lock_run(tmp_path)
    assert folder is not None
    started, ready = os.pipe()
    child = os.fork()
    if child == 0:  # (the worker: alive while the parent's lock is released)
        os.write(ready, b"1")
        time.sleep(5)
        os._exit(0)
    try:
        os.read(started, 1)  # (the child runs: its fork hooks have run)
        runs.unlock_run(folder)  # (what the kill of the parent does)
        again = runs.lock_run(tmp_path)
        assert again is not None
        runs.unlock_run(again)
    finally:
        os.kill(child, signal.SIGKILL)
        os.waitpid(child, 0)
        os.close(started)
        os.close(ready)


@pytest.mark.parametrize("command", ["validate", "test", "predict"])
def test_evaluating_without_a_checkpoint_says_the_model_is_as_built(
    command: str, fitted: Callable[..., Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """``test --config logs/<run>/config.yaml`` without ``--ckpt_path`` evaluates the model as built (its
    initial weights, as Lightning does): one line says so and names ``--ckpt_path``."""
    config = fitted() / "config.yaml"
    note = f"No --ckpt_path: {command} takes the model as built"
    code, out, err = run_main([command, *FAST, "--config", str(config)], capsys)
    assert code == 0 and note in out, err
    code, out, err = run_main([command, *FAST, "--config", str(config), "--ckpt_path=best"], capsys)
    assert code == 0 and note not in out, err


def test_best_is_the_callbacks_best_for_top_k_and_min_mode(run_cli: RunCLI) -> None:
    scores = ["--model.scores=[0.5,0.9,0.6,0.8,0.3]", "--trainer.max_epochs=5"]
    cli = run_cli("fit", *SCRIPTED, *scores, "--checkpoint.save_top_k=3", "--checkpoint.filename=top-{epoch}")
    test = run_cli("test", "--ckpt_path=best")
    assert Path(test.config.test.ckpt_path).name == "top-epoch=1.ckpt"
    assert len(list((cli.run_dir / "checkpoints").glob("top-*.ckpt"))) == 3
    run_cli("fit", *SCRIPTED, *scores, "--checkpoint.mode=min", "--checkpoint.save_top_k=2")
    test = run_cli("test", "--ckpt_path=best")
    assert epoch_of(Path(test.config.test.ckpt_path)) == 4  # the lowest score


def test_best_resolves_when_the_filename_holds_a_metric_key(
    run_cli: RunCLI, workdir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``{val/acc:.3f}`` in a filename: one file in ``checkpoints/`` (``val_acc``, no ``val/`` folder) per
    checkpoint kept, the best of top 2; ``test`` and ``validate --ckpt_path best`` find it, and ``fit
    --ckpt_path best`` (or ``last``) continues that run in its folder."""
    args = [*SCRIPTED, "--model.scores=[0.5,0.9,0.6,0.7,0.65]", "--checkpoint.save_top_k=2"]
    args += ["--checkpoint.filename={epoch}-{val/acc:.3f}"]
    fit = run_cli("fit", *args, "--trainer.max_epochs=3")
    checkpoints = fit.run_dir / "checkpoints"
    kept = ["epoch=1-val_acc=0.900.ckpt", "epoch=2-val_acc=0.600.ckpt", "last.ckpt"]
    assert sorted(path.name for path in checkpoints.iterdir()) == kept
    assert all(path.is_file() for path in checkpoints.iterdir())
    best = Path(run_cli("test", "--ckpt_path=best").config.test.ckpt_path)
    assert (best.parent.name, best.name, epoch_of(best)) == ("checkpoints", "epoch=1-val_acc=0.900.ckpt", 1)
    # and fit from it continues that run in its folder
    again = run_cli("fit", *args, "--trainer.max_epochs=4", "--ckpt_path=best")
    assert again.run_dir == fit.run_dir and (fit.run_dir / "config.resume-1.yaml").is_file()
    capsys.readouterr()
    run_cli("fit", *args, "--trainer.max_epochs=5", "--ckpt_path=last")
    (line,) = [line for line in capsys.readouterr().out.splitlines() if line.startswith("--ckpt_path: ")]
    assert Path(line.removeprefix("--ckpt_path: ")).resolve() == checkpoints / "last.ckpt"
    fits = [run for run in run_dirs(workdir / "logs") if run.name.endswith("_fit")]
    assert fits == [fit.run_dir]  # (no new run folder)
    assert all(path.is_file() for path in checkpoints.iterdir())
    found = Path(run_cli("validate", "--ckpt_path=best").config.validate.ckpt_path).resolve()
    assert found.parent == checkpoints and found.name.startswith("epoch=") and found.is_file()


def test_best_and_last_never_fall_back_to_an_older_run(
    run_cli: RunCLI, workdir: Path, capsys: pytest.CaptureFixture[str], fitted: Callable[..., Path]
) -> None:
    """The newest run has no last.ckpt (switched off): best/last must not quietly name the run before."""
    fitted("older")  # (a finished run with best.ckpt and last.ckpt)
    run_cli(
        "fit", *SCRIPTED, "--trainer.max_epochs=2", "--run_name=newer", "--last_checkpoint.every_n_epochs=0"
    )
    assert (workdir / "logs" / "newer" / "checkpoints" / "best.ckpt").is_file()
    for alias in ("best", "last"):
        code, _, err = run_main(["test", *FAST, f"--ckpt_path={alias}"], capsys)
        assert code == 2 and f"--ckpt_path={alias}: " in err and "newer" in err and "older" not in err, err
    assert sorted(p.name for p in run_dirs(workdir / "logs")) == ["newer", "older"]


def test_report_uses_the_runs_recorded_best_checkpoint(
    run_cli: RunCLI, capsys: pytest.CaptureFixture[str]
) -> None:
    """With save_top_k=3 the best epoch is in best-v2.ckpt, not best.ckpt (the first epoch's)."""
    args = ["--model.scores=[0.5,0.7,0.9]", "--trainer.max_epochs=3", "--checkpoint.save_top_k=3"]
    cli = run_cli("fit", *SCRIPTED, *args)
    assert epoch_of(cli.run_dir / "checkpoints" / "best.ckpt") == 0
    code, out, _ = run_main(["report", str(cli.run_dir)], capsys)
    (loaded,) = [
        Path(line.removeprefix("--ckpt_path: ")) for line in out.splitlines() if "--ckpt_path" in line
    ]
    assert code == 0 and loaded.name == "best-v2.ckpt" and epoch_of(loaded) == 2
    assert "confusion_matrix.png" in out


def test_continuing_from_an_earlier_checkpoint_logs_each_step_once(run_cli: RunCLI) -> None:
    """fit --ckpt_path best (epoch 1 of 4) continues the run in its folder: the rows logged after that
    checkpoint are replaced, none doubled, and they equal an uninterrupted run's."""
    args = [*SCRIPTED, "--model.scores=[0.5,0.9,0.6,0.65]", "--trainer.max_epochs=4"]
    straight = run_cli("fit", *args, "--run_name=straight")
    run = run_cli("fit", *args, "--run_name=again")
    assert epoch_of(run.run_dir / "checkpoints" / "best.ckpt") == 1
    run_cli("fit", *args, "--ckpt_path=best")
    for key in ("train/loss", "train/lr", "val/acc", "val/loss", "best/val/acc"):
        rows = metric_rows(run.run_dir, key)
        assert len({row[:2] for row in rows}) == len(rows), f"{key}: a step logged twice"
        assert_same_rows(run.run_dir, straight.run_dir, key)


def test_rerunning_a_saved_config_or_branching_from_a_checkpoint_never_touches_the_old_run(
    run_cli: RunCLI, workdir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    first = run_cli("fit", "--run_name=A", "--trainer.max_epochs=2")
    before = hashes(first.run_dir)
    config = str(first.run_dir / "config.yaml")
    rerun = run_cli("fit", "--config", config, "--run_name=B")
    assert rerun.run_dir.name == "B" and (rerun.run_dir / "checkpoints" / "best.ckpt").is_file()
    auto = run_cli("fit", "--config", config)  # the saved run_name is not reused
    assert auto.run_dir.name not in ("A", "B")
    last = first.run_dir / "checkpoints" / "last.ckpt"
    branch = run_cli("fit", "--run_name=C", "--trainer.max_epochs=3", f"--ckpt_path={last}")
    assert epoch_of(branch.run_dir / "checkpoints" / "last.ckpt") == 2
    # a branch with nothing left to train says so, and names no best checkpoint (it has none; A's is A's)
    capsys.readouterr()
    run_cli("fit", "--run_name=D", "--trainer.max_epochs=2", f"--ckpt_path={last}")
    out = capsys.readouterr().out
    assert "already reached --trainer.max_epochs=2" in out and "Best checkpoint" not in out
    assert hashes(first.run_dir) == before
    names = ["A", "B", "C", "D", auto.run_dir.name]
    assert sorted(p.name for p in run_dirs(workdir / "logs")) == sorted(names)


def test_config_yaml_is_portable_and_names_no_run_folder(
    run_cli: RunCLI, workdir: Path, fitted: Callable[..., Path], trained_run: Path
) -> None:
    """config.yaml has no folder of its run (loggers, checkpoints, default_root_dir) and leaves out a fit's
    run_name and ckpt_path, so re-running it (also from elsewhere, after the run folder moved) starts a
    new run; a continued run's config.resume-1.yaml too."""
    fitted("A")  # (its config.yaml written by the shared fit, in the folder above trained_run's logs)
    first = run_cli("fit", "--run_name=A", "--trainer.max_epochs=2", "--ckpt_path=last")
    for name, cwd in (("config.yaml", trained_run.parents[1]), ("config.resume-1.yaml", workdir)):
        text = (first.run_dir / name).read_text()
        saved = yaml.safe_load(text)
        assert str(cwd) not in text and "logs/" not in text, name
        assert saved["trainer"]["default_root_dir"] is None
        assert saved["trainer"]["logger"]["init_args"]["save_dir"] == "logs"  # as the experiment says
        assert saved["checkpoint"]["dirpath"] is None and saved["last_checkpoint"]["dirpath"] is None
        assert "run_name" not in saved and "ckpt_path" not in saved
    # a checkpoint given before --config of it is kept (a null there overrode it: the untrained model)
    best = first.run_dir / "checkpoints" / "best.ckpt"
    validated = run_cli("validate", f"--ckpt_path={best}", "--config", str(first.run_dir / "config.yaml"))
    assert Path(validated.trainer.ckpt_path).resolve() == best.resolve()
    moved = workdir / "elsewhere"
    moved.mkdir()
    (workdir / "logs").rename(moved / "old_logs")
    os.chdir(moved)  # (the workdir fixture's monkeypatch.chdir puts the working directory back)
    rerun = run_cli("fit", "--config", str(moved / "old_logs" / "A" / "config.yaml"))
    assert rerun.run_dir.parent == moved / "logs" and rerun.run_dir.name != "A"
    assert not (moved / "old_logs" / "A" / "config.resume-2.yaml").exists()


# (a resume after max_steps logs like the uninterrupted run: test_private_apis.py, which pins the private
# attribute that makes it so)


def test_a_plain_lightning_checkpoint_of_the_helpers_classes_reloads(tmp_path: Path) -> None:
    """BaseModule/BaseDataModule subclasses stay plain Lightning classes: Trainer.fit, save_checkpoint,
    load_from_checkpoint and fit(ckpt_path=...) without the CLI."""
    from fixture_task import TinyClassifier, TinyImages

    def trainer(epochs: int) -> Trainer:
        return Trainer(
            max_epochs=epochs,
            default_root_dir=tmp_path,
            logger=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            limit_train_batches=2,
            limit_val_batches=1,
        )

    model = TinyClassifier()
    first = trainer(1)
    first.fit(model, TinyImages())
    first.save_checkpoint(tmp_path / "plain.ckpt")
    reloaded = TinyClassifier.load_from_checkpoint(tmp_path / "plain.ckpt")  # Lightning's default loading
    for name, tensor in model.state_dict().items():
        assert torch.equal(tensor, reloaded.state_dict()[name]), name
    second = trainer(2)
    second.fit(TinyClassifier(), TinyImages(), ckpt_path=tmp_path / "plain.ckpt")
    assert second.current_epoch == 2


def test_a_model_built_in_python_with_a_schedule_reloads_only_with_it_again(tmp_path: Path) -> None:
    """An optimizer and LR scheduler given as Python callables are not in the checkpoint: reloading
    without them warns and names what to pass, resuming ``fit`` without them stops; given again,
    both reload the same model and the resume continues the schedule."""
    from fixture_task import TinyClassifier, TinyImages

    from runwright.errors import ConfigError
    from runwright.schedules import WarmupCosineLR

    def built() -> TinyClassifier:
        return TinyClassifier(
            optimizer=functools.partial(torch.optim.SGD, lr=0.1),
            lr_scheduler=functools.partial(WarmupCosineLR, warmup_steps=1, total_steps=8),
        )

    def trainer(epochs: int) -> Trainer:
        return Trainer(max_epochs=epochs, default_root_dir=tmp_path, logger=False, enable_progress_bar=False,
                       enable_model_summary=False, limit_train_batches=2, limit_val_batches=1)  # fmt: skip

    first = trainer(1)
    first.fit(built(), TinyImages())
    first.save_checkpoint(path := tmp_path / "python.ckpt")
    with pytest.warns(
        UserWarning, match=r"built in Python with its own optimizer and lr_scheduler.*Pass them"
    ):
        TinyClassifier.load_from_checkpoint(path)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # given again: no warning
        again = TinyClassifier.load_from_checkpoint(
            path, **{k: getattr(built(), k) for k in ("optimizer", "lr_scheduler")}
        )
    assert again.lr_scheduler is not None
    with pytest.raises(ConfigError, match="lr_scheduler"):
        trainer(2).fit(TinyClassifier(), TinyImages(), ckpt_path=path)
    resumed = trainer(2)
    resumed.fit(built(), TinyImages(), ckpt_path=path)
    assert resumed.lr_scheduler_configs[0].scheduler.last_epoch == 2  # continued: stepped after each epoch


@pytest.mark.parametrize("scheduler", ["WarmupCosineLR", "OneCycleLR"])
def test_a_schedule_built_in_python_without_total_steps_gets_the_runs_steps(
    tmp_path: Path, scheduler: str
) -> None:
    """``partial(WarmupCosineLR, warmup_steps=0.1)`` (or ``partial(OneCycleLR, max_lr=0.1)``), written in
    Python without ``total_steps``, is sized as the config's null ``total_steps`` is: the run's optimizer
    steps, stepped every step (not ``total_steps=None: needs a finite run``)."""
    from fixture_task import TinyClassifier, TinyImages

    from runwright.schedules import WarmupCosineLR

    factory = {
        "WarmupCosineLR": functools.partial(WarmupCosineLR, warmup_steps=0.1),
        "OneCycleLR": functools.partial(torch.optim.lr_scheduler.OneCycleLR, max_lr=0.1),
    }[scheduler]
    model = TinyClassifier(optimizer=functools.partial(torch.optim.SGD, lr=0.1), lr_scheduler=factory)
    trainer = Trainer(max_epochs=2, default_root_dir=tmp_path, logger=False, enable_progress_bar=False,
                      enable_model_summary=False, limit_train_batches=3, limit_val_batches=1)  # fmt: skip
    trainer.fit(model, TinyImages())
    (config,) = trainer.lr_scheduler_configs
    assert config.interval == "step" and config.scheduler.last_epoch == 6
    assert getattr(config.scheduler, "total_steps", None) == 6


def test_a_copied_checkpoint_is_not_taken_for_a_run_of_the_folder_above(
    run_cli: RunCLI, workdir: Path, capsys: pytest.CaptureFixture[str], fitted: Callable[..., Path]
) -> None:
    """A checkpoint copied out of its run (``model.ckpt`` in some folder) belongs to no run, even when
    the folder above holds an unrelated ``config.yaml``: ``fit`` from it starts a new run, and
    ``export`` rebuilds it as ``test`` would (its own hyperparameters, the default data), never reading
    the unrelated one."""
    first = fitted()
    shelf = workdir / "shelf" / "models"
    shelf.mkdir(parents=True)
    (shelf.parent / "config.yaml").write_text("unrelated: true\n")
    copy = shelf / "model.ckpt"
    copy.write_bytes((first / "checkpoints" / "best.ckpt").read_bytes())
    second = run_cli("fit", f"--ckpt_path={copy}", "--trainer.max_epochs=2")
    assert second.run_dir.parent == workdir / "logs" and second.run_dir != first
    assert not (shelf.parent / "metrics.csv").exists()
    code, _, err = run_main(["export", f"--ckpt_path={copy}", "--format=torchscript"], capsys)
    assert code == 0 and "unrelated" not in err, err


def test_a_fit_without_ckpt_path_starts_afresh_next_to_a_last_ckpt(
    run_cli: RunCLI, workdir: Path, fitted: Callable[..., Path]
) -> None:
    """A ``checkpoints/last.ckpt`` in the working directory (another project's, a copied one) is no
    checkpoint of a ``fit`` that names none."""
    (workdir / "checkpoints").mkdir()
    (workdir / "checkpoints" / "last.ckpt").write_bytes((fitted() / "checkpoints" / "last.ckpt").read_bytes())
    cli = run_cli("fit")
    assert cli.trainer.ckpt_path is None
    assert not cli.continued and epoch_of(cli.run_dir / "checkpoints" / "last.ckpt") == 0


def test_continuing_a_run_with_another_logger_warns(run_cli: RunCLI, fitted: Callable[..., Path]) -> None:
    """The logger of a continued run comes from the command's config, like every trainer setting:
    continuing a CSV-logged run with another logger says so; repeating the run's logger does not."""
    fitted()
    with pytest.warns(UserWarning, match=r"logged with \['CSVLogger'\], with \['TensorBoardLogger'\]"):
        run_cli("fit", "--trainer.max_epochs=2", "--ckpt_path=last", "--trainer.logger=TensorBoardLogger")
    with warnings.catch_warnings():
        warnings.filterwarnings("error", "continuing")
        run_cli("fit", "--trainer.max_epochs=3", "--ckpt_path=last")


def test_an_optimizer_setting_given_with_ckpt_path_is_refused_as_its_state_continues(
    run_cli: RunCLI, capsys: pytest.CaptureFixture[str], fitted: Callable[..., Path]
) -> None:
    """``fit --ckpt_path`` continues the optimizer's state (its LR included): an optimizer value other than
    the checkpoint's would be recorded but never used, so it is one error line, and the run's files stay
    as they were; the checkpoint's own value resumes."""
    first = fitted()
    before = hashes(first)
    code, _, err = run_main(
        ["fit", *FAST, "--trainer.max_epochs=2", "--ckpt_path=last", "--model.optimizer.init_args.lr=5"],
        capsys,
    )
    assert code == 2
    assert (
        "model.optimizer.lr=5.0 (the checkpoint's 0.01) would never be used" in err.strip().splitlines()[-1]
    )
    assert hashes(first) == before
    resumed = run_cli(
        "fit", "--trainer.max_epochs=2", "--ckpt_path=last", "--model.optimizer.init_args.lr=0.01"
    )
    assert resumed.trainer.global_step == 4


def test_data_values_given_with_ckpt_path_win_over_the_checkpoints(run_cli: RunCLI, workdir: Path) -> None:
    """``test --ckpt_path best --data.batch_size=7 --data.num_test=20`` tests with batches of 7 on 20
    samples (not the checkpoint's 16 and 47); so does a
    ``--config`` that sets them; the checkpoint's other data values (num_classes 3) are kept."""
    run_cli("fit", "--data.num_classes=3", "--data.num_test=30")
    limits = ["--trainer.limit_test_batches=1.0"]
    given = run_cli("test", *limits, "--ckpt_path=best", "--data.batch_size=7", "--data.num_test=20")
    (workdir / "data.yaml").write_text("data:\n  init_args:\n    batch_size: 7\n    num_test: 20\n")
    from_file = run_cli("test", *limits, "--ckpt_path=best", "--config=data.yaml")
    kept = run_cli("test", *limits, "--ckpt_path=best")
    for cli, (batch_size, samples) in ((given, (7, 20)), (from_file, (7, 20)), (kept, (16, 30))):
        loader = cli.trainer.test_dataloaders
        assert (loader.batch_size, len(loader.dataset), cli.datamodule.num_classes) == (
            batch_size,
            samples,
            3,
        )
        assert cli.model.num_classes == 3


def test_a_users_model_checkpoint_never_takes_over(
    run_cli: RunCLI, workdir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A ModelCheckpoint in trainer.callbacks (here: by val/loss, every epoch kept, into the run's
    checkpoints/) is added next to the engine's: the printed best, ``--ckpt_path best|last`` and the
    Ctrl-C checkpoint stay the engine's best.ckpt (by val/acc) and last.ckpt."""
    own = [
        "--trainer.callbacks+=lightning.pytorch.callbacks.ModelCheckpoint",
        "--trainer.callbacks.monitor=val/loss",
        "--trainer.callbacks.save_top_k=-1",
        "--trainer.callbacks.filename=mine-{epoch}",
    ]
    scripted = [*SCRIPTED, "--model.scores=[0.5,0.9,0.6,0.7]", "--trainer.max_epochs=4"]
    code, out, _ = run_main(["fit", *FAST, *scripted, *own], capsys)
    (run,) = run_dirs(workdir / "logs")
    folder = run / "checkpoints"
    assert code == 0 and f"Best checkpoint (val/acc=0.9000): {folder / 'best.ckpt'}" in out, out
    mine = {f"mine-epoch={epoch}.ckpt" for epoch in range(4)}
    assert {p.name for p in folder.iterdir()} == {"best.ckpt", "last.ckpt", *mine}
    assert Path(run_cli("test", "--ckpt_path=best").config.test.ckpt_path).resolve() == folder / "best.ckpt"
    assert Path(run_cli("test", "--ckpt_path=last").config.test.ckpt_path).resolve() == folder / "last.ckpt"
    assert epoch_of(folder / "best.ckpt") == 1
    # Ctrl-C in epoch 1 of a new run: the resumable checkpoint is the engine's last.ckpt of that run
    three = "--trainer.limit_train_batches=3"
    with pytest.raises(TrainingInterrupted):
        run_cli(
            "fit",
            *scripted,
            *own,
            three,
            "--trainer.callbacks+=helpers.SignalAt",
            "--trainer.callbacks.epoch=1",
            "--run_name=stopped",
        )
    stopped = workdir / "logs" / "stopped" / "checkpoints"
    assert torch.load(stopped / "last.ckpt", weights_only=True)["global_step"] == 4  # 3 + 1 batches
    resumed = run_cli("fit", *scripted, *own, three, "--ckpt_path=last")
    assert resumed.run_dir == stopped.parent and resumed.trainer.global_step == 12


def test_best_is_never_a_users_checkpoint_even_when_the_engines_has_none(
    run_cli: RunCLI, workdir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Ctrl-C before the first validation: the engine's best checkpoint has no file yet, a ModelCheckpoint
    of the user's (by train/loss, every step) has; ``--ckpt_path best`` says there is no best instead of
    taking the user's file."""
    own = [
        "--trainer.callbacks+=lightning.pytorch.callbacks.ModelCheckpoint",
        "--trainer.callbacks.monitor=train/loss",
        "--trainer.callbacks.every_n_train_steps=1",
        "--trainer.callbacks+=helpers.SignalAt",
        "--trainer.callbacks.batch=1",
        "--trainer.limit_train_batches=4",  # (a signal in an epoch's last batch lets it validate first)
    ]
    with pytest.raises(TrainingInterrupted):  # (at batch 1 of 3: a stop at an epoch's last one waits)
        run_cli("fit", *own, "--trainer.limit_train_batches=3")
    (run,) = run_dirs(workdir / "logs")
    assert len(list((run / "checkpoints").glob("epoch=0-step=*.ckpt"))) == 1
    code, _, err = run_main(["test", *FAST, "--ckpt_path=best"], capsys)
    assert code == 2 and "records no best checkpoint" in err, err


def test_a_fit_into_a_checkpoint_folder_with_an_earlier_last_ckpt_starts_afresh(
    run_cli: RunCLI, workdir: Path
) -> None:
    """Two fits sharing one checkpoint folder (``--checkpoint.dirpath``/``--last_checkpoint.dirpath``):
    the second trains from step 0 (it resumes only with ``--ckpt_path``), without a warning about
    ``ckpt_path``."""
    shared = [f"--checkpoint.dirpath={workdir / 'ckpts'}", f"--last_checkpoint.dirpath={workdir / 'ckpts'}"]
    run_cli("fit", *shared, "--run_name=first")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        second = run_cli("fit", *shared, "--run_name=second")
    assert second.trainer.ckpt_path is None
    assert [step for _, step, _ in metric_rows(second.run_dir, "train/loss")] == [0, 1]
    assert not [str(w.message) for w in caught if "ckpt_path" in str(w.message)]


def test_later_commands_rebuild_the_runs_engine_settings_and_warn_about_no_callback(
    run_cli: RunCLI, workdir: Path
) -> None:
    """A run with its own monitor, a health check switched off and EMA: ``fit --ckpt_path last`` without
    repeating them continues with the run's best so far (by its monitor), and ``validate``/``test``/
    ``predict --ckpt_path best`` run with the run's settings, without Lightning's warning about the
    callbacks that created the checkpoint."""
    own = ["--checkpoint.monitor=val/loss", "--checkpoint.mode=min", "--health.disable=[label_shape]"]
    ema = ["--trainer.callbacks+=lightning.pytorch.callbacks.EMAWeightAveraging"]
    first = run_cli("fit", *own, *ema, "--trainer.max_epochs=2", "--model.lr_scheduler=null")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        resumed = run_cli(
            "fit", *ema, "--trainer.max_epochs=3", "--model.lr_scheduler=null", "--ckpt_path=last"
        )
        evaluated = [run_cli(command, "--ckpt_path=best") for command in ("validate", "test", "predict")]
    assert resumed.run_dir == first.run_dir
    best = resumed.trainer.checkpoint_callback
    assert best is not None and best.monitor == "val/loss"  # type: ignore[attr-defined]
    losses = [value for _, _, value in metric_rows(first.run_dir, "val/loss")]
    assert len(losses) == 3 and float(best.best_model_score) == pytest.approx(min(losses))  # type: ignore[attr-defined]
    for cli in evaluated:
        saved = yaml.safe_load((cli.run_dir / "config.yaml").read_text())
        assert saved["checkpoint"]["monitor"] == "val/loss" and saved["health"]["disable"] == ["label_shape"]
    assert not [str(w.message) for w in caught if "callbacks used to create the checkpoint" in str(w.message)]


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


def test_a_refused_resume_adds_no_record_to_the_run(fitted: Callable[..., Path]) -> None:
    """``fit --ckpt_path last`` refused as bad input (an ``EarlyStopping`` monitor the model never logs:
    exit 2, "nothing lost") leaves the continued run's folder as it was: no ``config.resume-1.yaml`` or
    ``provenance.resume-1.yaml`` of a command that never trained (the next resume would take ``-2``)."""
    run = fitted()
    before = sorted(path.name for path in run.iterdir())
    stop = "--trainer.callbacks=[{class_path: EarlyStopping, init_args: {monitor: val/accc}}]"
    with pytest.raises(SystemExit) as exit_info:
        main(["fit", "--trainer.max_epochs=2", "--trainer.limit_train_batches=2", stop, "--ckpt_path=last"])
    assert exit_info.value.code == 2
    assert sorted(path.name for path in run.iterdir()) == before
