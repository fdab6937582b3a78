"""Loggers: W&B offline by default (no network, no key in files, one sync command for a continued run),
the logger presets, metrics.csv with every logged key, plain progress lines, W&B's run config."""

from __future__ import annotations

import csv
import logging
import os
import socket
import threading
import time
from pathlib import Path

import pytest
import yaml
from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger, WandbLogger
from support import (
    FAST,
    LOGGERS,
    TINY,
    RunCLI,
    kept_environ,
    metric_rows,
    project_cli,
    run_dirs,
    run_main,
    run_module,
    step_losses,
)

from runwright import runs
from runwright.callbacks import LineProgressBar
from runwright.runs import SaveConfig

#: The W&B preset: tests name their logger explicitly, so they hold whichever logger is the default.
WANDB = LOGGERS["wandb"]  # as a user's W&B preset sets it


class ConnectionCounter:
    """A TCP server on 127.0.0.1 that counts (and drops) every connection made to it."""

    def __init__(self) -> None:
        self.server = socket.socket()
        self.server.bind(("127.0.0.1", 0))
        self.server.listen()
        self.server.settimeout(0.2)
        self.port = self.server.getsockname()[1]
        self.connections = 0
        self.stop = False
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while not self.stop:
            try:
                connection, _ = self.server.accept()
            except OSError:
                continue
            self.connections += 1
            connection.close()

    def close(self) -> None:
        self.stop = True
        self.thread.join()
        self.server.close()


@pytest.mark.slow
def test_default_wandb_run_is_offline_makes_no_network_call_and_never_saves_the_key(tmp_path: Path) -> None:
    """W&B's server URL and the HTTP(S) proxies point at a local socket that counts connections (an
    online run does connect to it: checked by hand with --trainer.logger.offline=false). A process of
    its own: W&B reads its environment when it starts."""
    counter = ConnectionCounter()
    secret = "fake-key-0123456789abcdef0123456789abcdef"
    url = f"http://127.0.0.1:{counter.port}"
    env = {"WANDB_API_KEY": secret, "WANDB_BASE_URL": url, "HTTP_PROXY": url, "HTTPS_PROXY": url}
    env_without_mode = {k: v for k, v in os.environ.items() if k != "WANDB_MODE"}
    start = time.perf_counter()
    try:
        result = run_module(
            ["fit", *WANDB, *FAST[:3]],
            cwd=tmp_path,
            env=env,
            timeout=300,
            base_env=env_without_mode,
        )
    finally:
        counter.close()
    elapsed = time.perf_counter() - start
    assert counter.connections == 0, "the offline run connected to the W&B server or a proxy"
    assert elapsed < 120, f"the offline run took {elapsed:.0f} s"
    (run_dir,) = run_dirs(tmp_path / "logs")
    offline_runs = list((run_dir / "wandb").glob("offline-run-*/run-*.wandb"))
    assert offline_runs and offline_runs[0].stat().st_size > 0
    assert f"wandb sync {offline_runs[0].parent}\n" in result.stdout
    assert (run_dir / "metrics.csv").is_file() and (run_dir / "config.yaml").is_file()
    for path in run_dir.rglob("*"):
        if path.is_file():
            assert secret.encode() not in path.read_bytes(), f"the API key was written to {path}"


@pytest.mark.slow
def test_a_wandb_run_continued_offline_is_one_run_with_one_sync_command(tmp_path: Path) -> None:
    """fit, then fit --ckpt_path last, then once more, W&B offline: one W&B id in three offline parts of
    the one run folder, and the last command's sync hint uploads every part, oldest first (not only
    the last)."""
    env = {"WANDB_MODE": "offline", "WANDB_SILENT": "true"}
    wandb = WANDB  # whatever the default logger is
    run_module(["fit", *FAST, *wandb], cwd=tmp_path, env=env)
    (run,) = run_dirs(tmp_path / "logs")
    for epochs in (2, 3):
        result = run_module(
            ["fit", *FAST, *wandb, f"--trainer.max_epochs={epochs}", "--ckpt_path=last"],
            cwd=tmp_path,
            env=env,
        )
    parts = sorted((run / "wandb").glob("offline-run-*"))
    assert len(parts) == 3 and len({part.name.rsplit("-", 1)[-1] for part in parts}) == 1
    assert f"upload it with: wandb sync {' '.join(map(str, parts))}\n" in result.stdout
    assert run_dirs(tmp_path / "logs") == [run]


