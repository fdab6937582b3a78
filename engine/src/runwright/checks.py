"""The one stage of checks on a built run (:func:`check_run`): a setting that cannot work raises an error
whose message names the cause and the fix; a surprising one gets a warning."""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

import torch
import yaml
from jsonargparse import Namespace
from lightning.pytorch import LightningModule, Trainer
from lightning.pytorch.callbacks import WeightAveraging
from lightning.pytorch.utilities import rank_zero_warn

from .errors import CheckpointError, ConfigError
from .runs import DATA_LINKS, class_of

#: A logger's arguments that the engine sets to the run folder's (``runs.run_logger_config``).
ENGINE_LOGGER_ARGS = {"name", "save_dir", "version"}
_MISSING = object()


def check_run(
    config: Namespace,
    defaults: Namespace,
    model: LightningModule,
    datamodule: Any,
    trainer: Trainer,
    checkpoint: dict[str, Any] | None,
    fitting: bool,
) -> None:
    """Check a built run: its parsed ``config`` (of the subcommand) against the parser's ``defaults``, its
    ``model``, ``datamodule`` (or ``None``) and ``trainer``, and the ``checkpoint`` of ``--ckpt_path``
    (checked as a resume when ``fitting``).

    Raises:
        ConfigError: SyncBatchNorm without CUDA; a linked model argument given against its DataModule;
            ``fit --ckpt_path`` that switches weight averaging on or off or gives other optimizer or
            scheduler settings than the checkpoint's.
        CheckpointError: the ``--ckpt_path`` checkpoint does not fit the model.
    """
    if config.trainer.get("sync_batchnorm") and not torch.cuda.is_available():
        raise ConfigError(
            "trainer.sync_batchnorm=true needs CUDA GPUs (torch.nn.SyncBatchNorm does not run on CPU). Fix: "
            "drop --trainer.sync_batchnorm on CPU, or run on GPUs with --config configs/trainer/ddp_gpu.yaml."
        )
    for target, source in DATA_LINKS.items():  # a value given (not the default) that the link replaces
        key, attribute = f"model.init_args.{target}", source.partition("[")[0]
        given = config.get(key, _MISSING)
        if given is _MISSING or given == defaults.get(key, _MISSING) or not hasattr(datamodule, attribute):
            continue
        value = getattr(datamodule, attribute)
        if given != (value := value[0] if source.endswith("[0]") else value):
            raise ConfigError(
                f"model.{target}={given!r} is linked: it is set from the DataModule's {source} ({value!r}), "
                "so the value given would be replaced. Remove it; change the DataModule instead."
            )
    if checkpoint is None:  # (a run from a checkpoint has the checkpoint's classes, not the defaults')
        warn_carried_over(config, defaults)
        return
    check_state_dict_fits(model.state_dict(), checkpoint, config.ckpt_path, type(model).__name__)
    if fitting:
        averaging = [type(c).__name__ for c in trainer.callbacks if isinstance(c, WeightAveraging)]  # type: ignore[attr-defined]
        check_resume(config, checkpoint, averaging)


def check_logger(run_dir: Path, config: Namespace) -> None:
    """Warn when the run continued in ``run_dir`` logs with other loggers than its ``config.yaml`` names."""
    saved = yaml.safe_load((run_dir / "config.yaml").read_text()) or {}
    before, now = (class_names((c.get("trainer") or {}).get("logger")) for c in (saved, config))
    if before != now:
        rank_zero_warn(
            f"continuing {run_dir.name}, which logged with {before or 'no logger'}, with "
            f"{now or 'no logger'}: the logger comes from this command's config. Pass the run's logger "
            "config again (e.g. --config configs/logger/tensorboard.yaml) to log where the run did.",
            stacklevel=5,
        )


def class_names(value: Any) -> list[str]:
    """The short class names of a config value holding one class (``class_path``) or a list of them."""
    items = value if isinstance(value, list) else [value]
    return sorted(str(item.get("class_path")).rsplit(".", 1)[-1] for item in items if hasattr(item, "get"))


