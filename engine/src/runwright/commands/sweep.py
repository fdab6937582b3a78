"""``python -m <package> sweep``: hyperparameter search with Optuna, each trial an ordinary ``fit``
run (README, "Hyperparameter search").

The sweep's own settings (:class:`SweepOptions`) are arguments of the parser that also holds every
``fit`` option (:class:`SweepCLI`), so the sweep YAML is an ordinary ``--config`` file, which may set fit
options too. Everything else in the parsed config is a fit option of all trials: each trial is built
with ``ProjectCLI(args=[...], run=False, package=...)`` from them plus its sampled values, into the run folder
``<logs_dir>/<study>_trial<NNN>``, and trained with ``trainer.fit`` (:class:`Worker`). The study lives
in ``--storage`` (default: SQLite in ``<logs_dir>/<study>_sweep/``, where the results go), which
several workers share.

DDP trials (``--trainer.strategy=ddp``): Lightning starts the other ranks by re-running this command.
Rank 0 owns the trial and passes its fit arguments down in :data:`TRIAL_ENV`; a process started with
them runs exactly that fit (:func:`follow_trial`), never a trial of its own.
"""

from __future__ import annotations

import contextlib
import csv
import json
import logging
import os
import signal
import threading
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Literal

import optuna
import torch.distributed
from jsonargparse.typing import NonNegativeInt, PositiveFloat, PositiveInt
from lightning.pytorch.cli import LightningArgumentParser
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.exceptions import ExperimentalWarning, UpdateFinishedTrialError
from optuna.trial import TrialState
from optuna_integration import PyTorchLightningPruningCallback
from sqlalchemy import exc as sql

from ..cli import ProjectCLI
from ..errors import ConfigError, ProjectError, TrainingInterrupted
from ..runs import class_of, finish_wandb_run

#: Set by rank 0 of a DDP trial for the processes Lightning starts: the trial and its fit arguments.
TRIAL_ENV = "RUNWRIGHT_SWEEP_TRIAL"
#: Loaded after your default config files, before ``--config``: the trials' fit defaults (CSV logger, no
#: progress bar or model summary), the default sampler and pruner.
SWEEP_DEFAULTS = Path(__file__).with_name("sweep_defaults.yaml")
DISTRIBUTIONS = {"float": FloatDistribution, "int": IntDistribution, "categorical": CategoricalDistribution}
FINISHED = (TrialState.COMPLETE, TrialState.PRUNED)
#: A worker stops after this many failed trials in a row (e.g. an objective metric that is never logged).
MAX_FAILURES_IN_A_ROW = 5
#: The progress line of a trial failed by Optuna (a nan value) or from outside (heartbeat, operator).
OUTSIDE = "marked failed outside its run (a nan value, a stale heartbeat, an operator)"
TYPES = "types float, int, categorical, e.g. {type: float, low: 1.0e-4, high: 1.0e-2, log: true}"
STORAGE = 'use sqlite:///FILE.db or postgresql://USER:PASSWORD@HOST:5432/DB (pip install -e ".[postgres]")'


@dataclass
class Objective:
    """A trial's value.

    (These docstrings are the help of ``sweep --help``, hence plain text.)

    Args:
        metric: A logged metric; its value at the end of the trial counts (default:
            <checkpoint.monitor>_best, e.g. val/acc_best).
        direction: maximize or minimize it (default: from checkpoint.mode).
    """

    metric: str | None = None
    direction: Literal["maximize", "minimize"] | None = None


@dataclass
class SweepOptions:
    """The sweep's own settings; every other option is a fit option of all trials.

    Args:
        search_space: Config key (init_args may be left out) -> distribution {type: float|int|categorical,
            ...the fields of Optuna's class}, e.g. {type: float, low: 1.0e-4, high: 1.0e-2, log: true},
            {type: categorical, choices: [16, 32]}.
        objective: The logged metric whose value at a trial's end is the trial's value, and its direction.
        sampler: {class_path: NAME, init_args: {...}} of a class in optuna.samplers (or an import path).
        pruner: {class_path: NAME, init_args: {...}} of a class in optuna.pruners; null: no pruning.
        enqueue_trials: {config key: value} sets to run first (keys of search_space).
        n_trials: Finished (complete or pruned) trials the study should have.
        study_name: The study's name (default: the first --config file's name without .yaml).
        storage: Optuna storage URL (default: sqlite:///<logs_dir>/<study>_sweep/optuna.db).
        timeout: Start no trial after this many seconds.
        heartbeat_interval: Seconds between a running trial's heartbeats; a trial without one for twice
            as long (its worker was killed) is failed by the next worker, and a new trial replaces it.
    """

    search_space: dict[str, dict[str, Any]] = field(default_factory=dict)
    objective: Objective = field(default_factory=Objective)
    sampler: dict[str, Any] | None = None
    pruner: dict[str, Any] | None = None
    enqueue_trials: list[dict[str, Any]] = field(default_factory=list)
    n_trials: NonNegativeInt = 20
    study_name: str | None = None
    storage: str | None = None
    timeout: PositiveFloat | None = None
    heartbeat_interval: PositiveInt = 60


