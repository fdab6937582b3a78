"""``python -m <package> export``: write a trained model for inference, then check it against eager
PyTorch.

Formats, traced on at least 2 samples with a dynamic batch axis: ``onnx`` (``model.onnx``, torch's dynamo
exporter; needs the engine's ``export`` extra, ``pip install 'runwright[export]'``), ``torch_export``
(``model.pt2``), ``torchscript`` (``model.torchscript.pt``, traced; deprecated by PyTorch). Parity check:
the exported and the eager model run on up to 64 samples of the run's test split (the data of its
``config.yaml``) and on 1; a max absolute difference above ``--tolerance`` (default 1e-4, for fp32), or a
failing exporter, is one ``error:`` line and exit code 1. ``--quantize dynamic``: int8 dynamic
quantization of the ``nn.Linear`` layers (CPU, TorchScript only), printing the test metric before and
after.
"""

from __future__ import annotations

import io
import shutil
import warnings
from pathlib import Path
from typing import Any, Literal

import torch
from jsonargparse import ArgumentParser
from jsonargparse.typing import PositiveFloat
from lightning.pytorch.utilities.model_helpers import is_overridden

from ..errors import ProjectError, first_line
from ..project import DISTRIBUTION, missing_modules
from ..provenance import collect, write_provenance
from ..runs import add_run_folder_arguments, create_run_dir, resolve_checkpoint, run_dir_of, write_atomically
from . import rebuild

FILENAMES = {"onnx": "model.onnx", "torchscript": "model.torchscript.pt", "torch_export": "model.pt2"}


class ParityError(ProjectError, RuntimeError):
    """The exported model's outputs differ from the eager model's by more than the tolerance (exit code 1)."""


class ExportError(ProjectError):
    """An exporter (ONNX, ``torch.export``, TorchScript) failed on the model (exit code 1)."""


def write_model(model: Any, batch: torch.Tensor, fmt: str, path: Path) -> None:
    """Export ``model`` (a LightningModule in eval mode) to ``path`` as ``fmt``, traced on two samples of
    ``batch`` ``[B, ...]`` (the one sample twice when ``B == 1``) with a dynamic batch axis. ONNX input
    and output are named by the model's ``export_names``; from 1.5 GiB its weights go to ``path.data``.
    A file that cannot be written whole is not left behind (the file at ``path`` before stays, except
    for ONNX).

    Raises:
        ExportError: the exporter failed (the message names the format and the exporter's error).
        OSError: ``path`` cannot be written.
    """
    inputs, outputs = getattr(model, "export_names", ("inputs", "outputs"))
    onnx = {"input_names": [inputs], "output_names": [outputs], "external_data": False, "verbose": False}
    try:
        example, dynamic = torch.cat([batch, batch])[:2], ({0: torch.export.Dim.DYNAMIC},)
        if fmt == "onnx":  # (in place: a large model's weights go to a file named after it)
            model.to_onnx(path, (example,), dynamo=True, dynamic_shapes=dynamic, **onnx)
        elif fmt == "torch_export":
            program, buffer = torch.export.export(model, (example,), dynamic_shapes=dynamic), io.BytesIO()
            torch.export.save(program, buffer)  # (into a file, a failed write aborts the process)
            write_atomically(path, lambda temporary: temporary.write_bytes(buffer.getvalue()))
        else:
            trace = {"method": "trace", "example_inputs": example}
            write_atomically(path, lambda temporary: model.to_torchscript(temporary, **trace))
    except OSError as error:  # the file cannot be written (a full disk): cli.main names it
        for partial in (path, path.with_name(f"{path.name}.data")) if fmt == "onnx" else ():
            partial.unlink(missing_ok=True)
        error.filename = error.filename or str(path)
        raise
    except Exception as error:
        failed = f"exporting {type(model).__name__} failed: {type(error).__name__}: {first_line(error)}"
        raise ExportError(f"--format {fmt}: {failed}") from error


def run_exported(path: Path, fmt: str, inputs: torch.Tensor) -> torch.Tensor:
    """Load the exported file ``path`` and return its outputs on ``inputs`` as a float32 tensor."""
    if fmt == "onnx":
        import onnxruntime

        session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        return torch.from_numpy(session.run(None, {session.get_inputs()[0].name: inputs.numpy()})[0]).float()
    module = torch.export.load(path).module() if fmt == "torch_export" else torch.jit.load(path)
    return module(inputs).float()


@torch.no_grad()
def check_parity(path: Path, fmt: str, eager: Any, batch: torch.Tensor, tolerance: float) -> dict[int, float]:
    """Compare the exported model with ``eager`` on ``batch`` ``[B, ...]`` and on ``batch[:1]`` (two
    batch sizes check the dynamic batch axis); returns ``{batch_size: max |exported - eager|}``.

    Raises:
        ParityError: a difference exceeds ``tolerance`` or is NaN (another output shape: infinite).
    """
    diffs: dict[int, float] = {}
    for n in (len(batch), 1):
        out, ref = run_exported(path, fmt, batch[:n]), eager(batch[:n]).float()
        diffs[n] = diff = float((out - ref).abs().max()) if out.shape == ref.shape else float("inf")
        if not diff <= tolerance:
            raise ParityError(f"{fmt} vs eager, batch {n}: max abs diff {diff:.3g} > tolerance {tolerance:g}")
    return diffs


