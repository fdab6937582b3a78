"""Checkpoints and runs as a user meets them over several commands: last is last, best is best, a
resume continues its run, and no run writes a file of another run."""

from __future__ import annotations

import csv
import hashlib
from pathlib import Path

import pytest
import torch
import yaml
from conftest import CONFIGS, FAST, RunCLI, run_dirs, run_module

from project import loading
from project.cli import ProjectCLI, main

SCRIPTED = ["--model=training_helpers.ScriptedClassifier"]


def epoch_of(path: Path) -> int:
    return int(torch.load(path, weights_only=True, map_location="cpu")["epoch"])


def hashes(folder: Path) -> dict[str, str]:
    """SHA-256 of every file under ``folder`` (relative path -> digest)."""
    return {
        str(path.relative_to(folder)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(folder.rglob("*"))
        if path.is_file()
    }


def metric_rows(run_dir: Path, key: str) -> list[tuple[int, int, float]]:
    """``(epoch, step, value)`` of every row of ``metrics.csv`` that has ``key``."""
    with (run_dir / "metrics.csv").open(newline="") as handle:
        return [
            (int(row["epoch"]), int(row["step"]), float(row[key]))
            for row in csv.DictReader(handle)
            if row.get(key)
        ]


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
    assert [v for _, _, v in metric_rows(cli.run_dir, "val/acc_best")] == pytest.approx([0.5, 0.7, 0.7])


def test_resume_continues_the_run_in_its_folder_with_its_best_so_far(run_cli: RunCLI, workdir: Path) -> None:
    # (the warmup-cosine length follows max_epochs, which differs here)
    args = [*SCRIPTED, "--model.scores=[0.5,0.7,0.6,0.65]", "--lr_schedule.enabled=false"]
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
    for key in ("val/acc_best", "val/acc", "train/loss", "train/acc"):
        assert_same_rows(first.run_dir, straight.run_dir, key)
    assert [v for _, _, v in metric_rows(first.run_dir, "val/acc_best")] == pytest.approx(
        [0.5, 0.7, 0.7, 0.7]
    )
    assert (first.run_dir / "config.yaml").is_file() and (first.run_dir / "config.resume-2.yaml").is_file()
    for name, tensor in straight.model.state_dict().items():
        assert torch.equal(tensor, again.model.state_dict()[name]), name


def test_best_is_the_callbacks_best_for_top_k_and_min_mode(run_cli: RunCLI) -> None:
    cli = run_cli(
        "fit",
        *SCRIPTED,
        "--model.scores=[0.5,0.9,0.6,0.8,0.3]",
        "--trainer.max_epochs=5",
        "--checkpoint.save_top_k=3",
        "--checkpoint.filename=top-{epoch}",
    )
    test = run_cli("test", "--ckpt_path=best")
    assert Path(test.config.test.ckpt_path).name == "top-epoch=1.ckpt"
    assert len(list((cli.run_dir / "checkpoints").glob("top-*.ckpt"))) == 3
    run_cli(
        "fit",
        *SCRIPTED,
        "--model.scores=[0.5,0.9,0.6,0.8,0.3]",
        "--model.best_mode=min",
        "--trainer.max_epochs=5",
        "--checkpoint.save_top_k=2",
    )
    test = run_cli("test", "--ckpt_path=best")
    assert epoch_of(Path(test.config.test.ckpt_path)) == 4  # the lowest score


def test_best_resolves_when_the_filename_makes_subfolders(run_cli: RunCLI) -> None:
    """``{val/acc:.3f}`` in a filename makes Lightning write into a subfolder ``epoch=1-val/``."""
    args = ["--model.scores=[0.5,0.9,0.6,0.7]", "--checkpoint.save_top_k=2"]
    args += ["--checkpoint.filename={epoch}-{val/acc:.3f}"]
    fit = run_cli("fit", *SCRIPTED, *args, "--trainer.max_epochs=3")
    test = run_cli("test", "--ckpt_path=best")
    best = Path(test.config.test.ckpt_path)
    assert (best.parent.name, best.name, epoch_of(best)) == ("epoch=1-val", "acc=0.900.ckpt", 1)
    # and fit from it continues that run in its folder (it started a new run)
    again = run_cli("fit", *SCRIPTED, *args, "--trainer.max_epochs=4", "--ckpt_path=best")
    assert again.run_dir == fit.run_dir and (fit.run_dir / "config.resume-1.yaml").is_file()


def test_best_and_last_never_fall_back_to_an_older_run(
    run_cli: RunCLI, workdir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The newest run has no last.ckpt (switched off): best/last must not quietly name the run before."""
    run_cli("fit", *SCRIPTED, "--trainer.max_epochs=2", "--run_name=older")
    no_last = "--last_checkpoint.every_n_epochs=0"
    run_cli("fit", *SCRIPTED, "--trainer.max_epochs=2", "--run_name=newer", no_last)
    assert (workdir / "logs" / "newer" / "checkpoints" / "best.ckpt").is_file()
    for alias in ("best", "last"):
        with pytest.raises(SystemExit) as caught:
            run_cli("test", f"--ckpt_path={alias}")
        assert caught.value.code == 2
        error = capsys.readouterr().err
        assert f"--ckpt_path={alias}: " in error and "newer" in error and "older" not in error


def test_report_uses_the_runs_recorded_best_checkpoint(
    run_cli: RunCLI, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """With save_top_k=3 the best epoch is in best-v2.ckpt, not best.ckpt (the first epoch's)."""
    args = ["--model.scores=[0.5,0.7,0.9]", "--trainer.max_epochs=3", "--checkpoint.save_top_k=3"]
    cli = run_cli("fit", *SCRIPTED, *args)
    assert epoch_of(cli.run_dir / "checkpoints" / "best.ckpt") == 0
    loaded: list[Path] = []
    real_load_model = loading.load_model
    monkeypatch.setattr(loading, "load_model", lambda p: loaded.append(Path(p)) or real_load_model(p))
    main(["report", str(cli.run_dir)])
    assert [p.name for p in loaded] == ["best-v2.ckpt"] and epoch_of(loaded[0]) == 2
    assert "confusion_matrix.png" in capsys.readouterr().out


def test_continuing_from_an_earlier_checkpoint_logs_each_step_once(run_cli: RunCLI) -> None:
    """fit --ckpt_path best (epoch 1 of 4) continues the run in its folder: the rows logged after that
    checkpoint are replaced, none doubled, and they equal an uninterrupted run's."""
    args = [*SCRIPTED, "--model.scores=[0.5,0.9,0.6,0.65]", "--trainer.max_epochs=4"]
    straight = run_cli("fit", *args, "--run_name=straight")
    run = run_cli("fit", *args, "--run_name=again")
    assert epoch_of(run.run_dir / "checkpoints" / "best.ckpt") == 1
    run_cli("fit", *args, "--ckpt_path=best")
    for key in ("train/loss", "train/lr", "val/acc", "val/loss", "val/acc_best"):
        rows = metric_rows(run.run_dir, key)
        assert len({row[:2] for row in rows}) == len(rows), f"{key}: a step logged twice"
        assert_same_rows(run.run_dir, straight.run_dir, key)


def test_a_run_name_cannot_leave_the_logs_folder(run_cli: RunCLI, workdir: Path) -> None:
    from project.errors import RunExistsError

    for name in ("../escape", "a/b", ".."):
        with pytest.raises(RunExistsError, match="plain folder name"):
            run_cli("fit", f"--run_name={name}")
    assert not (workdir / "escape").exists()


def test_rerunning_a_saved_config_or_branching_from_a_checkpoint_never_touches_the_old_run(
    run_cli: RunCLI, workdir: Path
) -> None:
    first = run_cli("fit", "--run_name=A", "--trainer.max_epochs=2")
    before = hashes(first.run_dir)
    config = str(first.run_dir / "config.yaml")
    rerun = ProjectCLI(args=["fit", "--config", config, "--run_name=B"])
    assert rerun.run_dir.name == "B" and (rerun.run_dir / "checkpoints" / "best.ckpt").is_file()
    auto = ProjectCLI(args=["fit", "--config", config])  # the saved run_name is not reused
    assert auto.run_dir.name not in ("A", "B")
    branch = run_cli(
        "fit", "--run_name=C", "--trainer.max_epochs=3", f"--ckpt_path={first.run_dir}/checkpoints/last.ckpt"
    )
    assert epoch_of(branch.run_dir / "checkpoints" / "last.ckpt") == 2
    assert hashes(first.run_dir) == before
    assert sorted(p.name for p in run_dirs(workdir / "logs")) == sorted(["A", "B", "C", auto.run_dir.name])


def test_resume_after_max_steps_logs_like_the_uninterrupted_run(run_cli: RunCLI) -> None:
    """A run stopped by max_steps at an epoch's end, extended with a larger max_steps: the same steps
    and epochs in metrics.csv as one uninterrupted run, no row for the finished epoch's (empty) end.
    The data order of the next epoch is not restored exactly in this case (README, "Checkpoints and
    exact resume"), so the values are compared up to the stop."""
    steps = ["--trainer.limit_train_batches=4", "--trainer.log_every_n_steps=1", "--trainer.max_epochs=-1"]
    steps += ["--lr_schedule.enabled=false"]  # its length follows max_steps, which differs here
    straight = run_cli("fit", *steps, "--trainer.max_steps=8", "--run_name=straight")
    first = run_cli("fit", *steps, "--trainer.max_steps=4", "--run_name=resumed")
    run_cli("fit", *steps, "--trainer.max_steps=8", "--ckpt_path=last")
    run_cli("fit", *steps, "--trainer.max_steps=12", "--ckpt_path=last")  # and once more
    longer = run_cli("fit", *steps, "--trainer.max_steps=12", "--run_name=longer")
    for key in ("train/loss", "train/acc", "val/acc"):
        assert [row[:2] for row in metric_rows(first.run_dir, key)] == [
            row[:2] for row in metric_rows(longer.run_dir, key)
        ], key
    first_rows, straight_rows = (
        metric_rows(first.run_dir, "train/loss"),
        metric_rows(straight.run_dir, "train/loss"),
    )
    assert first_rows[:4] == straight_rows[:4]
    assert [epoch for epoch, _, _ in metric_rows(first.run_dir, "train/acc")] == [0, 1, 2]
    assert all(value > 0 for _, _, value in metric_rows(first.run_dir, "train/acc"))


@pytest.mark.slow
def test_a_resumed_run_keeps_its_wandb_id(tmp_path: Path) -> None:
    env = {"WANDB_MODE": "offline", "WANDB_SILENT": "true"}
    fast = [*FAST, "--trainer.max_epochs=1"]
    wandb = ["--config", str(CONFIGS / "logger" / "wandb.yaml")]  # whatever the default logger is
    run_module(["fit", *fast, *wandb], cwd=tmp_path, env=env)
    (run,) = run_dirs(tmp_path / "logs")
    ids = {path.name.rsplit("-", 1)[-1] for path in (run / "wandb").glob("offline-run-*")}
    run_module(["fit", *FAST, *wandb, "--trainer.max_epochs=2", "--ckpt_path=last"], cwd=tmp_path, env=env)
    runs = list((run / "wandb").glob("offline-run-*"))
    assert len(ids) == 1 and len(runs) == 2  # two offline segments of one W&B run
    assert {path.name.rsplit("-", 1)[-1] for path in runs} == ids
    assert run_dirs(tmp_path / "logs") == [run]


def test_a_plain_lightning_checkpoint_of_the_projects_classes_reloads(tmp_path: Path) -> None:
    from lightning.pytorch import Trainer

    from project.data import DigitsDataModule
    from project.models import ImageClassifier

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

    model = ImageClassifier(num_classes=10)
    first = trainer(1)
    first.fit(model, DigitsDataModule())
    first.save_checkpoint(tmp_path / "plain.ckpt")
    reloaded = ImageClassifier.load_from_checkpoint(tmp_path / "plain.ckpt")  # Lightning's default loading
    for name, tensor in model.state_dict().items():
        assert torch.equal(tensor, reloaded.state_dict()[name]), name
    second = trainer(2)
    second.fit(ImageClassifier(), DigitsDataModule(), ckpt_path=tmp_path / "plain.ckpt")
    assert second.current_epoch == 2


def test_a_copied_checkpoint_is_not_taken_for_a_run_of_the_folder_above(
    run_cli: RunCLI, workdir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A checkpoint copied out of its run (``model.ckpt`` in some folder) belongs to no run, even when
    the folder above holds an unrelated ``config.yaml``: ``fit`` from it starts a new run, and
    ``export`` asks for the config instead of reading the unrelated one."""
    from project.cli import main

    first = run_cli("fit")
    shelf = workdir / "shelf" / "models"
    shelf.mkdir(parents=True)
    (shelf.parent / "config.yaml").write_text("unrelated: true\n")
    copy = shelf / "model.ckpt"
    copy.write_bytes((first.run_dir / "checkpoints" / "best.ckpt").read_bytes())
    second = run_cli("fit", f"--ckpt_path={copy}", "--trainer.max_epochs=2")
    assert second.run_dir.parent == workdir / "logs" and second.run_dir != first.run_dir
    assert not (shelf.parent / "metrics.csv").exists()
    capsys.readouterr()
    with pytest.raises(SystemExit) as caught:
        main(["export", f"--ckpt_path={copy}", "--format=torchscript"])
    assert caught.value.code != 0
    err = capsys.readouterr().err
    assert "model.ckpt is not inside a run folder" in err and "--config" in err
    assert "unrelated" not in err


def test_continuing_a_run_with_another_logger_warns(run_cli: RunCLI) -> None:
    """The logger of a continued run comes from the command's config, like every trainer setting:
    continuing a CSV-logged run without its logger config says so; repeating the config does not."""
    csv_preset = str(CONFIGS / "logger" / "csv.yaml")
    run_cli("fit", "--config", csv_preset)
    with pytest.warns(UserWarning, match=r"logged with \['CSVLogger'\], with \['WandbLogger'\]"):
        run_cli("fit", "--trainer.max_epochs=2", "--ckpt_path=last", "--trainer.logger=WandbLogger")
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        warnings.filterwarnings("ignore", "(?!continuing)")  # only this warning is an error here
        run_cli("fit", "--config", csv_preset, "--trainer.max_epochs=3", "--ckpt_path=last")


def test_a_model_setting_given_with_ckpt_path_that_the_checkpoint_replaces_warns(run_cli: RunCLI) -> None:
    """With ``--ckpt_path`` the model comes from the checkpoint: an explicit ``--model...`` value that
    it replaces is named in a warning (it was dropped without a word); the value used is the
    checkpoint's, as the saved config says. A value equal to the checkpoint's does not warn."""
    first = run_cli("fit")
    with pytest.warns(UserWarning, match=r"model\.optimizer\.lr=5\.0 is replaced by its 0\.001"):
        run_cli("fit", "--trainer.max_epochs=2", "--ckpt_path=last", "--model.optimizer.init_args.lr=5")
    saved = yaml.safe_load((first.run_dir / "config.resume-1.yaml").read_text())
    assert saved["model"]["init_args"]["optimizer"]["init_args"]["lr"] == 0.001
    import warnings

    with warnings.catch_warnings():
        warnings.filterwarnings("error", "--ckpt_path: the model comes from the checkpoint")
        run_cli("validate", "--ckpt_path=last", "--model.optimizer.init_args.lr=0.001")
