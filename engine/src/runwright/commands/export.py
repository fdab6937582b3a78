"""``python -m <package> export --ckpt_path ...``: write a trained model for inference, then check it
against eager PyTorch.

The run is rebuilt as ``test`` builds it (:class:`~runwright.commands.rebuild.RebuildCLI`: ``--config``
and overrides work as for every command). Formats, traced on at least 2 samples with a dynamic batch axis:
``onnx`` (``model.onnx``, torch's dynamo exporter; needs the engine's ``export`` extra, ``pip install
'runwright[export]'``), ``torch_export`` (``model.pt2``), ``torchscript`` (``model.torchscript.pt``,
traced; deprecated by PyTorch). The inputs: up to 64 samples of the run's test split, or the model's
``example_input_array`` (:func:`~runwright.commands.rebuild.model_inputs`). Parity check: the exported and
the eager model run on them and on their first sample; a max absolute difference above ``--tolerance``
(default 1e-4, for fp32), or a failing exporter, is one ``error:`` line and exit code 1. ``--quantize
dynamic``: int8 dynamic quantization of the ``nn.Linear`` layers (CPU, TorchScript only), printing the
test metric before and after.
"""

from __future__ import annotations

import inspect
import io
import shutil
import warnings
from pathlib import Path
from typing import Any, Literal

import torch
from jsonargparse.typing import PositiveFloat
from lightning.pytorch.cli import LightningArgumentParser
from lightning_utilities.core.apply_func import apply_to_collection

from ..errors import ConfigError, ProjectError, first_line
from ..project import DISTRIBUTION, missing_modules
from ..provenance import collect, write_provenance
from ..runs import write_atomically
from . import rebuild
from .rebuild import Inputs

FILENAMES = {"onnx": "model.onnx", "torchscript": "model.torchscript.pt", "torch_export": "model.pt2"}


class ParityError(ProjectError, RuntimeError):
    """The exported model's outputs differ from the eager model's by more than the tolerance (exit code 1)."""


class ExportError(ProjectError):
    """An exporter (ONNX, ``torch.export``, TorchScript) failed on the model (exit code 1)."""


def input_names(model: Any, inputs: Inputs) -> list[str]:
    """The ONNX input names: the model's ``export_names[0]`` for one input (default ``inputs``), else the
    keywords, or ``forward``'s parameter names for positional inputs."""
    args, kwargs = inputs
    if kwargs:
        return list(kwargs)
    if len(args) == 1:
        return [getattr(model, "export_names", ("inputs",))[0]]
    return list(inspect.signature(model.forward).parameters)[: len(args)]


def write_model(model: Any, inputs: Inputs, fmt: str, path: Path) -> None:
    """Export ``model`` (a LightningModule in eval mode) to ``path`` as ``fmt``, traced on two samples of
    ``inputs`` (the one sample twice when there is one) with a dynamic batch axis (dim 0 of every tensor).
    ONNX inputs and outputs are named by :func:`input_names` and ``export_names[1]`` (default
    ``outputs``, for one output); from 1.5 GiB its weights go to ``path.data``. A file that cannot be
    written whole is not left behind (the file at ``path`` before stays, except for ONNX).

    Raises:
        ExportError: the exporter failed (the message names the format and the exporter's error).
        OSError: ``path`` cannot be written.
    """
    args, kwargs = apply_to_collection(inputs, torch.Tensor, lambda v: torch.cat([v, v])[:2])
    axis = {0: torch.export.Dim.DYNAMIC}
    dynamic: Any = {k: axis for k in kwargs} if kwargs else tuple(axis for _ in args)
    try:
        if fmt == "onnx":  # (in place: a large model's weights go to a file named after it)
            names = {"input_names": input_names(model, inputs), "external_data": False, "verbose": False}
            outputs = getattr(model, "export_names", ("inputs", "outputs"))[1:]
            model.to_onnx(
                path, args, dynamo=True, kwargs=kwargs, dynamic_shapes=dynamic, output_names=outputs, **names
            )
        elif fmt == "torch_export":
            program, buffer = torch.export.export(model, args, kwargs, dynamic_shapes=dynamic), io.BytesIO()
            torch.export.save(program, buffer)  # (into a file, a failed write aborts the process)
            write_atomically(path, lambda temporary: temporary.write_bytes(buffer.getvalue()))
        else:
            trace: dict[str, Any] = {"method": "trace", "example_inputs": args or None, "strict": False}
            trace |= {"example_kwarg_inputs": kwargs} if kwargs else {}
            write_atomically(path, lambda temporary: model.to_torchscript(temporary, **trace))
    except OSError as error:  # the file cannot be written (a full disk): cli.main names it
        for partial in (path, path.with_name(f"{path.name}.data")) if fmt == "onnx" else ():
            partial.unlink(missing_ok=True)
        error.filename = error.filename or str(path)
        raise
    except Exception as error:
        failed = f"exporting {type(model).__name__} failed: {type(error).__name__}: {first_line(error)}"
        raise ExportError(f"--format {fmt}: {failed}") from error


