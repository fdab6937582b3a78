"""Checks of a parsed config that stop a bad run before anything is written (one ``error:`` line
naming the cause and the fix), or warn about a surprising one. They read parsed configs only: what the
user gave (``--config`` files and the command line) is the parsed config against the parser's defaults
(:func:`explicit_values`)."""

from __future__ import annotations

import inspect
import os
import warnings
from pathlib import Path
from typing import Any

import torch
import yaml
from jsonargparse import Namespace
from lightning.pytorch import LightningDataModule, LightningModule, Trainer
from lightning.pytorch.loggers import WandbLogger

from .errors import ConfigError
from .runs import class_of

#: Model arguments set from the DataModule when both have them: target -> (source attribute, how).
DATA_LINKS = {"num_classes": "num_classes", "in_features": "num_features", "in_channels": "dims[0]"}

#: Model arguments of older versions, dropped from their checkpoints (value: where the setting went).
REMOVED_MODEL_ARGUMENTS = {
    "best_metric": "checkpoint.monitor (e.g. val/acc) in the config",
    "best_mode": "checkpoint.mode in the config",
}
#: Top-level config groups of older versions (value: what replaced them).
REMOVED_GROUPS = {
    "lr_schedule": "model.lr_scheduler: class_path "
    "runwright.schedules.WarmupCosineLR (same init_args warmup_steps, warmup_start_factor, "
    "min_lr_factor; enabled: false is lr_scheduler: null)",
}

#: A logger's arguments that the engine sets to the run folder's (``runs.run_logger_config``).
ENGINE_LOGGER_ARGS = {"name", "save_dir", "version"}

_MISSING = object()


def explicit_values(config: Namespace, defaults: Namespace) -> dict[str, Any]:
    """The leaf keys (``model.init_args.optimizer.init_args.lr``) whose parsed value differs from the
    parser's defaults (its default config files included): what ``--config`` files and the command line
    set. A value given equal to its default is not told apart from the default."""
    flat_defaults = dict(defaults.items())
    return {key: value for key, value in config.items() if flat_defaults.get(key, _MISSING) != value}


def signature_defaults(cls: type) -> dict[str, Any]:
    """The default value of each argument of ``cls.__init__`` that has one."""
    parameters = inspect.signature(cls).parameters.items()
    return {name: p.default for name, p in parameters if p.default is not inspect.Parameter.empty}


def check_sync_batchnorm(trainer: Namespace) -> None:
    """Raise :class:`ConfigError` when ``trainer.sync_batchnorm`` is asked for without CUDA:
    ``torch.nn.SyncBatchNorm`` only runs on CUDA modules and would fail inside the DDP workers."""
    accelerator = trainer.get("accelerator")
    name = accelerator if isinstance(accelerator, str) else getattr(accelerator, "class_path", "")
    if trainer.get("sync_batchnorm") and (name == "cpu" or not torch.cuda.is_available()):
        raise ConfigError(
            f"trainer.sync_batchnorm=true needs CUDA GPUs (torch.nn.SyncBatchNorm does not run on CPU), "
            f"but accelerator={name!r} and CUDA available={torch.cuda.is_available()}. Fix: drop "
            "--trainer.sync_batchnorm on CPU, or run on GPUs with --config configs/trainer/ddp_gpu.yaml."
        )


def check_wandb_log_model(logger: Any) -> None:
    """Raise :class:`ConfigError` when an offline W&B logger is asked to upload checkpoints
    (``log_model``): WandbLogger refuses the pair with a vague type error otherwise."""
    online = os.environ.get("WANDB_MODE", "").lower() == "online"
    for item in logger if isinstance(logger, list) else [logger]:
        init_args = item.get("init_args") if isinstance(item, Namespace) else None
        if init_args is None or not issubclass(class_of(item.class_path), WandbLogger):
            continue
        if init_args.get("log_model") and init_args.get("offline") and not online:
            raise ConfigError(
                f"trainer.logger.log_model={init_args.log_model!r} needs an online W&B run (checkpoints are "
                "uploaded as artifacts), but the W&B logger is offline (the default). Fix: add "
                "--trainer.logger.offline=false after `wandb login` (or set WANDB_MODE=online), or drop "
                "log_model."
            )


def warn_carried_over(config: Namespace, defaults: Namespace) -> None:
    """Warn when switching a class kept the previous class's value of a same-named argument.

    jsonargparse keeps the init_args that both classes take when ``class_path`` changes (by design:
    only what is given changes). So ``--model.optimizer=torch.optim.SGD`` keeps AdamW's
    ``weight_decay=0.01`` where SGD's own default is 0. For every class in the config that differs from
    the default config's class at the same key, this names each argument that still holds the
    default config's value where the new class's own default differs. Not named: what the engine sets
    itself, a model's linked arguments (:data:`DATA_LINKS`, from the DataModule) and a logger's
    ``name``/``save_dir``/``version`` (the run folder's, ``runs.py``).
    """
    set_by_engine = {"model.init_args.": set(DATA_LINKS), "trainer.logger.init_args.": ENGINE_LOGGER_ARGS}
    flat, flat_defaults = dict(config.items()), dict(defaults.items())
    for key, class_path in flat.items():
        old = flat_defaults.get(key)
        if not key.endswith("class_path") or not isinstance(old, str) or old == class_path:
            continue
        prefix = key.removesuffix("class_path") + "init_args."
        own = signature_defaults(class_of(class_path))
        carried = [
            f"{name}={value!r} (its own default: {own[name]!r})"
            for name, value in ((k.removeprefix(prefix), v) for k, v in flat.items() if k.startswith(prefix))
            if name in own
            and flat_defaults.get(prefix + name, _MISSING) == value != own[name]
            and name not in set_by_engine.get(prefix, ())
        ]
        if carried:
            warnings.warn(
                f"{prefix.replace('.init_args', '')[:-1]}: {class_path.rsplit('.', 1)[-1]} keeps the value "
                f"of {old.rsplit('.', 1)[-1]} for {', '.join(carried)}. Set them explicitly if that is not "
                "what you want.",
                stacklevel=2,
            )