class SweepCLI(ProjectCLI):
    """Hyperparameter search with Optuna; each trial is an ordinary fit run, logged to CSV. The sweep
    YAML (configs/sweep/digits.yaml) is a --config file with the sweep's settings below; every other
    option is a fit option of all trials. Run the same command in more processes (or machines, with
    --storage postgresql://...) to share the study, again to continue it; --n_trials 0 only rewrites
    the results in <logs_dir>/<study>_sweep/."""

    def __init__(self, args: list[str], package: str) -> None:
        prog = f"python -m {package} sweep"
        usage = {"prog": prog, "usage": f"{prog} --config SWEEP_YAML [options]", "description": self.__doc__}
        super().__init__(args=args, run=False, package=package, parser_kwargs=usage)

    def default_config_files(self) -> list[Path]:
        """fit's default config files, then :data:`SWEEP_DEFAULTS`."""
        return [*super().default_config_files(), SWEEP_DEFAULTS]

    def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        """Add the sweep's settings (:class:`SweepOptions`) to fit's options."""
        super().add_arguments_to_parser(parser)
        parser.add_class_arguments(SweepOptions)

    def instantiate_classes(self) -> None:
        """Nothing to build: each trial builds its own run."""

    def after_instantiate_classes(self) -> None:
        """Nothing was built."""


# ------------------------------------------------------------------------------------- the sweep YAML


def _plain(value: Any) -> Any:
    """A categorical choice as Optuna stores it: a list or mapping becomes its JSON text, which the
    trial's ``--key=TEXT`` override reads back as the list (jsonargparse parses it as YAML)."""
    return value if value is None or isinstance(value, (bool, int, float, str)) else json.dumps(value)


