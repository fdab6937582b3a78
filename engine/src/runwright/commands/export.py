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

import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import torch
from jsonargparse.typing import PositiveFloat
from lightning.pytorch.utilities.model_helpers import is_overridden
from torch import Tensor, nn
from torch.utils.data import DataLoader

from ..errors import ConfigError, DataError, ProjectError
from ..project import DISTRIBUTION, missing_modules

FILENAMES = {"onnx": "model.onnx", "torchscript": "model.torchscript.pt", "torch_export": "model.pt2"}
DEFAULT_TOLERANCE = 1e-4


class ParityError(ProjectError, RuntimeError):
    """The exported model differs from the eager one by more than the tolerance, or does not run at a
    checked batch size (exit code 1)."""


class ExportError(ProjectError):
    """An exporter (ONNX, ``torch.export``, TorchScript) failed on the model (exit code 1)."""


@dataclass
class ExportResult:
    """What :func:`export_checkpoint` wrote and measured: ``max_abs_diff`` maps a batch size to the
    largest absolute difference (exported vs eager outputs); ``accuracy`` holds the test metric
    ``metric_name`` (``"accuracy"`` or ``"MAE"``) of the ``fp32`` and ``int8`` models when quantizing."""

    path: Path
    max_abs_diff: dict[int, float]
    accuracy: dict[str, float] = field(default_factory=dict)
    metric_name: str = "accuracy"


def _first_line(error: Exception) -> str:
    return f"{type(error).__name__}: {(str(error).strip().splitlines() or [''])[0]}"


