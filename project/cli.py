"""The command line: ``python -m project {fit,validate,test,predict}`` (a
LightningCLI), plus the extra commands of :data:`EXTRA_COMMANDS` (``export``, ``report``, ...).

Defaults live in YAML: ``configs/default.yaml`` and ``configs/logger.yaml`` inside the package are loaded
first, then ``--config`` files (repeatable, later files win), then dotted overrides
(``--model.optimizer.init_args.lr=3e-4``). Each run writes into a new folder ``<logs_dir>/<run name>``
(default ``./logs``): the resolved ``config.yaml``, ``metrics.csv``, checkpoints and predictions.
``fit --ckpt_path last|best|FILE`` continues the run that wrote the checkpoint, in its folder, unless
``--run_name`` asks for a new run.
"""

from __future__ import annotations

import importlib
import sys
import warnings
from functools import partial
from pathlib import Path
from typing import Any

import yaml
from jsonargparse import Namespace
from lightning.fabric.plugins import TorchCheckpointIO
from lightning.pytorch import LightningDataModule, LightningModule, Trainer
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.cli import ArgsType, LightningArgumentParser, LightningCLI
from lightning.pytorch.utilities.exceptions import MisconfigurationException, SIGTERMException

# Imported so that their DataModules and LightningModules are known subclasses: short class names such
# as --model=ImageClassifier resolve only among imported classes.
from . import data, models  # noqa: F401
from .callbacks import (
    CSVPredictionWriter,
    ExactResume,
    GracefulInterruption,
    HealthCheck,
    MemoryMonitor,
    TrainingMonitor,
    WarmupCosineSchedule,
    default_extra_callbacks,
)
from .checkpointing import AtomicCheckpointIO, LastCheckpoint, check_state_dict_fits, load_checkpoint
from .checks import (
    DATA_LINKS,
    check_linked_not_set,
    check_model_and_trainer,
    check_sync_batchnorm,
    check_wandb_log_model,
    class_of,
    data_link_value,
    warn_carried_over,
    warn_logger_switch,
    warn_replaced_by_checkpoint,
)
from .errors import CheckpointError, ConfigError, ProjectError
from .loading import saved_classes
from .provenance import Provenance
from .runs import (
    SaveConfigToLoggers,
    add_run_folder_arguments,
    create_run_dir,
    finish_wandb_run,
    keep_metrics_csv,
    resolve_checkpoint,
    run_dir_of,
    run_logger_config,
    wandb_id_of,
)

#: Loaded before any ``--config``: the defaults of every setting, then the default logger.
DEFAULT_CONFIG_FILES = [
    str(Path(__file__).parent / "configs" / name) for name in ("default.yaml", "logger.yaml")
]
#: Keys of a fit's config that belong to that run alone; its ``config.yaml`` saves them as null so
#: that re-running it (``fit --config logs/A/config.yaml``) starts a new run instead of writing into A.
RUN_KEYS = ("run_name", "ckpt_path")


