"""``python -m <package> export``: every format is written, reloaded and checked against eager
PyTorch. The tests that only read a run export the session's shared one (conftest's ``trained_run``)."""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
import yaml
from support import (
    PLAIN_DATA,
    PLAIN_MODEL,
    RunCLI,
    checkpoint_model,
    fit_with_batch_size_1,
    main,
    quantized_export_line,
    rebuilt,
    run_main,
)

from runwright.commands import export, rebuild
from runwright.errors import ConfigError


@pytest.mark.parametrize("fmt", ["onnx", "torch_export", "torchscript"])
def test_export_writes_a_model_that_matches_eager(
    fmt: str, trained_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    output = tmp_path / export.FILENAMES[fmt]
    ckpt = trained_run / "checkpoints" / "best.ckpt"
    main(["export", f"--ckpt_path={ckpt}", f"--format={fmt}", f"--output={output}"])
    out = capsys.readouterr().out
    match = re.search(r"batch 47: ([0-9.e+-]+), batch 1: ([0-9.e+-]+)\) <= tolerance 0.0001", out)
    assert match, out
    assert all(float(value) <= 1e-4 for value in match.groups())
    assert sorted(path.name for path in tmp_path.iterdir()) == [output.name]  # one self-contained file
    if fmt == "onnx":  # named for the task, as a serving client sees them
        import onnx

        graph = onnx.load(str(output)).graph
        assert [graph.input[0].name, graph.output[0].name] == ["images", "logits"]
    # Reload independently: the file must hold a model that classifies a real batch like the checkpoint.
    run = rebuilt(ckpt)
    images, _ = next(iter(run.datamodule.test_dataloader()))
    expected = run.model(images[:5]).detach()
    (actual,) = export.run_exported(output, fmt, ((images[:5],), {}))
    assert actual.shape == (5, 4)
    torch.testing.assert_close(actual, expected, atol=1e-4, rtol=0)


def test_parity_check_fails_clearly_when_the_models_differ(trained_run: Path, tmp_path: Path) -> None:
    model = checkpoint_model(trained_run / "checkpoints" / "best.ckpt")
    inputs = ((torch.randn(4, 1, 8, 8),), {})
    path = tmp_path / "model.pt2"
    export.write_model(model, inputs, "torch_export", path)
    with torch.no_grad():
        model.head.bias.add_(1e-2)  # the eager model drifts away from what was exported
    with pytest.raises(export.ParityError, match=r"batch 4: max abs diff 0.01 > tolerance 0.0001"):
        export.check_parity(path, "torch_export", model, inputs, tolerance=1e-4)


def test_quantized_export_prints_the_test_accuracy_before_and_after(
    trained_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The int8 model passes the parity check (the command succeeds), its Linear layers are int8, and the
    fp32 accuracy printed is the checkpoint's on the whole test split."""
    ckpt = trained_run / "checkpoints" / "best.ckpt"
    line = quantized_export_line(ckpt, tmp_path / "q.pt", capsys)
    match = re.fullmatch(r"Test accuracy: fp32 ([0-9.]+), int8 ([0-9.]+) \(delta [+-][0-9.]+\)", line)
    assert match, line
    assert all(0.0 <= float(value) <= 1.0 for value in match.groups())
    scripted = torch.jit.load(tmp_path / "q.pt")
    assert "quantized::linear_dynamic" in str(scripted.head.graph)  # int8 Linear, not fp32
    run = rebuilt(ckpt)
    model, datamodule = run.model, run.datamodule
    right = total = 0
    with torch.no_grad():
        for images, labels in datamodule.test_dataloader():
            right += int((model(images).argmax(dim=-1) == labels).sum())
            total += len(labels)
    assert total == 47
    assert float(match.group(1)) == pytest.approx(right / total, abs=1e-4)


def test_bad_input_exits_2_and_missing_onnx_names_the_extra(
    trained_run: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    ckpt = str(trained_run / "checkpoints" / "best.ckpt")
    for args, message in [
        (["--ckpt_path=nope.ckpt"], "no such file"),
        ([f"--ckpt_path={ckpt}", "--format=tflite"], "tflite"),
        ([f"--ckpt_path={ckpt}", "--quantize=dynamic"], "use --format torchscript"),
    ]:
        with pytest.raises(SystemExit) as exit_info:
            main(["export", *args])
        assert exit_info.value.code == 2
        assert message in capsys.readouterr().err
    monkeypatch.setattr(export, "missing_modules", lambda extra: ["onnxruntime"])
    with pytest.raises(SystemExit):
        main(["export", f"--ckpt_path={ckpt}", "--format=onnx"])
    assert "pip install 'runwright[export]'" in capsys.readouterr().err


def test_export_best_takes_the_newest_runs_best_checkpoint(
    fitted: Callable[..., Path], workdir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    older, newer = fitted("older"), fitted("newer")
    later = (newer / "checkpoints/best.ckpt").stat().st_mtime + 60
    os.utime(newer / "checkpoints/best.ckpt", (later, later))
    capsys.readouterr()
    main(["export", "--ckpt_path", "best", "--format", "torch_export"])
    assert "Parity check passed" in capsys.readouterr().out
    (exported,) = (workdir / "logs").glob("*_export/model.pt2")
    provenance = yaml.safe_load((exported.parent / "provenance.yaml").read_text())
    assert provenance["checkpoint"] == str(newer / "checkpoints/best.ckpt")
    assert str(older) not in provenance["checkpoint"]


def test_a_plain_lightning_module_exports_on_its_test_split_or_its_example_input(
    run_cli: RunCLI, workdir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A LightningModule written as Lightning's docs write one: the parity batch is its DataModule's test
    split (47 samples); a run whose data has no test split traces the model's ``example_input_array``."""
    fit = run_cli("fit", f"--model={PLAIN_MODEL}", f"--data={PLAIN_DATA}", "--checkpoint.monitor=val_acc")
    ckpt = fit.run_dir / "checkpoints" / "best.ckpt"
    capsys.readouterr()
    main(["export", f"--ckpt_path={ckpt}", "--format=torchscript", f"--output={workdir / 'plain.pt'}"])
    assert "batch 47:" in capsys.readouterr().out
    model = checkpoint_model(ckpt)
    ((example,), _) = rebuild.model_inputs(model, None)  # no test batch: the example input
    assert torch.equal(example, model.example_input_array)


def test_main_help_lists_the_extra_commands(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["--help"])
    assert exit_info.value.code == 0
    out = " ".join(capsys.readouterr().out.split())
    for command in ("export:", "report:", "lr_find:", "scale_batch_size:"):
        assert command in out, command


@pytest.fixture(scope="module")
def batch_size_1_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fixture run trained with ``--data.batch_size=1`` (a few steps)."""
    return fit_with_batch_size_1(tmp_path_factory.mktemp("export_bs1") / "logs")


@pytest.mark.parametrize("fmt", ["onnx", "torch_export", "torchscript"])
def test_export_after_batch_size_1_has_a_dynamic_batch_axis(
    fmt: str, batch_size_1_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = batch_size_1_run
    output = tmp_path / export.FILENAMES[fmt]
    main(
        [
            "export",
            f"--ckpt_path={run / 'checkpoints' / 'best.ckpt'}",
            f"--format={fmt}",
            f"--output={output}",
        ]
    )
    out = capsys.readouterr().out
    # checked at the largest batch available (the 47 test samples, loaded in batches of 1) and at 1
    assert re.search(r"batch 47: [0-9.e+-]+, batch 1: [0-9.e+-]+\) <= tolerance", out), out
    images = torch.randn(5, 1, 8, 8)
    with torch.no_grad():
        expected = checkpoint_model(run / "checkpoints" / "best.ckpt")(images)
    (actual,) = export.run_exported(output, fmt, ((images,), {}))
    torch.testing.assert_close(actual, expected, atol=1e-4, rtol=0)


def test_an_exporter_failure_is_one_error_line_naming_the_format(
    trained_run: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("Unsupported operator aten::frobnicate\nlong traceback text")

    monkeypatch.setattr(torch.export, "export", broken)
    with pytest.raises(SystemExit) as exit_info:
        main(["export", f"--ckpt_path={trained_run / 'checkpoints' / 'best.ckpt'}", "--format=torch_export"])
    assert exit_info.value.code == 1
    err = capsys.readouterr().err
    assert err.strip().splitlines()[-1] == (
        "error: --format torch_export: exporting TinyClassifier failed: "
        "RuntimeError: Unsupported operator aten::frobnicate"
    )
    assert "Traceback" not in err


def test_keyword_inputs_export_with_their_example_and_without_one_stop_with_one_line(
    run_cli: RunCLI, workdir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Dict batches give the engine no input: a ConfigError (one ``error:`` line, exit 2, no export folder
    left: test_foreign_tasks.py's ``test_export[glue]``, a task of dict batches) naming
    ``example_input_array``; with a dict ``example_input_array`` (keyword inputs) every format exports,
    every output of its dict checked at both batch sizes."""
    from helpers import KeywordInputs

    model = KeywordInputs()
    fix = r"KeywordInputs: the engine cannot tell its inputs from the test batches; set self\.example_input"
    with pytest.raises(ConfigError, match=fix):
        rebuild.model_inputs(model, next(iter(model.test_dataloader())))
    args = ["--model=helpers.KeywordInputs", "--data=null", "--checkpoint.monitor=val_loss"]
    run_cli("fit", *args, "--model.example=true")
    for fmt in ("onnx", "torch_export", "torchscript"):
        code, out, err = run_main(["export", "--ckpt_path=best", f"--format={fmt}"], capsys)
        assert code == 0 and "(batch 2: " in out and ", batch 1: " in out, err
