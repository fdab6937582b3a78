"""``python -m <package> {fit,validate,test,predict}`` (a ``LightningCLI``) and :data:`EXTRA_COMMANDS`:
defaults from YAML (the engine's, then the package's), then ``--config`` files, then dotted overrides;
each run in its own folder; with ``--ckpt_path`` the model, data and engine settings of the checkpoint's
run come right after the defaults, so whatever the user gives wins."""

from __future__ import annotations

import argparse
import importlib
import inspect
import os
import sys
from pathlib import Path
from typing import Any, TypeVar

import lightning
import torch
import yaml
from jsonargparse import Namespace
from lightning.fabric.plugins import TorchCheckpointIO
from lightning.pytorch import Callback, LightningModule, Trainer
from lightning.pytorch.callbacks import ModelSummary
from lightning.pytorch.cli import ArgsType, LightningArgumentParser, LightningCLI
from lightning.pytorch.utilities import rank_zero_only, rank_zero_warn
from lightning.pytorch.utilities.exceptions import MisconfigurationException, SIGTERMException

from . import checks, private, runs, slurm
from .callbacks import (
    AverageFromTrainedWeights,
    CompileModel,
    CSVPredictionWriter,
    DistributedEvaluation,
    HealthCheck,
    Interruption,
    MemoryMonitor,
    TrainingMonitor,
    console_callbacks,
)
from .checkpointing import (
    AtomicCheckpointIO,
    BestCheckpoint,
    EarlyStoppingMonitorCheck,
    LastCheckpoint,
    load_checkpoint,
    load_matching_weights,
)
from .console import quiet_console
from .errors import ConfigError, FileSystemError, ProjectError, TrainingInterrupted, file_system_error
from .failures import build_problem, one_line
from .parser import ConfigBeforeSubcommand, ConfigFile, Parser, closest, did_you_mean
from .project import DISTRIBUTION, config_files, missing_modules
from .provenance import Provenance
from .resume import ExactResume

CLI = TypeVar("CLI", bound="ProjectCLI")
#: LightningCLI's subcommands and the Trainer method arguments each takes from the parsed config.
ALL_SUBCOMMANDS = LightningCLI.subcommands()
#: The Trainer-method arguments that LightningCLI's subcommands add and a run's ``config.yaml`` holds
#: (``ckpt_path``, ``weights_only``, ``verbose``, ``return_predictions``), with their type hints. Every
#: parser takes them all, so any config the engine wrote is a ``--config`` of any command; a command
#: ignores those its method does not take (``lr_find`` given a test run's ``ckpt_path``).
COMMAND_KEYS = {
    name: parameter.annotation
    for subcommand, skip in ALL_SUBCOMMANDS.items()
    for name, parameter in inspect.signature(getattr(Trainer, subcommand)).parameters.items()
    if name not in skip and name != "self"
}


