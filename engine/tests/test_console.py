"""What a command prints when its output goes to a log (not a terminal): every epoch's progress in
plain lines whichever progress bar the config chose, and under DDP, or with a model module that imports
``pytorch_lightning``, the same few lines as one process prints."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from support import FAST, run_main

#: FAST with the progress bar on (the model summary stays off).
WITH_BAR = [a for a in FAST if "progress_bar" not in a]


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
    shown = [re.sub(r"=[-0-9.e]+", "=V", re.sub(r"\d+\.\d s$", "T s", line)) for line in out.splitlines()]
    train, epoch = "  train/loss=V", "  train/loss=V  val/acc=V  val/f1=V  val/loss=V  val/acc_best=V"
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