@pytest.mark.parametrize(
    ("preset", "logger_types"),
    [
        ("wandb", [WandbLogger]),
        ("tensorboard", [TensorBoardLogger]),
        ("csv", [CSVLogger]),
    ],
)
def test_logger_presets_switch_the_logger_and_keep_metrics_csv(
    preset: str, logger_types: list[type], run_cli: RunCLI
) -> None:
    """The trainer's loggers (a model's ``self.loggers``) are the preset's alone, and metrics.csv holds every
    step's training loss and the engine's values whichever logger it is."""
    cli = run_cli("fit", *LOGGERS[preset])
    assert [type(logger) for logger in cli.trainer.loggers] == logger_types
    assert cli.model.loggers == cli.trainer.loggers
    assert sorted(step_losses(cli.run_dir)) == [0, 1]  # FAST: 2 steps, a row each
    assert metric_rows(cli.run_dir, "train/grad_norm") and metric_rows(cli.run_dir, "best/val/acc")
    if preset == "tensorboard":
        assert list(cli.run_dir.glob("events.out.tfevents.*"))


def test_logger_override_on_the_command_line(run_cli: RunCLI) -> None:
    cli = run_cli("fit", "--trainer.logger=lightning.pytorch.loggers.TensorBoardLogger")
    assert [type(logger) for logger in cli.trainer.loggers] == [TensorBoardLogger]
    cli = run_cli("fit", "--trainer.logger=false")
    assert cli.trainer.loggers == []