class ProjectCLI(LightningCLI):
    """LightningCLI for the user's ``package``: its config files, run folders, checkpoint aliases, the
    engine's callbacks (always present, each a config group: ``--checkpoint.*``, ``--last_checkpoint.*``,
    ``--memory.*``, ``--exact_resume.*``, ``--training_monitor.*``, ``--health.*``, ``--interruption.*``,
    ``--compile.*``; a ``trainer.callbacks`` list is added to them) and the data links
    (:func:`~runwright.runs.linked_arguments`).

    ``run=False`` builds the run without a subcommand (sweeps, tuners): use it as a context manager
    around your own ``cli.trainer.fit(...)``. Bad input raises a :class:`~runwright.errors.ConfigError`
    (exit code 2 from :func:`main`) and leaves no new run folder behind.
    """

    #: Run folder suffix when there is no subcommand (``run=False``, e.g. the tuning commands); ``None``:
    #: no run folder and no logger (a finished run rebuilt, :func:`~runwright.commands.rebuild.rebuilt`).
    run_label: str | None = "run"
    #: Whether this CLI without a subcommand rebuilds the run of ``--ckpt_path`` (which a tuner or a sweep,
    #: given a config that names one, ignores).
    rebuilds = False
    #: This run's folder (set when the classes are built).
    run_dir: Path
    #: Whether this command created the logs folder (removed again with a discarded new run).
    _new_logs_dir = False
    #: The run folder's lock, held during a fit (:func:`~runwright.runs.lock_run`).
    _lock: int | None = None
    #: The entries of the run folder when the command took it (chosen, and locked for a fit).
    _entries: set[Path]

    def __init__(self, args: ArgsType = None, run: bool = True, *, package: str, **kwargs: Any) -> None:
        self.package = package
        argv = sys.argv[1:] if args is None else args
        first = argv[0] if isinstance(argv, list) and argv else None
        self.running = first if run and first in ALL_SUBCOMMANDS else None  # only its parser is built
        prog = f"python -m {package}"
        usage = f"{prog} " + ("{" + ",".join(ALL_SUBCOMMANDS) + "} " if run else "") + "[options]"
        files: dict[str, Any] = {"default_config_files": [str(path) for path in self.default_config_files()]}
        if run:  # (each subcommand's parser reads them)
            files = {name: {**files, "usage": f"{prog} {name} [options]"} for name in self.subcommands()}
        # allow_abbrev: --trainer.max_epoch=2 (a typo) must fail, not set max_epochs
        common = {"prog": prog, "epilog": EPILOG, "allow_abbrev": False, "usage": usage}
        kwargs["parser_kwargs"] = {**common, **files, **(kwargs.get("parser_kwargs") or {})}
        kwargs = {"model_class": LightningModule, "datamodule_class": None, "parser_class": Parser, **kwargs}
        kwargs.setdefault("save_config_callback", runs.SaveConfig)  # (data optional: no datamodule_class)
        kwargs.update(subclass_mode_model=True, subclass_mode_data=True, auto_configure_optimizers=False)
        self.parsers: list[LightningArgumentParser] = []
        self.checkpoint: dict[str, Any] | None = None
        self.init_checkpoint: dict[str, Any] | None = None  # fit --init_from: weights only
        self.continued = False
        self.runs_subcommand = run
        self._environ = dict(os.environ)
        try:
            super().__init__(args=args, run=run, **kwargs)
        except BaseException as error:
            self._end(error, building=True)
            raise
        if run:
            self._end()

    def subcommands(self) -> dict[str, set[str]]:  # type: ignore[override]
        """LightningCLI's subcommands (a ``staticmethod`` there), only the one being run when the command
        line names one: building a subcommand's parser costs about 0.3 s of CPU."""
        return {self.running: ALL_SUBCOMMANDS[self.running]} if self.running else ALL_SUBCOMMANDS

    def default_config_files(self) -> list[Path]:
        """The config files loaded before any ``--config`` (:func:`~runwright.project.config_files`)."""
        return config_files(self.package)

    def __deepcopy__(self, memo: dict[int, Any]) -> ProjectCLI:
        """The CLI itself, never a copy: the optimizer and scheduler callables LightningCLI gives a model
        refer to it, so a deep copy of the model (Lightning's ``WeightAveraging`` makes one) would copy
        the trainer and the data with it, and fail under DDP (``cannot pickle '_thread.lock'``)."""
        return self

    def __enter__(self: CLI) -> CLI:
        """``with ProjectCLI(args, run=False, package=...) as cli: cli.trainer.fit(...)``."""
        return self

    def __exit__(self, kind: object, error: BaseException | None, traceback: object) -> None:
        """See :meth:`_end` (an error in the block is not one of building the run)."""
        self._end(error)

    def _end(self, error: BaseException | None = None, building: bool = False) -> None:
        """End the command: release the run folder's lock, put the environment variables that seeding and
        the run folder set back, close an open W&B run and DDP's process group; raise ``error``'s
        one-line :class:`~runwright.errors.ProjectError` (:func:`~runwright.failures.one_line`), if any.
        After bad input (exit code 2), a fault of the file system, an interruption, or, while
        ``building`` the run, an error without a one-line form (a traceback), this command's new run
        folder without a checkpoint is discarded (:func:`~runwright.runs.discard_new_run`); after bad input
        that let a continued run train no step, what the command added to the run's folder (its records)."""
        problem = None
        if isinstance(error, Exception):
            compiling = hasattr(self, "config") and bool(self._config().get("compile.enabled"))
            problem = one_line(error, compiling, getattr(self, "run_dir", None))
            if problem is None:
                discard = building and not isinstance(error, OSError)
            else:
                discard = problem.exit_code == 2 or isinstance(problem, FileSystemError | TrainingInterrupted)
            if discard and hasattr(self, "run_dir") and not self.continued:
                runs.discard_new_run(self.run_dir, self._new_logs_dir)
            elif problem is not None and problem.exit_code == 2 and hasattr(self, "_entries"):
                start = int((self.checkpoint or {}).get("global_step", 0))
                if getattr(getattr(self, "trainer", None), "global_step", start) == start:
                    runs.discard_added(self.run_dir, self._entries)
        if self._lock is not None:
            runs.unlock_run(self._lock)
            self._lock = None
        os.environ.clear()
        os.environ.update(self._environ)
        runs.finish_wandb_run(getattr(getattr(self, "trainer", None), "is_global_zero", True))
        # Lightning closes only NCCL's group (at exit); a gloo group left to the interpreter's exit aborted
        # the process ("terminate called without an active exception", exit -6) in 8 of 40 2-process
        # runs of a plain torch script on a loaded 2-core machine, 0 of 40 when closed first
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()
        if problem is not None and problem is not error:
            raise problem from error

    def init_parser(self, **kwargs: Any) -> LightningArgumentParser:
        """LightningCLI's parser with the engine's ``--config`` (:class:`ConfigFile`)."""
        kwargs.setdefault("dump_header", [f"lightning.pytorch=={lightning.__version__}"])
        parser = self.parser_class(**kwargs)
        main_parser = self.runs_subcommand and not hasattr(self, "parser")  # (built first)
        action = ConfigBeforeSubcommand if main_parser else ConfigFile
        parser.add_argument(
            "-c", "--config", action=action, help="Path to a configuration file in yaml format."
        )
        return parser

    def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        """Add the run-folder arguments, ``--init_from``, the :data:`COMMAND_KEYS` this parser's
        subcommand does not take (hidden) and the engine's callbacks."""
        self.parsers.append(parser)
        subcommand = list(self.subcommands())[len(self.parsers) - 1] if self.runs_subcommand else None
        own = inspect.signature(getattr(Trainer, subcommand)).parameters if subcommand else {}
        for name, hint in COMMAND_KEYS.items():
            if name not in own:
                parser.add_argument(f"--{name}", type=hint, default=None, help=argparse.SUPPRESS)
        runs.add_run_folder_arguments(parser)
        parser.add_argument(
            "--init_from",
            type=str | None,
            default=None,
            help="fit only: start a new run from the weights of a checkpoint (a file, or best/last of the "
            "newest run), with a fresh optimizer, schedule and epoch count; tensors whose name or shape "
            "differ (a new head) keep their initial values and are named.",
        )
        for group, callback in GROUPS.items():
            parser.add_lightning_class_args(callback, group)

    def _config(self, config: Namespace | None = None) -> Namespace:
        """The parsed (or, given, the instantiated) config of the subcommand being run."""
        config = self.config if config is None else config
        subcommand = self.config.get("subcommand")
        return config[subcommand] if subcommand else config

    def parse_arguments(self, parser: LightningArgumentParser, args: ArgsType) -> None:
        """Parse the config. With ``--ckpt_path`` (a file, or ``best``/``last``), read the checkpoint once
        (honouring ``--weights_only``) and parse again with its run (model, data and engine settings,
        :func:`~runwright.runs.saved_run`) as the first ``--config`` (after the default config files, before
        everything given). Resolve ``--init_from`` to a file."""
        for subparser in self.parsers:  # jsonargparse names it "<main usage> [options] fit"; errors show it
            if " [options] " in subparser.prog:
                subparser.prog = f"python -m {self.package} {subparser.prog.rsplit(' ', 1)[-1]}"
        super().parse_arguments(parser, args)
        config = self._config()
        try:
            if self.running == "fit" and config.get("ckpt_path") is None:  # a requeued SLURM job goes on
                config.ckpt_path = slurm.job_checkpoint(config.logs_dir, config.run_name)
            if (self.running or self.rebuilds) and config.get("ckpt_path") is not None:
                path = runs.resolve_checkpoint(config.ckpt_path, config.logs_dir)
                self.checkpoint = load_checkpoint(path, weights_only=config.get("weights_only"))
                rank_zero_only(print)(f"--ckpt_path: {path}")
                groups = tuple(g for g in GROUPS if g != "compile")  # (compile: each command's own choice)
                saved = runs.saved_run(self.checkpoint, runs.run_dir_of(path), groups)
                if saved:
                    argv = list(sys.argv[1:] if args is None else args)
                    at = 1 if self.running else 0  # after the subcommand
                    given = f"# the run of {path}\n{yaml.safe_dump(saved)}"
                    super().parse_arguments(parser, [*argv[:at], "--config", given, *argv[at:]])
                self._config().ckpt_path = str(path)
            config = self._config()
            fitting = self.running == "fit" or not (self.running or self.rebuilds)  # (init_from: a fit's key)
            if config.get("init_from") is not None and fitting:
                path = runs.resolve_checkpoint(config.init_from, config.logs_dir, "--init_from").resolve()
                self.init_checkpoint = load_checkpoint(path, weights_only=config.get("weights_only"))
                config.init_from = str(path)  # config.yaml names the weights the run started from
        except ProjectError as error:
            (private.subcommand_parser(self) or parser).error(str(error))
        if config.get("verbose") is True:  # one line of results (after_test), not a table
            config.verbose = False

    def _parse_ckpt_path(self) -> None:
        """Nothing: :meth:`parse_arguments` read the checkpoint and put its run in the config."""

    def instantiate_classes(self) -> None:
        """Choose the run folder, build the model, the data and the trainer with the loggers, checkpoints
        and ``default_root_dir`` pointed at it (in a copy of the config: ``config.yaml`` names no run
        folder), then check the run (:func:`~runwright.checks.check_run`; a continued run's loggers:
        :func:`~runwright.checks.check_logger`) and load the ``--init_from`` weights that fit. A class that
        rejects its arguments or whose package is missing stops with a ``ConfigError`` naming the cause, as
        does ``--init_from`` with a ``--ckpt_path`` (that a tuner has not set aside)."""
        config = self._config()
        if self.init_checkpoint is not None and config.get("ckpt_path") is not None:
            raise ConfigError(
                "--init_from and --ckpt_path: pass one. --ckpt_path resumes a run (optimizer, schedule, "
                "epoch); --init_from starts a new run from its weights only"
            )
        run_config = self.config.clone()
        run = self._config(run_config)
        if self.run_label is None:  # a finished run rebuilt (commands.rebuild): no folder, no logger
            run.trainer.logger = False
        else:
            self._new_logs_dir = not Path(config.logs_dir).expanduser().exists()  # (removed with a bad run)
            self.run_dir, self.continued = runs.choose_run_dir(config, self.subcommand or self.run_label)
            self._lock = runs.lock_run(self.run_dir) if self.subcommand == "fit" else None
            self._entries = set(self.run_dir.iterdir())  # (after the lock: another fit's are its own)
            run.trainer.default_root_dir = str(self.run_dir)
            wandb_id = runs.wandb_id_of(self.run_dir) if self.continued else None
            run.trainer.logger = runs.run_logger_config(config.trainer.logger, self.run_dir, wandb_id)
            for callback in (run.checkpoint, run.last_checkpoint):
                callback.dirpath = callback.dirpath or str(self.run_dir / "checkpoints")
        parser = private.subcommand_parser(self) or self.parser
        links = runs.linked_arguments(runs.class_of(run.model.class_path)) if run.get("data") else {}
        for target, source in links.items():
            first = (lambda dims: int(dims[0])) if source.endswith("[0]") else None
            parser.link_arguments(
                f"data.{source.removesuffix('[0]')}", f"model.init_args.{target}", first, "instantiate"
            )
        self.defaults = parser.get_defaults(skip_validation=True)  # (the values no config or option gave)
        try:
            self.config_init = self.parser.instantiate(run_config)
            init = self._config(self.config_init)
            self.datamodule, self.model = init.get("data"), init.get("model")
            clip = "trainer.gradient_clip_val"  # (manual optimization clips itself: none by default)
            if not self.model.automatic_optimization and init.get(clip) == self.defaults.get(clip):
                init.trainer.gradient_clip_val = None
            self.trainer = self.instantiate_trainer()
        except (ValueError, TypeError, ImportError, MisconfigurationException) as error:
            if isinstance(error, ProjectError):
                raise
            raise build_problem(error, run.trainer.logger) from error
        fitting = self.subcommand == "fit"
        checks.check_run(
            config, self.defaults, self.model, self.datamodule, self.trainer, self.checkpoint, fitting
        )
        if self.init_checkpoint is not None:
            rank_zero_only(print)(
                load_matching_weights(self.model, self.init_checkpoint, config.init_from), flush=True
            )
        if self.continued:
            checks.check_logger(self.run_dir, config)

    def instantiate_trainer(self, **kwargs: Any) -> Trainer:
        """The trainer with the progress display, the provenance record, DDP-exact evaluation, the
        predictions writer (``predict``) and atomic checkpoint writes."""
        trainer_config = dict(self._config(self.config_init).get("trainer") or {})
        callbacks = trainer_config.get("callbacks") or []
        callbacks = callbacks if isinstance(callbacks, list) else [callbacks]
        shown = console_callbacks(trainer_config, callbacks)
        if any(isinstance(callback, ModelSummary) for callback in shown):
            kwargs["enable_model_summary"] = False  # one is there: Lightning would say it skips its own
        sharding = trainer_config.get("use_distributed_sampler") is not False  # (else the user's loaders)
        extra = [Provenance(self.package), *([DistributedEvaluation()] if sharding else [])]
        if self.subcommand == "predict":
            extra.append(CSVPredictionWriter())
        kwargs.setdefault(
            "callbacks", [AverageFromTrainedWeights(), EarlyStoppingMonitorCheck(), *shown, *extra]
        )
        for name in sorted(name for name in os.environ if name.startswith("PL_TRAINER_")):
            option = f"--trainer.{name.removeprefix('PL_TRAINER_').lower()}"
            message = f"{name} is not read here (the CLI sets every Trainer argument): use {option}=..."
            rank_zero_warn(message, stacklevel=6)  # (LightningCLI's: shown as one line)
        trainer = super().instantiate_trainer(**kwargs)
        trainer.callbacks = [c for c in trainer.callbacks if not idle(c, trainer)]  # type: ignore[attr-defined]
        self.metrics_csv = runs.metrics_csv(trainer, Path(trainer.default_root_dir))
        slurm.stop_on_usr1()
        if type(trainer.strategy.checkpoint_io) is TorchCheckpointIO:
            fitting = self.subcommand in (None, "fit")
            trainer.strategy.checkpoint_io = AtomicCheckpointIO(callback_states=fitting)
        return trainer

    def after_instantiate_classes(self) -> None:
        """Keep the rows a continued run logged up to its checkpoint in its ``metrics.csv``; say so when
        ``validate``, ``test`` or ``predict`` is given no checkpoint (the model as built is evaluated)."""
        if self.subcommand in ("validate", "test", "predict") and self.checkpoint is None:
            rank_zero_only(print)(
                f"No --ckpt_path: {self.subcommand} takes the model as built (its initial weights, or what "
                "its __init__ loads); --ckpt_path best, last or a file takes a trained run's weights."
            )
        if self.continued and self.metrics_csv is not None:
            runs.keep_metrics_csv(
                self.metrics_csv, int(self.checkpoint["global_step"]) if self.checkpoint else 0
            )

    def after_validate(self) -> None:
        """Print the results in one line, 4 decimals (a metric of 1.0000001 reads 1.0000)."""
        metrics = sorted((k, float(v)) for k, v in self.trainer.callback_metrics.items() if v.numel() == 1)
        if self.trainer.is_global_zero and metrics and not self._config().get("verbose"):
            print(f"{self.subcommand}: " + "  ".join(f"{key}={value:.4f}" for key, value in metrics))

    after_test = after_validate

    def after_fit(self) -> None:
        """Say where the run folder and its best checkpoint are, and when the fit trained no step (a
        checkpoint already at ``max_steps`` or ``max_epochs``, ``max_epochs=0``, no training batch)."""
        trainer, run_dir = self.trainer, self.run_dir
        if not trainer.is_global_zero:
            return
        if trainer.global_step == (int(self.checkpoint["global_step"]) if self.checkpoint else 0):
            steps, epochs = trainer.max_steps, -1 if trainer.max_epochs is None else trainer.max_epochs
            reached = [f"--trainer.max_steps={steps}"] if 0 <= steps <= trainer.global_step else []
            reached += [f"--trainer.max_epochs={epochs}"] if 0 <= epochs <= trainer.current_epoch else []
            rest = "had no training batch (see --trainer.limit_train_batches and the training data)."
            if reached:
                rest = f"already reached {reached[0]}; give a larger value to train on."
            at = f"current_epoch={trainer.current_epoch}, global_step={trainer.global_step}"
            print(f"Nothing trained: {'the checkpoint' if self.checkpoint else 'the run'} ({at}) {rest}")
        print(f"Run folder: {run_dir}")
        slurm.mark_finished(run_dir, trainer)
        best = next((cb for cb in trainer.callbacks if isinstance(cb, BestCheckpoint)), None)  # type: ignore[attr-defined]
        # (a run branched from a checkpoint that trained nothing has only the old run's best)
        if (
            best
            and best.best_model_path
            and run_dir.resolve() in Path(best.best_model_path).resolve().parents
        ):
            score = "no --checkpoint.monitor: the latest epoch's"
            if best.monitor is not None and best.best_model_score is not None:
                score = f"{best.monitor}={float(best.best_model_score):.4f}"
            print(f"Best checkpoint ({score}): {best.best_model_path}")


