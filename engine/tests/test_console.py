"""What a command prints when its output goes to a log (not a terminal): every epoch's progress in
plain lines whichever progress bar the config chose, and under DDP, or with a model module that imports
``pytorch_lightning``, the same few lines as one process prints."""

from __future__ import annotations

import csv
import os
import re
from pathlib import Path

import pytest
from support import FAST, run_dirs, run_main, run_module

#: FAST with the progress bar on (the model summary stays off).
WITH_BAR = [a for a in FAST if "progress_bar" not in a]
#: Two CPU processes; the model summary off, a metrics row every 2 steps (4 batches an epoch).
DDP = [
    "--trainer.accelerator=cpu",
    "--trainer.strategy=ddp",
    "--trainer.devices=2",
    "--trainer.enable_model_summary=false",
    "--trainer.log_every_n_steps=2",
]


def normalized(out: str) -> list[str]:
    """The lines of ``out``, each ``=<number>`` as ``=V`` and the seconds at a line's end as ``T s``."""
    return [re.sub(r"=[-0-9.e]+", "=V", re.sub(r"\d+\.\d s$", "T s", line)) for line in out.splitlines()]


@pytest.mark.parametrize("bar", ["TQDMProgressBar", "RichProgressBar", "runwright.callbacks.LineProgressBar"])
def test_the_bar_a_config_chooses_prints_each_epoch_in_plain_lines_in_a_log(
    workdir: Path, capsys: pytest.CaptureFixture[str], recwarn: pytest.WarningsRecorder, bar: str
) -> None:
    """pytest's stdout is no terminal, as ``> log`` or ``| tee``: the bar keeps its ``refresh_rate``; no
    warning."""
    class_path = bar if "." in bar else f"lightning.pytorch.callbacks.{bar}"
    args = ["fit", *WITH_BAR, "--trainer.max_epochs=2", "--trainer.limit_train_batches=4"]
    args += [f"--trainer.callbacks+={class_path}", "--trainer.callbacks.refresh_rate=2"]
    code, out, err = run_main(args, capsys)
    assert code == 0, err
    assert "\r" not in out + err and "\x1b" not in out + err, "no redrawing in a log"
    assert err == ""
    assert [str(w.message) for w in recwarn if not issubclass(w.category, DeprecationWarning)] == []
    shown = normalized(out)
    train, epoch = "  train/loss=V", "  train/loss=V  val/acc=V  val/f1=V  val/loss=V  best/val/acc=V"
    run = next(line.removeprefix("Run folder: ") for line in out.splitlines() if line.startswith("Run "))
    assert shown == [
        f"epoch 1/2  batch 2/4{train}  T s",
        f"epoch 1/2  batch 4/4{train}  T s",
        f"epoch 1/2 done{epoch}  T s",
        f"epoch 2/2  batch 2/4{train}  T s",
        f"epoch 2/2  batch 4/4{train}  T s",
        f"epoch 2/2 done{epoch}  T s",
        f"Run folder: {run}",
        f"Best checkpoint (val/acc=V): {run}/checkpoints/best.ckpt",
    ]


@pytest.mark.slow
def test_a_ddp_fit_with_a_module_that_imports_pytorch_lightning_prints_what_one_process_prints(
    tmp_path: Path,
) -> None:
    """Two CPU processes (gloo) in a fresh interpreter, the data from a module that imports
    ``pytorch_lightning``: rank 0's one line on the processes, the epochs, the run folder and the best
    checkpoint; no warning, no line of rank 1's. The engine's metrics are synced as their meaning asks:
    ``train/samples_per_sec`` is the run's (both processes' samples), over the slowest process's
    ``train/epoch_time_sec``."""
    args = ["fit", "--data=tutorial_style.TutorialImages", "--trainer.limit_train_batches=4", *DDP]
    result = run_module(args, cwd=tmp_path, timeout=300)
    assert result.stderr.splitlines() == ["Initializing distributed: GLOBAL_RANK: 0, MEMBER: 1/2"]
    shown = normalized(result.stdout)
    (run,) = run_dirs(tmp_path / "logs")
    epoch = "  train/loss=V  val/acc=V  val/f1=V  val/loss=V  best/val/acc=V  T s"
    assert shown == [
        f"epoch 1/2 done{epoch}",
        f"epoch 2/2 done{epoch}",
        f"Run folder: {run}",
        f"Best checkpoint (val/acc=V): {run}/checkpoints/best.ckpt",
    ]
    rows = list(csv.DictReader((run / "metrics.csv").open()))
    epoch_rows = [r for r in rows if r["train/samples_per_sec"]]
    assert len(epoch_rows) == 2
    for row in epoch_rows:  # 4 batches of 16 per process and epoch: 128 samples, however unequal the times
        samples = float(row["train/samples_per_sec"]) * float(row["train/epoch_time_sec"])
        assert samples == pytest.approx(128, rel=1e-5), row
    assert all(float(r["memory/rss_mib"]) > 0 for r in rows if r["memory/rss_mib"])


def test_a_machine_with_srun_on_the_path_prints_the_quiet_console(
    workdir: Path,
    capsys: pytest.CaptureFixture[str],
    recwarn: pytest.WarningsRecorder,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every SLURM login node has ``srun`` on the PATH: a command started there without ``srun`` (so not a
    SLURM job) printed Lightning's "The `srun` command is available on your system but is not used" hint
    (Lightning looks ``srun`` up on the PATH as the Trainer is built). A fake ``srun`` on the PATH, no
    ``SLURM_*`` variable, as on such a node: no warning, only the run's two lines."""
    bin_dir = workdir / "bin"
    bin_dir.mkdir()
    (bin_dir / "srun").write_text("#!/bin/sh\nexit 0\n")
    (bin_dir / "srun").chmod(0o755)
    for key in [key for key in os.environ if key.startswith("SLURM_")]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    code, out, err = run_main(["fit", *FAST], capsys)
    assert code == 0 and err == "", err
    assert [str(w.message) for w in recwarn if not issubclass(w.category, DeprecationWarning)] == []
    (run,) = run_dirs(workdir / "logs")
    assert normalized(out) == [
        f"Run folder: {run}",
        f"Best checkpoint (val/acc=V): {run}/checkpoints/best.ckpt",
    ]
