"""Checks of a parsed config that stop a bad run before anything is written (one ``error:`` line
naming the cause and the fix), or warn about a surprising one."""

from __future__ import annotations

import importlib
import inspect
import itertools
import os
import warnings
from pathlib import Path
from typing import Any

import torch
import yaml
from jsonargparse import Namespace
from lightning.pytorch import LightningModule, Trainer
from lightning.pytorch.cli import LightningArgumentParser
from lightning.pytorch.loggers import WandbLogger

from .errors import ConfigError


def class_of(class_path: str) -> type:
    """The class that a ``class_path`` such as ``torch.optim.SGD`` names (imported)."""
    module, _, name = class_path.rpartition(".")
    cls: type = getattr(importlib.import_module(module), name)
    return cls


def check_sync_batchnorm(parser: LightningArgumentParser, trainer: Namespace) -> None:
    """Stop with a clear message (exit 2) when ``trainer.sync_batchnorm`` is asked for without CUDA:
    ``torch.nn.SyncBatchNorm`` only runs on CUDA modules and would fail inside the DDP workers."""
    accelerator = trainer.get("accelerator")
    name = accelerator if isinstance(accelerator, str) else getattr(accelerator, "class_path", "")
    if trainer.get("sync_batchnorm") and (name == "cpu" or not torch.cuda.is_available()):
        parser.error(
            f"trainer.sync_batchnorm=true needs CUDA GPUs (torch.nn.SyncBatchNorm does not run on CPU), "
            f"but accelerator={name!r} and CUDA available={torch.cuda.is_available()}. Fix: drop "
            "--trainer.sync_batchnorm on CPU, or run on GPUs with --config configs/trainer/ddp_gpu.yaml."
        )


#: Class-typed settings whose class a user may switch on the command line (``--model.optimizer=SGD``).
SWITCHABLE = ("model.init_args.optimizer", "model.init_args.lr_scheduler", "model.init_args.backbone")


def warn_carried_over(config: Namespace, argv: list[Any], defaults: dict[str, Any]) -> None:
    """Warn when switching a class kept the previous class's value of a same-named argument.

    jsonargparse keeps the init_args that both classes take when ``class_path`` changes (by design:
    only what is given changes). So ``--model.optimizer=torch.optim.SGD`` keeps AdamW's
    ``weight_decay=0.01`` where SGD's own default is 0. For each setting of :data:`SWITCHABLE` whose
    class differs from the one in ``defaults`` (``configs/default.yaml`` as a dict), this names every
    argument that holds the previous class's default, not the new class's, and was not given on the
    command line.
    """
    given = " ".join(str(arg) for arg in argv)
    for key in SWITCHABLE:
        value, old = config.get(key), dict(defaults)  # type: Any, Any
        for part in key.split("."):
            old = (old or {}).get(part)
        if (
            not isinstance(value, Namespace)
            or not isinstance(old, dict)
            or value.class_path == old.get("class_path")
        ):
            continue
        old_class, new_class = class_of(old["class_path"]), class_of(value.class_path)
        old_defaults = {**_signature_defaults(old_class), **(old.get("init_args") or {})}
        new_defaults = _signature_defaults(new_class)
        carried = [
            f"{name}={arg!r} (its own default: {new_defaults[name]!r})"
            for name, arg in (value.get("init_args") or {}).items()
            if name in old_defaults
            and name in new_defaults
            and arg == old_defaults[name] != new_defaults[name]
            and f"{key.replace('.init_args', '')}.{name}" not in given
            and f"{key}.init_args.{name}" not in given
        ]
        if carried:
            warnings.warn(
                f"{key.replace('.init_args', '')}: {new_class.__name__} keeps the value of "
                f"{old_class.__name__} for {', '.join(carried)}. Set them explicitly if that is not what "
                "you want.",
                stacklevel=2,
            )


def _signature_defaults(cls: type) -> dict[str, Any]:
    return {
        name: param.default
        for name, param in inspect.signature(cls).parameters.items()
        if param.default is not inspect.Parameter.empty
    }


#: Model arguments that the CLI sets from the DataModule once it is built (``link_arguments(...,
#: apply_on="instantiate")``): target -> the DataModule attribute read (of ``dims``, the first entry).
DATA_LINKS = {"num_classes": "num_classes", "in_features": "num_features", "in_channels": "dims"}

#: Every link target -> where its value comes from.
LINKED = {
    **{f"model.{target}": f"the DataModule's {source}" for target, source in DATA_LINKS.items()},
    "model.in_channels": "the DataModule's dims[0]",
    "checkpoint.monitor": "val/<model.best_metric>",
    "checkpoint.mode": "model.best_mode",
}


def data_link_value(datamodule: Any, source: str) -> Any:
    """The value of ``DATA_LINKS`` source attribute ``source`` of ``datamodule`` (``None`` if absent)."""
    value = getattr(datamodule, source, None)
    return int(value[0]) if source == "dims" and value else value


