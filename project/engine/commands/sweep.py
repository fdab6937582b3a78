"""``python -m project sweep``: hyperparameter search with Optuna, each trial an ordinary
``fit`` run (README, "Hyperparameter search").

The sweep YAML is the ``--config`` file with a ``search_space`` (config key -> Optuna distribution);
it also names the ``objective``, ``sampler``, ``pruner`` and ``enqueue_trials``. Every other argument
is a ``fit`` option for all trials. Each trial runs ``fit`` in this process into the run folder
``<logs_dir>/<study>_trial<NNN>``. The study lives in ``--storage`` (default: SQLite in
``<logs_dir>/<study>_sweep/``, where the results go), which several worker processes share.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import json
import logging
import os
import signal
import socket
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from jsonargparse import Namespace

from ..cli import ProjectCLI
from ..errors import ConfigError, ProjectError, TrainingInterrupted

#: The package whose command this is (``project``; a generated repo's own name).
PACKAGE = __package__.split(".")[0]

PROG = f"python -m {PACKAGE} sweep"
SWEEP_KEYS = ("search_space", "objective", "sampler", "pruner", "enqueue_trials")
DISTRIBUTIONS = {
    "float": "FloatDistribution",
    "int": "IntDistribution",
    "categorical": "CategoricalDistribution",
}
#: Optuna's samplers (TPE: Bergstra et al. 2011) and pruners (Hyperband: Li et al. 2018) by their YAML name.
SAMPLERS = {"tpe": "TPESampler", "random": "RandomSampler"}
PRUNERS = {"median": "MedianPruner", "hyperband": "HyperbandPruner", "none": "NopPruner"}
#: Fit options every trial starts from (the command line and --config files can override them): the
#: CSV logger (metrics.csv only; the default offline W&B logger costs seconds per trial), and no
#: progress bar or model summary (several workers share one terminal; one progress line per trial).
TRIAL_DEFAULTS = (
    "--trainer.logger=lightning.pytorch.loggers.CSVLogger",
    "--trainer.enable_progress_bar=false",
    "--trainer.enable_model_summary=false",
)
#: This process, as recorded in each of its trials (``worker`` user attribute).
WORKER = f"{socket.gethostname()}:{os.getpid()}"
#: A worker stops after this many failed trials in a row (e.g. an objective metric that is never logged).
MAX_FAILURES_IN_A_ROW = 5


@dataclass
class SweepSpec:
    """A checked sweep YAML: ``search_space`` (config key as written -> Optuna distribution), the
    objective ``metric`` and ``direction``, the ``sampler`` and ``pruner`` sections (``{name, **kwargs}``)
    and the parameter sets to enqueue."""

    path: Path
    search_space: dict[str, Any]
    metric: str
    direction: str
    sampler: dict[str, Any]
    pruner: dict[str, Any]
    enqueue_trials: list[dict[str, Any]]


def _plain(value: Any) -> Any:
    """A categorical choice as Optuna stores it: a list or mapping becomes its JSON text, which the
    trial's ``--key=TEXT`` override reads back (jsonargparse parses it as YAML)."""
    return value if value is None or isinstance(value, (bool, int, float, str)) else json.dumps(value)


def _distribution(key: str, spec: Any, where: str) -> Any:
    """One ``search_space`` entry (``{type: float|int|categorical, **kwargs of Optuna's class}``) as an
    Optuna distribution; raises :class:`ConfigError` naming ``key``."""
    import optuna.distributions

    name = f"{where}: search_space[{key!r}]"
    kind = spec.get("type") if isinstance(spec, dict) else None
    if kind not in DISTRIBUTIONS:
        raise ConfigError(
            f"{name} needs a type float, int or categorical, e.g. "
            "{type: float, low: 1.0e-4, high: 1.0e-2, log: true}; got " + repr(spec)
        )
    kwargs = {k: v for k, v in spec.items() if k != "type"}
    if isinstance(kwargs.get("choices"), list):
        kwargs["choices"] = [_plain(choice) for choice in kwargs["choices"]]
    try:  # Optuna checks the fields, the range (low <= high) and the choices (non-empty)
        return getattr(optuna.distributions, DISTRIBUTIONS[kind])(**kwargs)
    except (TypeError, ValueError) as error:
        raise ConfigError(f"{name}: {error}") from None