def idle(callback: Callback, trainer: Trainer) -> bool:
    """Whether an engine callback would do nothing in ``trainer``'s run, which then goes without it: one
    switched off (``enabled=False``; a health check with every check disabled), or the DDP evaluation in
    one process."""
    if isinstance(callback, DistributedEvaluation):
        return trainer.world_size < 2
    if isinstance(callback, HealthCheck):
        return not callback.active
    switchable = (CompileModel, MemoryMonitor, TrainingMonitor, Interruption)
    return isinstance(callback, switchable) and not callback.enabled


#: The engine's callbacks, each a config group of its own.
GROUPS = {
    "checkpoint": BestCheckpoint,
    "last_checkpoint": LastCheckpoint,
    "memory": MemoryMonitor,
    "exact_resume": ExactResume,
    "training_monitor": TrainingMonitor,
    "health": HealthCheck,
    "interruption": Interruption,
    "compile": CompileModel,
}


#: Commands that are not Trainer methods: name -> (its module under ``runwright.commands``, with a
#: ``main(args, package)``; one-line help; the engine's extra it needs or ``None``).
EXTRA_COMMANDS: dict[str, tuple[str, str, str | None]] = {
    "export": ("export", "write the model as ONNX/TorchScript/torch.export, check it", None),
    "report": ("report", "PNG plots (curves, LR, memory, confusion matrix) of a run", "plots"),
    "lr_find": ("tune", "LR range test: suggested LR, loss-vs-LR plot, a config", "plots"),
    "scale_batch_size": ("tune", "largest batch size that fits, and a config to use", None),
    "sweep": ("sweep", "hyperparameter search (Optuna), each trial a fit run", "sweep"),
    "submit": ("submit", "run a command as a SLURM job (--dry_run: print its script)", None),
}