def check_linked_not_set(parser: LightningArgumentParser, argv: list[str]) -> None:
    """Stop (exit 2) when a linked value is set on the command line or in a ``--config`` file: the
    link would silently replace it."""
    given = [arg.split("=", 1)[0].lstrip("-").replace(".init_args.", ".") for arg in argv]
    files = [arg.split("=", 1)[1] for arg in argv if arg.startswith("--config=")]
    files += [value for flag, value in itertools.pairwise(argv) if flag in ("--config", "-c")]
    for file in (Path(name) for name in files):
        config = yaml.safe_load(file.read_text()) if file.is_file() else {}
        given += [
            f"{top}.{key}"
            for top, section in (config or {}).items()
            if isinstance(section, dict)
            for key in {**section, **(section.get("init_args") or {})}
        ]
    for key in LINKED:
        if key in given:
            parser.error(
                f"{key} is linked: it is set from {LINKED[key]}, so a value given for it would be replaced. "
                "Remove it; change its source instead."
            )


def check_wandb_log_model(parser: LightningArgumentParser, logger: Any) -> None:
    """Stop (exit 2) when an offline W&B logger is asked to upload checkpoints (``log_model``):
    WandbLogger refuses the pair, and the refusal would otherwise surface as a vague type error."""
    online = os.environ.get("WANDB_MODE", "").lower() == "online"
    for item in logger if isinstance(logger, list) else [logger]:
        init_args = item.get("init_args") if isinstance(item, Namespace) else None
        if init_args is None or not issubclass(class_of(item.class_path), WandbLogger):
            continue
        if init_args.get("log_model") and init_args.get("offline") and not online:
            parser.error(
                f"trainer.logger.log_model={init_args.log_model!r} needs an online W&B run (checkpoints are "
                "uploaded as artifacts), but the W&B logger is offline (the default). Fix: add "
                "--trainer.logger.offline=false after `wandb login` (or set WANDB_MODE=online), or drop "
                "log_model."
            )


def check_model_and_trainer(model: LightningModule, trainer: Trainer, config: Namespace) -> None:
    """Refuse, before anything runs, settings that Lightning or a callback would only reject later.

    Raises:
        ConfigError: gradient clipping with a manually optimised model (Lightning clips only in
            automatic optimization), or a model LR scheduler next to the warmup-cosine callback.
    """
    if not model.automatic_optimization and trainer.gradient_clip_val:
        raise ConfigError(
            f"trainer.gradient_clip_val={trainer.gradient_clip_val} (the default): "
            f"{type(model).__name__} sets "
            "automatic_optimization=False, and Lightning clips gradients only in automatic optimization. "
            "Fix: --trainer.gradient_clip_val=null, and clip in training_step with self.clip_gradients(...)."
        )
    if config.lr_schedule.enabled and getattr(model, "lr_scheduler", None) is not None:
        raise ConfigError(
            "model.lr_scheduler is set while the warmup-cosine callback (lr_schedule) is enabled: two "
            "schedules would fight over the LR. Use one: --lr_schedule.enabled=false, or "
            "--model.lr_scheduler=null."
        )


def warn_logger_switch(run_dir: Path, logger: Any) -> None:
    """Warn when ``fit --ckpt_path`` continues the run in ``run_dir`` with other loggers than the run
    used (its ``config.yaml``): the logger, like every trainer setting, comes from this command's
    config, so a run trained with ``--config configs/logger/tensorboard.yaml`` and continued without
    it would switch to the default logger half-way."""

    def names(value: Any) -> list[str]:
        items = value if isinstance(value, list) else [value]
        paths = [str(item.get("class_path")) for item in items if hasattr(item, "get")]
        return sorted(path.rsplit(".", 1)[-1] for path in paths)

    saved = yaml.safe_load((run_dir / "config.yaml").read_text()) or {}
    before, now = names((saved.get("trainer") or {}).get("logger")), names(logger)
    if before != now:
        warnings.warn(
            f"continuing {run_dir.name}, which logged with {before or 'no logger'}, with "
            f"{now or 'no logger'}: the logger comes from this command's config. Pass the run's "
            "logger config again (e.g. --config configs/logger/tensorboard.yaml) to keep logging where "
            "the run did.",
            stacklevel=2,
        )


def warn_replaced_by_checkpoint(argv: list[str], before: Namespace, after: Namespace) -> None:
    """Warn when ``--model...`` values given on the command line are replaced by the checkpoint's (the
    ``model`` config ``before`` and ``after`` the checkpoint's was applied): with ``--ckpt_path`` the
    model's class and arguments come from the checkpoint (and, for ``fit``, the optimizer's state)."""

    def flat(model: Namespace) -> dict[str, Any]:
        return {f"model.{key}".replace("init_args.", ""): value for key, value in model.items()}

    old, new = flat(before), flat(after)
    given = [
        arg.split("=", 1)[0].lstrip("-").replace("init_args.", "")
        for arg in argv
        if arg.startswith("--model")
    ]
    replaced = [
        key for key in old if old[key] != new.get(key) and any(f"{key}.".startswith(f"{g}.") for g in given)
    ]
    if replaced:
        warnings.warn(
            "--ckpt_path: the model comes from the checkpoint, so "
            + ", ".join(f"{key}={old[key]!r} is replaced by its {new.get(key)!r}" for key in replaced)
            + ". To train with other model settings, start a new run without --ckpt_path.",
            stacklevel=2,
        )
