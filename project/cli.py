"""The command line: ``python -m project {fit,validate,test,predict}``
(a LightningCLI).

Everything is configured from YAML files (``--config``, repeatable, later files win) and dotted
overrides (``--model.optimizer.lr=3e-4``). With no arguments, ``fit`` trains the default experiment:
an :class:`~project.models.ImageClassifier` with a
:class:`~project.models.SimpleCNN` backbone on
:class:`~project.data.DigitsDataModule`. Each run writes into a new folder
``<logs_dir>/<run name>`` (default ``./logs``): checkpoints, the resolved ``config.yaml``,
``metrics.csv`` and predictions.
"""

from __future__ import annotations

import importlib
import os
import re
import sys
import warnings
from pathlib import Path
from typing import Any

import torch
import yaml
from jsonargparse import Namespace, lazy_instance
from lightning.pytorch import LightningDataModule, LightningModule, Trainer
from lightning.pytorch.callbacks import Callback, ModelCheckpoint, ModelSummary, ProgressBar, RichModelSummary
from lightning.pytorch.cli import ArgsType, LightningArgumentParser, LightningCLI, SaveConfigCallback
from lightning.pytorch.loggers import WandbLogger
from lightning.pytorch.utilities.exceptions import MisconfigurationException, SIGTERMException

# Imported so that every DataModule and LightningModule they export is a known subclass: short class
# names such as --model=TabularRegressor or --data=DiabetesDataModule resolve only to imported classes.
import project.data
import project.models  # noqa: F401
from project.callbacks import (
    CSVPredictionWriter,
    ExactResume,
    GracefulInterruption,
    HealthCheck,
    LineProgressBar,
    MemoryMonitor,
    TrainingMonitor,
    WarmupCosineSchedule,
)
from project.checkpointing import AtomicCheckpointIO, check_state_dict_fits, load_checkpoint
from project.errors import CheckpointError, ConfigError, ProjectError
from project.progress import stdout_is_terminal
from project.provenance import Provenance
from project.runs import (
    CHECKPOINT_ALIASES,
    add_run_folder_arguments,
    create_run_dir,
    find_checkpoint,
)

DEFAULT_MODEL = "project.models.ImageClassifier"
DEFAULT_BACKBONE = "project.models.SimpleCNN"
DEFAULT_DATA = "project.data.DigitsDataModule"

#: Trainer defaults for the default experiment (each can be overridden, e.g. ``--trainer.max_epochs=5``).
TRAINER_DEFAULTS: dict[str, Any] = {
    "max_epochs": 30,
    "log_every_n_steps": 10,
    "gradient_clip_val": 1.0,
    "gradient_clip_algorithm": "norm",
    # Offline unless told otherwise: no account, network or prompt needed; `wandb sync` uploads later.
    "logger": lazy_instance(WandbLogger, save_dir="logs", offline=True, project=__package__),
}

CSV_LOGGER = "lightning.pytorch.loggers.CSVLogger"
#: Depth of the model summary printed at fit start (3 reaches the layers inside the backbone).
MODEL_SUMMARY_DEPTH = 3


def _with_csv_logger(logger: Any) -> Any:
    """Add a ``CSVLogger`` to a logger config that has none, so every run keeps a ``metrics.csv``.

    ``True`` (Lightning's default logger) becomes just the CSV logger; ``False``/``None`` (logging off)
    stay as they are.
    """
    if logger is None or logger is False:
        return logger
    csv_logger = Namespace(class_path=CSV_LOGGER, init_args=Namespace())
    if logger is True:
        return csv_logger
    items = logger if isinstance(logger, list) else [logger]
    if any(isinstance(item, Namespace) and item.get("class_path") == CSV_LOGGER for item in items):
        return logger
    return [*items, csv_logger]