def _optuna_object(spec: SweepSpec, section: str, **overrides: Any) -> Any:
    """The sampler or pruner of ``spec`` (``section``), its constructor kwargs updated by ``overrides``;
    raises :class:`ConfigError` for a section that is not a mapping, an unknown name or a bad argument."""
    import optuna

    if not isinstance(getattr(spec, section), dict):
        raise ConfigError(f"{spec.path}: {section} must be a mapping such as " + "{name: ...}")
    kwargs = {**getattr(spec, section), **overrides}
    name = kwargs.pop("name", "tpe" if section == "sampler" else "median")
    classes, module = (SAMPLERS, optuna.samplers) if section == "sampler" else (PRUNERS, optuna.pruners)
    if name not in classes:
        raise ConfigError(f"{spec.path}: {section}.name={name!r} is unknown; choose one of {sorted(classes)}")
    try:
        return getattr(module, classes[name])(**kwargs)
    except (TypeError, ValueError) as error:
        raise ConfigError(f"{spec.path}: {section} {name}: {error}") from None


def make_sampler(spec: SweepSpec, seed_offset: int = 0) -> Any:
    """The sampler of ``spec``, its ``seed`` (if any) plus ``seed_offset``."""
    seed = spec.sampler.get("seed")
    return _optuna_object(spec, "sampler", **({} if seed is None else {"seed": int(seed) + seed_offset}))


def load_sweep_spec(path: str | Path, raw: Any = None) -> SweepSpec:
    """Read and check a sweep YAML (``raw``: its already loaded content).

    Raises:
        ConfigError: an unknown top-level key, distribution type or field, an empty range or choice
            list, an unknown sampler or pruner (or a bad argument of one), a bad objective, or an
            enqueued key outside the space; the message names the key.
    """
    raw = yaml.safe_load(Path(path).read_text()) if raw is None else raw
    unknown = set(raw) - set(SWEEP_KEYS) if isinstance(raw, dict) else set()
    if unknown:
        raise ConfigError(f"{path}: unknown key(s) {sorted(unknown)}; a sweep config has {list(SWEEP_KEYS)}")
    if not isinstance(raw, dict) or not isinstance(raw.get("search_space"), dict) or not raw["search_space"]:
        raise ConfigError(
            f"{path}: a sweep config is a mapping whose search_space maps config keys to distributions"
        )
    space = {str(key): _distribution(str(key), spec, str(path)) for key, spec in raw["search_space"].items()}
    objective = raw.get("objective") or {}
    if (
        not isinstance(objective, dict)
        or set(objective) - {"metric", "direction"}
        or objective.get("direction", "maximize") not in ("maximize", "minimize")
    ):
        raise ConfigError(
            f"{path}: objective must be "
            + "{metric: NAME, direction: maximize|minimize}"
            + f", not {objective}"
        )
    enqueue = raw.get("enqueue_trials") or []
    if not isinstance(enqueue, list) or not all(isinstance(item, dict) for item in enqueue):
        raise ConfigError(f"{path}: enqueue_trials must be a list of " + "{config key: value} mappings")
    for index, params in enumerate(enqueue):
        if set(params) - set(space):
            raise ConfigError(
                f"{path}: enqueue_trials[{index}]: {sorted(set(params) - set(space))} not in search_space"
            )
    spec = SweepSpec(
        Path(path),
        space,
        str(objective.get("metric", "val/acc_best")),
        str(objective.get("direction", "maximize")),
        raw.get("sampler") or {},
        raw.get("pruner") or {},
        [{str(k): _plain(v) for k, v in params.items()} for params in enqueue],
    )
    _optuna_object(spec, "sampler"), _optuna_object(spec, "pruner")  # bad names or arguments stop here
    return spec


# ---------------------------------------------------------------------------------------- fit options


class _Parsed(Exception):
    """Raised by :class:`_ParseOnlyCLI` once the config is parsed; carries the CLI."""


class _ParseOnlyCLI(ProjectCLI):
    """``ProjectCLI`` that parses fit options (no subcommand) and stops before building anything."""

    def before_instantiate_classes(self) -> None:
        """Stop here: no run folder, no model."""
        raise _Parsed(self)