def write_model(model: Any, batch: Tensor, fmt: str, path: Path) -> None:
    """Export ``model`` (a LightningModule in eval mode) to ``path`` as ``fmt``, traced on two samples of
    ``batch`` ``[B, ...]`` (the one sample twice when ``B == 1``) with a dynamic batch axis. ONNX input
    and output are named by the model's ``export_names``; from 1.5 GiB its weights go to ``path.data``.

    Raises:
        ExportError: the exporter failed (the message names the format and the exporter's error).
    """
    example = torch.cat([batch, batch])[:2]
    dynamic = ({0: torch.export.Dim.DYNAMIC},)
    inputs, outputs = getattr(model, "export_names", ("inputs", "outputs"))
    onnx_options = {
        "input_names": [inputs],
        "output_names": [outputs],
        "external_data": False,
        "verbose": False,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if fmt == "onnx":
                model.to_onnx(path, (example,), dynamo=True, dynamic_shapes=dynamic, **onnx_options)
            elif fmt == "torch_export":
                torch.export.save(torch.export.export(model, (example,), dynamic_shapes=dynamic), path)
            else:
                model.to_torchscript(path, method="trace", example_inputs=example)
    except Exception as error:
        raise ExportError(
            f"--format {fmt}: exporting {type(model).__name__} failed: {_first_line(error)}"
        ) from error


def run_exported(path: Path, fmt: str, inputs: Tensor) -> Tensor:
    """Load the exported file ``path`` and return its outputs on ``inputs`` as a float32 tensor."""
    if fmt == "onnx":
        import onnxruntime

        session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        return torch.from_numpy(session.run(None, {session.get_inputs()[0].name: inputs.numpy()})[0]).float()
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # torch.jit.load is deprecated, still supported
        module = torch.export.load(path).module() if fmt == "torch_export" else torch.jit.load(path)
        return module(inputs).float()


@torch.no_grad()
def check_parity(path: Path, fmt: str, eager: nn.Module, batch: Tensor, tolerance: float) -> dict[int, float]:
    """Compare the exported model with ``eager`` on ``batch`` ``[B, ...]`` and on ``batch[:1]`` (two
    batch sizes check the dynamic batch axis); returns ``{batch_size: max |exported - eager|}``.

    Raises:
        ParityError: a difference exceeds ``tolerance``, the output shapes differ, or the exported
            model does not run at one of the batch sizes.
    """
    diffs: dict[int, float] = {}
    for size, inputs in {len(batch): batch, 1: batch[:1]}.items():
        expected = eager(inputs).float()
        try:
            actual = run_exported(path, fmt, inputs)
        except Exception as error:
            raise ParityError(f"{path} does not run on a batch of {size}: {_first_line(error)}") from error
        if actual.shape != expected.shape:
            raise ParityError(f"{path}: output shape {tuple(actual.shape)} != eager {tuple(expected.shape)}")
        diffs[size] = float((actual - expected).abs().max())
    if not (worst := max(diffs.values())) <= tolerance:
        raise ParityError(
            f"{fmt} export vs eager: max abs diff {worst:.3g} > tolerance {tolerance:g}; do not ship it"
        )
    return diffs


def test_metric(model: nn.Module, outputs: Tensor, targets: Tensor) -> tuple[str, float]:
    """The quantization check's metric: ``("accuracy", share 0..1)`` of ``outputs`` ``[N, K]`` when
    ``targets`` ``[N]`` are class indices, else ``("MAE", ...)`` of ``outputs`` ``[N]`` in the target's
    original units when the model has ``to_original_units`` (the regressor)."""
    if not targets.dtype.is_floating_point:
        return "accuracy", float((outputs.argmax(-1) == targets).float().mean())
    to_units = getattr(model, "to_original_units", lambda values: values)
    return "MAE", float((to_units(outputs.reshape(targets.shape)) - to_units(targets)).abs().mean())


def parity_batch(model: Any, datamodule: Any) -> Tensor:
    """The inputs to trace and check the export on, ``[B, ...]``: the first 64 samples of the
    DataModule's test split (one batch of its loader's ``collate_fn``, however small the run's
    ``batch_size``), or, for a DataModule without a ``test_dataloader``, the model's
    ``example_input_array``.

    Raises:
        DataError: the test split is empty.
        ConfigError: neither a test split nor an ``example_input_array`` gives an input tensor.
    """
    from ..runs import split_batch

    if datamodule is not None and is_overridden("test_dataloader", datamodule):
        datamodule.setup("test")
        loader = datamodule.test_dataloader()
        batch = next(iter(DataLoader(loader.dataset, batch_size=64, collate_fn=loader.collate_fn)), None)
        if batch is None:
            raise DataError("the test split is empty: nothing to check the export on")
        if isinstance(inputs := split_batch(batch)[0], Tensor):
            return inputs
    if isinstance(example := getattr(model, "example_input_array", None), Tensor):
        return example
    raise ConfigError(f"no input tensor to trace {type(model).__name__} on: set its self.example_input_array")


def export_checkpoint(
    ckpt_path: Path,
    fmt: str,
    output: Path,
    config_path: Path,
    quantize: str | None = None,
    tolerance: float = DEFAULT_TOLERANCE,
) -> ExportResult:
    """Load ``ckpt_path``, export it to ``output`` as ``fmt`` and check parity on the test split of the
    data in ``config_path`` (a run's ``config.yaml``). With ``quantize="dynamic"`` the int8 model is
    exported and checked (every ``nn.Linear``, ``torch.ao.quantization.quantize_dynamic``), and the test
    metric of both models is measured on the whole test split.

    Raises:
        ExportError, ParityError: see :func:`write_model`, :func:`check_parity`.
        ConfigError: ``quantize`` for data without a ``test_dataloader``.
    """
    from ..runs import load_datamodule, load_model, predict_test_split

    model, datamodule = load_model(ckpt_path), load_datamodule(config_path)
    batch = parity_batch(model, datamodule)
    result = ExportResult(output, {})
    eager: Any = model
    if quantize:
        if not is_overridden("test_dataloader", datamodule):
            raise ConfigError("--quantize compares the test metric before and after: needs a test_dataloader")
        # per-tensor weight scale, activation scale per batch; the API is deprecated in favour of torchao
        # but works on CPU in torch 2.x (its warning is silenced)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from torch.ao.quantization import quantize_dynamic

            eager = quantize_dynamic(model, {nn.Linear}, dtype=torch.qint8).eval()
        for name, net in (("fp32", model), ("int8", eager)):
            split = predict_test_split(net, datamodule, f"{name} test metric")
            result.metric_name, result.accuracy[name] = test_metric(net, *split)
    print(f"Exporting {ckpt_path} as {fmt} to {output} ...", flush=True)
    start = time.perf_counter()
    write_model(eager, batch, fmt, output)
    print(f"Wrote {output} ({output.stat().st_size / 2**20:.2f} MiB) in {time.perf_counter() - start:.1f} s")
    result.max_abs_diff = check_parity(output, fmt, eager, batch, tolerance)
    return result


def main(args: list[str], package: str) -> None:
    """Run ``python -m <package> export ARGS``: exit code 2 on bad input (a bad ``--ckpt_path``:
    :class:`~runwright.errors.CheckpointError`); :class:`ExportError` or :class:`ParityError`
    on failure (one ``error:`` line and exit code 1 from ``cli.main``)."""
    from jsonargparse import ArgumentParser

    from ..provenance import collect, write_provenance
    from ..runs import add_run_folder_arguments, create_run_dir, resolve_checkpoint, run_config_of

    parser = ArgumentParser(prog=f"python -m {package} export", description=__doc__)
    parser.add_argument("--ckpt_path", type=str, required=True, help="File, or best/last (newest run).")
    parser.add_argument("--format", type=Literal["onnx", "torchscript", "torch_export"], default="onnx")
    parser.add_argument("--quantize", type=Literal["dynamic"] | None, help="int8 Linear layers (CPU).")
    parser.add_argument("--tolerance", type=PositiveFloat, default=DEFAULT_TOLERANCE)
    parser.add_argument("--output", type=Path | None, help="Output file (default: in a new run folder).")
    parser.add_argument("--config", type=Path | None, help="Run config.yaml (default: the checkpoint's).")
    add_run_folder_arguments(parser)
    cfg = parser.parse_args(args[1:])
    if cfg.quantize and cfg.format != "torchscript":
        parser.error(f"--quantize needs TorchScript, not --format={cfg.format}; use --format torchscript")
    if cfg.format == "onnx" and (missing := missing_modules("export")):
        parser.error(
            f"--format onnx needs the engine's 'export' extra ({', '.join(missing)} not installed): "
            f"pip install '{DISTRIBUTION}[export]' (or --format torch_export, --format torchscript)"
        )
    ckpt = resolve_checkpoint(cfg.ckpt_path, cfg.logs_dir)
    if not (config := cfg.config or run_config_of(ckpt)).is_file():
        parser.error(f"--config={str(config)!r}: no such file")
    output = cfg.output or create_run_dir(cfg.logs_dir, "export", cfg.run_name) / FILENAMES[cfg.format]
    if not cfg.output:
        write_provenance(output.parent, collect(package=package, checkpoint=str(ckpt.resolve())))
    result = export_checkpoint(ckpt, cfg.format, output, config, cfg.quantize, cfg.tolerance)
    diffs = ", ".join(f"batch {size}: {diff:.3g}" for size, diff in result.max_abs_diff.items())
    print(f"Parity check passed: max abs diff vs eager ({diffs}) <= tolerance {cfg.tolerance:g}")
    if result.accuracy:
        fp32, int8 = result.accuracy["fp32"], result.accuracy["int8"]
        print(f"Test {result.metric_name}: fp32 {fp32:.4f}, int8 {int8:.4f} (delta {int8 - fp32:+.4f})")
    print(f"Exported model: {result.path}")
