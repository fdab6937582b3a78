"""``python -m project export``: write a trained model for inference, then check it against
eager PyTorch.

Formats:
    ``onnx``: ``model.onnx`` through torch's dynamo ONNX exporter (``LightningModule.to_onnx``), input
        and output named by the model's ``export_names`` (the classifier's ``images``/``logits``, the
        regressor's ``features``/``predictions``) with a dynamic batch axis, weights inside the file (in
        ``model.onnx.data`` next to it from 1.5 GiB of weights: ONNX files stop at 2 GB); checked with
        onnxruntime. Needs the ``export`` extra
        (``pip install -e ".[export]"``: onnx, onnxruntime, onnxscript).
    ``torch_export``: ``model.pt2``, a ``torch.export.ExportedProgram`` with a dynamic batch axis
        (load with ``torch.export.load(path).module()``).
    ``torchscript``: ``model.torchscript.pt`` by tracing (``torch.jit.load``). TorchScript is
        deprecated in PyTorch; prefer ``torch_export``.

Every format is traced on a batch of at least 2 samples (whatever the run's ``batch_size``; a batch of
1 would let ``torch.export`` specialise the batch axis to 1) with the batch axis declared dynamic.
The check runs the exported model and the eager model on real samples of the run's test split (the
data section of the run's ``config.yaml``) at two batch sizes: the largest available (up to
``PARITY_BATCH_SIZE`` samples, gathered over as many test batches as needed) and 1. It fails
(exit code 1) when the largest absolute difference of the outputs exceeds ``--tolerance`` (default
1e-4, for fp32). An exporter that fails is one ``error:`` line naming the format and the cause
(exit code 1).

``--quantize dynamic`` first applies int8 dynamic quantization to the ``nn.Linear`` layers
(``torch.ao.quantization.quantize_dynamic``: weights int8, activations quantized per batch at run time,
CPU only) and reports the test metric before and after (accuracy for a classifier, whose targets are
class indices; mean absolute error in the target's units for a regressor); it is exported as
TorchScript (neither the ONNX nor the ``torch.export`` path supports these quantized modules).
"""

from __future__ import annotations

import importlib.util
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import torch
from torch import Tensor, nn

from .errors import ProjectError

Format = Literal["onnx", "torchscript", "torch_export"]
FILENAMES: dict[str, str] = {
    "onnx": "model.onnx",
    "torchscript": "model.torchscript.pt",
    "torch_export": "model.pt2",
}
#: Python modules the ONNX path needs, all in the ``export`` extra of pyproject.toml.
ONNX_MODULES = ("onnx", "onnxruntime", "onnxscript")
INSTALL_HINT = 'pip install -e ".[export]"  (or: pip install onnx onnxruntime onnxscript)'
DEFAULT_TOLERANCE = 1e-4
#: Most test samples the parity check runs at once (fewer when the test split is smaller).
PARITY_BATCH_SIZE = 64
#: Input and output names for a model without an ``export_names`` attribute.
DEFAULT_EXPORT_NAMES = ("inputs", "outputs")


class ParityError(ProjectError, RuntimeError):
    """The exported model's outputs differ from the eager model's by more than the tolerance, or it
    does not run at one of the checked batch sizes (exit code 1)."""


class ExportError(ProjectError):
    """An exporter (ONNX, ``torch.export``, TorchScript) failed on the model; exit code 1."""


@dataclass
class ExportResult:
    """What :func:`export_checkpoint` wrote and measured.

    ``max_abs_diff`` maps a batch size to the largest absolute difference (exported vs eager logits)
    on a real test batch of that size. ``accuracy`` holds the test metric (``fp32``, ``int8``) when
    quantizing, and ``metric_name`` says which (``"accuracy"`` or ``"MAE"``, see :func:`test_metric`).
    """

    path: Path
    format: str
    max_abs_diff: dict[int, float]
    tolerance: float
    accuracy: dict[str, float] = field(default_factory=dict)
    metric_name: str = "accuracy"


def missing_onnx_modules() -> list[str]:
    """Names of the ONNX packages that are not installed (empty when ONNX export can run)."""
    return [name for name in ONNX_MODULES if importlib.util.find_spec(name) is None]