class ProjectCLI(LightningCLI):
    """LightningCLI with this project's run folders, forced callbacks, links and checkpoint aliases.

    Extra arguments (every subcommand): ``--logs_dir`` (folder of run folders, default ``logs``),
    ``--run_name`` (this run's folder name; default timestamp and subcommand), and the groups of the
    always-present callbacks: ``--checkpoint.*`` (best by the model's ``best_metric``:
    ``checkpoints/best.ckpt``), ``--last_checkpoint.*`` (``checkpoints/last.ckpt`` at the end of every
    epoch), ``--lr_schedule.*``, ``--memory.*``, ``--exact_resume.*``, ``--training_monitor.*``,
    ``--health.*``, ``--interruption.*``.

    Linked values (set from their source, not settable themselves): the model's ``num_classes``, the
    ``in_channels`` and the regressor's ``in_features`` from the DataModule's
    ``num_classes``, ``dims[0]`` and ``num_features``; the checkpoint's ``monitor``/``mode`` from the
    model's ``best_metric``/``best_mode``.

    ``--ckpt_path best|last`` names the best/last checkpoint of the newest run under ``--logs_dir``.
    With ``--ckpt_path`` the model's class and arguments come from the checkpoint, and so does the
    DataModule unless the config chose another data class.
    """

    #: Run folder suffix when there is no subcommand (``run=False``, e.g. the tuning commands).
    run_label = "run"

    def __init__(self, args: ArgsType = None, run: bool = True, **kwargs: Any) -> None:
        prog = f"python -m {__package__}"
        subcommands = ",".join(self.subcommands())
        parser_kwargs = {
            "prog": prog,
            "epilog": EPILOG,
            "allow_abbrev": False,  # --trainer.max_epoch=2 (a typo) must fail, not set max_epochs
            "usage": f"{prog} " + ("{" + subcommands + "} " if run else "") + "[options]",
        }
        if not run:
            parser_kwargs["default_config_files"] = DEFAULT_CONFIG_FILES
            # (the extra commands pass their own arguments on; sys.argv holds the command's name too)
            warnings.filterwarnings("ignore", "LightningCLI's args parameter is intended to run from within")
        for name in self.subcommands() if run else ():
            parser_kwargs[name] = {
                "default_config_files": DEFAULT_CONFIG_FILES,
                "usage": f"{prog} {name} [options]",
            }
        kwargs.setdefault("model_class", LightningModule)
        kwargs.setdefault("datamodule_class", LightningDataModule)
        kwargs.setdefault("subclass_mode_model", True)
        kwargs.setdefault("subclass_mode_data", True)
        kwargs.setdefault("auto_configure_optimizers", False)
        kwargs.setdefault("save_config_callback", SaveConfigToLoggers)
        kwargs["parser_kwargs"] = {**parser_kwargs, **(kwargs.get("parser_kwargs") or {})}
        self.parsers: list[LightningArgumentParser] = []
        super().__init__(args=args, run=run, **kwargs)

    def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        """Add the run-folder arguments, the forced callbacks and the links."""
        self.parsers.append(parser)
        add_run_folder_arguments(parser)
        parser.add_lightning_class_args(ModelCheckpoint, "checkpoint")
        parser.add_lightning_class_args(LastCheckpoint, "last_checkpoint")
        parser.add_lightning_class_args(WarmupCosineSchedule, "lr_schedule")
        parser.add_lightning_class_args(MemoryMonitor, "memory")
        parser.add_lightning_class_args(ExactResume, "exact_resume")
        parser.add_lightning_class_args(TrainingMonitor, "training_monitor")
        parser.add_lightning_class_args(HealthCheck, "health")
        parser.add_lightning_class_args(GracefulInterruption, "interruption")
        for target, source in DATA_LINKS.items():
            compute_fn = partial(data_link_value, source=source)
            parser.link_arguments("data", f"model.init_args.{target}", compute_fn, apply_on="instantiate")
        parser.link_arguments(
            "model.init_args.best_metric", "checkpoint.monitor", compute_fn=lambda m: f"val/{m}"
        )
        parser.link_arguments("model.init_args.best_mode", "checkpoint.mode")

    def _config(self, config: Namespace | None = None) -> Namespace:
        """The parsed (or, given, the instantiated) config of the subcommand being run."""
        config = self.config if config is None else config
        subcommand = self.config.get("subcommand")
        return config[subcommand] if subcommand else config

    def parse_arguments(self, parser: LightningArgumentParser, args: ArgsType) -> None:
        """Parse and check the config; then resolve ``--ckpt_path`` (alias or file), load the checkpoint
        once (honouring ``--weights_only``) and take the model (and data) class and arguments from it."""
        self.checkpoint: dict[str, Any] | None = None
        argv = [str(arg) for arg in (args if isinstance(args, list) else sys.argv[1:])]
        # jsonargparse names a subcommand's parser "<main usage> [options] fit", and the tip printed
        # with an error shows that name: make it the real command
        for subparser in self.parsers:
            if " [options] " in subparser.prog:
                subparser.prog = f"python -m {__package__} {subparser.prog.rsplit(' ', 1)[-1]}"
        check_linked_not_set(parser, argv)  # before parsing: jsonargparse's own message is obscure
        super().parse_arguments(parser, args)
        config = self._config()
        check_sync_batchnorm(parser, config.trainer)
        check_wandb_log_model(parser, config.trainer.logger)
        warn_carried_over(config, argv, _default_config())
        self.ckpt_path = config.get("ckpt_path")
        if self.ckpt_path is None:
            return
        try:
            self.ckpt_path = str(resolve_checkpoint(self.ckpt_path, config.logs_dir))
            self.checkpoint = load_checkpoint(self.ckpt_path, weights_only=config.get("weights_only"))
        except CheckpointError as error:
            parser.error(str(error))
        print(f"--ckpt_path: {self.ckpt_path}")
        saved = saved_classes(self.checkpoint, skip=tuple(DATA_LINKS))
        default_data = class_of(_default_config()["data"]["class_path"])
        if "data" in saved and class_of(config.data.class_path) is not default_data:
            del saved["data"]  # the config chose a data class: keep it
        if saved:
            before = config.model.clone()
            self.config = parser.parse_object({self.config.subcommand: saved}, self.config)
            warn_replaced_by_checkpoint(argv, before, self._config().model)
        # Set back in before_instantiate_classes: LightningCLI would read the checkpoint a second time
        # (ignoring --weights_only and the links) if it saw the path now.
        self._config().ckpt_path = None

    def before_instantiate_classes(self) -> None:
        """Choose this run's folder and point the trainer, loggers and checkpoints at it.

        ``fit --ckpt_path`` of a checkpoint inside a run folder continues that run there, with its
        W&B id, unless ``--run_name`` names another run (a branch); anything else gets a new folder
        (:func:`~project.runs.create_run_dir`).
        """
        config = self._config()
        if self.ckpt_path is not None:
            config.ckpt_path = self.ckpt_path
        self._user_logger = config.trainer.logger
        continued = run_dir_of(config.ckpt_path) if config.get("ckpt_path") else None
        # a --run_name that names the checkpoint's own run (the first command, repeated) continues it too
        named = Path(config.logs_dir).expanduser().resolve() / str(config.run_name)
        if self.subcommand == "fit" and continued is not None and (not config.run_name or continued == named):
            self.run_dir, self.continued = continued, True
        else:
            self.run_dir = create_run_dir(config.logs_dir, self.subcommand or self.run_label, config.run_name)
            self.continued = False
        if self.continued:
            warn_logger_switch(self.run_dir, config.trainer.logger)
        wandb_id = wandb_id_of(self.run_dir) if self.continued else None
        config.trainer.default_root_dir = str(self.run_dir)
        config.trainer.logger = run_logger_config(config.trainer.logger, self.run_dir, wandb_id)
        for callback in (config.checkpoint, config.last_checkpoint):
            callback.dirpath = callback.dirpath or str(self.run_dir / "checkpoints")
        # The CSV logger warns about (and deletes) files in a non-empty folder: ours holds config.yaml,
        # and a continued run's metrics.csv is put back in after_instantiate_classes.
        warnings.filterwarnings("ignore", "Experiment logs directory .* exists and is not empty")
        warnings.filterwarnings("ignore", "The dirpath has changed from")
        # TrainingMonitor writes each epoch's last step, so short epochs do get a training curve
        warnings.filterwarnings("ignore", "The number of training batches .* is smaller than the logging")

    def instantiate_classes(self) -> None:
        """Build model, data and trainer. A class rejecting its arguments (``ValueError``,
        ``TypeError``, ``MisconfigurationException``, e.g. ``--data.batch_size=-1``) or a checkpoint
        that does not fit the model stops with a :class:`~project.errors.ConfigError` naming the
        cause, and a new run folder that is still empty is removed."""
        try:
            super().instantiate_classes()
            check_model_and_trainer(self.model, self.trainer, self._config())
            if self.checkpoint is not None:
                check_state_dict_fits(self.model, self.checkpoint, self._config().ckpt_path)
        except (ProjectError, ValueError, TypeError, MisconfigurationException) as error:
            if not self.continued and not any(self.run_dir.iterdir()):
                self.run_dir.rmdir()
            if isinstance(error, ProjectError):
                raise
            cause: BaseException = error
            while cause.__cause__ is not None:  # jsonargparse wraps the constructor's own error
                cause = cause.__cause__
            raise ConfigError(f"building the run failed: {type(cause).__name__}: {cause}") from error

    def instantiate_trainer(self, **kwargs: Any) -> Trainer:
        """Build the trainer with :func:`default_extra_callbacks` and atomic checkpoint writes."""
        trainer_config = dict(self._config(self.config_init).get("trainer") or {})
        callbacks = trainer_config.get("callbacks") or []
        callbacks = list(callbacks) if isinstance(callbacks, list) else [callbacks]
        kwargs.setdefault("callbacks", [*callbacks, *default_extra_callbacks(trainer_config, callbacks)])
        trainer = super().instantiate_trainer(**kwargs)
        if type(trainer.strategy.checkpoint_io) is TorchCheckpointIO:
            trainer.strategy.checkpoint_io = AtomicCheckpointIO()
        return trainer

    def after_instantiate_classes(self) -> None:
        """Give ``config.yaml`` back its portable values, keep a continued run's ``metrics.csv``,
        attach the CSV prediction writer for ``predict``, and the provenance record."""
        config = self._config()
        config.trainer.logger = self._user_logger  # the saved config.yaml names no run folder
        for callback in (config.checkpoint, config.last_checkpoint):
            if callback.dirpath == str(self.run_dir / "checkpoints"):
                callback.dirpath = None
        if self.subcommand == "fit":
            for key in RUN_KEYS:
                config[key] = None
        if self.continued:
            keep_metrics_csv(
                self.trainer.loggers, int(self.checkpoint["global_step"]) if self.checkpoint else 0
            )
        if self.subcommand == "predict":
            self.trainer.callbacks.append(CSVPredictionWriter())  # type: ignore[attr-defined]
        # Provenance: provenance.yaml in the run folder, the same facts in checkpoints and W&B (issue 17).
        self.trainer.callbacks.append(Provenance())  # type: ignore[attr-defined]

    def finish_wandb(self) -> None:
        """Close this run's W&B run (see :func:`~project.runs.finish_wandb_run`)."""
        finish_wandb_run(self.trainer.is_global_zero)

    after_validate = after_test = after_predict = finish_wandb

    def after_fit(self) -> None:
        """Say where the run folder and the best checkpoint are, and close W&B."""
        self.finish_wandb()
        callback = self.trainer.checkpoint_callback
        if self.trainer.is_global_zero:
            print(f"Run folder: {self.run_dir}")
            if isinstance(callback, ModelCheckpoint) and callback.best_model_path:
                score = float(callback.best_model_score or 0)
                print(f"Best checkpoint ({callback.monitor}={score:.4f}): {callback.best_model_path}")