def run_exported(path: Path, fmt: str, inputs: Inputs) -> list[torch.Tensor]:
    """Load the exported file ``path`` and return its outputs on ``inputs``, as float32 tensors in order."""
    args, kwargs = inputs
    if fmt == "onnx":
        import onnxruntime

        session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        given = dict(zip((i.name for i in session.get_inputs()), args, strict=False)) | kwargs
        outputs = session.run(None, {name: value.numpy() for name, value in given.items()})
        return [torch.from_numpy(output).float() for output in outputs]
    module = torch.export.load(path).module() if fmt == "torch_export" else torch.jit.load(path)
    return [output.float() for output in rebuild.tensors(module(*args, **kwargs))]


@torch.no_grad()
def check_parity(path: Path, fmt: str, eager: Any, inputs: Inputs, tolerance: float) -> dict[int, float]:
    """Compare the exported model with ``eager`` on ``inputs`` and on their first sample (two batch sizes
    check the dynamic batch axis), every output; returns ``{batch_size: max |exported - eager|}``.

    Raises:
        ParityError: a difference exceeds ``tolerance`` or is NaN (another output shape: infinite).
    """
    diffs: dict[int, float] = {}
    for n in (len(rebuild.tensors(inputs)[0]), 1):
        part = apply_to_collection(inputs, torch.Tensor, lambda v, n=n: v[:n])
        out, ref = run_exported(path, fmt, part), rebuild.tensors(eager(*part[0], **part[1]))
        shapes = [o.shape for o in out] == [r.shape for r in ref]
        errors = [float((o - r.float()).abs().max()) for o, r in zip(out, ref, strict=True)] if shapes else []
        diffs[n] = diff = max(errors) if shapes else float("inf")
        if not diff <= tolerance:
            raise ParityError(f"{fmt} vs eager, batch {n}: max abs diff {diff:.3g} > tolerance {tolerance:g}")
    return diffs


def test_metric(model: Any, source: Any) -> tuple[str, float]:
    """The quantization check's metric of ``model`` on the whole test split: ``("accuracy", share 0..1)``
    of ``[N, K]`` outputs for class-index targets, else ``("MAE", ...)`` of ``[N]`` outputs, in the
    target's original units when the model has ``to_original_units`` (a regressor).

    Raises:
        ConfigError: the test split cannot be run (:func:`~runwright.commands.rebuild.predict_test_split`).
    """
    try:
        outputs, targets = rebuild.predict_test_split(model, source)
    except ConfigError as error:
        raise ConfigError(f"--quantize reports the test metric before and after: {error}") from None
    if not targets.dtype.is_floating_point:
        return "accuracy", float((outputs.argmax(-1) == targets).float().mean())
    units = getattr(model, "to_original_units", lambda values: values)
    return "MAE", float((units(outputs.reshape(targets.shape)) - units(targets)).abs().mean())


