"""The command line: ``python -m <package> {fit,validate,test,predict}`` (a LightningCLI), plus the
commands of :data:`EXTRA_COMMANDS` (``export``, ``report``, ...).

Defaults live in YAML, loaded first: the engine's ``defaults.yaml``, then your
``<package>/configs/default.yaml`` (your experiment) and ``<package>/configs/logger.yaml`` (the
default logger); then ``--config`` files (repeatable, later files win), then dotted overrides. Each run
writes into a new folder ``<logs_dir>/<run name>`` (default ``./logs``); ``fit --ckpt_path
last|best|FILE`` continues the run that wrote the checkpoint, in its folder, unless ``--run_name``
asks for a new run.
"""

from __future__ import annotations

import importlib
import os
import shutil
import sys
from pathlib import Path
from typing import Any

import lightning
from jsonargparse import ActionConfigFile, Namespace
from lightning.fabric.plugins import TorchCheckpointIO
from lightning.pytorch import LightningDataModule, LightningModule, Trainer
from lightning.pytorch.callbacks import ModelSummary
from lightning.pytorch.cli import ArgsType, LightningArgumentParser, LightningCLI
from lightning.pytorch.utilities import rank_zero_only
from lightning.pytorch.utilities.exceptions import MisconfigurationException, SIGTERMException

from . import __version__
from .callbacks import (
    CompileModel,
    CSVPredictionWriter,
    DistributedEvaluation,
    GracefulInterruption,
    HealthCheck,
    MemoryMonitor,
    TrainingMonitor,
    default_extra_callbacks,
)
from .checkpointing import (
    AtomicCheckpointIO,
    BestCheckpoint,
    LastCheckpoint,
    check_state_dict_fits,
    check_weight_averaging,
    load_checkpoint,
    load_matching_weights,
)
from .checks import (
    DATA_LINKS,
    check_links,
    check_model_and_trainer,
    check_removed_keys,
    check_saved_model,
    check_sync_batchnorm,
    check_wandb_log_model,
    explicit_values,
    warn_carried_over,
    warn_logger_switch,
    warn_replaced_by_checkpoint,
)
from .deprecations import add_renamed_arguments, apply_renamed
from .errors import ConfigError, ProjectError, TrainingInterrupted, first_line
from .parser import Parser
from .progress import quiet_console
from .project import DISTRIBUTION, check_engine_version, config_files, missing_modules
from .provenance import Provenance
from .resume import CheckpointReadOnce, ExactResume
from .runs import (
    SaveConfig,
    add_run_folder_arguments,
    choose_run_dir,
    class_of,
    finish_wandb_run,
    keep_metrics_csv,
    resolve_checkpoint,
    run_dir_of,
    run_logger_config,
    saved_classes,
    wandb_id_of,
)


class ConfigFile(ActionConfigFile):
    """``--config FILE``: a file written for an older version of the template is refused with one line
    naming the change (``checks.check_removed_keys``); before the subcommand any
    file is refused (jsonargparse would read only a section named after the subcommand there)."""

    before_subcommand = False

    def __call__(self, parser: Any, cfg: Any, values: Any, option_string: str | None = None) -> None:
        """Check ``values`` (the file), then let jsonargparse read it."""
        if self.before_subcommand:
            parser.error(
                f"--config {values} comes before the subcommand; put it after: "
                f"{parser.prog} fit --config {values}"
            )
        try:
            check_removed_keys(values)
        except ConfigError as error:
            parser.error(str(error))
        parser.reading = values  # (named in the error of a misspelt class path in it: parser.Parser)
        try:
            super().__call__(parser, cfg, values, option_string)
        finally:
            parser.reading = None


class ConfigBeforeSubcommand(ConfigFile):
    """The main parser's ``--config`` when the CLI runs a subcommand (see :class:`ConfigFile`)."""

    before_subcommand = True


#: LightningCLI's subcommands and the Trainer method arguments each takes from the parsed config.
ALL_SUBCOMMANDS = LightningCLI.subcommands()