def _default_config() -> dict[str, Any]:
    """``configs/default.yaml`` as a dict."""
    return dict(yaml.safe_load(Path(DEFAULT_CONFIG_FILES[0]).read_text()))


#: Commands that are not Trainer methods: name -> (module with a ``main(args)``, one-line help).
EXTRA_COMMANDS: dict[str, tuple[str, str]] = {
    "export": (f"{__package__}.export", "write the model as ONNX/TorchScript/torch.export, check it"),
    "report": (f"{__package__}.report", "PNG plots (curves, LR, memory, confusion matrix) of a run"),
    "lr_find": (f"{__package__}.tuning", "LR range test: suggested LR, loss-vs-LR plot, a config"),
    "scale_batch_size": (f"{__package__}.tuning", "largest batch size that fits, and a config to use"),
    "sweep": (f"{__package__}.sweep", "hyperparameter search (Optuna), each trial a fit run"),
}

EPILOG = "More commands (each has --help): " + "; ".join(
    f"{name}: {text}" for name, (_, text) in EXTRA_COMMANDS.items()
)


def main(args: ArgsType = None) -> None:
    """Run the CLI on ``args`` (default: ``sys.argv[1:]``).

    The :data:`EXTRA_COMMANDS` are dispatched to their own modules; everything else is a LightningCLI
    subcommand. A :class:`~project.errors.ProjectError` (bad checkpoint, missing data,
    failed health
    check, interruption) is printed as one ``error:`` line without a traceback, and the process exits
    with the error's code (2 for bad input, 130 after SIGINT, 1 otherwise); after SIGTERM with 143.
    """
    argv = sys.argv[1:] if args is None else args
    try:
        if isinstance(argv, list) and argv and argv[0] in EXTRA_COMMANDS:
            module = importlib.import_module(EXTRA_COMMANDS[argv[0]][0])
            rest = [str(arg) for arg in argv[1:]]
            module.main([argv[0], *rest] if module.__name__.endswith(".tuning") else rest)
            return
        ProjectCLI(args=args)
    except ProjectError as error:
        print(f"error: {error}", file=sys.stderr, flush=True)
        sys.exit(error.exit_code)
    except SIGTERMException:
        sys.exit(143)