EPILOG = "More commands (each has --help): " + "; ".join(f"{k}: {v[1]}" for k, v in EXTRA_COMMANDS.items())


def check_extra(command: str) -> None:
    """Raise a :class:`~runwright.errors.ConfigError` naming the engine's extra that ``command`` (one of
    :data:`EXTRA_COMMANDS`) needs and its ``pip install``, when a package of it is not installed."""
    extra = EXTRA_COMMANDS.get(command, ("", "", None))[2]
    if extra and (missing := missing_modules(extra)):
        raise ConfigError(
            f"{command} needs the engine's {extra!r} extra ({', '.join(missing)} not installed): "
            f"pip install '{DISTRIBUTION}[{extra}]'"
        )


def main(args: ArgsType = None, *, package: str | None) -> None:
    """Run the CLI of ``package`` (the user's package: ``python -m <package>``) on ``args`` (default:
    ``sys.argv[1:]``).

    The :data:`EXTRA_COMMANDS` run from their own modules (one whose extra is not installed stops with
    one line naming it); everything else is a LightningCLI subcommand (a first argument that names no
    command is one line with the closest command). A ``ProjectError`` (bad input,
    a bad checkpoint, a failed health check, an
    interruption, a file or folder that cannot be written: :func:`~runwright.errors.file_system_error`)
    is one ``error:`` line, no traceback, and the process exits with its code (2 for bad input, 130
    after SIGINT, 1 otherwise; 143 after SIGTERM). Under DDP a stop that every process makes
    alike (a ``ConfigError``, an interruption) is reported by rank 0 alone; the other processes exit
    with 0, so that Lightning's launcher, which kills rank 0 when another process fails, lets it report.
    """
    if not package:
        raise TypeError("main(package=...) needs the user's package name: main(package=__package__)")
    argv = sys.argv[1:] if args is None else args
    with quiet_console():
        try:
            words = [str(arg) for arg in argv] if isinstance(argv, list) else []  # (a dict: ProjectCLI's)
            command = words[0] if words else "-"
            commands = [*ALL_SUBCOMMANDS, *EXTRA_COMMANDS]
            if not command.startswith("-") and command not in commands:
                close = did_you_mean(closest(command, commands))
                raise ConfigError(f"no command `{command}`{close} (the commands: {', '.join(commands)})")
            if command in EXTRA_COMMANDS:
                check_extra(command)
                importlib.import_module(f"runwright.commands.{EXTRA_COMMANDS[command][0]}").main(
                    words, package
                )
                return
            ProjectCLI(args=args, package=package)
        except (ProjectError, SIGTERMException, OSError) as error:
            # (a DataError is a ProjectError first; another OSError, e.g. export's or report's files)
            problem = (
                error if isinstance(error, (ProjectError, SIGTERMException)) else file_system_error(error)
            )
            if problem is None:
                raise
            shared = isinstance(problem, (ConfigError, TrainingInterrupted, SIGTERMException))
            if shared and getattr(rank_zero_only, "rank", 0) > 0:
                sys.exit(0)  # rank 0 reports it (see above)
            if isinstance(problem, SIGTERMException):
                sys.exit(143)
            print(f"error: {problem}", file=sys.stderr, flush=True)
            sys.exit(problem.exit_code)