def test_wandb_offline_switch_parses_in_short_and_long_form(
    workdir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for flag in ("", "--trainer.logger.offline=false", "--trainer.logger.init_args.offline=false"):
        _, out, _ = run_main(["fit", *WANDB, *([flag] if flag else []), "--print_config"], capsys)
        logger = yaml.safe_load(out)["trainer"]["logger"]
        assert logger["class_path"] == "lightning.pytorch.loggers.WandbLogger"
        assert logger["init_args"]["offline"] is (not flag), flag


def test_metrics_csv_holds_every_logged_key(run_cli: RunCLI) -> None:
    cli = run_cli("fit", "--trainer.max_epochs=2")
    rows = list(csv.DictReader((cli.run_dir / "metrics.csv").open()))
    header = set(rows[0])
    for key in (
        "train/loss",
        "train/acc",
        "val/loss",
        "val/acc",
        "train/lr",
        "train/grad_norm",
        "train/samples_per_sec",
        "train/epoch_time_sec",
        "memory/rss_mib",
    ):
        assert key in header, key
    grad_norms = [float(r["train/grad_norm"]) for r in rows if r["train/grad_norm"]]
    assert len(grad_norms) == 4 and all(g > 0 for g in grad_norms)  # log_every_n_steps=1, 2 x 2 steps
    epoch_rows = [r for r in rows if r["train/samples_per_sec"]]
    assert [int(r["epoch"]) for r in epoch_rows] == [0, 1]
    for row in epoch_rows:
        # 2 batches of 16 per epoch, so samples/s * seconds must give 32 samples
        assert float(row["train/samples_per_sec"]) * float(row["train/epoch_time_sec"]) == pytest.approx(32)


def test_plain_progress_lines_and_model_summary_when_stdout_is_not_a_terminal(
    run_cli: RunCLI,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    args = [a for a in FAST if "progress_bar" not in a and "model_summary" not in a]
    # Lightning's logger does not propagate when imported before logging is set up (pytest < 9 does not
    # look at such loggers)
    monkeypatch.setattr(logging.getLogger("lightning.pytorch"), "propagate", True)
    caplog.set_level(logging.INFO)
    cli = run_cli("fit", *args, "--trainer.max_epochs=2", fast=False)  # pytest's stdout is no terminal
    assert isinstance(cli.trainer.progress_bar_callback, LineProgressBar)
    out = capsys.readouterr().out
    lines = [line for line in out.splitlines() if line.startswith("epoch ")]
    assert [line.split("  ")[0] for line in lines] == ["epoch 1/2 done", "epoch 2/2 done"]
    assert "val/acc=" in lines[-1] and "\r" not in out
    # The model summary at fit start lists the layers inside the backbone with input/output shapes.
    assert "In sizes" in caplog.text and "[2, 1, 8, 8]" in caplog.text
    assert "backbone.features.0" in caplog.text
    with pytest.raises(ValueError, match="refresh_rate=-1"):
        LineProgressBar(refresh_rate=-1)


class RecordingWandbRun:
    """Stands in for ``wandb.Run``: records what ``config.update`` receives."""

    def __init__(self) -> None:
        self.config = self
        self.updates: list[dict[str, object]] = []

    def update(self, values: dict[str, object], allow_val_change: bool = False) -> None:
        self.updates.append(values)


def test_wandb_run_config_is_the_saved_config_yaml_dumped_once(
    workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with kept_environ():
        cli = project_cli(FAST, run=False)
    (callback,) = [cb for cb in cli.trainer.callbacks if isinstance(cb, SaveConfig)]
    wandb_logger = WandbLogger.__new__(WandbLogger)  # no wandb.init: its run is the recorder
    run = RecordingWandbRun()
    wandb_logger._experiment = run
    cli.trainer.loggers = [CSVLogger(cli.run_dir, name="", version=""), wandb_logger]
    dumps = 0
    dump = callback.parser.dump

    def counting_dump(*args: object, **kwargs: object) -> str:
        nonlocal dumps
        dumps += 1
        return dump(*args, **kwargs)

    monkeypatch.setattr(callback.parser, "dump", counting_dump)
    callback.setup(cli.trainer, cli.model, "fit")
    saved = yaml.safe_load((cli.run_dir / "config.yaml").read_text())
    assert run.updates == [{"config": saved}]
    assert saved["model"]["class_path"] == TINY
    assert dumps == 1  # config.yaml's; W&B got the file's contents, not a second dump


def test_grad_norm_rows_hold_their_own_steps_norm_also_after_a_resume(run_cli: RunCLI, workdir: Path) -> None:
    """``train/grad_norm`` in the row of step ``k`` is step ``k``'s pre-clip norm (it was once the
    previous step's), and a run resumed mid-epoch logs it at the same steps with the same values as
    the uninterrupted run (its first logged step once had none)."""
    from helpers import Recorder

    args = [
        "--trainer.max_epochs=2",
        "--trainer.limit_train_batches=4",
        "--trainer.log_every_n_steps=2",
        "--trainer.callbacks+=helpers.Recorder",
    ]
    steps = [
        "--trainer.callbacks+=lightning.pytorch.callbacks.ModelCheckpoint",
        f"--trainer.callbacks.dirpath={workdir / 'steps'}",
        "--trainer.callbacks.every_n_train_steps=1",
        "--trainer.callbacks.save_top_k=-1",
        "--trainer.callbacks.filename={step}",
    ]
    Recorder.runs.clear()
    full = run_cli("fit", *args, "--run_name=full", *steps)
    norms = dict(enumerate(Recorder.runs[0].pre_clip_norms))

    def logged(run: Path) -> dict[int, float]:
        rows = csv.DictReader((run / "metrics.csv").open())
        return {int(r["step"]): float(r["train/grad_norm"]) for r in rows if r["train/grad_norm"]}

    assert sorted(logged(full.run_dir)) == [1, 3, 5, 7]  # every 2nd step, each epoch's last included
    for step, value in logged(full.run_dir).items():
        assert value == pytest.approx(norms[step], rel=1e-5), step
    resumed = run_cli("fit", *args, "--run_name=resumed", f"--ckpt_path={workdir}/steps/step=5.ckpt")
    assert logged(resumed.run_dir) == {s: v for s, v in logged(full.run_dir).items() if s >= 5}


def test_a_continued_run_keeps_the_metrics_csv_rows_before_its_checkpoints_step(tmp_path: Path) -> None:
    """``keep_metrics_csv`` keeps the rows logged before the checkpoint's step, in order, and drops those
    at or after it (logged after the checkpoint was saved; the continued run logs them again)."""
    (tmp_path / "metrics.csv").write_text("epoch,step,a\n0,0,1.5\n0,1,2.5\n0,2,3.5\n1,3,4.5\n")
    logger = CSVLogger(tmp_path, name="", version="")
    runs.keep_metrics_csv(logger, last_step=2)
    with (tmp_path / "metrics.csv").open(newline="") as handle:
        rows = [(row["step"], row["a"]) for row in csv.DictReader(handle)]
    assert rows == [("0", "1.5"), ("1", "2.5")]