def _set_logger_dirs(logger: Any, run_dir: Path) -> Any:
    """Point a logger config (a ``class_path`` namespace, or a list of them) at ``run_dir``.

    CSV and TensorBoard loggers write straight into the run folder (empty ``name`` and ``version``);
    W&B keeps its files in ``<run_dir>/wandb`` and is named after the run folder unless a name is set;
    the environment variable ``WANDB_MODE=online`` (upload) or ``WANDB_MODE=disabled`` (W&B off) turns
    its ``offline`` default off so wandb follows the variable.
    """
    if isinstance(logger, list):
        return [_set_logger_dirs(item, run_dir) for item in logger]
    if not isinstance(logger, Namespace) or "class_path" not in logger:
        return logger
    init_args = logger.get("init_args") or Namespace()
    class_name = logger.class_path.rsplit(".", 1)[-1]
    init_args.save_dir = str(run_dir)
    if class_name in ("CSVLogger", "TensorBoardLogger"):
        init_args.name = ""
        init_args.version = ""
    elif class_name == "WandbLogger":
        if not init_args.get("name"):
            init_args.name = run_dir.name
        if os.environ.get("WANDB_MODE", "").lower() in ("online", "disabled"):
            init_args.offline = False  # else WandbLogger(offline=True) overrides WANDB_MODE
    logger.init_args = init_args
    return logger


def check_sync_batchnorm(parser: LightningArgumentParser, trainer: Namespace) -> None:
    """Stop with a clear message when ``trainer.sync_batchnorm`` is asked for without CUDA.

    ``torch.nn.SyncBatchNorm`` only runs on CUDA modules; on CPU it fails inside the DDP workers with
    a torch traceback. This check runs right after parsing, before anything is built or launched,
    and exits with code 2.
    """
    if not trainer.get("sync_batchnorm"):
        return
    accelerator = trainer.get("accelerator")
    accelerator_name = accelerator if isinstance(accelerator, str) else getattr(accelerator, "class_path", "")
    on_cpu = accelerator_name == "cpu" or (accelerator_name == "auto" and not torch.cuda.is_available())
    if on_cpu or not torch.cuda.is_available():
        parser.error(
            f"trainer.sync_batchnorm=true needs CUDA GPUs (torch.nn.SyncBatchNorm does not run on CPU), "
            f"but accelerator={accelerator_name!r} and CUDA available={torch.cuda.is_available()}. "
            "Fix: drop --trainer.sync_batchnorm (or set it to false) on CPU, or run on GPUs with "
            "--config configs/trainer/ddp_gpu.yaml."
        )