class ProjectCLI(CheckpointReadOnce):
    """LightningCLI with run folders, checkpoint aliases, the engine's callbacks and the data links.

    Extra arguments (every subcommand): ``--logs_dir`` (folder of run folders, default ``logs``),
    ``--run_name`` (this run's folder name; default timestamp and subcommand), and the groups of the
    engine's callbacks, which are always present (a ``trainer.callbacks`` list is added to them):
    ``--checkpoint.*`` (the best checkpoint by ``checkpoint.monitor``, ``checkpoints/best.ckpt``),
    ``--last_checkpoint.*`` (``checkpoints/last.ckpt`` at the end of every epoch), ``--memory.*``,
    ``--exact_resume.*``, ``--training_monitor.*``, ``--health.*``, ``--interruption.*``.

    Linked values (:data:`~runwright.checks.DATA_LINKS`): a model argument ``num_classes``,
    ``in_features`` or ``in_channels`` is set from the DataModule's ``num_classes``, ``num_features``
    or ``dims[0]`` when both have them.

    ``--ckpt_path best|last`` names the best/last checkpoint of the newest run under ``--logs_dir``.
    With ``--ckpt_path`` the model's class and arguments come from the checkpoint, and so does the
    DataModule's unless the config chose another data class; data arguments given explicitly win.

    ``package`` is the user's package (``python -m <package>``): it is imported first (its classes get
    their short names) and its ``configs/default.yaml`` and ``configs/logger.yaml`` are loaded after the
    engine's ``defaults.yaml`` (:func:`~runwright.project.config_files`).
    """

    #: Run folder suffix when there is no subcommand (``run=False``, e.g. the tuning commands).
    run_label = "run"

    def __init__(self, args: ArgsType = None, run: bool = True, *, package: str, **kwargs: Any) -> None:
        self.package = package
        argv = sys.argv[1:] if args is None else args
        # the subcommand to run (the first argument): only its parser is built (LightningCLI builds all four)
        self.running = (
            argv[0] if run and isinstance(argv, list) and argv and argv[0] in ALL_SUBCOMMANDS else None
        )
        prog = f"python -m {package}"
        defaults = [str(path) for path in self.default_config_files()]
        parser_kwargs: dict[str, Any] = {
            "prog": prog,
            "epilog": EPILOG,
            "allow_abbrev": False,  # --trainer.max_epoch=2 (a typo) must fail, not set max_epochs
            "usage": f"{prog} " + ("{" + ",".join(ALL_SUBCOMMANDS) + "} " if run else "") + "[options]",
        }
        if not run:
            parser_kwargs["default_config_files"] = defaults
        for name in self.subcommands() if run else ():
            parser_kwargs[name] = {"default_config_files": defaults, "usage": f"{prog} {name} [options]"}
        kwargs.setdefault("model_class", LightningModule)
        kwargs.setdefault("datamodule_class", LightningDataModule)
        kwargs.setdefault("subclass_mode_model", True)
        kwargs.setdefault("subclass_mode_data", True)
        kwargs.setdefault("auto_configure_optimizers", False)
        kwargs.setdefault("save_config_callback", SaveConfig)
        kwargs.setdefault("parser_class", Parser)
        kwargs["parser_kwargs"] = {**parser_kwargs, **(kwargs.get("parser_kwargs") or {})}
        self.parsers: list[LightningArgumentParser] = []
        self.checkpoint: dict[str, Any] | None = None
        self.init_checkpoint: dict[str, Any] | None = None  # fit --init_from: weights only
        self._environ = dict(os.environ)
        self.runs_subcommand = run
        try:
            try:
                super().__init__(args=args, run=run, **kwargs)
            except Exception as error:
                if type(error).__module__.split(".")[0] != "wandb":
                    raise
                # e.g. online without an API key or without network: W&B's own error, in one line
                first = (str(error).strip().splitlines() or [""])[0]
                raise ConfigError(
                    f"W&B could not start the run ({type(error).__name__}: {first}); log in (`wandb login`) "
                    "or log offline (WANDB_MODE=offline, the W&B preset's default)"
                ) from error
        except ProjectError as error:
            if error.exit_code == 2:  # bad input: leave no half-made run behind
                self._discard_new_run()
            raise
        finally:
            if run:
                self.__exit__()

    def _discard_new_run(self) -> None:
        """Delete this command's run folder when it is new and holds no checkpoint (the loggers may have
        written their first files before the data or a setting was found bad); its W&B run is closed
        without the hint to upload it."""
        run_dir: Path | None = getattr(self, "run_dir", None)
        if (
            run_dir is None
            or self.continued
            or not run_dir.is_dir()
            or any(run_dir.glob("checkpoints/**/*.ckpt"))
        ):
            return
        finish_wandb_run(is_global_zero=False)
        shutil.rmtree(run_dir, ignore_errors=True)

    def subcommands(self) -> dict[str, set[str]]:  # type: ignore[override]
        """LightningCLI's subcommands (a ``staticmethod`` there), only the one being run when the command
        line names one: building a subcommand's parser costs about 0.3 s of CPU."""
        return {self.running: ALL_SUBCOMMANDS[self.running]} if self.running else ALL_SUBCOMMANDS

    def default_config_files(self) -> list[Path]:
        """The config files loaded before any ``--config`` (:func:`~runwright.project.config_files`)."""
        return config_files(self.package)

    def __deepcopy__(self, memo: dict[int, Any]) -> ProjectCLI:
        """The CLI itself, never a copy: the optimizer and scheduler callables LightningCLI gives a model
        keep a reference to it (through their instantiator), so copying a model (Lightning's
        ``WeightAveraging`` deep-copies the LightningModule into its average) would otherwise copy the
        whole CLI, the trainer and the data with it, and fail under DDP (``cannot pickle
        '_thread.lock'``)."""
        return self

    def __enter__(self) -> ProjectCLI:
        """``with ProjectCLI(args, run=False) as cli: cli.trainer.fit(...)``: see :meth:`__exit__`."""
        return self

    def __exit__(self, *exc_info: object) -> None:
        """Leave the process as it was before the CLI: the environment variables that seeding and the
        run folder set are restored and an open W&B run is closed (a run with a subcommand does this
        when it ends; with ``run=False`` use the CLI as a context manager around your own calls)."""
        for key in set(os.environ) - set(self._environ):
            del os.environ[key]
        os.environ.update(self._environ)
        finish_wandb_run(getattr(getattr(self, "trainer", None), "is_global_zero", True))

    def init_parser(self, **kwargs: Any) -> LightningArgumentParser:
        """LightningCLI's parser with the engine's ``--config`` (:class:`ConfigFile`)."""
        kwargs.setdefault("dump_header", [f"lightning.pytorch=={lightning.__version__}"])
        parser = self.parser_class(**kwargs)
        first = not hasattr(self, "parser")  # LightningCLI builds the main parser first
        action = ConfigBeforeSubcommand if self.runs_subcommand and first else ConfigFile
        parser.add_argument(
            "-c", "--config", action=action, help="Path to a configuration file in yaml format."
        )
        return parser

    def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        """Add the run-folder arguments, the engine's callbacks and the data links."""
        self.parsers.append(parser)
        add_run_folder_arguments(parser)
        parser.add_argument(
            "--init_from",
            type=str | None,
            default=None,
            help="fit only: start a new run from the weights of a checkpoint (a file, or best/last of the "
            "newest run), with a fresh optimizer, schedule and epoch count; tensors whose name or shape "
            "differ (a new head) keep their initial values and are named.",
        )
        add_renamed_arguments(parser)
        parser.add_lightning_class_args(BestCheckpoint, "checkpoint")
        parser.add_lightning_class_args(LastCheckpoint, "last_checkpoint")
        parser.add_lightning_class_args(MemoryMonitor, "memory")
        parser.add_lightning_class_args(ExactResume, "exact_resume")
        parser.add_lightning_class_args(TrainingMonitor, "training_monitor")
        parser.add_lightning_class_args(HealthCheck, "health")
        parser.add_lightning_class_args(GracefulInterruption, "interruption")
        parser.add_lightning_class_args(CompileModel, "compile")
        for target, source in DATA_LINKS.items():
            attribute, first = source.removesuffix("[0]"), source.endswith("[0]")
            parser.link_arguments(
                f"data.{attribute}",
                f"model.init_args.{target}",
                compute_fn=(lambda dims: int(dims[0])) if first else None,
                apply_on="instantiate",
            )

    def _config(self, config: Namespace | None = None) -> Namespace:
        """The parsed (or, given, the instantiated) config of the subcommand being run."""
        config = self.config if config is None else config
        subcommand = self.config.get("subcommand")
        return config[subcommand] if subcommand else config

    def parse_arguments(self, parser: LightningArgumentParser, args: ArgsType) -> None:
        """Parse and check the config; resolve ``--ckpt_path`` (alias or file), read the checkpoint
        once (honouring ``--weights_only``) and take the model (and data) class and arguments from it."""
        for subparser in self.parsers:  # jsonargparse names it "<main usage> [options] fit"; errors show it
            if " [options] " in subparser.prog:
                subparser.prog = f"python -m {self.package} {subparser.prog.rsplit(' ', 1)[-1]}"
        super().parse_arguments(parser, args)
        subcommand = self.config.get("subcommand")
        subparser = self._subcommand_parsers[subcommand] if subcommand else parser
        config = self._config()
        try:
            apply_renamed(config)
            check_sync_batchnorm(config.trainer)
            check_wandb_log_model(config.trainer.logger)
            defaults = subparser.get_defaults()
            self.explicit = explicit_values(config, defaults)
            warn_carried_over(config, defaults)
            if config.get("ckpt_path") is not None:
                self._apply_checkpoint(subparser, config)
            if config.get("init_from") is not None:
                self._read_init_from(self._config())
            if "verbose" in self._config() and "verbose" not in self.explicit:
                self._config().verbose = (
                    False  # one line of results (after_test) instead of Lightning's table
                )
        except ProjectError as error:
            subparser.error(str(error))

    def _apply_checkpoint(self, parser: LightningArgumentParser, config: Namespace) -> None:
        """Read the checkpoint that ``--ckpt_path`` names and build this run from its model and data:
        the model's class and arguments are the checkpoint's (a given value it replaces is named in a
        warning); so are the data's, unless the config chose another data class, and data arguments
        given explicitly (``--config``, command line) win over the checkpoint's."""
        ckpt_path = resolve_checkpoint(config.ckpt_path, config.logs_dir)
        self.checkpoint = load_checkpoint(ckpt_path, weights_only=config.get("weights_only"))
        print(f"--ckpt_path: {ckpt_path}")
        saved = saved_classes(self.checkpoint, run_dir_of(ckpt_path))
        if "model" in saved:
            check_saved_model(saved["model"], self.config.get("subcommand"), ckpt_path)
        chosen = self.explicit.get("data.class_path")
        if "data" in saved and chosen is not None and chosen != saved["data"]["class_path"]:
            del saved["data"]  # the config chose another data class: keep it
        given_data = {k: v for k, v in self.explicit.items() if k.startswith("data.init_args.")}
        if saved:
            update = {self.config.subcommand: saved} if self.config.get("subcommand") else saved
            self.config = self.parser.parse_object(update, self.config)
        config = self._config()
        for key, value in given_data.items():
            if key in config:
                config[key] = value
        config.ckpt_path = str(ckpt_path)
        warn_replaced_by_checkpoint(self.explicit, config)

    def _read_init_from(self, config: Namespace) -> None:
        """Resolve ``--init_from`` (a file, ``best``, ``last``), read its checkpoint once and record the
        file's absolute path in the config (so ``config.yaml`` names the weights the run started from)."""
        subcommand = self.config.get("subcommand")
        if subcommand not in (None, "fit"):
            raise ConfigError(
                f"--init_from starts a new training run: use it with fit; {subcommand} takes --ckpt_path"
            )
        if config.get("ckpt_path") is not None:
            raise ConfigError(
                "--init_from and --ckpt_path: pass one. --ckpt_path resumes a run (optimizer, schedule, "
                "epoch); --init_from starts a new run from its weights only"
            )
        path = resolve_checkpoint(config.init_from, config.logs_dir).resolve()
        self.init_checkpoint = load_checkpoint(path, weights_only=config.get("weights_only"))
        config.init_from = str(path)

    def instantiate_classes(self) -> None:
        """Choose the run folder (``runs.choose_run_dir``) and build the model, the
        data and the trainer from the config with the loggers, checkpoints and ``default_root_dir``
        pointed at it: a copy of the config, so ``config.yaml`` names no run folder.

        A class rejecting its arguments (``ValueError``, ``TypeError``, ``MisconfigurationException``,
        e.g. ``--data.batch_size=-1``), a class whose package is not installed (``ImportError``, e.g. a
        logger's), a linked value given against its source, or a checkpoint that
        does not fit the model stops with a ``ConfigError`` naming the
        cause, and a new run folder that is still empty is removed.
        """
        config = self._config()
        self.run_dir, self.continued = choose_run_dir(config, self.subcommand or self.run_label)
        if self.continued:
            warn_logger_switch(self.run_dir, config.trainer.logger)
        run_config = self.config.clone()
        run = self._config(run_config)
        run.trainer.default_root_dir = str(self.run_dir)
        wandb_id = wandb_id_of(self.run_dir) if self.continued else None
        run.trainer.logger = run_logger_config(config.trainer.logger, self.run_dir, wandb_id)
        for callback in (run.checkpoint, run.last_checkpoint):
            callback.dirpath = callback.dirpath or str(self.run_dir / "checkpoints")
        try:
            self.config_init = self.parser.instantiate(run_config)
            init = self._config(self.config_init)
            self.datamodule, self.model = init.get("data"), init.get("model")
            self.trainer = self.instantiate_trainer()
            check_links(self.explicit, self.model, self.datamodule)
            check_model_and_trainer(self.model, self.trainer)
            if self.checkpoint is not None:
                check_state_dict_fits(self.model, self.checkpoint, config.ckpt_path)
                if self.subcommand == "fit":
                    check_weight_averaging(self.trainer, self.checkpoint, config.ckpt_path)
            if self.init_checkpoint is not None:
                print(load_matching_weights(self.model, self.init_checkpoint, config.init_from), flush=True)
        except (ProjectError, ValueError, TypeError, ImportError, MisconfigurationException) as error:
            if not self.continued and not any(self.run_dir.iterdir()):
                self.run_dir.rmdir()
            if isinstance(error, ProjectError):
                raise
            cause: BaseException = error
            while cause.__cause__ is not None:  # jsonargparse wraps the constructor's own error
                cause = cause.__cause__
            problem = logger_problem(run.trainer.logger) or f"{type(cause).__name__}: {first_line(cause)}"
            raise ConfigError(f"building the run failed: {problem}") from error

    def instantiate_trainer(self, **kwargs: Any) -> Trainer:
        """Build the trainer with the progress display, the provenance record, DDP-exact evaluation,
        the predictions writer (``predict``) and atomic checkpoint writes."""
        trainer_config = dict(self._config(self.config_init).get("trainer") or {})
        callbacks = trainer_config.get("callbacks") or []
        callbacks = list(callbacks) if isinstance(callbacks, list) else [callbacks]
        shown = default_extra_callbacks(trainer_config, callbacks)
        if any(isinstance(callback, ModelSummary) for callback in shown):
            kwargs["enable_model_summary"] = False  # ours is there: Lightning would say it skips its own
        extra = [*shown, Provenance(self.package), DistributedEvaluation()]
        if self.subcommand == "predict":
            extra.append(CSVPredictionWriter())
        kwargs.setdefault("callbacks", [*callbacks, *extra])
        trainer = super().instantiate_trainer(**kwargs)
        if type(trainer.strategy.checkpoint_io) is TorchCheckpointIO:
            trainer.strategy.checkpoint_io = AtomicCheckpointIO()
        return trainer

    def after_instantiate_classes(self) -> None:
        """Keep the rows a continued run logged up to its checkpoint in its ``metrics.csv``."""
        if self.continued:
            keep_metrics_csv(
                self.trainer.loggers, int(self.checkpoint["global_step"]) if self.checkpoint else 0
            )

    def after_validate(self) -> None:
        """Print the results in one line, 4 decimals (a metric of 1.0000001 reads 1.0000)."""
        stage = "validate" if self.subcommand == "validate" else "test"
        metrics = {
            key: float(value) for key, value in self.trainer.callback_metrics.items() if value.numel() == 1
        }
        if self.trainer.is_global_zero and metrics and not self._config().get("verbose"):
            print(f"{stage}: " + "  ".join(f"{key}={value:.4f}" for key, value in sorted(metrics.items())))

    after_test = after_validate

    def after_fit(self) -> None:
        """Say where the run folder and its best checkpoint are, and when a run from a checkpoint had
        nothing left to train (the checkpoint already at ``max_steps`` or ``max_epochs``)."""
        trainer = self.trainer
        best = next((cb for cb in trainer.callbacks if isinstance(cb, BestCheckpoint)), None)  # type: ignore[attr-defined]
        if not trainer.is_global_zero:
            return
        if self.checkpoint and trainer.global_step == self.checkpoint["global_step"]:
            limits = [("max_steps", trainer.max_steps, trainer.global_step)]
            limits.append(("max_epochs", trainer.max_epochs or -1, trainer.current_epoch))
            reached = [f"--trainer.{key}={value}" for key, value, now in limits if 0 <= value <= now]
            at = f"current_epoch={trainer.current_epoch}, global_step={trainer.global_step}"
            print(
                f"Nothing trained: the checkpoint ({at})"
                + (f" already reached {reached[0]}; give a larger value to train on." if reached else ".")
            )
        print(f"Run folder: {self.run_dir}")
        # (a run branched from a checkpoint that trained nothing has only the old run's best)
        if (
            best is not None
            and best.best_model_path
            and self.run_dir.resolve() in Path(best.best_model_path).resolve().parents
        ):
            score = float(best.best_model_score) if best.best_model_score is not None else float("nan")
            print(f"Best checkpoint ({best.monitor}={score:.4f}): {best.best_model_path}")