def parse_fit_options(fit_args: Sequence[str]) -> tuple[Namespace, Any]:
    """Parse ``fit`` options as ``fit`` would; returns the resolved config and the parser.

    A bad option exits with code 2 and jsonargparse's ``error:`` line, as ``fit`` does.
    """
    try:
        _ParseOnlyCLI(args=list(fit_args), run=False, parser_kwargs={"prog": PROG})
    except _Parsed as parsed:
        cli: ProjectCLI = parsed.args[0]
        return cli.config, cli.parser
    raise AssertionError("unreachable: _ParseOnlyCLI always raises _Parsed")  # pragma: no cover


def resolve_key(config: Namespace, key: str) -> str | None:
    """The full dotted key of ``key`` in ``config`` (``init_args`` levels filled in), or ``None``.

    ``model.optimizer.lr`` -> ``model.init_args.optimizer.init_args.lr``; ``data.batch_size`` ->
    ``data.init_args.batch_size``.
    """
    node: Any = config
    path: list[str] = []
    for part in key.split("."):
        children = vars(node) if isinstance(node, Namespace) else {}
        init_args = children.get("init_args")
        if part in children:
            path.append(part)
            node = children[part]
        elif isinstance(init_args, Namespace) and part in vars(init_args):
            path += ["init_args", part]
            node = vars(init_args)[part]
        else:
            return None
    return ".".join(path)


def override(key: str, value: Any) -> str:
    """``--key=value``: a string as it is (YAML, as typed on the command line: the JSON text of a list
    choice becomes the list), anything else as JSON (a YAML subset: jsonargparse reads it back exactly)."""
    return f"--{key}={value if isinstance(value, str) else json.dumps(value)}"


# ------------------------------------------------------------------------------------------- trials


class _TrialCLI(ProjectCLI):
    """``ProjectCLI`` for one trial: ``fit`` plus the pruning callback."""

    @staticmethod
    def subcommands() -> dict[str, set[str]]:
        """Only ``fit``: the parsers of the other subcommands would cost seconds per trial."""
        return {"fit": ProjectCLI.subcommands()["fit"]}

    def __init__(self, args: list[str], callbacks: list[Any]) -> None:
        self._trial_callbacks = callbacks
        super().__init__(args=args)

    def init_parser(self, **kwargs: Any) -> Any:
        """A parser that raises ``argparse.ArgumentError`` (the trial's error) instead of exiting."""
        return super().init_parser(**kwargs, exit_on_error=False)

    def after_instantiate_classes(self) -> None:
        """Append the trial's callbacks (after ``ModelCheckpoint``: a pruned epoch is still saved)."""
        super().after_instantiate_classes()
        self.trainer.callbacks.extend(self._trial_callbacks)  # type: ignore[attr-defined]


class TrialFailed(Exception):
    """A trial failed (its error is in the trial's ``error`` user attribute); the sweep goes on."""