class ExportCLI(rebuild.RebuildCLI):
    """The rebuilt run of ``--ckpt_path`` with the export's options, in a run folder of its own (unless
    ``--output``)."""

    run_label: str | None = "export"

    def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        """Add ``--format``, ``--quantize``, ``--tolerance`` and ``--output``."""
        super().add_arguments_to_parser(parser)
        parser.add_argument("--format", type=Literal["onnx", "torchscript", "torch_export"], default="onnx")
        parser.add_argument("--quantize", type=Literal["dynamic"] | None, help="int8 Linear layers (CPU).")
        parser.add_argument("--tolerance", type=PositiveFloat, default=1e-4)
        parser.add_argument("--output", type=Path | None, help="Output file (default: in a new run folder).")

    def parse_arguments(self, parser: LightningArgumentParser, args: Any) -> None:
        """Refuse options that cannot work before anything is built; with ``--output``, no run folder."""
        super().parse_arguments(parser, args)
        config = self.config
        if config.quantize and config.format != "torchscript":
            parser.error(
                f"--quantize needs TorchScript, not --format={config.format}; use --format torchscript"
            )
        if config.format == "onnx" and (missing := missing_modules("export")):
            parser.error(f"--format onnx needs {', '.join(missing)}: pip install '{DISTRIBUTION}[export]'")
        if config.output:
            self.run_label = None


def main(args: list[str], package: str) -> None:
    """Run ``python -m <package> export ARGS``: exit code 2 on bad input (a bad ``--ckpt_path``:
    :class:`~runwright.errors.CheckpointError`); :class:`ExportError`, :class:`ParityError` or an
    ``OSError`` (a file that cannot be written) on failure (one ``error:`` line from ``cli.main``). The
    export's run folder is removed on any failure but a :class:`ParityError`."""
    prog = f"python -m {package} export"
    usage = {"prog": prog, "usage": f"{prog} --ckpt_path CKPT [options]", "description": __doc__}
    with ExportCLI(args=args[1:], run=False, package=package, parser_kwargs=usage) as cli:
        model, config = cli.model, cli.config
        output = config.output or cli.run_dir / FILENAMES[config.format]
        output.parent.mkdir(parents=True, exist_ok=True)
        try:
            inputs = rebuild.model_inputs(model, rebuild.first_test_batch(cli.data_source))
            if not config.output:  # a run folder of its own: the provenance of the export next to the model
                write_provenance(
                    output.parent, collect(package=package, checkpoint=str(Path(config.ckpt_path).resolve()))
                )
            with warnings.catch_warnings():  # torch's deprecation notes (quantize_dynamic, TorchScript, ONNX)
                warnings.simplefilter("ignore")
                if config.quantize:  # int8 weights (a scale per tensor), activations quantized per batch
                    name, fp32 = test_metric(model, cli.data_source)
                    model = torch.ao.quantization.quantize_dynamic(
                        model, {torch.nn.Linear}, dtype=torch.qint8
                    )
                    int8 = test_metric(model, cli.data_source)[1]
                    print(f"Test {name}: fp32 {fp32:.4f}, int8 {int8:.4f} (delta {int8 - fp32:+.4f})")
                write_model(model, inputs, config.format, output)
                diffs = check_parity(output, config.format, model, inputs, config.tolerance)
        except BaseException as error:  # no half-made run folder (after a ParityError, the model to look at)
            if not config.output and not isinstance(error, ParityError):
                shutil.rmtree(output.parent, ignore_errors=True)
            raise
    checked = ", ".join(f"batch {size}: {diff:.3g}" for size, diff in diffs.items())
    print(f"Parity check passed: max abs diff vs eager ({checked}) <= tolerance {config.tolerance:g}")
    print(f"Exported model: {output} ({output.stat().st_size / 2**20:.2f} MiB)")
