"""``python -m project report RUN_DIR``: the PNGs are written, readable, of the stated size and
not blank."""

from __future__ import annotations

from pathlib import Path

import matplotlib.image
import pytest
from support import FAST, PACKAGE, PLAIN_DATA, PLAIN_MODEL, RunCLI, main

from runwright.commands import report


def test_report_writes_every_plot_as_a_readable_png(
    run_cli: RunCLI, capsys: pytest.CaptureFixture[str]
) -> None:
    cli = run_cli("fit", *FAST, "--trainer.max_epochs=2", fast=False)
    main(["report", str(cli.run_dir)])
    out = capsys.readouterr().out
    names = ["loss", "accuracy", "lr", "memory", "confusion_matrix"]
    for name in names:
        path = cli.run_dir / "report" / f"{name}.png"
        assert f"wrote {path}" in out
        image = matplotlib.image.imread(path)
        assert image.shape[:2] == (report.HEIGHT, report.WIDTH), name
        assert image[..., :3].std() > 0.01, f"{name}.png is blank"
    # --ckpt_path takes the aliases every command takes: last of the newest run (this one)
    main(["report", str(cli.run_dir), "--ckpt_path=last", "--output", str(cli.run_dir / "last")])
    assert f"wrote {cli.run_dir / 'last' / 'confusion_matrix.png'}" in capsys.readouterr().out


def test_report_reads_metrics_and_rejects_a_folder_without_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "metrics.csv").write_text("epoch,step,train/loss,val/loss\n0,0,2.5,\n0,1,2.0,\n0,1,,2.2\n")
    rows = report.read_metrics(tmp_path / "metrics.csv")
    assert report.series(rows, "train/loss") == ([0.0, 1.0], [2.5, 2.0])
    assert report.series(rows, "val/loss") == ([1.0], [2.2])
    written = report.write_report(tmp_path, tmp_path / "out", PACKAGE)
    assert set(written) == {"loss"}  # no acc/lr/memory columns and no checkpoint: skipped, said so
    assert "skipped confusion_matrix.png" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exit_info:
        main(["report", str(tmp_path / "out")])
    assert exit_info.value.code == 2 and "no metrics.csv" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_info:
        main(["report", str(tmp_path), "--ckpt_path=nope.ckpt"])
    assert (
        exit_info.value.code == 2
        and "error: --ckpt_path='nope.ckpt': no such file" in capsys.readouterr().err
    )


def test_report_of_a_plain_lightning_module_draws_what_it_can(
    run_cli: RunCLI, capsys: pytest.CaptureFixture[str]
) -> None:
    """Its ``train_loss``/``val_loss``/``val_acc`` keys are plotted, the LR plot (no scheduler) is
    skipped with a message, and the confusion matrix comes from its test split."""
    cli = run_cli("fit", f"--model={PLAIN_MODEL}", f"--data={PLAIN_DATA}", "--checkpoint.monitor=val_acc")
    capsys.readouterr()
    main(["report", str(cli.run_dir)])
    out = capsys.readouterr().out
    for name in ("loss", "accuracy", "memory", "confusion_matrix"):
        assert f"wrote {cli.run_dir / 'report' / f'{name}.png'}" in out, out
    assert "skipped lr.png: no train/lr values" in out