def logger_problem(logger: Any) -> str | None:
    """Why a logger of the config cannot be built (e.g. its package is not installed: jsonargparse
    reports only that the value fits no type), found by building each one alone; ``None`` if all build."""
    for item in logger if isinstance(logger, list) else [logger]:
        if isinstance(item, Namespace):
            cls = class_of(item.class_path)
            try:
                cls(**dict(item.get("init_args") or {}))
            except Exception as error:
                return f"trainer.logger {cls.__name__}: {type(error).__name__}: {first_line(error)}"
    return None


#: Commands that are not Trainer methods: name -> (module with a ``main(args, package)``, one-line help,
#: the engine's extra it needs or ``None``).
EXTRA_COMMANDS: dict[str, tuple[str, str, str | None]] = {
    "export": (
        "runwright.commands.export",
        "write the model as ONNX/TorchScript/torch.export, check it",
        None,
    ),
    "report": (
        "runwright.commands.report",
        "PNG plots (curves, LR, memory, confusion matrix) of a run",
        "plots",
    ),
    "lr_find": ("runwright.commands.tune", "LR range test: suggested LR, loss-vs-LR plot, a config", "plots"),
    "scale_batch_size": (
        "runwright.commands.tune",
        "largest batch size that fits, and a config to use",
        None,
    ),
    "sweep": ("runwright.commands.sweep", "hyperparameter search (Optuna), each trial a fit run", "sweep"),
}