def quantize_dynamic_int8(model: nn.Module) -> nn.Module:
    """A copy of ``model`` with every ``nn.Linear`` replaced by an int8 dynamically quantized one.

    Uses ``torch.ao.quantization.quantize_dynamic`` (Jacob et al. 2018 affine int8; per-tensor weight
    scale, activation scale computed per batch). The API is marked deprecated in favour of torchao
    but works on CPU in torch 2.x; its deprecation warning is silenced here.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from torch.ao.quantization import quantize_dynamic

        return quantize_dynamic(model, {nn.Linear}, dtype=torch.qint8)


def _dynamic_batch() -> tuple[dict[int, Any]]:
    return ({0: torch.export.Dim.DYNAMIC},)


def export_names(model: nn.Module) -> tuple[str, str]:
    """The model's ``(input name, output name)`` for ONNX: its ``export_names`` attribute (the
    classifier's ``("images", "logits")``, the regressor's ``("features", "predictions")``), else
    :data:`DEFAULT_EXPORT_NAMES`."""
    names = getattr(model, "export_names", DEFAULT_EXPORT_NAMES)
    return str(names[0]), str(names[1])


def trace_example(batch: Tensor) -> Tensor:
    """The first two samples of ``batch`` ``[B, ...]`` (the one sample twice when ``B == 1``): tracing
    on a batch of 1 lets ``torch.export`` (and so the dynamo ONNX exporter) specialise the batch axis
    to 1, and the exported model then refuses any other batch size."""
    return batch[:2] if len(batch) >= 2 else torch.cat([batch, batch])


def write_model(model: Any, example: Tensor, fmt: str, path: Path) -> None:
    """Export ``model`` (a LightningModule in eval mode) traced on ``example`` ``[B, ...]`` (``B >= 2``,
    see :func:`trace_example`) to ``path``, with a dynamic batch axis.

    Raises:
        ModuleNotFoundError: ``fmt == "onnx"`` and onnx/onnxruntime/onnxscript are missing.
        ValueError: an unknown ``fmt``, or ``B < 2``.
        ExportError: the exporter failed (the message names the format and the exporter's error).
    """
    if fmt not in FILENAMES:
        raise ValueError(f"format={fmt!r}: expected one of {sorted(FILENAMES)}")
    if len(example) < 2:
        raise ValueError(f"trace on at least 2 samples, got {len(example)}: 1 would fix the batch axis")
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        _write_model(model, example, fmt, path)
    except ModuleNotFoundError:
        raise
    except Exception as error:
        raise ExportError(
            f"--format {fmt}: exporting {type(model).__name__} failed: {type(error).__name__}: "
            f"{str(error).strip().splitlines()[0] if str(error).strip() else ''}"
        ) from error


def _write_model(model: Any, example: Tensor, fmt: str, path: Path) -> None:
    input_name, output_name = export_names(model)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if fmt == "onnx":
            missing = missing_onnx_modules()
            if missing:
                raise ModuleNotFoundError(f"ONNX export needs {', '.join(missing)}: {INSTALL_HINT}")
            model.to_onnx(
                path,
                (example,),
                dynamo=True,
                input_names=[input_name],
                output_names=[output_name],
                dynamic_shapes=_dynamic_batch(),
                external_data=_state_bytes(model) >= ONNX_EXTERNAL_DATA_BYTES,
                verbose=False,
            )
        elif fmt == "torch_export":
            program = torch.export.export(model, (example,), dynamic_shapes=_dynamic_batch())
            torch.export.save(program, path)
        else:
            model.to_torchscript(path, method="trace", example_inputs=example)


#: Models whose parameters and buffers reach this size (bytes) keep their ONNX weights in a separate
#: ``model.onnx.data`` next to ``model.onnx``: one ONNX (protobuf) file cannot exceed 2 GB. Smaller
#: models get a single self-contained ``model.onnx``.
ONNX_EXTERNAL_DATA_BYTES = 3 << 29  # 1.5 GiB


def _state_bytes(model: torch.nn.Module) -> int:
    """Bytes of the model's parameters and buffers."""
    tensors = [*model.parameters(), *model.buffers()]
    return sum(tensor.numel() * tensor.element_size() for tensor in tensors)


def run_exported(path: Path, fmt: str, inputs: Tensor) -> Tensor:
    """Load the exported file ``path`` and return its outputs on ``inputs`` as a float32 tensor."""
    if fmt == "onnx":
        import onnxruntime

        session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        name = session.get_inputs()[0].name
        return torch.from_numpy(session.run(None, {name: inputs.numpy()})[0]).float()
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # torch.jit.load is deprecated, still supported
        if fmt == "torch_export":
            return torch.export.load(path).module()(inputs).float()
        return torch.jit.load(path)(inputs).float()


def check_parity(path: Path, fmt: str, eager: nn.Module, batch: Tensor, tolerance: float) -> dict[int, float]:
    """Compare the exported model with ``eager`` on ``batch`` ``[B, ...]`` and on ``batch[:1]``.

    Two batch sizes check the dynamic batch axis. Returns ``{batch_size: max |exported - eager|}``.

    Raises:
        ParityError: when a difference exceeds ``tolerance``, the outputs' shapes differ, or the
            exported model does not run at one of the batch sizes.
    """
    diffs: dict[int, float] = {}
    sizes = [batch] if len(batch) == 1 else [batch, batch[:1]]
    for inputs in sizes:
        with torch.no_grad():
            expected = eager(inputs).float()
        try:
            actual = run_exported(path, fmt, inputs)
        except Exception as error:
            raise ParityError(
                f"{fmt} export of {path} does not run on a batch of {len(inputs)}: {type(error).__name__}: "
                f"{str(error).strip().splitlines()[0] if str(error).strip() else ''}"
            ) from error
        if actual.shape != expected.shape:
            raise ParityError(
                f"{fmt} output shape {tuple(actual.shape)} != eager {tuple(expected.shape)} "
                f"for batch size {len(inputs)}"
            )
        diffs[len(inputs)] = float((actual - expected).abs().max())
    worst = max(diffs.values())
    if not worst <= tolerance:
        raise ParityError(
            f"{fmt} export of {path} does not match the eager model: max abs diff {worst:.3g} > tolerance "
            f"{tolerance:g} (per batch size: {diffs}). Do not ship it; check for ops that export "
            "differently (or raise --tolerance if a lower precision is intended)."
        )
    return diffs


def accuracy(logits: Tensor, targets: Tensor) -> float:
    """Share of rows of ``logits`` ``[N, K]`` whose argmax equals ``targets`` ``[N]`` (0..1)."""
    return float((logits.argmax(dim=-1) == targets).float().mean())


def test_metric(model: nn.Module, outputs: Tensor, targets: Tensor) -> tuple[str, float]:
    """The quantization check's metric for this task: ``("accuracy", ...)`` when ``targets`` are class
    indices (integers), else ``("MAE", ...)``, the mean absolute error of ``outputs`` ``[N]`` in the
    target's original units when the model has ``to_original_units`` (the regressor)."""
    if not targets.dtype.is_floating_point:
        return "accuracy", accuracy(outputs, targets)
    to_units = getattr(model, "to_original_units", None)
    outputs, targets = outputs.reshape(targets.shape), targets
    if callable(to_units):
        outputs, targets = to_units(outputs), to_units(targets)
    return "MAE", float((outputs - targets).abs().mean())


def parity_batch(loader: Any, size: int = PARITY_BATCH_SIZE) -> Tensor:
    """Up to ``max(size, first batch)`` inputs of ``loader``'s batches, concatenated ``[B, ...]``:
    the largest batch available however small the run's ``batch_size``."""
    from .loading import split_batch

    parts: list[Tensor] = []
    for batch in loader:
        parts.append(split_batch(batch)[0])
        if sum(len(part) for part in parts) >= size:
            break
    if not parts:
        raise ValueError("the test split is empty: nothing to check the export on")
    inputs = torch.cat(parts)
    return inputs if len(parts) == 1 else inputs[:size]


def export_checkpoint(
    ckpt_path: Path,
    fmt: str,
    output: Path,
    config_path: Path,
    quantize: str | None = None,
    tolerance: float = DEFAULT_TOLERANCE,
) -> ExportResult:
    """Load ``ckpt_path``, export it to ``output`` as ``fmt``, check parity and return the result.

    The real batch is the first batch of the test split of the data in ``config_path`` (a run's
    ``config.yaml``). With ``quantize="dynamic"`` the int8 model is exported and checked, and the test
    accuracy of the fp32 and int8 models is measured on the whole test split.

    Raises:
        ParityError: the exported model differs from the eager one by more than ``tolerance``.
    """
    from .loading import load_datamodule, load_model, predict_test_split

    model = load_model(ckpt_path)
    datamodule = load_datamodule(config_path)
    datamodule.setup("test")
    batch = parity_batch(datamodule.test_dataloader())
    accuracies: dict[str, float] = {}
    metric = "accuracy"
    eager: Any = model
    if quantize == "dynamic":
        outputs, targets = predict_test_split(model, datamodule, desc="fp32 test metric")
        metric, accuracies["fp32"] = test_metric(model, outputs, targets)
        eager = quantize_dynamic_int8(model).eval()
        outputs, targets = predict_test_split(eager, datamodule, desc="int8 test metric")
        metric, accuracies["int8"] = test_metric(eager, outputs, targets)
    print(f"Exporting {ckpt_path} as {fmt} to {output} ...", flush=True)
    start = time.perf_counter()
    write_model(eager, trace_example(batch), fmt, output)
    print(f"Wrote {output} ({output.stat().st_size / 2**20:.2f} MiB) in {time.perf_counter() - start:.1f} s")
    diffs = check_parity(output, fmt, eager, batch, tolerance)
    return ExportResult(output, fmt, diffs, tolerance, accuracies, metric)


def build_parser() -> Any:
    """The ``export`` command's jsonargparse parser."""
    from jsonargparse import ArgumentParser

    from .runs import add_run_folder_arguments

    parser = ArgumentParser(
        prog=f"python -m {__package__} export",
        description=__doc__,
    )
    parser.add_argument(
        "--ckpt_path", type=str, required=True, help="Checkpoint file, or best/last of the newest run."
    )
    parser.add_argument("--format", type=Format, default="onnx", help="Export format.")
    parser.add_argument(
        "--quantize",
        type=Literal["dynamic"] | None,
        default=None,
        help="int8 dynamic quantization of Linear layers (exported as torchscript).",
    )
    parser.add_argument(
        "--tolerance", type=float, default=DEFAULT_TOLERANCE, help="Largest allowed max abs difference."
    )
    parser.add_argument(
        "--output", type=str | None, default=None, help="Output file (default: in a new run folder)."
    )
    parser.add_argument(
        "--config",
        type=str | None,
        default=None,
        help="The run's config.yaml, for the data (default: next to the checkpoint's folder).",
    )
    add_run_folder_arguments(parser)
    return parser


def main(args: list[str]) -> None:
    """Run ``python -m project export ARGS``.

    Exits 2 on bad input; raises :class:`ExportError` or :class:`ParityError` (one ``error:`` line and
    exit code 1 from :func:`project.cli.main`) when the exporter or the parity check fails.
    """
    from .loading import resolve_checkpoint, run_config_of
    from .provenance import collect, write_provenance
    from .runs import create_run_dir

    parser = build_parser()
    cfg = parser.parse_args(args)
    if cfg.quantize and cfg.format != "torchscript":
        parser.error(
            f"--quantize={cfg.quantize} with --format={cfg.format}: dynamically quantized Linear layers only "
            "export as TorchScript; use --format torchscript"
        )
    if cfg.format == "onnx" and missing_onnx_modules():
        parser.error(f"--format onnx needs {', '.join(missing_onnx_modules())}; install: {INSTALL_HINT}")
    if not cfg.tolerance > 0:
        parser.error(f"--tolerance={cfg.tolerance}: must be a positive number such as 1e-4")
    try:
        ckpt = resolve_checkpoint(cfg.ckpt_path, cfg.logs_dir)
        config = Path(cfg.config) if cfg.config else run_config_of(ckpt)
        if not config.is_file():
            raise FileNotFoundError(f"--config={cfg.config!r}: no such file")
    except FileNotFoundError as error:
        parser.error(str(error))
    if cfg.output:
        output = Path(cfg.output)
    else:
        output = create_run_dir(cfg.logs_dir, "export", cfg.run_name) / FILENAMES[cfg.format]
        # Provenance: code, versions and source checkpoint, in the export's run folder.
        write_provenance(output.parent, collect(checkpoint=str(ckpt.resolve())))
    result = export_checkpoint(ckpt, cfg.format, output, config, cfg.quantize, cfg.tolerance)
    diffs = ", ".join(f"batch {size}: {diff:.3g}" for size, diff in result.max_abs_diff.items())
    print(f"Parity check passed: max abs diff vs eager ({diffs}) <= tolerance {result.tolerance:g}")
    if result.accuracy:
        fp32, int8 = result.accuracy["fp32"], result.accuracy["int8"]
        print(f"Test {result.metric_name}: fp32 {fp32:.4f}, int8 {int8:.4f} (delta {int8 - fp32:+.4f})")
    print(f"Exported model: {result.path}")