class Objective:
    """Optuna objective: one ``fit`` run per trial (``fit_args`` plus the sampled values, into the run
    folder ``<logs_dir>/<study>_trial<NNN>``); returns the objective metric at its end.

    Raises ``optuna.TrialPruned``, ``KeyboardInterrupt`` (Ctrl-C: stop the sweep) or
    :class:`TrialFailed` (recorded as failed with its ``error``; the sweep goes on).
    """

    def __init__(
        self, spec: SweepSpec, fit_args: list[str], keys: dict[str, str], logs_dir: str, study_name: str
    ) -> None:
        self.spec, self.fit_args, self.keys = spec, fit_args, keys
        self.logs_dir, self.study_name = logs_dir, study_name
        self.interrupted = False  # set by the SIGINT handler
        self._reseeded = False

    def __call__(self, trial: Any) -> float:
        import optuna
        from optuna.distributions import CategoricalDistribution, IntDistribution
        from optuna_integration import PyTorchLightningPruningCallback

        trial.set_user_attr("worker", WORKER)
        if not self._reseeded:
            # Workers that share a study must not draw the same random startup trials: seed this
            # process's sampler with seed + its first trial number (unique, given out by the storage).
            # A single worker on a new study starts at trial 0, so its seed is the configured one.
            self._reseeded = True
            trial.study.sampler = make_sampler(self.spec, seed_offset=trial.number)
        overrides = []
        for key, d in self.spec.search_space.items():
            if isinstance(d, CategoricalDistribution):
                value = trial.suggest_categorical(key, d.choices)
            elif isinstance(d, IntDistribution):
                value = trial.suggest_int(key, d.low, d.high, step=d.step, log=d.log)
            else:
                value = trial.suggest_float(key, d.low, d.high, step=d.step, log=d.log)
            overrides.append(override(self.keys[key], value))
        run_name = f"{self.study_name}_trial{trial.number:03d}"
        trial.set_user_attr("run_dir", str(Path(self.logs_dir, run_name).expanduser().resolve()))
        trial.set_user_attr("fit_args", [*self.fit_args, *overrides])
        args = ["fit", *TRIAL_DEFAULTS, *self.fit_args, *overrides]
        args += [f"--logs_dir={self.logs_dir}", f"--run_name={run_name}"]
        pruning = PyTorchLightningPruningCallback(trial, monitor=self.spec.metric)
        try:
            cli = _TrialCLI(args, callbacks=[pruning])
            pruning.check_pruned()  # DDP trials: the decision of rank 0 (a no-op in one process)
        except optuna.TrialPruned:
            raise
        except (KeyboardInterrupt, SystemExit, Exception) as error:
            # SystemExit: Lightning's exit(1) after a Ctrl-C outside our interruption callback
            if self.interrupted or isinstance(error, (KeyboardInterrupt, TrainingInterrupted)):
                trial.set_user_attr("error", "interrupted (Ctrl-C)")
                raise KeyboardInterrupt from None
            message = str(error) if isinstance(error, ProjectError) else f"{type(error).__name__}: {error}"
            if isinstance(error, SystemExit):
                message = f"fit exited with code {error.code}"
            elif isinstance(error, argparse.ArgumentError):  # a sampled value the parser rejects
                message = "invalid fit option: " + " ".join(str(error).split())
            trial.set_user_attr("error", message)
            raise TrialFailed(message) from None
        value = cli.trainer.callback_metrics.get(self.spec.metric)
        if value is None:
            message = f"objective.metric={self.spec.metric!r} was not logged by the run; logged: "
            trial.set_user_attr("error", message + str(sorted(cli.trainer.callback_metrics)))
            raise TrialFailed(trial.user_attrs["error"])
        return float(value)


# ------------------------------------------------------------------------------------------ storage


def _safe_url(url: str) -> str:
    """``url`` with its password hidden."""
    from sqlalchemy.engine import make_url

    with contextlib.suppress(Exception):
        return str(make_url(url).render_as_string(hide_password=True))
    return url.split("@")[-1]


def open_storage(url: str) -> Any:
    """An Optuna ``RDBStorage`` on ``url``, with heartbeats so that trials of a killed worker are marked
    failed (after 2 minutes) and replaced by a new trial; SQLite waits up to 60 s for a lock held by
    another worker. A plain ``postgresql://`` uses ``psycopg2`` where it is installed (SQLAlchemy
    2.1's default driver for it is psycopg 3).

    Raises:
        ConfigError: the URL cannot be used (bad scheme, missing driver, server not reachable).
    """
    import importlib.util

    import optuna
    import sqlalchemy.exc

    if url.startswith(("postgresql://", "postgres://")) and importlib.util.find_spec("psycopg2"):
        url = "postgresql+psycopg2://" + url.partition("://")[2]
    sqlite = url.startswith("sqlite")
    for attempt in range(5):  # two workers creating the same new database can race on its tables
        try:
            return optuna.storages.RDBStorage(
                url,
                engine_kwargs={"connect_args": {"timeout": 60}} if sqlite else {},
                heartbeat_interval=60,
                grace_period=120,
            )
        except (ImportError, ValueError, sqlalchemy.exc.ArgumentError) as error:  # no driver, a bad URL
            raise ConfigError(
                f"--storage={_safe_url(url)}: {type(error).__name__}: {error}; use sqlite:///path/to/file.db "
                'or postgresql://user:password@host:5432/dbname (driver: pip install -e ".[postgres]")'
            ) from None
        except (sqlalchemy.exc.OperationalError, sqlalchemy.exc.IntegrityError) as error:
            # retried: the tables created by another worker at the same moment, a locked SQLite file;
            # not retried: a server that cannot be reached
            gone = isinstance(error, sqlalchemy.exc.OperationalError) and not sqlite
            if gone or attempt == 4:
                message = str(error).splitlines()[0]
                raise ConfigError(
                    f"--storage={_safe_url(url)}: cannot open the database: {message}"
                ) from None
            time.sleep(0.5 * (attempt + 1))
    raise AssertionError("unreachable")  # pragma: no cover