def distributions(space: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The Optuna distribution of each ``search_space`` entry; raises :class:`ConfigError` naming the key
    of an unknown type or field, an empty range or choice list (Optuna's own checks)."""
    result = {}
    for key, spec in space.items():
        try:
            kwargs = {k: [_plain(c) for c in v] if k == "choices" else v for k, v in spec.items()}
            result[key] = DISTRIBUTIONS[kwargs.pop("type", None)](**kwargs)  # type: ignore[index]
        except (KeyError, TypeError, ValueError) as error:
            raise ConfigError(f"search_space[{key!r}]: {type(error).__name__}: {error}; {TYPES}") from None
    return result


def optuna_object(key: str, spec: dict[str, Any] | None, seed_offset: int = 0) -> Any:
    """The sampler or pruner (``key``) that ``spec`` names, ``{class_path: NAME, init_args: {...}}`` (a
    NAME in ``optuna.samplers``/``optuna.pruners`` or an import path; other keys are init_args too), with
    ``seed_offset`` added to its ``seed``; ``None``: no pruning. Raises :class:`ConfigError` if it fails."""
    module = optuna.samplers if key == "sampler" else optuna.pruners
    spec = dict(spec or {"class_path": "NopPruner"})
    path, init_args = str(spec.pop("class_path", None)), {**(spec.pop("init_args", None) or {}), **spec}
    try:
        if init_args.get("seed") is not None:
            init_args["seed"] += seed_offset
        return (class_of(path) if "." in path else getattr(module, path))(**init_args)
    except (ImportError, AttributeError, TypeError, ValueError) as error:
        fix = "write {class_path: NAME, init_args: {...}}, NAME from " + module.__name__
        raise ConfigError(f"{key}: {path} {init_args}: {type(error).__name__}: {error}; {fix}") from None


def override(trial: Any, key: str, full_key: str, d: Any) -> str:
    """``--full_key=VALUE`` with ``trial``'s value of ``key`` (enqueued, or sampled from the distribution
    ``d``): a string as it is (YAML, as typed on the command line: the JSON text of a list choice becomes
    the list), anything else as JSON (a YAML subset: jsonargparse reads it back exactly)."""
    if isinstance(d, CategoricalDistribution):
        value = trial.suggest_categorical(key, d.choices)
    else:
        suggest = trial.suggest_int if isinstance(d, IntDistribution) else trial.suggest_float
        value = suggest(key, d.low, d.high, step=d.step, log=d.log)
    return f"--{full_key}={value if isinstance(value, str) else json.dumps(value)}"


# ---------------------------------------------------------------------------------------------- trials


@contextlib.contextmanager
def _scope() -> Iterator[None]:
    """Lightning's info lines ("GPU available", "Seed set") off; afterwards, close what a trial leaves
    open (its W&B run, a DDP process group: the next trial starts its own) and put ``os.environ`` and
    the logging level back."""
    saved, disabled = dict(os.environ), logging.root.manager.disable
    logging.disable(logging.INFO)
    try:
        yield
    finally:
        finish_wandb_run()
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()
        os.environ.clear()
        os.environ.update(saved)
        logging.disable(disabled)


def build_trial(args: list[str], trial: Any, metric: str, package: str) -> tuple[ProjectCLI, Any]:
    """The trial's run (``fit`` options ``args``; a parse error is raised, not exited) with Optuna's
    pruning callback added after the checkpoints (a pruned epoch is still saved)."""
    cli = ProjectCLI(args=args, run=False, package=package, parser_kwargs={"exit_on_error": False})
    pruning = PyTorchLightningPruningCallback(trial, monitor=metric)
    cli.trainer.callbacks.append(pruning)  # type: ignore[attr-defined]
    return cli, pruning


def follow_trial(spec: dict[str, Any]) -> None:
    """Run rank 0's trial ``spec`` (:data:`TRIAL_ENV`) in this rank > 0 process of its DDP job: the same
    fit, with a pruning callback on the same trial (it takes part in rank 0's pruning decision). Rank 0
    records the trial; an error here is printed and the process ends normally (Lightning's launcher
    kills rank 0 when a child process exits with an error)."""
    study = optuna.load_study(study_name=spec["study"], storage=spec["storage"])
    try:
        trial = optuna.trial.Trial(study, spec["trial_id"])
        cli, _ = build_trial(spec["args"], trial, spec["metric"], spec["package"])
        cli.trainer.fit(cli.model, datamodule=cli.datamodule)
    except (Exception, KeyboardInterrupt, SystemExit) as error:
        print(f"rank {os.environ['LOCAL_RANK']}: {type(error).__name__}: {error}")


def open_storage(url: str, heartbeat_interval: int) -> Any:
    """An Optuna ``RDBStorage`` on ``url`` with heartbeats (a killed worker's trial fails after two
    intervals without one); SQLite waits up to 60 s for a lock held by another worker. ``postgresql://``
    uses ``psycopg2`` (``pip install -e ".[postgres]"``; SQLAlchemy 2.1's default would be psycopg 3).
    Raises :class:`ConfigError` for a URL that cannot be used (scheme, driver, server not reachable)."""
    url = "postgresql+psycopg2://" + url.partition("://")[2] if url.startswith("postgresql://") else url
    engine = {"connect_args": {"timeout": 60}} if url.startswith("sqlite") else {}
    # retried: tables that another worker creates at the same moment; a locked SQLite file
    retried = (sql.IntegrityError, sql.OperationalError) if engine else (sql.IntegrityError,)
    for attempt in range(5):
        try:
            return optuna.storages.RDBStorage(url, engine, heartbeat_interval=heartbeat_interval)
        except (ImportError, ValueError, sql.SQLAlchemyError) as error:
            if attempt == 4 or not isinstance(error, retried):
                raise ConfigError(f"--storage: {str(error).splitlines()[0]}; {STORAGE}") from None
            time.sleep(0.5 * (attempt + 1))
    raise AssertionError("unreachable")  # pragma: no cover


class Worker:
    """This process's part of a study: ask for a trial, run it, tell its result, until the study has
    ``n_trials`` finished (complete or pruned) trials, ``timeout`` passed, Ctrl-C, or
    :data:`MAX_FAILURES_IN_A_ROW` failed trials in a row. While the other workers' running trials would
    complete the study it waits: a killed worker's trial fails once its heartbeat is stale (Optuna's
    ``fail_stale_trials``) and a new trial takes its place. A trial failed from outside (a heartbeat
    check, an operator) stops at its next validation and counts as failed (``study.tell`` with
    ``skip_if_finished``, where ``study.optimize`` would raise).

    Bad settings raise :class:`ConfigError` here, before any trial. A ``search_space`` key is a fit
    option as ``fit --print_config`` shows it (a leaf: ``model.optimizer.class_path`` for the class),
    with or without its ``init_args`` levels.
    """

    def __init__(self, cli: SweepCLI) -> None:
        self.config = config = cli.config
        self.package = cli.package
        self.space = distributions(config.search_space)
        leaves = {key.replace(".init_args", ""): key for key, _ in config.items()}
        self.keys = {key: leaves.get(key.replace(".init_args", ""), "") for key in self.space}
        unknown = [key for key, full in self.keys.items() if not full]
        unknown += [key for params in config.enqueue_trials for key in params if key not in self.space]
        if not self.space or unknown:
            hint = f"`python -m {cli.package} fit --print_config` shows the fit options"
            raise ConfigError(f"search_space: {unknown or 'empty'}: not a fit option or not in it; {hint}")
        objective = config.objective
        self.metric = objective.metric = objective.metric or f"{config.checkpoint.monitor}_best"
        direction = objective.direction = objective.direction or f"{config.checkpoint.mode}imize"
        fit = config.clone()
        for key in [*(option.name for option in fields(SweepOptions)), "config"]:
            fit.pop(key, None)
        self.fit_args = ["--config", cli.parser.dump(fit, skip_none=False, skip_check=True)]
        first_config = Path(str(config.config[0])).stem if config.get("config") else "sweep"
        self.name, self.logs_dir = config.study_name or first_config, Path(config.logs_dir).expanduser()
        self.folder = self.logs_dir.resolve() / f"{self.name}_sweep"  # the results (and SQLite)
        sampler, pruner = optuna_object("sampler", config.sampler), optuna_object("pruner", config.pruner)
        self.folder.mkdir(parents=True, exist_ok=True)
        url = config.storage or f"sqlite:///{self.folder / 'optuna.db'}"
        self.storage = open_storage(url, config.heartbeat_interval)
        kwargs: dict[str, Any] = {"study_name": self.name, "direction": direction, "load_if_exists": True}
        self.study = optuna.create_study(storage=self.storage, sampler=sampler, pruner=pruner, **kwargs)
        if self.study.direction.name != direction.upper():
            raise ConfigError(f"study {self.name!r}: stored with another direction; use another --study_name")
        for params in config.enqueue_trials:
            self.study.enqueue_trial({k: _plain(v) for k, v in params.items()}, skip_if_exists=True)
        self.study_id = self.storage.get_study_id_from_name(self.name)
        self.failures: list[str] = []  # this worker's failed trials in a row
        self.trial: Any = None  # this worker's trial until it is told
        self.sigint = signal.getsignal(signal.SIGINT)

    def count(self, *states: TrialState) -> int:
        """How many trials of the study are in ``states``."""
        return len(self.study.get_trials(deepcopy=False, states=states))

    def run(self) -> bool:
        """Run trials (see the class); returns whether Ctrl-C stopped it (its trial is then failed)."""
        end = time.monotonic() + (self.config.timeout or float("inf"))
        try:
            while len(self.failures) < MAX_FAILURES_IN_A_ROW and time.monotonic() < end:
                optuna.storages.fail_stale_trials(self.study)
                if self.count(*FINISHED) >= self.config.n_trials:
                    break
                if self.count(*FINISHED, TrialState.RUNNING) >= self.config.n_trials:
                    time.sleep(min(5, self.config.heartbeat_interval))  # the others finish, or go stale
                else:
                    self.run_one()
        except KeyboardInterrupt:
            if self.trial is not None:
                self.study.tell(self.trial, state=TrialState.FAIL, skip_if_finished=True)
            return True
        finally:
            signal.signal(signal.SIGINT, self.sigint)  # (Lightning ignores SIGINT after a KeyboardInterrupt)
        return False

    def heartbeat(self, trial_id: int, stop: threading.Event) -> None:
        """Record the trial's heartbeat every ``heartbeat_interval`` seconds until ``stop`` is set."""
        while not stop.wait(self.config.heartbeat_interval):
            self.storage.record_heartbeat(trial_id)

    def run_one(self) -> None:
        """Ask for a trial, run it with heartbeats, tell its result, print its line, rewrite trials.csv."""
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C in ask would leave a trial that no one holds
        self.trial = trial = self.study.ask()
        signal.signal(signal.SIGINT, self.sigint)
        # Each trial is sampled with seed + its number: reproducible, and workers that share a study
        # never draw the same random startup trials.
        self.study.sampler = optuna_object("sampler", self.config.sampler, seed_offset=trial.number)
        trial.set_user_attr("run_dir", str(self.logs_dir.resolve() / f"{self.name}_trial{trial.number:03d}"))
        trial_id = self.storage.get_trial_id_from_study_id_trial_number(self.study_id, trial.number)
        stop = threading.Event()
        self.storage.record_heartbeat(trial_id)
        beat = threading.Thread(target=self.heartbeat, args=(trial_id, stop))
        beat.start()
        try:
            state, value = self.run_trial(trial, trial_id)
        finally:
            stop.set()
            beat.join()
        frozen, self.trial = self.study.tell(trial, value, state=state, skip_if_finished=True), None
        error = frozen.user_attrs.get("error", OUTSIDE)
        self.failures = [*self.failures, error] if frozen.state == TrialState.FAIL else []
        print(progress_line(self.study, frozen, self.config.n_trials, self.metric, error), flush=True)
        write_trials_csv(self.study, self.folder / "trials.csv")

    def run_trial(self, trial: Any, trial_id: int) -> tuple[TrialState, float | None]:
        """Build and fit the trial's run; returns its state and value (``KeyboardInterrupt`` on Ctrl-C)."""
        overrides = [override(trial, key, self.keys[key], d) for key, d in self.space.items()]
        args = [*self.fit_args, *overrides, f"--run_name={Path(trial.user_attrs['run_dir']).name}"]
        spec = {"storage": self.storage.url, "study": self.name, "trial_id": trial_id, "metric": self.metric}
        spec["package"] = self.package
        with _scope():
            os.environ[TRIAL_ENV] = json.dumps({**spec, "args": args})  # for the other ranks of a DDP trial
            try:
                cli, pruning = build_trial(args, trial, self.metric, self.package)
                cli.trainer.fit(cli.model, datamodule=cli.datamodule)
                pruning.check_pruned()  # a DDP trial's pruning decision (a no-op in one process)
                metrics = cli.trainer.callback_metrics
                if (value := metrics.get(self.metric)) is None:
                    raise ProjectError(f"objective.metric={self.metric!r} was not logged: {sorted(metrics)}")
                with contextlib.suppress(UpdateFinishedTrialError):  # (failed from outside meanwhile)
                    trial.set_user_attr("config", (cli.run_dir / "config.yaml").read_text())  # for best.yaml
                return TrialState.COMPLETE, float(value)
            except optuna.TrialPruned:
                return TrialState.PRUNED, None
            except (Exception, KeyboardInterrupt, SystemExit) as error:
                # SystemExit: Lightning's exit after a Ctrl-C outside the interruption callback, or SIGTERM
                interrupted = isinstance(error, (KeyboardInterrupt, SystemExit, TrainingInterrupted))
                with contextlib.suppress(UpdateFinishedTrialError):
                    message = "interrupted" if interrupted else f"{type(error).__name__}: {error}"
                    trial.set_user_attr("error", " ".join(message.split()))  # (jsonargparse's have lines)
                if interrupted:
                    raise KeyboardInterrupt from None
                return TrialState.FAIL, None


# --------------------------------------------------------------------------------------------- results


def _text(value: Any) -> str:
    """A value for a progress line (floats with 4 significant digits)."""
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def progress_line(study: Any, trial: Any, n_trials: int, metric: str, error: str) -> str:
    """One line for a finished trial: number, state, value (or error), params (by the last part of their
    key), the best so far and how many trials of the study have finished."""
    params = ", ".join(f"{key.rsplit('.', 1)[-1]}={_text(value)}" for key, value in trial.params.items())
    what = {TrialState.COMPLETE: f"{metric}={_text(trial.value)}", TrialState.FAIL: error}.get(trial.state)
    what = what or f"at epoch {trial.last_step} ({metric}={_text(trial.value)})"
    best = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)) and study.best_trial
    best_text = f"best: trial {best.number} {metric}={best.value:.4f}" if best else "best: none yet"
    state, done = trial.state.name.lower().replace("fail", "failed"), len(study.get_trials(states=FINISHED))
    return f"trial {trial.number} {state}: {what}  [{params}]  {best_text}  ({done}/{n_trials} finished)"