EPILOG = "More commands (each has --help): " + "; ".join(
    f"{name}: {text}" for name, (_, text, _) in EXTRA_COMMANDS.items()
)


def main(args: ArgsType = None, *, package: str | None) -> None:
    """Run the CLI of ``package`` (the user's package: ``python -m <package>``) on ``args`` (default:
    ``sys.argv[1:]``).

    The :data:`EXTRA_COMMANDS` are dispatched to their own modules (one whose extra is not installed
    stops with one line naming it); everything else is a LightningCLI subcommand. A ``ProjectError``
    (bad input, an engine outside the range the package requires, a bad checkpoint, missing data, a
    failed health check, an interruption) is printed as one ``error:`` line without a traceback, and
    the process exits with the error's code (2 for bad input, 130 after SIGINT, 1 otherwise); after
    SIGTERM with 143.

    With several processes (DDP), a stop that every process makes alike (a
    :class:`~runwright.errors.ConfigError`, which comes from the config they share, or an
    interruption, which they agree on) is reported by rank 0 alone; the other processes end quietly
    with exit code 0, so that Lightning's launcher, which kills rank 0 as soon as another process
    fails, lets rank 0 report it and exit with its code.
    """
    if not package:
        raise TypeError("main(package=...) needs the user's package name: main(package=__package__)")
    argv = sys.argv[1:] if args is None else args
    with quiet_console():
        try:
            check_engine_version(package, __version__)
            if isinstance(argv, list) and argv and argv[0] in EXTRA_COMMANDS:
                name, extra = argv[0], EXTRA_COMMANDS[argv[0]][2]
                if extra and (missing := missing_modules(extra)):
                    raise ConfigError(
                        f"{name} needs the engine's {extra!r} extra ({', '.join(missing)} not installed): "
                        f"pip install '{DISTRIBUTION}[{extra}]'"
                    )
                module = importlib.import_module(EXTRA_COMMANDS[name][0])
                environ = dict(os.environ)
                try:
                    module.main([str(arg) for arg in argv], package)
                finally:  # as ProjectCLI(run=True) does (the run folder's variable, the seed's)
                    os.environ.clear()
                    os.environ.update(environ)
                return
            ProjectCLI(args=args, package=package)
        except (ProjectError, SIGTERMException) as error:
            shared = isinstance(error, (ConfigError, TrainingInterrupted, SIGTERMException))
            if shared and getattr(rank_zero_only, "rank", 0) > 0:
                sys.exit(0)  # rank 0 reports it (see above)
            if isinstance(error, SIGTERMException):
                sys.exit(143)
            print(f"error: {error}", file=sys.stderr, flush=True)
            sys.exit(error.exit_code)
