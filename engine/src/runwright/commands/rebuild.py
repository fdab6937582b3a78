"""A finished run rebuilt outside the Trainer, for the commands that read a run (``export``, ``report``):
its model from a checkpoint, its data from its ``config.yaml``, and the model's outputs on the test split."""

from __future__ import annotations

import inspect
import warnings
from pathlib import Path
from typing import Any

import torch
import yaml
from jsonargparse import ArgumentParser
from lightning.pytorch import LightningDataModule, LightningModule
from lightning.pytorch.utilities.model_helpers import is_overridden
from torch import Tensor

from ..checkpointing import load_checkpoint
from ..errors import CheckpointError, ConfigError
from ..runs import class_of, run_dir_of, saved_run


def load_model(ckpt_path: str | Path, datamodule: LightningDataModule | None = None) -> LightningModule:
    """The model of a checkpoint, in eval mode on the CPU, read with ``weights_only=True``: built from the
    ``_class_path`` and init arguments in its ``hyper_parameters`` (LightningCLI's, for a model that calls
    ``save_hyperparameters``), else from the ``model`` section of its run's ``config.yaml`` with the
    arguments linked from ``datamodule`` (``num_classes``, ...: :data:`~runwright.cli.DATA_LINKS`).

    Raises:
        CheckpointError: see :func:`~runwright.checkpointing.load_checkpoint` (which also warns when the
            file was saved under another torch/Lightning major.minor version); the checkpoint names no
            model class and lies in no run folder.
    """
    from ..runs import DATA_LINKS

    checkpoint = load_checkpoint(ckpt_path)
    if "_class_path" in (checkpoint.get("hyper_parameters") or {}):
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Attribute .* is an instance of `nn.Module`")
            return LightningModule.load_from_checkpoint(
                ckpt_path, map_location="cpu", weights_only=True
            ).eval()
    config = saved_run(checkpoint, run_dir_of(ckpt_path)).get("model")
    if config is None:
        raise CheckpointError(
            f"checkpoint {str(ckpt_path)!r} names no model class (its model saves no hyperparameters) and "
            "is not inside a run folder with a config.yaml: use a checkpoint of a run"
        )
    init_args = dict(config.get("init_args") or {})
    for target, source in DATA_LINKS.items():  # as the CLI links them when it builds the run
        attribute, first = source.removesuffix("[0]"), source.endswith("[0]")
        if target in inspect.signature(class_of(config["class_path"])).parameters and hasattr(
            datamodule, attribute
        ):
            value = getattr(datamodule, attribute)
            init_args[target] = int(value[0]) if first else value
    parser = ArgumentParser(exit_on_error=False)
    parser.add_subclass_arguments(LightningModule, "model", required=True, fail_untyped=False)
    model: LightningModule = parser.instantiate(
        parser.parse_object({"model": {**config, "init_args": init_args}})
    ).model
    model.load_state_dict(checkpoint["state_dict"])
    return model.eval()


def load_datamodule(config_path: str | Path) -> LightningDataModule:
    """The ``data`` section (``class_path`` + ``init_args``) of a run's ``config.yaml``, instantiated.

    Raises:
        ConfigError: the file has no ``data`` section.
    """
    if not isinstance(data := (yaml.safe_load(Path(config_path).read_text()) or {}).get("data"), dict):
        raise ConfigError(f"{config_path}: no 'data' section (class_path, init_args) to build the data from")
    parser = ArgumentParser(exit_on_error=False)
    parser.add_subclass_arguments(LightningDataModule, "data", required=True, fail_untyped=False)
    return parser.instantiate(parser.parse_object({"data": data})).data


def split_batch(model: Any, batch: Any) -> tuple[Any, Tensor]:
    """``(inputs, target)`` of a batch: the model's own ``split_batch`` (:class:`~runwright.BaseModule`'s),
    else ``(batch[0], batch[1])`` (a batch ``(inputs, target, ...)``)."""
    return model.split_batch(batch) if hasattr(model, "split_batch") else (batch[0], batch[1])


@torch.no_grad()
def predict_test_split(model: torch.nn.Module, datamodule: LightningDataModule) -> tuple[Tensor, Tensor]:
    """Run ``model`` over the whole test split; return ``(outputs [N, ...] float32, targets [N])``.

    Raises:
        ConfigError: the DataModule has no ``test_dataloader``.
    """
    if not is_overridden("test_dataloader", datamodule):
        raise ConfigError(f"{type(datamodule).__name__} has no test_dataloader: no test split to run on")
    datamodule.setup("test")
    outputs, targets = [], []
    for inputs, target in (split_batch(model, batch) for batch in datamodule.test_dataloader()):
        outputs.append(model(inputs).float())
        targets.append(target)
    return torch.cat(outputs), torch.cat(targets)
