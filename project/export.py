"""``python -m project export``: write a trained model for inference, then check it against
eager PyTorch.

Formats:
    ``onnx``: ``model.onnx`` through torch's dynamo ONNX exporter (``LightningModule.to_onnx``), input
        ``images`` and output ``logits`` with a dynamic batch axis, weights inside the file (in
        ``model.onnx.data`` next to it from 1.5 GiB of weights: ONNX files stop at 2 GB); checked with
        onnxruntime at two batch sizes (the real batch and its first sample). Needs the ``export`` extra
        (``pip install -e ".[export]"``: onnx, onnxruntime, onnxscript).
    ``torch_export``: ``model.pt2``, a ``torch.export.ExportedProgram`` with a dynamic batch axis
        (load with ``torch.export.load(path).module()``).
    ``torchscript``: ``model.torchscript.pt`` by tracing (``torch.jit.load``). TorchScript is
        deprecated in PyTorch; prefer ``torch_export``.

The check runs the exported model and the eager model on a real batch of the run's test split (the
data section of the run's ``config.yaml``) and fails (exit code 1) when the largest absolute
difference of the outputs exceeds ``--tolerance`` (default 1e-4, for fp32).

``--quantize dynamic`` first applies int8 dynamic quantization to the ``nn.Linear`` layers
(``torch.ao.quantization.quantize_dynamic``: weights int8, activations quantized per batch at run time,
CPU only) and reports the test accuracy before and after; it is exported as TorchScript (neither the
ONNX nor the ``torch.export`` path supports these quantized modules).
"""

from __future__ import annotations

import importlib.util
import sys
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import torch
from torch import Tensor, nn

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


class ParityError(RuntimeError):
    """The exported model's outputs differ from the eager model's by more than the tolerance."""


@dataclass
class ExportResult:
    """What :func:`export_checkpoint` wrote and measured.

    ``max_abs_diff`` maps a batch size to the largest absolute difference (exported vs eager logits)
    on a real test batch of that size. ``accuracy`` holds test accuracies (``fp32``, ``int8``) when
    quantizing.
    """

    path: Path
    format: str
    max_abs_diff: dict[int, float]
    tolerance: float
    accuracy: dict[str, float] = field(default_factory=dict)
    metric_name: str = "acc"


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


def write_model(model: Any, example: Tensor, fmt: str, path: Path) -> None:
    """Export ``model`` (a LightningModule in eval mode) traced on ``example`` ``[B, ...]`` to ``path``.

    Raises:
        ModuleNotFoundError: ``fmt == "onnx"`` and onnx/onnxruntime/onnxscript are missing.
        ValueError: an unknown ``fmt``.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
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
                input_names=["images"],
                output_names=["logits"],
                dynamic_shapes=_dynamic_batch(),
                external_data=_state_bytes(model) >= ONNX_EXTERNAL_DATA_BYTES,
                verbose=False,
            )
        elif fmt == "torch_export":
            program = torch.export.export(model, (example,), dynamic_shapes=_dynamic_batch())
            torch.export.save(program, path)
        elif fmt == "torchscript":
            model.to_torchscript(path, method="trace", example_inputs=example)
        else:
            raise ValueError(f"format={fmt!r}: expected one of {sorted(FILENAMES)}")


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
    """Compare the exported model with ``eager`` on ``batch`` ``[B, ...]`` (and on ``batch[:1]``).

    Two batch sizes check the dynamic batch axis. Returns ``{batch_size: max |exported - eager|}``.

    Raises:
        ParityError: when a difference exceeds ``tolerance`` (or the outputs' shapes differ).
    """
    diffs: dict[int, float] = {}
    sizes = [batch] if len(batch) == 1 else [batch, batch[:1]]
    for inputs in sizes:
        with torch.no_grad():
            expected = eager(inputs).float()
        actual = run_exported(path, fmt, inputs)
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
    """Share of rows of ``logits`` ``[N, K]`` whose argmax equals ``targets`` ``[N]`` (0..1).

    For a regression model (float ``targets``) it is the mean absolute error instead (lower is better).
    """
    if targets.dtype.is_floating_point:
        return float((logits.reshape(targets.shape) - targets).abs().mean())
    return float((logits.argmax(dim=-1) == targets).float().mean())


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
    from project.loading import load_datamodule, load_model, predict_test_split, split_batch

    model = load_model(ckpt_path)
    datamodule = load_datamodule(config_path)
    datamodule.setup("test")
    batch, batch_targets = split_batch(next(iter(datamodule.test_dataloader())))
    batch_targets_float = batch_targets is not None and batch_targets.dtype.is_floating_point
    accuracies: dict[str, float] = {}
    eager: Any = model
    if quantize == "dynamic":
        logits, targets = predict_test_split(model, datamodule, desc="fp32 test accuracy")
        accuracies["fp32"] = accuracy(logits, targets)
        eager = quantize_dynamic_int8(model).eval()
        logits, targets = predict_test_split(eager, datamodule, desc="int8 test accuracy")
        accuracies["int8"] = accuracy(logits, targets)
    print(f"Exporting {ckpt_path} as {fmt} to {output} ...", flush=True)
    start = time.perf_counter()
    write_model(eager, batch[:2], fmt, output)
    print(f"Wrote {output} ({output.stat().st_size / 2**20:.2f} MiB) in {time.perf_counter() - start:.1f} s")
    diffs = check_parity(output, fmt, eager, batch, tolerance)
    metric = "acc" if not accuracies or not batch_targets_float else "mae"
    return ExportResult(output, fmt, diffs, tolerance, accuracies, metric)


def build_parser() -> Any:
    """The ``export`` command's jsonargparse parser."""
    from jsonargparse import ArgumentParser

    from project.runs import add_run_folder_arguments

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

    Exits 2 on bad input, 1 when the parity check fails.
    """
    from project.loading import resolve_checkpoint, run_config_of
    from project.provenance import collect, write_provenance
    from project.runs import create_run_dir

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
        # Provenance (issue 17): code, versions and source checkpoint, in the export's run folder.
        write_provenance(output.parent, collect(checkpoint=str(ckpt.resolve())))
    try:
        result = export_checkpoint(ckpt, cfg.format, output, config, cfg.quantize, cfg.tolerance)
    except ParityError as error:
        print(f"FAILED parity check: {error}", file=sys.stderr)
        raise SystemExit(1) from None
    diffs = ", ".join(f"batch {size}: {diff:.3g}" for size, diff in result.max_abs_diff.items())
    print(f"Parity check passed: max abs diff vs eager ({diffs}) <= tolerance {result.tolerance:g}")
    if result.accuracy:
        fp32, int8 = result.accuracy["fp32"], result.accuracy["int8"]
        name = "accuracy" if "acc" in result.metric_name else "MAE"
        print(f"Test {name}: fp32 {fp32:.4f}, int8 {int8:.4f} (delta {int8 - fp32:+.4f})")
    print(f"Exported model: {result.path}")
