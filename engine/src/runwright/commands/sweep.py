"""``python -m <package> sweep``: an Optuna study whose trials are ordinary ``fit`` runs (the engine's
README, "Hyperparameter search"). The sweep's settings (:class:`SweepOptions`) are options of the parser
that holds every ``fit`` option, so the sweep YAML is a ``--config`` file; every other option is a fit
option of all trials. Rank 0 of a DDP trial hands it to the ranks Lightning starts in :data:`TRIAL_ENV`."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import time
import warnings
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Literal

import optuna
import torch.distributed
from jsonargparse import ArgumentParser, Namespace
from jsonargparse.typing import NonNegativeInt, PositiveFloat, PositiveInt
from lightning.pytorch.cli import LightningArgumentParser
from lightning.pytorch.utilities.exceptions import SIGTERMException
from optuna.distributions import CategoricalDistribution, IntDistribution, json_to_distribution
from optuna.trial import FrozenTrial, TrialState
from optuna_integration import PyTorchLightningPruningCallback
from sqlalchemy import exc as sql

from .. import private, slurm
from ..checkpointing import BestCheckpoint, validates
from ..cli import ProjectCLI
from ..errors import ConfigError, ProjectError, TrainingInterrupted, first_line
from ..runs import class_of, write_atomically

#: Set by rank 0 of a DDP trial for the processes Lightning starts: the trial and its fit arguments (JSON).
TRIAL_ENV = "RUNWRIGHT_SWEEP_TRIAL"
FINISHED = (TrialState.COMPLETE, TrialState.PRUNED)
#: The system attribute of a trial stopped by a preemption: its ``last.ckpt``, where its retry goes on.
RESUME_FROM = "resume_from"
#: A worker stops after this many failed trials in a row (e.g. an objective metric that is never logged).
MAX_FAILURES = 5


@dataclass
class Objective:
    """A trial's value.

    Args:
        metric: A metric the model logs; its value at the end of the trial counts, and trials are pruned
            on it (default: the best checkpoint's score, best/<checkpoint.monitor>, pruned on
            checkpoint.monitor).
        direction: maximize or minimize it (default: from checkpoint.mode).
    """

    metric: str | None = None
    direction: Literal["maximize", "minimize"] | None = None


@dataclass
class SweepOptions:
    """The sweep's own settings; every other option is a fit option of all trials.

    Args:
        search_space: Config key (init_args may be left out) -> Optuna distribution as Optuna writes it,
            {name: FloatDistribution, attributes: {low: 1.0e-4, high: 1.0e-2, log: true}}, IntDistribution
            {low, high, step}, CategoricalDistribution {choices: [16, 32]}.
        objective: The logged metric whose value at a trial's end is the trial's value, and its direction.
        sampler: An Optuna sampler, {class_path: TPESampler, init_args: {seed: 0}}.
        pruner: An Optuna pruner, {class_path: MedianPruner}; null: no pruning.
        enqueue_trials: {config key: value} sets to run first (keys of search_space).
        n_trials: Finished (complete or pruned) trials the study should have.
        study_name: The study's name (default: the first --config file's name without .yaml).
        storage: Optuna storage: a URL (sqlite:///FILE.db, postgresql://...) or journal:FILE, Optuna's
            journal file, safe on a shared (network) file system (default: the file optuna.db, in a SLURM
            job and with submit optuna.journal, in <logs_dir>/<study>_sweep).
        timeout: Start no trial after this many seconds.
        heartbeat_interval: Seconds between a running trial's heartbeats; a trial without one for twice
            as long (its worker was killed) is failed by the next worker, and retried.
        workers: Worker processes on this machine, each with its own GPUs (CUDA_VISIBLE_DEVICES: the
            visible GPUs shared out evenly); with submit: SLURM array tasks, one worker each.
    """

    search_space: dict[str, dict[str, Any]] = field(default_factory=dict)
    objective: Objective = field(default_factory=Objective)
    sampler: optuna.samplers.BaseSampler | None = None
    pruner: optuna.pruners.BasePruner | None = None
    enqueue_trials: list[dict[str, Any]] = field(default_factory=list)
    n_trials: NonNegativeInt = 20
    study_name: str | None = None
    storage: str | None = None
    timeout: PositiveFloat | None = None
    heartbeat_interval: PositiveInt = 60
    workers: PositiveInt = 1


def build(option: str, spec: Namespace | None, base: type, seed_offset: int = 0) -> Any:
    """The sampler or pruner (a ``base``) that the parsed ``spec`` of ``option`` names (``class_path``,
    ``init_args``; a class in them is built too, and short names work at every level), its ``seed`` (if
    set) plus ``seed_offset``; ``None`` for ``None``.

    Raises:
        ConfigError: the class rejects its arguments (``ThresholdPruner`` without a bound).
    """
    if spec is None:
        return None
    spec = spec.clone()
    if spec.get("init_args.seed") is not None:
        spec.init_args.seed += seed_offset
    parser = ArgumentParser(exit_on_error=False)
    parser.add_argument(f"--{option}", type=base)
    try:
        return parser.instantiate_classes(parser.parse_object({option: spec.as_dict()}))[option]
    except Exception as error:
        cause = error.__cause__ or error
        raise ConfigError(
            f"{option}: {spec.class_path.rpartition('.')[2]} rejects its init_args: "
            f"{type(cause).__name__}: {first_line(cause)}"
        ) from None


def fit_trial(args: list[str], trial: optuna.Trial, metric: str, package: str) -> tuple[ProjectCLI, Any]:
    """Build the run of the ``fit`` options ``args`` (a parse error is raised, not exited) with Optuna's
    pruning callback after the checkpoints (a pruned epoch is still saved) and fit it (from its
    ``--ckpt_path``, if any, in its own run folder). Afterwards, even
    after a failed start, ``os.environ`` is as before (``ProjectCLI``'s) and no W&B run or DDP process
    group is left open (the next trial starts its own)."""
    try:
        with ProjectCLI(args=args, run=False, package=package, parser_kwargs={"exit_on_error": False}) as cli:
            pruning = PyTorchLightningPruningCallback(trial, monitor=metric)
            cli.trainer.callbacks.append(pruning)  # type: ignore[attr-defined]
            cli.trainer.fit(cli.model, datamodule=cli.datamodule, ckpt_path=cli.config.get("ckpt_path"))
    finally:
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()
    return cli, pruning


#: Why a study shared by a cluster's workers is never kept in SQLite.
NO_SQLITE = (
    "SQLite is not safe on a shared (network) file system such as a cluster's, where its file locks can "
    "fail and lose or corrupt the study; use journal:FILE (Optuna's journal file, the default there) or "
    "postgresql://USER:PASSWORD@HOST:5432/DB"
)


#: Optuna's callback that puts a failed trial back in the queue (a copy with its parameters), and the
#: ``RDBStorage`` argument that takes it (Optuna >= 4.9 names both anew).
RETRY, RETRY_ARGUMENT = (
    (optuna.storages.RetryHeartbeatStaleTrialCallback, "heartbeat_stale_trial_callback")
    if hasattr(optuna.storages, "RetryHeartbeatStaleTrialCallback")
    else (optuna.storages.RetryFailedTrialCallback, "failed_trial_callback")
)


def open_storage(url: str, heartbeat_interval: int) -> optuna.storages.BaseStorage:
    """An Optuna storage on ``url`` with heartbeats, a trial failed for a stale one retried: an
    ``RDBStorage``, where SQLite waits up to 60 s for another worker's lock, or for ``journal:FILE`` a
    ``JournalStorage`` on that file (:func:`runwright.private.journal_storage`). Raises
    :class:`ConfigError` for a URL that cannot be used."""
    if url.startswith("journal:"):
        path = Path(url.removeprefix("journal:")).expanduser()
        if not path.parent.is_dir():
            raise ConfigError(
                f"--storage={url}: no folder {path.parent}; use journal:FILE in an existing folder"
            )
        return private.journal_storage(str(path), heartbeat_interval, RETRY())
    if url.startswith("postgresql://"):  # (SQLAlchemy's default driver for it is psycopg 3)
        url = "postgresql+psycopg2://" + url.removeprefix("postgresql://")
    engine = {"connect_args": {"timeout": 60}} if url.startswith("sqlite") else {}
    retry: dict[str, Any] = {RETRY_ARGUMENT: RETRY()}
    for attempt in range(1, 6):  # (another worker may be creating the tables at the same moment)
        try:
            return optuna.storages.RDBStorage(url, engine, heartbeat_interval=heartbeat_interval, **retry)
        except (ImportError, ValueError, sql.SQLAlchemyError) as error:
            if attempt == 5 or not isinstance(error, (sql.IntegrityError, sql.OperationalError)):
                hint = "sqlite:///FILE.db or postgresql://USER:PASSWORD@HOST:5432/DB (runwright[postgres])"
                raise ConfigError(f"--storage: {first_line(error)}; use {hint}") from None
            time.sleep(0.5 * attempt)
    raise AssertionError("unreachable")


class SweepCLI(ProjectCLI):
    """Hyperparameter search with Optuna; each trial is an ordinary fit run, logged to CSV. The sweep
    YAML (configs/sweep/*.yaml) is a --config file with the sweep's settings below; every other
    option is a fit option of all trials. Run the same command in more processes (or machines, with
    --storage postgresql://...) to share the study, again to continue it; --n_trials 0 only rewrites
    the results in <logs_dir>/<study>_sweep/."""

    def __init__(self, args: list[str], package: str, create: bool = True) -> None:
        """Parse ``args`` and create or load the study (:meth:`instantiate_classes`); without ``create``
        only check the settings and find the sweep's folder and storage (``submit --dry_run``)."""
        self.create = create
        prog = f"python -m {package} sweep"
        usage = {"prog": prog, "usage": f"{prog} --config SWEEP_YAML [options]", "description": self.__doc__}
        super().__init__(args=args, run=False, package=package, parser_kwargs=usage)

    def default_config_files(self) -> list[Path]:
        """fit's default config files, then ``sweep_defaults.yaml`` (the trials' logger, the sampler...)."""
        return [*super().default_config_files(), Path(__file__).with_name("sweep_defaults.yaml")]

    def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        """Add the sweep's settings (:class:`SweepOptions`) to fit's options."""
        super().add_arguments_to_parser(parser)
        parser.add_class_arguments(SweepOptions, instantiate=False)

    def instantiate_classes(self) -> None:
        """Check the settings (a bad one raises :class:`ConfigError`, before any trial; a ``search_space``
        key is a fit option as ``fit --print_config`` shows it, with or without its ``init_args``
        levels) and create or load the study; each trial builds its own run."""
        config, space = self.config, self.config.search_space
        options = {key.replace(".init_args", ""): key for key, _ in config.items()}
        unknown = [key for key in space if key.replace(".init_args", "") not in options]
        unknown += [key for params in config.enqueue_trials for key in params if key not in space]
        if not space or unknown:
            raise ConfigError(
                f"search_space: {unknown or 'empty'}: not a fit option or not in it (fit --print_config)"
            )
        self.space: dict[str, tuple[str, Any]] = {}  # key -> (fit option, distribution)
        for key, spec in space.items():
            try:
                distribution = json_to_distribution(json.dumps(spec))
            except (KeyError, TypeError, ValueError) as error:
                raise ConfigError(f"search_space[{key!r}]: {type(error).__name__}: {error}") from None
            self.space[key] = options[key.replace(".init_args", "")], distribution
        model = class_of(config.model.class_path)
        data = config.get("data") and class_of(config.data.class_path)
        if config.objective.metric is None and config.checkpoint.monitor is None:
            raise ConfigError(
                "objective.metric: none given, and --checkpoint.monitor=null gives the trials no best score; "
                "set checkpoint.monitor (and checkpoint.mode) or objective.metric (and objective.direction)"
            )
        if config.objective.metric is None and not validates(model, data, config.trainer.limit_val_batches):
            raise ConfigError(
                f"objective.metric: none given, and {model.__name__} has no validation loop, so the trials "
                "have no best checkpoint score; set objective.metric to a value it logs in training_step "
                "(and objective.direction)"
            )
        self.monitor = config.objective.metric or config.checkpoint.monitor  # what trials are pruned on
        self.metric = config.objective.metric or f"{BestCheckpoint.PREFIX}{config.checkpoint.monitor}"
        direction: Any = config.objective.direction or f"{config.checkpoint.mode}imize"
        fit = config.clone()
        for key in ["config", *(option.name for option in fields(SweepOptions))]:
            fit.pop(key, None)
        self.fit_args = ["--config", self.parser.dump(fit, skip_none=False, skip_validation=True)]
        self.name = config.study_name or Path(str((config.config or ["sweep"])[0])).stem
        sampler = build("sampler", config.sampler, optuna.samplers.BaseSampler)
        pruner = build("pruner", config.pruner, optuna.pruners.BasePruner) or optuna.pruners.NopPruner()
        self.folder = Path(config.logs_dir).expanduser().resolve() / f"{self.name}_sweep"  # results, SQLite
        cluster = slurm.job() is not None or not self.create  # (a cluster's shared file system)
        default = "journal:{}/optuna.journal" if cluster else "sqlite:///{}/optuna.db"
        self.storage_url = config.storage or default.format(self.folder)
        if self.storage_url.startswith("sqlite") and cluster:  # (before its folder exists)
            raise ConfigError(f"--storage={self.storage_url}: {NO_SQLITE}")
        check_devices(config.trainer.get("devices"), config.trainer.get("accelerator"))
        if not self.create:
            return
        self.folder.mkdir(parents=True, exist_ok=True)
        self.storage = open_storage(self.storage_url, config.heartbeat_interval)
        self.study = optuna.create_study(
            storage=self.storage, sampler=sampler, pruner=pruner, study_name=self.name,
            direction=direction, load_if_exists=True,
        )  # fmt: skip
        if self.study.direction.name != direction.upper():
            raise ConfigError(f"study {self.name!r}: stored with another direction; use another --study_name")
        for params in config.enqueue_trials:
            self.study.enqueue_trial(params, skip_if_exists=True)
        self.study_id = self.storage.get_study_id_from_name(self.name)
        self.failures: list[str] = []  # this worker's failed trials in a row
        self.number = -1  # this worker's latest trial
        self.preempted = False  # its latest trial stopped by SIGTERM (or SIGUSR1 in a SLURM job)

    def after_instantiate_classes(self) -> None:
        """Nothing was built."""

    def count(self, *states: TrialState) -> int:
        """How many trials of the study are in ``states``."""
        return len(self.study.get_trials(deepcopy=False, states=states))

    def run(self) -> bool:
        """Run trials, one at a time, until the study has ``--n_trials`` finished (complete or pruned) ones,
        ``--timeout`` passed, Ctrl-C, or :data:`MAX_FAILURES` failed trials in a row; while the finished
        and the running trials make ``--n_trials``, wait for the others' trials to finish or go stale. A
        trial failed from outside while it runs counts as failed. Returns whether Ctrl-C stopped it (its
        trial is then failed)."""
        end, n = time.monotonic() + (self.config.timeout or float("inf")), self.config.n_trials
        try:
            while self.count(*FINISHED) < n and len(self.failures) < MAX_FAILURES and time.monotonic() < end:
                if self.count(*FINISHED, TrialState.RUNNING) >= n:  # the others' running trials may make it
                    time.sleep(1)
                    optuna.storages.fail_stale_trials(self.study)
                    continue
                try:
                    self.study.optimize(self.objective, n_trials=1, catch=(Exception,))
                except ValueError:  # Optuna cannot tell a trial that was failed from outside while it ran
                    if self.study.trials[self.number].state != TrialState.FAIL:
                        raise
                self.told(self.study.trials[self.number])
        except KeyboardInterrupt:
            if self.preempted and self.number >= 0:  # give the trial back, to go on from its last.ckpt
                trial = self.study.trials[self.number]
                if trial.state == TrialState.FAIL:
                    RETRY()(self.study, trial)
            return True
        return False

    def resume_args(self, trial_id: int) -> list[str]:
        """For the retry of a trial that a preemption stopped (SIGTERM: it saved ``last.ckpt`` and was given
        back), ``--ckpt_path`` of that checkpoint, so that it goes on from there in its own run folder; else
        nothing (a killed worker's trial starts again)."""
        trial = self.storage.get_trial(trial_id)
        if (last := trial.system_attrs.get(RESUME_FROM)) and Path(last).is_file():
            retried = trial.system_attrs.get("retry_history", ["?"])[-1]
            print(f"trial {trial.number} retries trial {retried} from {last}", flush=True)
            return [f"--ckpt_path={last}"]
        return []

    def objective(self, trial: optuna.Trial) -> float:
        """Build and fit the trial's run; its value (a pruned trial raises ``TrialPruned``)."""
        self.number = trial.number
        if self.config.sampler:  # seed + the trial's number: reproducible, and workers draw different trials
            self.study.sampler = build(
                "sampler", self.config.sampler, optuna.samplers.BaseSampler, trial.number
            )
        run_name = f"{self.name}_trial{trial.number:03d}"
        trial.set_user_attr("run_dir", str(self.folder.parent / run_name))
        overrides = [override(trial, key, *spec) for key, spec in self.space.items()]
        trial_id = self.storage.get_trial_id_from_study_id_trial_number(self.study_id, trial.number)
        args = [*self.fit_args, *overrides, *self.resume_args(trial_id), f"--run_name={run_name}"]
        os.environ[TRIAL_ENV] = json.dumps([self.storage_url, self.name, trial_id, self.monitor, args])
        try:
            cli, pruning = fit_trial(args, trial, self.monitor, self.package)
            pruning.check_pruned()  # a DDP trial's pruning decision (a no-op in one process)
            if metric := self.config.objective.metric:  # its value at the end, else the best checkpoint's
                value = cli.trainer.callback_metrics.get(metric)
            else:
                best = next(c for c in cli.trainer.checkpoint_callbacks if isinstance(c, BestCheckpoint))
                value = best.best_model_score
            if value is None:
                logged = sorted(cli.trainer.callback_metrics)
                raise ProjectError(f"objective.metric={self.monitor!r} was not logged: {logged}")
            trial.set_user_attr("config", (cli.run_dir / "config.yaml").read_text())  # for best.yaml
            return float(value)
        except optuna.TrialPruned:
            raise
        except (Exception, KeyboardInterrupt, SystemExit) as error:
            # SystemExit: Lightning's exit after a Ctrl-C outside the interruption callback, or SIGTERM
            interrupted = isinstance(error, (KeyboardInterrupt, SystemExit, TrainingInterrupted))
            self.preempted = isinstance(error, SIGTERMException)
            message = "interrupted" if interrupted else " ".join(f"{type(error).__name__}: {error}".split())
            with contextlib.suppress(Exception):  # (failed from outside meanwhile: it cannot be set)
                trial.set_user_attr("error", message)
                last = Path(trial.user_attrs["run_dir"]) / "checkpoints" / "last.ckpt"
                if self.preempted and last.is_file():  # its retry (a copy) goes on from here
                    self.storage.set_trial_system_attr(trial_id, RESUME_FROM, str(last))
            if interrupted:
                raise KeyboardInterrupt from None
            raise

    def told(self, trial: FrozenTrial) -> None:
        """After each trial: count the failures in a row, print the trial's line, rewrite ``trials.csv``."""
        error = trial.user_attrs.get("error", "marked failed outside its run (stale heartbeat, operator)")
        self.failures = [*self.failures, error] if trial.state == TrialState.FAIL else []
        params = ", ".join(f"{key.rsplit('.', 1)[-1]}={_text(value)}" for key, value in trial.params.items())
        value = f"{self.metric}={_text(trial.value)}"
        state = trial.state.name.lower().replace("fail", "failed")
        what = {"complete": value, "failed": error}.get(state, f"at epoch {trial.last_step} ({value})")
        best = self.study.best_trial if self.count(TrialState.COMPLETE) else None
        best_text = f"trial {best.number} {self.metric}={best.value:.4f}" if best else "none yet"
        done = f"{self.count(*FINISHED)}/{self.config.n_trials} finished"
        print(f"trial {trial.number} {state}: {what}  [{params}]  best: {best_text}  ({done})")
        self.write_results(plots=False)

    def write_results(self, plots: bool = True) -> list[Path]:
        """Rewrite ``trials.csv`` whole (Optuna's ``trials_dataframe``: number, state, value, duration,
        ``params_*``, ``user_attrs_run_dir`` and ``_error``); with ``plots``, once a trial completed, also
        ``best.yaml`` (the best trial's ``config.yaml``: ``fit --config best.yaml`` re-runs it) and
        Optuna's matplotlib plots (one Optuna cannot draw yet is skipped with a message)."""
        import matplotlib.pyplot as plt
        import optuna.visualization.matplotlib as vis

        from .report import save_png

        written = [self.folder / "trials.csv"]
        trials = self.study.trials_dataframe(("number", "state", "value", "duration", "params", "user_attrs"))
        trials = trials.drop(columns=["user_attrs_config"], errors="ignore")
        write_atomically(written[0], lambda path: trials.to_csv(path, index=False))
        if not plots or not self.count(TrialState.COMPLETE):
            return written
        best, best_yaml = self.study.best_trial, self.folder / "best.yaml"
        write_atomically(
            best_yaml, f"# trial {best.number} {self.metric}={best.value}\n{best.user_attrs['config']}"
        )
        print(f"Best: trial {best.number}; re-run it: python -m {self.package} fit --config {best_yaml}")
        written.append(best_yaml)
        plt.switch_backend("Agg")  # files only, no window
        for plot in (vis.plot_optimization_history, vis.plot_param_importances, vis.plot_parallel_coordinate):
            path = self.folder / f"{plot.__name__.removeprefix('plot_')}.png"
            try:
                written.append(save_png(plot(self.study).figure, path, dpi=100, bbox_inches="tight"))
            except OSError:  # the folder cannot be written: cli.main names it
                raise
            except Exception as error:  # Optuna raises several types for "not enough trials"
                print(f"skipped {path.name}: {type(error).__name__}: {error}")
        plt.close("all")
        return written


def _text(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def override(trial: optuna.Trial, key: str, option: str, d: Any) -> str:
    """``--option=VALUE`` with ``trial``'s value of ``key`` (enqueued, or sampled from ``d``): a string as
    it is (YAML, as typed on the command line), anything else as JSON (which jsonargparse reads back)."""
    if isinstance(d, CategoricalDistribution):
        value = trial.suggest_categorical(key, d.choices)
    else:
        suggest = trial.suggest_int if isinstance(d, IntDistribution) else trial.suggest_float
        value = suggest(key, d.low, d.high, step=d.step, log=d.log)
    return f"--{option}={value if isinstance(value, str) else json.dumps(value)}"


def main(args: list[str], package: str) -> None:
    """Run ``python -m <package> sweep ARGS``: create or load the study, run trials until it has
    ``--n_trials`` finished ones or ``--timeout`` passed, write the results. Bad input stops before any
    trial with one ``error:`` line and exit code 2; Ctrl-C stops after the current training batch, keeps
    the finished trials, writes the results and exits with 130. In a process that Lightning started for
    a DDP trial's rank > 0, runs that rank's part of the trial (rank 0 records it; an error is printed
    and the process ends normally, as Lightning's launcher kills rank 0 when another process fails)."""
    if "LOCAL_RANK" in os.environ:  # a process of a multi-process launch
        if TRIAL_ENV not in os.environ:
            raise ConfigError("sweep runs once, not on each rank (torchrun, srun): pass --trainer.devices=N")
        storage, name, trial_id, metric, fit_args = json.loads(os.environ[TRIAL_ENV])
        try:
            storage = open_storage(storage, SweepOptions.heartbeat_interval)  # (its driver, its timeout)
            trial = optuna.trial.Trial(optuna.load_study(study_name=name, storage=storage), trial_id)
            fit_trial(fit_args, trial, metric, package)
        except (Exception, KeyboardInterrupt, SystemExit) as error:
            print(f"rank {os.environ['LOCAL_RANK']}: {type(error).__name__}: {error}")
        return
    warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)  # heartbeats, fail_stale_trials
    warnings.filterwarnings("ignore", module="optuna")  # its plots of few trials, a retried trial
    optuna.logging.set_verbosity(optuna.logging.ERROR)  # (a failed trial's traceback: its line says it)
    with SweepCLI(args[1:], package) as sweep:  # (os.environ as before afterwards: the trials' variable)
        workers = sweep.config.workers
        interrupted = run_workers(args[1:], workers, package) if workers > 1 else sweep.run()
        written = "\n  ".join(map(str, sweep.write_results()))
        done = sweep.count(*FINISHED)
        print(f"{done} finished trial(s) in study {sweep.name!r}; results:\n  {written}")
        if len(sweep.failures) >= MAX_FAILURES:
            raise ProjectError(f"{MAX_FAILURES} trials in a row failed, the last: {sweep.failures[-1]}")
        if interrupted:
            by = "SIGTERM (its trial given back to the study)" if sweep.preempted else "Ctrl-C"
            raise TrainingInterrupted(f"sweep interrupted by {by}; {done} finished trial(s) kept; re-run it")


def worker_devices(workers: int) -> list[str | None]:
    """The ``CUDA_VISIBLE_DEVICES`` of each of ``workers`` workers on this machine: the visible GPUs
    (``CUDA_VISIBLE_DEVICES``, else all) shared out evenly, in order (a remainder left unused); ``None``
    for each when there is no GPU.

    Raises:
        ConfigError: fewer GPUs than workers.
    """
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", ",".join(map(str, range(torch.cuda.device_count()))))
    ids = [device.strip() for device in visible.split(",") if device.strip()]
    if not ids:
        return [None] * workers
    if len(ids) < workers:
        raise ConfigError(
            f"--workers={workers}: this machine has {len(ids)} GPU(s) ({','.join(ids)}), and each worker "
            f"needs one of its own; use --workers={len(ids)} or fewer"
        )
    per = len(ids) // workers
    return [",".join(ids[index * per : (index + 1) * per]) for index in range(workers)]


def check_devices(devices: Any, accelerator: Any) -> None:
    """Stop before any trial when a trial's ``--trainer.devices`` asks more GPUs than this worker sees.

    Raises:
        ConfigError: naming both numbers and the worker's ``CUDA_VISIBLE_DEVICES``.
    """
    count = torch.cuda.device_count()
    if not count or str(accelerator) not in ("auto", "gpu", "cuda", "None"):
        return
    wanted = len(devices) if isinstance(devices, list) else int(str(devices)) if str(devices).isdigit() else 0
    if wanted > count:
        visible = os.environ.get("CUDA_VISIBLE_DEVICES", "all")
        raise ConfigError(
            f"--trainer.devices={devices}: a trial asks for {wanted} GPUs, but this worker has {count} "
            f"(CUDA_VISIBLE_DEVICES={visible}); ask for at most {count}, or run fewer --workers"
        )


def run_workers(args: list[str], workers: int, package: str) -> bool:
    """Run ``sweep ARGS`` in ``workers`` processes of this machine sharing the study, each with its own
    GPUs (:func:`worker_devices`), and wait for them; returns whether Ctrl-C stopped them (it reaches
    every worker: each stops its trial, as one worker does).

    Raises:
        ProjectError: a worker failed (its exit code; its own lines say why).
    """
    command = [sys.executable, "-m", package, "sweep", *args, "--workers=1"]
    processes = [
        subprocess.Popen(command, env={**os.environ, **({"CUDA_VISIBLE_DEVICES": gpus} if gpus else {})})
        for gpus in worker_devices(workers)
    ]
    try:
        codes = [process.wait() for process in processes]
    except KeyboardInterrupt:
        codes = [process.wait() for process in processes]
        return True
    if failed := [(index, code) for index, code in enumerate(codes) if code not in (0, 130, 143)]:
        raise ProjectError(
            f"sweep worker {failed[0][0]} exited with {failed[0][1]} (its lines above say why)"
        )
    return any(code in (130, 143) for code in codes)


def submit_sweep(command: list[str], options: Namespace, package: str) -> None:
    """``submit sweep ...``: the sweep's workers (``--workers N``) as a SLURM job array, N tasks of one
    process each, sharing one study on a storage that is safe on the cluster's shared file system:
    ``journal:<logs_dir>/<study>_sweep/optuna.journal`` unless ``--storage`` names one (SQLite is
    refused: :data:`NO_SQLITE`). The study is created before the job is submitted (a bad setting stops
    here); the script and the workers' output go into the sweep's folder. ``--dry_run``: print the
    script, create nothing.

    Raises:
        ConfigError: a bad setting, SQLite, a job of more than one process per worker, or SLURM refused it.
    """
    from .submit import batch_script, submit

    resources = options.slurm
    if resources.nodes > 1 or (resources.tasks_per_node or 1) > 1:
        raise ConfigError(
            "submit sweep: each worker is one process on one node (an array task); give the trials their "
            "GPUs with --slurm.gpus_per_node, and more workers with --workers N"
        )
    resources.tasks_per_node = 1
    args = command[1:]
    warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)  # (the retry callback)
    with SweepCLI(args, package, create=False) as check:  # the settings, the study's folder and storage
        pass
    worker = ["sweep", *args, f"--storage={check.storage_url}", "--workers=1"]
    script = batch_script(resources, package, worker, f"{check.folder}/slurm-%A_%a.out", check.config.workers)
    if options.dry_run:
        print(script, end="")
        return
    new = not check.folder.exists()
    try:
        with SweepCLI([*args, f"--storage={check.storage_url}"], package):  # the study, before any worker
            submit(script, str(check.folder), owned=False)
    except BaseException:
        if new:
            shutil.rmtree(check.folder, ignore_errors=True)
        raise