# ------------------------------------------------------------------------------------------ results


def progress_line(study: Any, trial: Any, n_trials: int, metric: str) -> str:
    """One line for a finished trial: number, state, value, params (by the last part of their key),
    the best so far and how many trials of the study have finished."""
    from optuna.trial import TrialState

    def text(value: Any) -> str:
        return f"{value:.4g}" if isinstance(value, float) else str(value)

    params = ", ".join(f"{key.rsplit('.', 1)[-1]}={text(v)}" for key, v in trial.params.items())
    if trial.state == TrialState.COMPLETE:
        what = f"{metric}={trial.value:.4f}"
    elif trial.state == TrialState.PRUNED:
        step = trial.last_step
        what = f"at epoch {step} ({metric}={text(trial.intermediate_values.get(step))})"
    else:
        what = trial.user_attrs.get("error", "")
    state = "failed" if trial.state == TrialState.FAIL else trial.state.name.lower()
    done = len(study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED)))
    try:
        best = f"best: trial {study.best_trial.number} {metric}={study.best_value:.4f}"
    except ValueError:
        best = "best: none yet"
    return f"trial {trial.number} {state}: {what}  [{params}]  {best}  ({done}/{n_trials} finished)"


def _replace(path: Path, write: Any) -> Path:
    """Write ``path`` through ``write(temporary path)`` and a rename (readers never see half a file)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    write(tmp)
    tmp.replace(path)
    return path


def write_trials_csv(study: Any, path: Path) -> Path:
    """Write every trial of ``study`` (number, state, value, params, epochs reported, duration in
    seconds, run folder, error) to ``path``."""
    trials = study.get_trials(deepcopy=False)  # in the order of their numbers
    keys = list(dict.fromkeys(key for trial in trials for key in trial.params))
    header = ["number", "state", "value", *keys, "epochs", "duration_s", "run_dir", "error"]
    rows = [
        {
            **t.params,
            "number": t.number,
            "state": t.state.name,
            "value": t.value,
            "epochs": len(t.intermediate_values),
            "duration_s": None if t.duration is None else f"{t.duration.total_seconds():.1f}",
            "run_dir": t.user_attrs.get("run_dir"),
            "error": t.user_attrs.get("error"),
        }
        for t in trials
    ]

    def write(tmp: Path) -> None:
        with tmp.open("w", newline="") as handle:
            writer = csv.DictWriter(handle, header)
            writer.writeheader()
            writer.writerows(rows)

    return _replace(path, write)


def write_best_config(study: Any, path: Path) -> Path | None:
    """Write the best trial's ``fit`` config to ``path`` (``None``: no trial completed), parsed from its
    own fit options (its ``fit_args`` user attribute, without :data:`TRIAL_DEFAULTS`): ``fit --config
    path`` re-runs it with fit's usual logger and progress bar."""
    try:
        best = study.best_trial
    except ValueError:
        return None
    config, parser = parse_fit_options(best.user_attrs["fit_args"])
    header = f"# Best trial {best.number} of study {study.study_name!r}: {best.value}\n"
    return _replace(path, lambda tmp: tmp.write_text(header + parser.dump(config)))


def write_plots(study: Any, folder: Path) -> list[Path]:
    """Optuna's matplotlib plots (optimization history, parameter importances, parallel coordinates)
    as PNGs in ``folder``; a plot Optuna cannot draw yet (e.g. importances need two completed trials
    with different values) is skipped with a message."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import optuna.visualization.matplotlib as vis

    written = []
    for plot in (vis.plot_optimization_history, vis.plot_param_importances, vis.plot_parallel_coordinate):
        path = folder / f"{plot.__name__.removeprefix('plot_')}.png"
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # ExperimentalWarning, empty-data warnings
                plot(study)
                figure = plt.gcf()
                figure.set_size_inches(8, 6)
                figure.tight_layout()
                figure.savefig(path, dpi=100)
                plt.close(figure)
        except Exception as error:  # Optuna raises several types for "not enough trials"
            print(f"skipped {path.name}: {type(error).__name__}: {error}")
            continue
        written.append(path)
    return written


# -------------------------------------------------------------------------------------- command line


HELP_EPILOG = f"""
The sweep YAML is the --config file with a search_space (configs/sweep/digits.yaml); every other
argument is a fit option for all trials (`python -m {PACKAGE} fit --help`), which log to CSV:

  {PROG} --config configs/sweep/digits.yaml --trainer.max_epochs=10 --n_trials 20

