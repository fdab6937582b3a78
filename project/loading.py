"""Rebuild a trained model and its data from a run folder, outside the Trainer (export, report)."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import torch
import yaml
from lightning.pytorch import LightningDataModule, LightningModule
from torch import Tensor

from .errors import CheckpointError
from .runs import resolve_checkpoint, run_dir_of  # noqa: F401  (one resolver for every command)


def run_config_of(ckpt_path: Path) -> Path:
    """The ``config.yaml`` of the run that wrote ``ckpt_path`` (``<run>/checkpoints/x.ckpt``).

    Raises:
        CheckpointError: ``ckpt_path`` is not in a run folder's ``checkpoints/`` next to its
            ``config.yaml`` (pass the config explicitly then).
    """
    run_dir = run_dir_of(ckpt_path)
    if run_dir is None:
        raise CheckpointError(
            f"{ckpt_path} is not inside a run folder (<run>/checkpoints/<file>.ckpt next to "
            "<run>/config.yaml). Pass the run's config with --config PATH"
        )
    return run_dir / "config.yaml"


def saved_classes(checkpoint: dict[str, Any], skip: tuple[str, ...] = ()) -> dict[str, Any]:
    """The ``model`` and ``data`` configs (``{class_path, init_args}``) that LightningCLI saved in a
    checkpoint's ``hyper_parameters`` and ``datamodule_hyper_parameters`` (``_class_path`` plus the
    arguments), without the model arguments in ``skip`` (the CLI's link targets). A part the checkpoint
    has no class for (e.g. written by plain Lightning) is absent."""
    configs = {}
    for name, key in (("model", "hyper_parameters"), ("data", "datamodule_hyper_parameters")):
        saved = {k: v for k, v in (checkpoint.get(key) or {}).items() if k != "_instantiator"}
        if class_path := saved.pop("_class_path", None):
            init_args = {k: v for k, v in saved.items() if name == "data" or k not in skip}
            configs[name] = {"class_path": class_path, "init_args": init_args}
    return configs


def load_model(ckpt_path: str | Path) -> LightningModule:
    """Build the model saved in a LightningCLI checkpoint, in eval mode on the CPU.

    The checkpoint is read with ``torch.load(weights_only=True)``: its ``hyper_parameters`` hold the
    model's ``_class_path`` and init arguments (saved by LightningCLI), which Lightning's trusted
    instantiator (``lightning.pytorch.cli.instantiate_module``) turns back into the model; then the
    weights are loaded. Only classes already imported can be built, so ``project.models`` is
    imported.
    """
    from . import models  # noqa: F401  (registers the classes the checkpoint may name)
    from .checkpointing import load_checkpoint

    load_checkpoint(ckpt_path)  # clear errors, and a warning when saved under other torch/Lightning versions
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Attribute .* is an instance of `nn.Module`")
        model = LightningModule.load_from_checkpoint(str(ckpt_path), map_location="cpu", weights_only=True)
    return model.eval()


def load_datamodule(config_path: str | Path) -> LightningDataModule:
    """Instantiate the ``data`` section (``class_path`` + ``init_args``) of a run's ``config.yaml``.

    Raises:
        ValueError: the file has no ``data`` section.
    """
    from jsonargparse import ArgumentParser

    from . import data  # noqa: F401

    config = yaml.safe_load(Path(config_path).read_text()) or {}
    if not isinstance(config.get("data"), dict):
        raise ValueError(f"{config_path}: no 'data' section (class_path, init_args) to build the data from")
    parser = ArgumentParser(exit_on_error=False)
    parser.add_subclass_arguments(LightningDataModule, "data", required=True, fail_untyped=False)
    parsed = parser.parse_object({"data": config["data"]})
    datamodule: LightningDataModule = parser.instantiate_classes(parsed).data
    return datamodule


def split_batch(batch: Any) -> tuple[Tensor, Tensor | None]:
    """Split a batch into ``(inputs, targets)`` (targets ``None`` for an unlabelled batch)."""
    if isinstance(batch, (list, tuple)):
        return batch[0], (batch[1] if len(batch) > 1 else None)
    return batch, None


@torch.no_grad()
def predict_test_split(
    model: torch.nn.Module, datamodule: LightningDataModule, desc: str = "test split"
) -> tuple[Tensor, Tensor]:
    """Run ``model`` over the whole test split; return ``(logits [N, K] float32, targets [N] int64)``."""
    from .progress import track

    datamodule.setup("test")
    loader = datamodule.test_dataloader()
    outputs, targets = [], []
    for batch in track(loader, total=len(loader), desc=desc):
        inputs, target = split_batch(batch)
        outputs.append(model(inputs).float())
        if target is not None:
            targets.append(target)
    return torch.cat(outputs), torch.cat(targets) if targets else torch.empty(0, dtype=torch.int64)