def check_links(explicit: dict[str, Any], model: LightningModule | None, datamodule: Any) -> None:
    """Raise :class:`ConfigError` when a model argument of :data:`DATA_LINKS` was given a value that
    the link replaced with the DataModule's (it is set from there: change the source instead)."""
    for target, source in DATA_LINKS.items():
        given = explicit.get(f"model.init_args.{target}", _MISSING)
        attribute = source.partition("[")[0]
        if given is _MISSING or model is None or not hasattr(datamodule, attribute):
            continue
        value = getattr(datamodule, attribute)
        value = value[0] if source.endswith("[0]") else value
        if given != value:
            raise ConfigError(
                f"model.{target}={given!r} is linked: it is set from the DataModule's {source} "
                f"({value!r}), so the value given would be replaced. Remove it; change the DataModule "
                "instead."
            )


def check_model_and_trainer(model: LightningModule, trainer: Trainer) -> None:
    """Refuse, before anything runs, settings that Lightning would only reject later.

    Raises:
        ConfigError: gradient clipping with a manually optimised model (Lightning clips only in
            automatic optimization).
    """
    if not model.automatic_optimization and trainer.gradient_clip_val:
        raise ConfigError(
            f"trainer.gradient_clip_val={trainer.gradient_clip_val} (the default): "
            f"{type(model).__name__} sets "
            "automatic_optimization=False, and Lightning clips gradients only in automatic optimization. "
            "Fix: --trainer.gradient_clip_val=null, and clip in training_step with self.clip_gradients(...)."
        )


def check_saved_model(saved: dict[str, Any], subcommand: str | None, ckpt_path: Path) -> None:
    """Drop from a checkpoint's saved model arguments those of :data:`REMOVED_MODEL_ARGUMENTS` (older
    checkpoints evaluate as before); refuse to continue training such a checkpoint.

    Raises:
        ConfigError: ``fit`` of a checkpoint written before the change (its LR schedule lived in a
            callback and cannot be continued).
    """
    init_args = saved.get("init_args") or {}
    removed = sorted(set(init_args) & set(REMOVED_MODEL_ARGUMENTS))
    for name in removed:
        del init_args[name]
    if removed and subcommand == "fit":
        moved = "; ".join(f"model.{name} is now {REMOVED_MODEL_ARGUMENTS[name]}" for name in removed)
        raise ConfigError(
            f"--ckpt_path={ckpt_path}: written by an older version of the template ({moved}; the "
            "warmup-cosine schedule is the model's lr_scheduler), so its training cannot be continued "
            "exactly. validate/test/predict/export still work; start a new run to train again."
        )


def check_removed_keys(config_file: Any) -> None:
    """Raise :class:`ConfigError` naming the change when a config file (parsed on its own, before
    jsonargparse reads it) has a top-level group of :data:`REMOVED_GROUPS` or a model argument of
    :data:`REMOVED_MODEL_ARGUMENTS`, e.g. the ``config.yaml`` of a run made by an older version."""
    path = Path(str(config_file))
    try:
        content = yaml.safe_load(path.read_text()) if path.is_file() else None
    except OSError:  # --config given a YAML string (as the sweep does), not a file name
        return
    if not isinstance(content, dict):
        return
    model = content.get("model")
    init_args = model.get("init_args") if isinstance(model, dict) else None
    changes = [
        f"`{group}` was replaced by {REMOVED_GROUPS[group]}"
        for group in sorted(set(content) & set(REMOVED_GROUPS))
    ]
    changes += [
        f"`model.{name}` was replaced by {REMOVED_MODEL_ARGUMENTS[name]}"
        for name in sorted(set(init_args or {}) & set(REMOVED_MODEL_ARGUMENTS))
    ]
    if changes:
        raise ConfigError(f"{path}: written for an older version of the template: {'; '.join(changes)}")


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


def warn_replaced_by_checkpoint(explicit: dict[str, Any], config: Namespace) -> None:
    """Warn when ``--model...`` values that were given are replaced by the checkpoint's (``config``:
    after the checkpoint's model was applied): with ``--ckpt_path`` the model comes from the checkpoint."""
    replaced = [
        f"{key.replace('init_args.', '')}={value!r} is replaced by its {config.get(key)!r}"
        for key, value in explicit.items()
        if key.startswith("model.") and config.get(key) != value
    ]
    if replaced:
        warnings.warn(
            "--ckpt_path: the model comes from the checkpoint, so "
            + ", ".join(replaced)
            + ". To train with other model settings, start a new run without --ckpt_path.",
            stacklevel=2,
        )


def data_class_of(datamodule: LightningDataModule | None) -> str | None:
    """The ``module.Class`` path of a DataModule instance (``None`` for none)."""
    return None if datamodule is None else f"{type(datamodule).__module__}.{type(datamodule).__qualname__}"