def check_state_dict_fits(
    expected: dict[str, Any], checkpoint: dict[str, Any], path: str, model: str
) -> None:
    """Raise :class:`CheckpointError` naming ``path`` and the first key of the checkpoint's ``state_dict``
    that does not fit the model's ``expected`` one (another shape, missing or unexpected)."""
    if "state_dict" not in checkpoint:
        raise CheckpointError(f"checkpoint {path!r} has no 'state_dict': not a Lightning checkpoint")
    saved = checkpoint["state_dict"]
    for key in [k for k in expected if k in saved and saved[k].shape != expected[k].shape]:
        raise CheckpointError(
            f"checkpoint {path!r} does not fit this model: {key!r} has shape {tuple(saved[key].shape)} in "
            f"the checkpoint but {tuple(expected[key].shape)} in {model}. Use the config it was trained with."
        )
    missing, unexpected = [k for k in expected if k not in saved], [k for k in saved if k not in expected]
    if missing or unexpected:
        raise CheckpointError(
            f"checkpoint {path!r} does not fit this model ({model}): missing keys {missing[:5]}, unexpected "
            f"keys {unexpected[:5]}"
        )


def check_resume(config: Namespace, checkpoint: dict[str, Any], averaging: list[str]) -> None:
    """Refuse ``fit --ckpt_path`` that would not continue the run: weight averaging (e.g. EMA, whose
    checkpoints hold the averages in ``state_dict`` and the trained weights in ``current_model_state``)
    switched on or off, or optimizer or LR scheduler settings other than the checkpoint's (their state,
    the LR included, continues from the checkpoint, so a given value would never be used)."""
    path, averaged = config.ckpt_path, "current_model_state" in checkpoint
    fresh = f"start a new run from its weights with --init_from={path}"
    if averaged and not averaging:
        raise ConfigError(
            f"--ckpt_path={path}: the run averaged its weights (state_dict holds the averages), but this fit "
            "has no weight averaging and would train on from the averages. Resume with the run's averaging "
            f"(e.g. --config configs/callbacks/ema.yaml), or {fresh}"
        )
    if averaging and not averaged:
        raise ConfigError(
            f"--ckpt_path={path}: the checkpoint was saved without weight averaging, but this fit averages "
            f"({averaging[0]}), so the average would start here instead of where the run started. Resume "
            f"without the averaging (drop configs/callbacks/ema.yaml), or {fresh}"
        )

    def flat(node: Any, prefix: str) -> dict[str, Any]:  # {"a": {"b": (1,)}} -> {"<prefix>a.b": [1]}
        if not isinstance(node, dict):
            return {prefix[:-1]: list(node) if isinstance(node, tuple) else node}
        return {k: v for key, value in node.items() for k, v in flat(value, f"{prefix}{key}.").items()}

    saved = flat(checkpoint.get("hyper_parameters") or {}, "model.init_args.")
    changed = [
        f"{key.replace('init_args.', '')}={value!r} (the checkpoint's {saved[key]!r})"
        for key, value in flat(config.as_dict(), "").items()
        if key.startswith(("model.init_args.optimizer.", "model.init_args.lr_scheduler."))
        and saved.get(key, value) != value
    ]
    if changed:
        raise ConfigError(
            f"--ckpt_path continues the optimizer and LR scheduler from the checkpoint's state, so "
            f"{', '.join(changed)} would never be used. Drop it, or start a new run from the weights with "
            "other settings (--init_from)."
        )


def warn_carried_over(config: Namespace, defaults: Namespace) -> None:
    """Warn when switching a class kept the previous class's value of a same-named argument: jsonargparse
    keeps the init_args both classes take, so ``--model.optimizer=torch.optim.SGD`` keeps AdamW's
    ``weight_decay=0.01`` (SGD's own default is 0). Named: each argument that still holds the default
    config's value where the new class's own default differs, except what the engine sets (a model's
    linked arguments, a logger's run folder arguments)."""
    engine_sets = {"model.init_args.": set(DATA_LINKS), "trainer.logger.init_args.": ENGINE_LOGGER_ARGS}
    for key, class_path in config.items():
        old = defaults.get(key)
        if not key.endswith("class_path") or not isinstance(old, str) or old == class_path:
            continue
        prefix = key.removesuffix("class_path") + "init_args."
        own = {n: p.default for n, p in inspect.signature(class_of(class_path)).parameters.items()}
        carried = [
            f"{name}={config[prefix + name]!r} (its own default: {default!r})"
            for name, default in own.items()
            if default is not inspect.Parameter.empty
            and name not in engine_sets.get(prefix, ())
            and prefix + name in config
            and defaults.get(prefix + name, _MISSING) == config[prefix + name] != default
        ]
        if carried:
            rank_zero_warn(
                f"{prefix.replace('.init_args', '')[:-1]}: {class_path.rsplit('.', 1)[-1]} keeps the value "
                f"of {old.rsplit('.', 1)[-1]} for {', '.join(carried)}. Set them explicitly if that is not "
                "what you want.",
                stacklevel=5,
            )