@contextlib.contextmanager
def _replaced(path: Path) -> Iterator[Path]:
    """A temporary file that replaces ``path`` once written (readers never see half a file)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    yield tmp
    tmp.replace(path)


def write_trials_csv(study: Any, path: Path) -> Path:
    """Write every trial of ``study`` (number, state, value, params, epochs reported, duration in seconds,
    run folder, error) to ``path``."""
    trials = study.get_trials(deepcopy=False)
    params = list(dict.fromkeys(key for trial in trials for key in trial.params))
    with _replaced(path) as tmp, tmp.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["number", "state", "value", *params, "epochs", "duration_s", "run_dir", "error"])
        for t in trials:
            row = [t.number, t.state.name, t.value, *map(t.params.get, params), len(t.intermediate_values)]
            seconds = t.duration and round(t.duration.total_seconds(), 1)
            writer.writerow([*row, seconds, t.user_attrs.get("run_dir"), t.user_attrs.get("error")])
    return path


def write_results(study: Any, folder: Path, metric: str) -> list[Path]:
    """``trials.csv``; once a trial completed, ``best.yaml`` (the best trial's ``config.yaml``: ``fit
    --config best.yaml`` re-runs it) and Optuna's matplotlib plots (optimization history, parameter
    importances, parallel coordinates; one Optuna cannot draw yet is skipped with a message)."""
    import matplotlib.pyplot as plt
    import optuna.visualization.matplotlib as vis

    plt.switch_backend("Agg")  # files only, no window
    written = [write_trials_csv(study, folder / "trials.csv")]
    if not study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
        return written
    best, written = study.best_trial, [*written, folder / "best.yaml"]
    with _replaced(folder / "best.yaml") as tmp:
        tmp.write_text(f"# Best trial {best.number}: {metric}={best.value}\n{best.user_attrs['config']}")
    for plot in (vis.plot_optimization_history, vis.plot_param_importances, vis.plot_parallel_coordinate):
        path = folder / f"{plot.__name__.removeprefix('plot_')}.png"
        try:
            plot(study).figure.savefig(path, dpi=100, bbox_inches="tight")  # type: ignore[union-attr]
            written.append(path)
        except Exception as error:  # Optuna raises several types for "not enough trials"
            print(f"skipped {path.name}: {type(error).__name__}: {error}")
    plt.close("all")
    return written


# -------------------------------------------------------------------------------------------- command


def main(args: list[str], package: str) -> None:
    """Run ``python -m <package> sweep ARGS``: create or load the study, run trials until it has
    ``--n_trials`` finished (complete or pruned) ones or ``--timeout`` passed, write the results.

    Bad input (sweep YAML, fit options, storage URL) stops before any trial with one ``error:`` line and
    exit code 2. Ctrl-C stops after the current training batch, keeps the finished trials, writes the
    results and exits with 130. In a process that Lightning started for a DDP trial's rank > 0, runs
    that rank's part of the trial (:func:`follow_trial`) instead. The process keeps its environment,
    warning filters and logging levels.
    """
    if "LOCAL_RANK" in os.environ:  # a process of a multi-process launch
        if TRIAL_ENV not in os.environ:
            raise ConfigError("sweep runs once, not on each rank (torchrun, srun): pass --trainer.devices=N")
        return follow_trial(json.loads(os.environ[TRIAL_ENV]))
    with _scope(), warnings.catch_warnings():
        warnings.simplefilter("ignore", ExperimentalWarning)  # heartbeats, fail_stale_trials, constant_liar
        warnings.filterwarnings("ignore", module="optuna")  # ask with heartbeats, plots of few trials
        worker = Worker(SweepCLI(args[1:], package))
        print(f"Study {worker.name!r}: {worker.count(*FINISHED)} finished trial(s); see {worker.folder}")
        interrupted = worker.run()
        written = write_results(worker.study, worker.folder, worker.metric)
    done = worker.count(*FINISHED)
    print(f"{done} finished trial(s) in study {worker.name!r}; results:\n  " + "\n  ".join(map(str, written)))
    if len(worker.failures) >= MAX_FAILURES_IN_A_ROW:
        raise ProjectError(f"{MAX_FAILURES_IN_A_ROW} trials in a row failed, the last: {worker.failures[-1]}")
    if interrupted:
        raise TrainingInterrupted(f"sweep interrupted by Ctrl-C; {done} finished trial(s) kept; re-run it")
    if folder_best := next((path for path in written if path.name == "best.yaml"), None):
        best = worker.study.best_trial
        print(f"Best: trial {best.number} {worker.metric}={best.value:.4f} ({best.user_attrs['run_dir']})")
        print(f"Re-run it: python -m {package} fit --config {folder_best}")