Run the same command in more processes (or machines, with --storage postgresql://...) to share the
study, again to continue it; --n_trials 0 only rewrites the results in <logs_dir>/<study>_sweep/.
"""


def split_args(args: Sequence[str]) -> tuple[argparse.Namespace, Path, dict[str, Any], list[str]]:
    """Split the command line into the sweep's options, the sweep YAML (path and content) and the fit
    options. The sweep YAML is the ``--config`` file with a ``search_space`` key; other ``--config``
    files stay among the fit options, in their place (later configs and overrides win, as in ``fit``).

    Raises:
        ConfigError: no sweep YAML, or two of them.
    """
    parser = argparse.ArgumentParser(
        prog=PROG,
        usage=f"{PROG} --config SWEEP_YAML [options] [fit options]",
        description="Hyperparameter search with Optuna; each trial is an ordinary fit run.",
        epilog=HELP_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False,
    )
    parser.add_argument(
        "--n_trials", type=int, default=20, help="Finished (complete or pruned) trials the study should have."
    )
    parser.add_argument("--study_name", help="Study name (default: the sweep YAML's stem).")
    parser.add_argument(
        "--storage", help="Optuna storage URL (default: sqlite:///<logs_dir>/<study>_sweep/optuna.db)."
    )
    parser.add_argument("--timeout", type=float, help="Stop starting trials after this many seconds.")
    options, rest = parser.parse_known_args(list(args))
    if options.n_trials < 0 or (options.timeout is not None and options.timeout <= 0):
        parser.error(f"--n_trials={options.n_trials} must be >= 0 and --timeout={options.timeout} > 0")
    fit: list[str] = []
    spec_path, spec_raw = None, {}
    tokens = iter(rest)
    for token in tokens:
        if token.split("=")[0] != "--config":
            fit.append(token)
            continue
        value = token.partition("=")[2] or next(tokens, "")
        raw = yaml.safe_load(Path(value).read_text()) if Path(value).is_file() else None
        if not (isinstance(raw, dict) and "search_space" in raw):
            fit += ["--config", value]  # fit reports a missing file itself
        elif spec_path is not None:
            raise ConfigError(f"two sweep configs: {spec_path} and {value}; pass one")
        else:
            spec_path, spec_raw = Path(value), raw
    if spec_path is None:
        raise ConfigError(
            "no sweep config: pass --config with a YAML that has a search_space (configs/sweep/)"
        )
    return options, spec_path, spec_raw, fit


def main(args: list[str]) -> None:
    """Run ``python -m project sweep ARGS``: create or load the study, run trials until it has
    ``--n_trials`` finished (complete or pruned) ones or ``--timeout`` passed, write the results.

    Bad input (sweep YAML, fit options, storage URL) stops before any trial with one ``error:`` line
    and exit code 2. Ctrl-C stops after the current training batch, keeps the finished trials, writes
    the results and exits with 130.
    """
    import optuna
    from optuna.study import MaxTrialsCallback
    from optuna.trial import TrialState

    warnings.filterwarnings("ignore", message="LightningCLI's args parameter is intended to run from within")
    warnings.filterwarnings("ignore", message="Argument ``heartbeat_interval`` is an experimental feature")
    options, spec_path, spec_raw, fit_args = split_args(args[1:])
    spec = load_sweep_spec(spec_path, spec_raw)
    config, _ = parse_fit_options(fit_args)
    if config.get("run_name"):
        raise ConfigError("--run_name: the sweep names each trial's run folder itself (<study>_trial<NNN>)")
    keys = {key: resolve_key(config, key) for key in spec.search_space}
    if None in keys.values():
        raise ConfigError(
            f"{spec.path}: search_space key(s) {[k for k, v in keys.items() if v is None]} are not fit "
            f"options of this config (see `python -m {PACKAGE} fit --print_config` for the keys)"
        )
    study_name = options.study_name or spec.path.stem
    logs_dir = str(config.logs_dir)
    folder = Path(logs_dir).expanduser().resolve() / f"{study_name}_sweep"  # results (and SQLite)
    folder.mkdir(parents=True, exist_ok=True)
    url = options.storage or f"sqlite:///{folder / 'optuna.db'}"

    optuna.logging.set_verbosity(optuna.logging.ERROR)  # one progress line of ours per trial instead
    for name in ("lightning.pytorch", "lightning.fabric"):  # no "GPU available", "Seed set" per trial
        logging.getLogger(name).setLevel(logging.WARNING)
    study = optuna.create_study(
        study_name=study_name,
        storage=open_storage(url),
        sampler=make_sampler(spec),
        pruner=_optuna_object(spec, "pruner"),
        direction=spec.direction,  # type: ignore[arg-type]
        load_if_exists=True,
    )
    if study.direction.name.lower() != spec.direction:
        raise ConfigError(
            f"study {study_name!r} in {_safe_url(url)} was created to {study.direction.name.lower()}, "
            f"but {spec.path} says objective.direction={spec.direction}; use another --study_name"
        )
    for params in spec.enqueue_trials:
        study.enqueue_trial(params, skip_if_exists=True)
    finished = (TrialState.COMPLETE, TrialState.PRUNED)
    done = len(study.get_trials(deepcopy=False, states=finished))
    print(
        f"Study {study_name!r} ({_safe_url(url)}): {done} finished trial(s), running up to "
        f"{max(0, options.n_trials - done)} more; results in {folder}",
        flush=True,
    )
    objective = Objective(spec, fit_args, keys, logs_dir, study_name)  # type: ignore[arg-type]
    failures: list[str] = []  # this process's failed trials in a row

    def report(study: Any, trial: Any) -> None:
        print(progress_line(study, trial, options.n_trials, spec.metric), flush=True)
        write_trials_csv(study, folder / "trials.csv")
        failures[:] = [*failures, trial.user_attrs.get("error", "")] if trial.state == TrialState.FAIL else []
        if len(failures) >= MAX_FAILURES_IN_A_ROW:
            study.stop()

    def on_sigint(signum: int, frame: Any) -> None:
        objective.interrupted = True
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGINT, on_sigint)
    interrupted = False
    try:
        if options.n_trials > done:
            study.optimize(
                objective,
                timeout=options.timeout,
                catch=(Exception,),
                # Stop when the study (all workers) has n_trials finished or running trials; failed
                # trials do not count (new trials replace them), but MAX_FAILURES_IN_A_ROW of them stop.
                callbacks=[
                    report,
                    MaxTrialsCallback(options.n_trials, states=(*finished, TrialState.RUNNING)),
                ],
            )
    except KeyboardInterrupt:
        interrupted = True
        # A Ctrl-C between Optuna's ask and our objective leaves a trial RUNNING: fail it so that it is
        # neither counted as running nor left for the heartbeat (ours, or not yet claimed by a worker).
        for trial in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
            if trial.user_attrs.get("worker") in (None, WORKER):
                with contextlib.suppress(ValueError, RuntimeError):  # finished meanwhile
                    study.tell(trial.number, state=TrialState.FAIL)
    finally:
        signal.signal(signal.SIGINT, previous)

    written = [write_trials_csv(study, folder / "trials.csv"), write_best_config(study, folder / "best.yaml")]
    written += write_plots(study, folder)
    done = len(study.get_trials(deepcopy=False, states=finished))
    print(f"{done} finished trial(s) in study {study_name!r}; results:")
    print("\n".join(f"  {path}" for path in written if path is not None))
    if len(failures) >= MAX_FAILURES_IN_A_ROW:
        raise ProjectError(
            f"{len(failures)} trials in a row failed, so the sweep stopped; the last error: {failures[-1]}"
        )
    if interrupted:
        raise SweepInterrupted(
            f"sweep interrupted by Ctrl-C; {done} finished trial(s) are kept in {_safe_url(url)}. "
            "Re-run the same command to continue the study."
        )
    if written[1] is not None:
        best = study.best_trial
        print(f"Best: trial {best.number} {spec.metric}={best.value:.4f} ({best.user_attrs.get('run_dir')})")
        print(f"Re-run it: python -m {PACKAGE} fit --config {written[1]}")


class SweepInterrupted(ProjectError):
    """The sweep was stopped by Ctrl-C; finished trials are kept (exit code 130)."""

    exit_code = 130