class SaveConfigToLoggers(SaveConfigCallback):
    """Save ``config.yaml`` in the run folder and record the full resolved config in W&B.

    W&B gets the config as its run config (``wandb.config``, visible and searchable in the UI) next to
    the model's hyperparameters that Lightning logs itself. Other loggers keep ``hparams.yaml``.
    """

    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        """Save ``config.yaml`` (Lightning), then :meth:`save_config` on rank 0."""
        # trainer.log_dir broadcasts, so every rank asks for it here, not only rank 0 in save_config.
        self._saved_path: Path | None = None
        if self.save_to_log_dir and not self.already_saved:
            self._saved_path = Path(trainer.log_dir or ".", self.config_filename)
        super().setup(trainer, pl_module, stage)

    def save_config(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        """Log the resolved config to every ``WandbLogger`` of the trainer."""
        wandb_loggers = [logger for logger in trainer.loggers if isinstance(logger, WandbLogger)]
        if not wandb_loggers:
            return
        saved = getattr(self, "_saved_path", None)  # None when save_config is called on its own
        if saved is not None and not self.multifile and saved.is_file():
            text = saved.read_text()  # the file Lightning just wrote: a second dump costs ~0.1 s
        else:
            text = self.parser.dump(self.config, skip_none=False)
        config = yaml.safe_load(text)
        for logger in wandb_loggers:
            logger.experiment.config.update({"config": config}, allow_val_change=True)


def default_extra_callbacks(trainer_config: dict[str, Any], callbacks: list[Callback]) -> list[Callback]:
    """The progress bar and model summary this project adds unless the config chose its own.

    - Progress: Lightning's tqdm bar on a terminal;
      :class:`~project.callbacks.LineProgressBar` (plain lines) when stdout is not one. Nothing
      when ``enable_progress_bar`` is false.
    - Model summary to depth 3 (parameters per layer, trainable and frozen, and input/output shapes
      when the model sets ``example_input_array``): ``RichModelSummary`` on a terminal, the plain-text
      ``ModelSummary`` otherwise. Nothing when ``enable_model_summary`` is false.
    """
    extra: list[Callback] = []
    if (
        trainer_config.get("enable_progress_bar") is not False
        and not any(isinstance(cb, ProgressBar) for cb in callbacks)
        and not stdout_is_terminal()
    ):
        extra.append(LineProgressBar())
    if trainer_config.get("enable_model_summary") is not False and not any(
        isinstance(cb, ModelSummary) for cb in callbacks
    ):
        summary = RichModelSummary if stdout_is_terminal() else ModelSummary  # rich tables wrap at 80 cols
        extra.append(summary(max_depth=MODEL_SUMMARY_DEPTH))
    return extra


#: How jsonargparse's messages start when it wraps the error a constructor raised.
_JSONARGPARSE_WRAPPERS = (
    "Does not validate against any of the Union subtypes",
    "Problem with given class_path",
)


def _root_cause(error: BaseException) -> str:
    """The constructor's own error behind jsonargparse's wrapper messages, as ``Type: message``."""
    while str(error).startswith(_JSONARGPARSE_WRAPPERS) and (error.__cause__ or error.__context__):
        error = error.__cause__ or error.__context__  # type: ignore[assignment]
    return f"{type(error).__name__}: {error}"


class ProjectArgumentParser(LightningArgumentParser):
    """``LightningArgumentParser`` whose errors stay short.

    On a bad argument or config value jsonargparse prints the parser's usage before the ``error:``
    line; for this CLI that usage lists every option, hundreds of lines that bury the error. This
    parser's usage is one line, e.g. ``usage: python -m project fit [options]`` (with the
    subcommands at the top level); ``--help`` is unchanged.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # No abbreviations: argparse would otherwise take --trainer.max_epoch=2 (a typo) as
        # --trainer.max_epochs=2 without a word; a misspelt key must fail as unrecognized.
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def format_usage(self) -> str:
        """One line: the program, its subcommands if it has any, and ``[options]``."""
        subcommands = getattr(self, "_subcommands_action", None)
        choices = " {" + ",".join(subcommands.choices) + "}" if subcommands is not None else ""
        prog = self.prog.replace(" [options]", "")  # a subcommand's prog holds its parent's "[options]"
        return f"usage: {prog}{choices} [options]\n"


class ProjectCLI(LightningCLI):
    """LightningCLI with this project's defaults, run folders and checkpoint shortcuts.

    Extra arguments (for every subcommand):
        ``--logs_dir``: folder that holds one folder per run (default ``logs``, relative to the cwd).
        ``--run_name``: name of this run's folder (default: timestamp and subcommand).
        ``--checkpoint.*``: the always-present ``ModelCheckpoint`` (best by ``val/acc`` as
        ``checkpoints/best.ckpt``, plus ``checkpoints/last.ckpt``).
        ``--lr_schedule.*``: :class:`~project.callbacks.WarmupCosineSchedule` (on by default).
        ``--memory.*``: :class:`~project.callbacks.MemoryMonitor` (on by default).
        ``--exact_resume.*``: :class:`~project.callbacks.ExactResume` (on by default).
        ``--training_monitor.*``: :class:`~project.callbacks.TrainingMonitor` (gradient norm,
        throughput, epoch time; on by default).
        ``--health.*``: :class:`~project.callbacks.HealthCheck` (on by default).
        ``--interruption.*``: :class:`~project.callbacks.GracefulInterruption` (on by default).
        ``--ckpt_path best`` / ``--ckpt_path last``: the best / last checkpoint of the newest run
        under ``--logs_dir`` (for ``fit``, ``last`` resumes that run). With ``--ckpt_path`` the model
        is rebuilt from the checkpoint (LightningCLI) and so is the DataModule, unless a data class
        is chosen (see :meth:`_restore_data_from_checkpoint`).
    """

    #: Run folder suffix when there is no subcommand (``run=False``, e.g. the tuning commands).
    run_label = "run"

    def __init__(self, args: ArgsType = None, run: bool = True, **kwargs: Any) -> None:
        kwargs.setdefault("model_class", LightningModule)
        kwargs.setdefault("datamodule_class", LightningDataModule)
        kwargs.setdefault("subclass_mode_model", True)
        kwargs.setdefault("subclass_mode_data", True)
        kwargs.setdefault("seed_everything_default", 42)
        kwargs.setdefault("trainer_defaults", TRAINER_DEFAULTS)
        kwargs.setdefault("auto_configure_optimizers", False)
        kwargs.setdefault("save_config_kwargs", {"overwrite": False})
        kwargs.setdefault("save_config_callback", SaveConfigToLoggers)
        kwargs.setdefault("parser_kwargs", {"prog": f"python -m {__package__}", "epilog": EPILOG})
        kwargs.setdefault("parser_class", ProjectArgumentParser)
        super().__init__(args=args, run=run, **kwargs)

    def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        """Add run-folder arguments, the checkpoint group and the default model and data."""
        add_run_folder_arguments(parser)
        parser.add_lightning_class_args(ModelCheckpoint, "checkpoint")
        parser.add_lightning_class_args(WarmupCosineSchedule, "lr_schedule")
        parser.add_lightning_class_args(MemoryMonitor, "memory")
        parser.add_lightning_class_args(ExactResume, "exact_resume")
        parser.add_lightning_class_args(TrainingMonitor, "training_monitor")
        parser.add_lightning_class_args(HealthCheck, "health")
        parser.add_lightning_class_args(GracefulInterruption, "interruption")
        parser.set_defaults(
            {
                "model": {
                    "class_path": DEFAULT_MODEL,
                    "init_args": {"backbone": {"class_path": DEFAULT_BACKBONE}},
                },
                "data": {"class_path": DEFAULT_DATA},
                "checkpoint.monitor": "val/acc",
                "checkpoint.mode": "max",
                "checkpoint.filename": "best",
                "checkpoint.save_top_k": 1,
                "checkpoint.save_last": True,
            }
        )

    def parse_arguments(self, parser: LightningArgumentParser, args: ArgsType) -> None:
        """Parse, then turn ``--ckpt_path best|last`` into the newest run's checkpoint file."""
        self.checkpoint: dict[str, Any] | None = None
        super().parse_arguments(parser, args)
        subcommand = self.config.get("subcommand")
        config = self.config[subcommand] if subcommand else self.config
        check_sync_batchnorm(parser, config.trainer)
        if not subcommand:
            return
        if subcommand != "fit":
            # The checkpoint callback is inert outside fit; don't warn that its folder is new.
            warnings.filterwarnings("ignore", message="The dirpath has changed from")
        ckpt_path = config.get("ckpt_path")
        if ckpt_path in CHECKPOINT_ALIASES:
            try:
                config.ckpt_path = str(find_checkpoint(config.logs_dir, ckpt_path))
            except FileNotFoundError as error:
                parser.error(str(error))
            print(f"--ckpt_path={ckpt_path} -> {config.ckpt_path}")
        elif ckpt_path is not None and not Path(ckpt_path).is_file():
            parser.error(
                f"--ckpt_path={ckpt_path!r}: no such file. Pass a checkpoint file, or 'best'/'last' for "
                f"the newest run under --logs_dir={config.logs_dir!r}"
            )
        if config.get("ckpt_path") is not None:
            try:
                self.checkpoint = load_checkpoint(config.ckpt_path, weights_only=config.get("weights_only"))
            except CheckpointError as error:
                parser.error(str(error))
            self._apply_checkpoint_hyperparameters(parser, subcommand)
            self._restore_data_from_checkpoint(parser, subcommand)

    def _apply_checkpoint_hyperparameters(self, parser: LightningArgumentParser, subcommand: str) -> None:
        """Take the model's architecture from the checkpoint (its saved ``hyper_parameters``), as
        LightningCLI does, but from the file loaded once above with the user's ``weights_only``."""
        hparams = dict((self.checkpoint or {}).get("hyper_parameters") or {})
        hparams.pop("_instantiator", None)
        if not hparams:
            return
        if "_class_path" in hparams:
            hparams = {"class_path": hparams.pop("_class_path"), "dict_kwargs": hparams}
        self.config = parser.parse_object({subcommand: {"model": hparams}}, self.config)

    def _parse_ckpt_path(self) -> None:
        """Done in :meth:`parse_arguments` (one load of the checkpoint, honouring ``--weights_only``)."""

    def _restore_data_from_checkpoint(self, parser: LightningArgumentParser, subcommand: str) -> None:
        """Use the checkpoint's DataModule when the command line left the default one in place.

        LightningCLI restores the model's class and arguments from ``--ckpt_path`` but not the
        DataModule's, so ``test --ckpt_path best`` after a non-default experiment (e.g. the diabetes
        regression) would pair the model with the default digits data. When the configured data class
        is still ``DEFAULT_DATA`` and the checkpoint was trained with another DataModule (saved by its
        ``save_hyperparameters()``), that class and its arguments are used instead. Choosing a data
        class (``--config``, ``--data=...``) turns this off.
        """
        config = self.config[subcommand]
        if config.data.get("class_path") != DEFAULT_DATA:
            return
        hparams = dict((self.checkpoint or {}).get("datamodule_hyper_parameters") or {})
        class_path = hparams.pop("_class_path", None)
        hparams.pop("_instantiator", None)
        if class_path is None or class_path == DEFAULT_DATA:
            return
        self.config = parser.parse_object(
            {subcommand: {"data": {"class_path": class_path, "init_args": hparams}}}, self.config
        )
        print(f"--ckpt_path: data restored from the checkpoint: {class_path}")

    def before_instantiate_classes(self) -> None:
        """Create this run's folder and point the trainer, logger and checkpoints at it."""
        config = self.config[self.subcommand] if self.subcommand else self.config
        wandb = sys.modules.get("wandb")
        if wandb is not None and getattr(wandb, "run", None) is not None:
            wandb.finish()  # left open by an earlier run in this process that failed; don't reuse it
        self.run_dir = create_run_dir(config.logs_dir, self.subcommand or self.run_label, config.run_name)
        config.trainer.default_root_dir = str(self.run_dir)
        config.trainer.logger = _set_logger_dirs(_with_csv_logger(config.trainer.logger), self.run_dir)
        # The CSV logger warns that "previous log files will be deleted" in any non-empty folder; this
        # one is new (config.yaml, wandb/ are ours) and holds no earlier metrics.csv.
        not_empty = f"Experiment logs directory {re.escape(str(self.run_dir))}/? exists and is not empty"
        warnings.filterwarnings("ignore", not_empty)
        if config.checkpoint.dirpath is None:
            config.checkpoint.dirpath = str(self.run_dir / "checkpoints")

    def instantiate_classes(self) -> None:
        """Build model, data and trainer. When one of them rejects its arguments (a ``ValueError``,
        ``TypeError`` or Lightning's ``MisconfigurationException``, e.g. ``--data.batch_size=-1`` or
        ``--trainer.accelerator=gpu`` without a GPU), or the checkpoint does not fit, stop with a
        :class:`~project.errors.ConfigError` that names the cause, and remove the still-empty run
        folder."""
        try:
            super().instantiate_classes()
            if self.checkpoint is not None:
                config = self.config[self.subcommand] if self.subcommand else self.config
                check_state_dict_fits(self.model, self.checkpoint, config.ckpt_path)
        except (ProjectError, ValueError, TypeError, MisconfigurationException) as error:
            if getattr(self, "run_dir", None) is not None and not any(self.run_dir.iterdir()):
                self.run_dir.rmdir()
            if isinstance(error, ProjectError):
                raise
            cause = _root_cause(error)
            raise ConfigError(f"the config was parsed, but building the run failed: {cause}") from error

    def instantiate_trainer(self, **kwargs: Any) -> Trainer:
        """Build the trainer with the default progress bar and model summary added (see
        :func:`default_extra_callbacks`), and make its checkpoint writes atomic (temporary file, then
        rename)."""
        config_init = self.config_init[self.subcommand] if self.subcommand else self.config_init
        trainer_config = dict(config_init.get("trainer") or {})
        callbacks = trainer_config.get("callbacks") or []
        callbacks = list(callbacks) if isinstance(callbacks, list) else [callbacks]
        kwargs.setdefault("callbacks", [*callbacks, *default_extra_callbacks(trainer_config, callbacks)])
        trainer = super().instantiate_trainer(**kwargs)
        if type(trainer.strategy.checkpoint_io).__name__ == "TorchCheckpointIO":
            trainer.strategy.checkpoint_io = AtomicCheckpointIO()
        return trainer

    def after_instantiate_classes(self) -> None:
        """Attach the CSV prediction writer for ``predict``, and the provenance record."""
        if self.subcommand == "predict":
            self.trainer.callbacks.append(CSVPredictionWriter())  # type: ignore[attr-defined]
        # Provenance: provenance.yaml in the run folder, the same facts in checkpoints and W&B (issue 17).
        self.trainer.callbacks.append(Provenance())  # type: ignore[attr-defined]

    def _finish_wandb(self) -> None:
        """Close this run's W&B runs (so the next run in this process starts its own) and, for an
        offline run, say how to upload it."""
        for logger in self.trainer.loggers:
            if not isinstance(logger, WandbLogger) or logger._experiment is None:
                continue
            run = logger.experiment
            offline, sync_dir = bool(getattr(run, "offline", False)), getattr(run, "sync_dir", None)
            run.finish()
            if offline and sync_dir and self.trainer.is_global_zero:
                print(f"W&B run saved offline; upload it with: wandb sync {sync_dir}")

    def after_validate(self) -> None:
        """Close W&B."""
        self._finish_wandb()

    def after_test(self) -> None:
        """Close W&B."""
        self._finish_wandb()

    def after_predict(self) -> None:
        """Close W&B."""
        self._finish_wandb()

    def after_fit(self) -> None:
        """Say where the run folder and the best checkpoint are, and close W&B."""
        self._finish_wandb()
        callback = self.trainer.checkpoint_callback
        if self.trainer.is_global_zero:
            print(f"Run folder: {self.run_dir}")
            if isinstance(callback, ModelCheckpoint) and callback.best_model_path:
                print(
                    f"Best checkpoint ({callback.monitor}={float(callback.best_model_score or 0):.4f}): "
                    f"{callback.best_model_path}"
                )


#: Commands that are not Trainer methods: name -> (module with a ``main(args)``, one-line help).
EXTRA_COMMANDS: dict[str, tuple[str, str]] = {
    "export": ("project.export", "write the model as ONNX/TorchScript/torch.export, check it"),
    "report": ("project.report", "PNG plots (curves, LR, memory, confusion matrix) of a run"),
    "lr_find": ("project.tuning", "LR range test: suggested LR, loss-vs-LR plot, a config"),
    "scale_batch_size": ("project.tuning", "largest batch size that fits, and a config to use"),
}

EPILOG = "More commands (each has --help): " + "; ".join(
    f"{name}: {text}" for name, (_, text) in EXTRA_COMMANDS.items()
)


def main(args: ArgsType = None) -> None:
    """Run the CLI on ``args`` (default: ``sys.argv[1:]``).

    ``export``, ``report``, ... (:data:`EXTRA_COMMANDS`) are dispatched to their own modules before
    LightningCLI is built; everything else is a LightningCLI subcommand.

    A :class:`~project.errors.ProjectError` (bad checkpoint, missing data, failed health check,
    interruption) is printed as one ``error:`` line without a traceback, and the process exits with
    the error's code (2 for bad input, 130 after SIGINT, 1 otherwise); after SIGTERM it exits with 143.
    """
    argv = sys.argv[1:] if args is None else args
    try:
        if isinstance(argv, list) and argv and argv[0] in EXTRA_COMMANDS:
            module = importlib.import_module(EXTRA_COMMANDS[argv[0]][0])
            rest = [str(arg) for arg in argv[1:]]
            module.main([argv[0], *rest] if module.__name__ == "project.tuning" else rest)
            return
        ProjectCLI(args=args)
    except ProjectError as error:
        print(f"error: {error}", file=sys.stderr, flush=True)
        sys.exit(error.exit_code)
    except SIGTERMException:
        sys.exit(143)
