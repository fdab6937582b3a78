"""A finished run rebuilt as every command builds it (``--ckpt_path``: the run's classes, arguments, links,
engine settings and checks), for the commands that read a run (``export``, ``report``): its model with the
checkpoint's weights, its test data prepared, and the model's inputs and outputs on it."""

from __future__ import annotations

from typing import Any

import torch
from lightning.pytorch import LightningDataModule, LightningModule
from lightning.pytorch.cli import LightningArgumentParser
from lightning.pytorch.utilities.model_helpers import is_overridden
from lightning_utilities.core.apply_func import apply_to_collection
from torch import Tensor

from ..cli import ProjectCLI
from ..errors import ConfigError, first_line

#: A model's inputs: positional and keyword tensors (or nested structures of them).
Inputs = tuple[tuple[Any, ...], dict[str, Any]]


class RebuildCLI(ProjectCLI):
    """``ProjectCLI`` without a subcommand for the run of ``--ckpt_path`` (required): built as ``test``
    builds it, then the model gets the checkpoint's weights (its ``on_load_checkpoint``, then its
    ``state_dict``, so a weight-averaged run's averages) in eval mode on the CPU, and the DataModule
    (without one, the model) runs ``prepare_data`` and ``setup("test")``. No run folder and no logger,
    unless a subclass names its folder (:attr:`run_label`). Use it as a context manager."""

    run_label: str | None = None
    rebuilds = True

    def parse_arguments(self, parser: LightningArgumentParser, args: Any) -> None:
        """Parse, and refuse a missing ``--ckpt_path``."""
        super().parse_arguments(parser, args)
        if self.checkpoint is None:
            parser.error("--ckpt_path is required: a checkpoint file, or best/last of the newest run")

    def after_instantiate_classes(self) -> None:
        """Load the weights and prepare the test data."""
        super().after_instantiate_classes()
        assert self.checkpoint is not None
        self.model.on_load_checkpoint(self.checkpoint)
        self.model.load_state_dict(self.checkpoint["state_dict"])
        self.model.eval()
        self.data_source.prepare_data()
        self.data_source.setup("test")

    @property
    def data_source(self) -> LightningDataModule | LightningModule:
        """What holds the loaders: the DataModule, or without one the model."""
        return self.datamodule or self.model


def test_loader(source: LightningDataModule | LightningModule) -> Any | None:
    """The (first) test loader of ``source``; ``None`` without a ``test_dataloader``."""
    if not is_overridden("test_dataloader", source):
        return None
    loaders = source.test_dataloader()
    loaders = list(loaders.values()) if isinstance(loaders, dict) else loaders
    return loaders[0] if isinstance(loaders, (list, tuple)) else loaders


def first_test_batch(source: LightningDataModule | LightningModule, size: int = 64) -> Any | None:
    """The first ``size`` samples of the (first) test loader of ``source``, collated by that loader (one
    batch whatever the run's ``batch_size``); ``None`` without a ``test_dataloader``."""
    if (loader := test_loader(source)) is None:
        return None
    again = torch.utils.data.DataLoader(loader.dataset, size, collate_fn=loader.collate_fn)
    return next(iter(again), None)


def split_batch(model: Any, batch: Any) -> tuple[Any, Tensor] | None:
    """``(inputs, target)`` of a batch: the model's own ``split_batch`` (:class:`~runwright.BaseModule`'s),
    else a tuple or list of two tensors ``(x, y)``; ``None`` for another kind of batch (a dict, a bare
    tensor, ``(a, b, y)``: which are inputs the engine cannot tell)."""
    if hasattr(model, "split_batch"):
        return model.split_batch(batch)
    if isinstance(batch, (list, tuple)) and len(batch) == 2 and all(isinstance(b, Tensor) for b in batch):
        return batch[0], batch[1]
    return None


def as_inputs(value: Any) -> Inputs:
    """``example_input_array`` as Lightning reads it: a tuple or list holds positional inputs, a dict
    keyword inputs, anything else is the one input."""
    if isinstance(value, dict):
        return (), dict(value)
    return (tuple(value) if isinstance(value, (list, tuple)) else (value,)), {}


def model_inputs(model: LightningModule, batch: Any) -> Inputs:
    """The inputs to run ``model`` on: real test inputs (the inputs of ``batch``, when it is an ``(x, y)``
    batch or a bare tensor) when the model has no ``example_input_array`` or they are of its shape, else
    its ``example_input_array`` (Lightning's convention, what ``LightningModule.to_onnx`` traces).

    Raises:
        ConfigError: neither gives an input (e.g. dict batches and no ``example_input_array``).
    """
    split = split_batch(model, batch) if batch is not None else None
    real = split[0] if split is not None else batch if isinstance(batch, Tensor) else None
    example = model.example_input_array
    fix = (
        "set self.example_input_array in its __init__ (a tensor, a tuple of positional inputs or a dict of "
        "keyword inputs, batch first), as Lightning's to_onnx needs"
    )
    same = isinstance(real, Tensor) and isinstance(example, Tensor) and real.shape[1:] == example.shape[1:]
    if real is not None and (example is None or same):
        inputs, source = as_inputs(real), "the inputs of its test batches"
    elif example is None:
        raise ConfigError(
            f"{type(model).__name__}: the engine cannot tell its inputs from the test batches; {fix}"
        )
    else:
        inputs, source = as_inputs(example), "its example_input_array"
    try:
        with torch.no_grad():
            model(*inputs[0], **inputs[1])
    except Exception as error:
        failed = f"{type(error).__name__}: {first_line(error)}"
        raise ConfigError(f"{type(model).__name__} does not run on {source} ({failed}); {fix}") from None
    return inputs


def tensors(value: Any) -> list[Tensor]:
    """The tensors of an output or of :data:`Inputs` (a tensor, or nested tuples, lists and dicts of them),
    in order."""
    found: list[Tensor] = []
    apply_to_collection(value, Tensor, found.append)
    return found


@torch.no_grad()
def predict_test_split(model: Any, source: LightningDataModule | LightningModule) -> tuple[Tensor, Tensor]:
    """Run ``model`` over the whole (first) test split of ``source``; ``(outputs [N, ...] float32,
    targets [N])``.

    Raises:
        ConfigError: no ``test_dataloader``, or its batches are not ``(inputs, target)``.
    """
    if (loader := test_loader(source)) is None:
        raise ConfigError(f"{type(source).__name__} has no test_dataloader: no test split to run on")
    outputs, targets = [], []
    for batch in loader:
        if (split := split_batch(model, batch)) is None:
            raise ConfigError(f"{type(model).__name__}'s test batches are not (inputs, target) batches")
        outputs.append(model(split[0]).float())
        targets.append(split[1])
    return torch.cat(outputs), torch.cat(targets)