def test_metric(model: Any, datamodule: Any) -> tuple[str, float]:
    """The quantization check's metric of ``model`` on the whole test split: ``("accuracy", share 0..1)``
    of ``[N, K]`` outputs for class-index targets, else ``("MAE", ...)`` of ``[N]`` outputs, in the
    target's original units when the model has ``to_original_units`` (a regressor)."""
    outputs, targets = rebuild.predict_test_split(model, datamodule)
    if not targets.dtype.is_floating_point:
        return "accuracy", float((outputs.argmax(-1) == targets).float().mean())
    units = getattr(model, "to_original_units", lambda values: values)
    return "MAE", float((units(outputs.reshape(targets.shape)) - units(targets)).abs().mean())


def parity_batch(model: Any, datamodule: Any) -> torch.Tensor:
    """The inputs to trace and check the export on, ``[B, ...]``: the first 64 samples of the
    DataModule's test split (one batch of its loader's ``collate_fn``, whatever the run's ``batch_size``),
    or, without a ``test_dataloader``, the model's ``example_input_array``."""
    if not is_overridden("test_dataloader", datamodule):
        return model.example_input_array
    datamodule.setup("test")
    loader = datamodule.test_dataloader()
    batch = next(iter(torch.utils.data.DataLoader(loader.dataset, 64, collate_fn=loader.collate_fn)))
    return rebuild.split_batch(model, batch)[0]


def main(args: list[str], package: str) -> None:
    """Run ``python -m <package> export ARGS``: exit code 2 on bad input (a bad ``--ckpt_path``:
    :class:`~runwright.errors.CheckpointError`); :class:`ExportError`, :class:`ParityError` or an
    ``OSError`` (a file that cannot be written) on failure (one ``error:`` line from ``cli.main``). The
    export's run folder is removed on any failure but a :class:`ParityError`."""
    parser = ArgumentParser(prog=f"python -m {package} export", description=__doc__)
    parser.add_argument("--ckpt_path", type=str, required=True, help="File, or best/last (newest run).")
    parser.add_argument("--format", type=Literal["onnx", "torchscript", "torch_export"], default="onnx")
    parser.add_argument("--quantize", type=Literal["dynamic"] | None, help="int8 Linear layers (CPU).")
    parser.add_argument("--tolerance", type=PositiveFloat, default=1e-4)
    parser.add_argument("--output", type=Path | None, help="Output file (default: in a new run folder).")
    parser.add_argument("--config", type=Path | None, help="Run config.yaml (default: the checkpoint's).")
    add_run_folder_arguments(parser)
    cfg = parser.parse_args(args[1:])
    if cfg.quantize and cfg.format != "torchscript":
        parser.error(f"--quantize needs TorchScript, not --format={cfg.format}; use --format torchscript")
    if cfg.format == "onnx" and (missing := missing_modules("export")):
        parser.error(f"--format onnx needs {', '.join(missing)}: pip install '{DISTRIBUTION}[export]'")
    if cfg.config and not cfg.config.is_file():
        parser.error(f"--config={str(cfg.config)!r}: no such file")
    ckpt = resolve_checkpoint(cfg.ckpt_path, cfg.logs_dir)
    if not (config := cfg.config or ((run := run_dir_of(ckpt)) and run / "config.yaml")):
        parser.error(f"{ckpt} is not inside a run folder (next to its config.yaml): pass --config PATH")
    datamodule = rebuild.load_datamodule(config)
    model = rebuild.load_model(ckpt, datamodule)
    batch = parity_batch(model, datamodule)
    if cfg.output:
        cfg.output.parent.mkdir(parents=True, exist_ok=True)
    output = cfg.output or create_run_dir(cfg.logs_dir, "export", cfg.run_name) / FILENAMES[cfg.format]
    try:
        if not cfg.output:  # a run folder of its own: the provenance of the export next to the model
            write_provenance(output.parent, collect(package=package, checkpoint=str(ckpt.resolve())))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # torch's deprecation notes (quantize_dynamic, TorchScript, ONNX)
            if cfg.quantize:  # int8 weights (a scale per tensor), activations quantized per batch
                name, fp32 = test_metric(model, datamodule)
                model = torch.ao.quantization.quantize_dynamic(model, {torch.nn.Linear}, dtype=torch.qint8)
                int8 = test_metric(model, datamodule)[1]
                print(f"Test {name}: fp32 {fp32:.4f}, int8 {int8:.4f} (delta {int8 - fp32:+.4f})")
            write_model(model, batch, cfg.format, output)
            diffs = check_parity(output, cfg.format, model, batch, cfg.tolerance)
    except ParityError:  # the model is written whole: there to look at
        raise
    except BaseException:  # no half-made run folder
        if not cfg.output:
            shutil.rmtree(output.parent, ignore_errors=True)
        raise
    checked = ", ".join(f"batch {size}: {diff:.3g}" for size, diff in diffs.items())
    print(f"Parity check passed: max abs diff vs eager ({checked}) <= tolerance {cfg.tolerance:g}")
    print(f"Exported model: {output} ({output.stat().st_size / 2**20:.2f} MiB)")
