"""``python -m project sweep``: hyperparameter search with Optuna, each trial an
ordinary ``fit`` run.

```
python -m project sweep --config configs/sweep/digits.yaml [--n_trials 20] [fit options ...]
```

The sweep YAML (the ``--config`` file that has a ``search_space``) names:

- ``search_space``: ordinary config keys (as on the ``fit`` command line, ``init_args`` may be left out)
  mapped to a distribution: ``{type: float, low, high, log: false, step: null}``,
  ``{type: int, low, high, log: false, step: 1}`` or ``{type: categorical, choices: [...]}``;
- ``objective``: ``{metric: val/acc_best, direction: maximize}``, a metric the run logs; its value at the
  end of the trial is the trial's value (use a ``*_best`` metric for the best epoch);
- ``sampler``: ``{name: tpe|random, seed: 0, ...}``, the other keys go to the Optuna sampler's constructor
  (default TPE, Bergstra et al. 2011, "Algorithms for Hyper-Parameter Optimization");
- ``pruner``: ``{name: median|hyperband|none, ...}``, the other keys go to the Optuna pruner's constructor
  (Hyperband: Li et al. 2018, "Hyperband: A Novel Bandit-Based Approach to Hyperparameter Optimization");
- ``enqueue_trials`` (optional): parameter sets to run first, e.g. the current defaults.

Every other argument (experiment ``--config`` files, ``--trainer.*``, ``--data.*``, ...) is a ``fit``
option applied to every trial. Each trial runs ``fit`` in this process through :class:`ProjectCLI` into
the ordinary run folder ``<logs_dir>/<study>_trial<NNN>``; a callback reports the objective after every
validation and Optuna's pruner stops hopeless trials.

The study lives in ``--storage`` (default: the SQLite file ``<logs_dir>/<study>_sweep/optuna.db``; no
server). Re-running the same command continues it until ``--n_trials`` trials of the study have finished
(complete or pruned); several processes started with the same ``--study_name``/``--storage`` share the
work, on one machine (SQLite) or many (``--storage postgresql://user:password@host/db``, needs
``psycopg2``). Results go to ``<logs_dir>/<study>_sweep/``: ``trials.csv``, ``best.yaml`` (the best
trial's config: ``fit --config best.yaml`` re-runs it) and PNG plots.
"""

from __future__ import annotations

import contextlib
import csv
import json
import os
import signal
import socket
import sys
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any, Literal, cast

import yaml
from jsonargparse import Namespace

from .cli import ProjectCLI
from .errors import ConfigError, ProjectError, TrainingInterrupted

PROG = f"python -m {__package__} sweep"

#: Top-level keys of a sweep YAML.
SWEEP_KEYS = ("search_space", "objective", "sampler", "pruner", "enqueue_trials")
#: Keys of one ``search_space`` entry, by distribution type (``type`` itself is always allowed).
DISTRIBUTION_KEYS = {
    "float": {"low", "high", "log", "step"},
    "int": {"low", "high", "log", "step"},
    "categorical": {"choices"},
}
SAMPLERS = {"tpe": "TPESampler", "random": "RandomSampler"}
PRUNERS = {"median": "MedianPruner", "hyperband": "HyperbandPruner", "none": "NopPruner"}
#: Options of the sweep itself; every other argument is a ``fit`` option.
SWEEP_OPTIONS = ("--n_trials", "--study_name", "--storage", "--timeout")
#: This process, as recorded in each of its trials (``worker`` user attribute).
WORKER = f"{socket.gethostname()}:{os.getpid()}"

#: Marks a categorical choice that is not a plain value (a list, a mapping) stored as JSON text.
JSON_PREFIX = "json:"
#: A worker stops after this many failed trials in a row (e.g. an objective metric that is never logged).
MAX_FAILURES_IN_A_ROW = 5


def _quiet_warnings() -> None:
    """Hide two warnings that are expected here: LightningCLI's about getting ``args`` while
    ``sys.argv`` holds the sweep's command line, and Optuna's that heartbeats are experimental."""
    warnings.filterwarnings("ignore", message="LightningCLI's args parameter is intended to run from within")
    warnings.filterwarnings("ignore", message="Argument ``heartbeat_interval`` is an experimental feature")


@dataclass
class SweepSpec:
    """A validated sweep YAML.

    Attributes:
        path: the file.
        search_space: config key (as written) -> Optuna distribution.
        metric: the logged metric to optimise (e.g. ``val/acc_best``).
        direction: ``maximize`` or ``minimize``.
        sampler: ``(name, constructor kwargs)``.
        pruner: ``(name, constructor kwargs)``.
        enqueue_trials: parameter sets (config key -> value) to run first.
    """

    path: Path
    search_space: dict[str, Any]
    metric: str
    direction: str
    sampler: tuple[str, dict[str, Any]]
    pruner: tuple[str, dict[str, Any]]
    enqueue_trials: list[dict[str, Any]] = field(default_factory=list)


def _named(
    section: str, value: Any, names: dict[str, str], default: str, where: str
) -> tuple[str, dict[str, Any]]:
    """Read a ``{name: ..., **kwargs}`` section (sampler/pruner)."""
    if value is None:
        return default, {}
    if not isinstance(value, dict):
        example = "{name: " + str(default) + "}"
        raise ConfigError(f"{where}: {section} must be a mapping such as {example}, got {value!r}")
    kwargs = dict(value)
    name = kwargs.pop("name", default)
    if name not in names:
        raise ConfigError(f"{where}: {section}.name={name!r} is unknown; choose one of {sorted(names)}")
    return str(name), kwargs


def _distribution(key: str, spec: Any, where: str) -> Any:
    """One ``search_space`` entry as an Optuna distribution; raises :class:`ConfigError` naming ``key``."""
    import optuna.distributions as dist

    name = f"{where}: search_space[{key!r}]"
    if not isinstance(spec, dict) or "type" not in spec:
        raise ConfigError(
            f"{name} must be a mapping with a type (float, int or categorical), e.g. "
            "{type: float, low: 1.0e-4, high: 1.0e-2, log: true}; got " + repr(spec)
        )
    kind = spec["type"]
    if kind not in DISTRIBUTION_KEYS:
        raise ConfigError(f"{name}: unknown distribution type {kind!r}; choose float, int or categorical")
    unknown = set(spec) - DISTRIBUTION_KEYS[kind] - {"type"}
    if unknown:
        raise ConfigError(f"{name}: unknown field(s) {sorted(unknown)} for type {kind}")
    try:
        if kind == "categorical":
            choices = spec.get("choices")
            if not isinstance(choices, list) or not choices:
                raise ValueError(f"choices must be a non-empty list, got {choices!r}")
            if not all(choice is None or isinstance(choice, (bool, int, float, str)) for choice in choices):
                # Optuna stores only plain choices; a list such as [64, 64] is kept as its JSON text
                choices = [JSON_PREFIX + json.dumps(choice) for choice in choices]
            return dist.CategoricalDistribution(choices)
        missing = {"low", "high"} - set(spec)
        if missing:
            raise ValueError(f"missing {sorted(missing)}")
        low, high = spec["low"], spec["high"]
        if high < low:
            raise ValueError(f"empty range: low={low} > high={high}")
        if kind == "float":
            return dist.FloatDistribution(
                float(low), float(high), log=bool(spec.get("log", False)), step=spec.get("step")
            )
        return dist.IntDistribution(
            int(low), int(high), log=bool(spec.get("log", False)), step=spec.get("step", 1)
        )
    except (ValueError, TypeError) as error:
        raise ConfigError(f"{name}: {error}") from None


def _encode(distribution: Any, value: Any) -> Any:
    """``value`` as stored in ``distribution`` (JSON text for a list-valued categorical)."""
    choices = getattr(distribution, "choices", ())
    if choices and str(choices[0]).startswith(JSON_PREFIX):
        return JSON_PREFIX + json.dumps(value)
    return value


def decode(value: Any) -> Any:
    """A sampled value as the config takes it (undoes the JSON text of list-valued choices)."""
    if isinstance(value, str) and value.startswith(JSON_PREFIX):
        return json.loads(value[len(JSON_PREFIX) :])
    return value


def load_sweep_spec(path: str | Path, raw: Any = None) -> SweepSpec:
    """Read and check a sweep YAML (``raw``: its already loaded content).

    Raises:
        ConfigError: an unknown top-level key, distribution type or field, an empty range or choice
            list, an unknown sampler or pruner, a bad objective, or an enqueued key outside the space;
            the message names the key.
    """
    where = str(path)
    if raw is None:
        raw = yaml.safe_load(Path(path).read_text())
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: a sweep config must be a mapping with a search_space")
    unknown = set(raw) - set(SWEEP_KEYS)
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {sorted(unknown)}; a sweep config has {list(SWEEP_KEYS)}")
    space = raw.get("search_space")
    if not isinstance(space, dict) or not space:
        raise ConfigError(f"{where}: search_space must map config keys to distributions, got {space!r}")
    search_space = {str(key): _distribution(str(key), spec, where) for key, spec in space.items()}
    objective = raw.get("objective") or {}
    if not isinstance(objective, dict) or set(objective) - {"metric", "direction"}:
        raise ConfigError(f"{where}: objective must be " + "{metric: val/acc_best, direction: maximize}")
    metric = str(objective.get("metric", "val/acc_best"))
    direction = str(objective.get("direction", "maximize"))
    if direction not in ("maximize", "minimize"):
        raise ConfigError(f"{where}: objective.direction={direction!r}; use maximize or minimize")
    enqueue = raw.get("enqueue_trials") or []
    if not isinstance(enqueue, list) or not all(isinstance(item, dict) for item in enqueue):
        raise ConfigError(f"{where}: enqueue_trials must be a list of " + "{config key: value} mappings")
    for index, params in enumerate(enqueue):
        outside = set(params) - set(search_space)
        if outside:
            raise ConfigError(
                f"{where}: enqueue_trials[{index}]: key(s) {sorted(outside)} not in search_space"
            )
    return SweepSpec(
        path=Path(path),
        search_space=search_space,
        metric=metric,
        direction=direction,
        sampler=_named("sampler", raw.get("sampler"), SAMPLERS, "tpe", where),
        pruner=_named("pruner", raw.get("pruner"), PRUNERS, "median", where),
        enqueue_trials=[
            {str(k): _encode(search_space[k], v) for k, v in params.items()} for params in enqueue
        ],
    )


def make_sampler(spec: SweepSpec, seed_offset: int = 0) -> Any:
    """The sampler of ``spec`` (its ``seed``, if any, plus ``seed_offset``)."""
    import optuna

    name, kwargs = spec.sampler
    kwargs = dict(kwargs)
    if kwargs.get("seed") is not None:
        kwargs["seed"] = int(kwargs["seed"]) + seed_offset
    try:
        return getattr(optuna.samplers, SAMPLERS[name])(**kwargs)
    except (TypeError, ValueError) as error:
        raise ConfigError(f"{spec.path}: sampler {name}: {error}") from None


def make_pruner(spec: SweepSpec) -> Any:
    """The pruner of ``spec``."""
    import optuna

    name, kwargs = spec.pruner
    try:
        return getattr(optuna.pruners, PRUNERS[name])(**kwargs)
    except (TypeError, ValueError) as error:
        raise ConfigError(f"{spec.path}: pruner {name}: {error}") from None


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
    """``--key=value`` with the value as JSON (a YAML subset: jsonargparse reads it back exactly)."""
    return f"--{key}={json.dumps(value)}"


# ------------------------------------------------------------------------------------------- trials


class _TrialCLI(ProjectCLI):
    """``ProjectCLI`` for one trial: ``fit`` plus the pruning callback."""

    def __init__(self, args: list[str], callbacks: list[Any]) -> None:
        self._trial_callbacks = callbacks
        super().__init__(args=args)

    def after_instantiate_classes(self) -> None:
        """Append the trial's callbacks (after ``ModelCheckpoint``: a pruned epoch is still saved)."""
        super().after_instantiate_classes()
        self.trainer.callbacks.extend(self._trial_callbacks)  # type: ignore[attr-defined]


def _last_error_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("error:")]
    return (errors or lines or ["(no message)"])[-1]


class _Tee:
    """A text stream that writes to ``stream`` and keeps the last ``keep`` characters."""

    def __init__(self, stream: Any, keep: int = 4000) -> None:
        self.stream, self.keep, self.text = stream, keep, ""

    def write(self, text: str) -> int:
        self.text = (self.text + text)[-self.keep :]
        return int(self.stream.write(text))

    def flush(self) -> None:
        self.stream.flush()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.stream, name)


class Objective:
    """Optuna objective: one ``fit`` run per trial; returns the objective metric at its end.

    Args:
        spec: the sweep.
        fit_args: ``fit`` options for every trial.
        keys: search-space key -> full config key.
        logs_dir: where the trial run folders go.
        study_name: names the run folders ``<study>_trial<NNN>``.
    """

    def __init__(
        self, spec: SweepSpec, fit_args: list[str], keys: dict[str, str], logs_dir: str, study_name: str
    ) -> None:
        self.spec, self.fit_args, self.keys = spec, fit_args, keys
        self.logs_dir, self.study_name = logs_dir, study_name
        self.interrupted = False
        self._reseeded = False

    def suggest(self, trial: Any) -> dict[str, Any]:
        """Sample every search-space key (Optuna's public ``suggest_*`` API)."""
        import optuna.distributions as dist

        values: dict[str, Any] = {}
        for key, d in self.spec.search_space.items():
            if isinstance(d, dist.CategoricalDistribution):
                values[key] = trial.suggest_categorical(key, list(d.choices))
            elif isinstance(d, dist.IntDistribution):
                values[key] = trial.suggest_int(key, d.low, d.high, step=d.step, log=d.log)
            else:
                values[key] = trial.suggest_float(key, d.low, d.high, step=d.step, log=d.log)
        return values

    def __call__(self, trial: Any) -> float:
        """Run the trial. Raises ``optuna.TrialPruned``, ``KeyboardInterrupt`` (Ctrl-C: stop the sweep)
        or :class:`TrialFailed` (recorded as failed; the sweep goes on)."""
        import optuna
        from optuna_integration import PyTorchLightningPruningCallback

        trial.set_user_attr("worker", WORKER)
        if not self._reseeded:
            # Workers that share a study must not draw the same random startup trials: seed this
            # process's sampler with seed + its first trial number (unique, given out by the storage).
            # A single worker on a new study starts at trial 0, so its seed is the configured one.
            self._reseeded = True
            trial.study.sampler = make_sampler(self.spec, seed_offset=trial.number)
        params = self.suggest(trial)
        overrides = [override(self.keys[key], decode(value)) for key, value in params.items()]
        run_name = f"{self.study_name}_trial{trial.number:03d}"
        trial.set_user_attr("run_dir", str(Path(self.logs_dir, run_name).expanduser().resolve()))
        trial.set_user_attr("fit_args", [*self.fit_args, *overrides])
        args = ["fit", *self.fit_args, *overrides, f"--logs_dir={self.logs_dir}", f"--run_name={run_name}"]
        pruning = PyTorchLightningPruningCallback(trial, monitor=self.spec.metric)
        stderr = _Tee(sys.stderr)
        old_stderr, sys.stderr = sys.stderr, stderr
        try:
            cli = _TrialCLI(args, callbacks=[pruning])
            pruning.check_pruned()  # DDP trials: the decision of rank 0 (a no-op in one process)
        except optuna.TrialPruned:
            raise
        except (KeyboardInterrupt, TrainingInterrupted):
            self._fail(trial, "interrupted (Ctrl-C)")
            raise KeyboardInterrupt from None
        except SystemExit as error:  # a sampled value the parser rejects, or Lightning's exit on Ctrl-C
            if self.interrupted:
                self._fail(trial, "interrupted (Ctrl-C)")
                raise KeyboardInterrupt from None
            message = f"fit exited with code {error.code}: {_last_error_line(stderr.text)}"
            raise TrialFailed(self._fail(trial, message)) from None
        except Exception as error:
            if self.interrupted:
                self._fail(trial, "interrupted (Ctrl-C)")
                raise KeyboardInterrupt from None
            text = str(error) if isinstance(error, ProjectError) else f"{type(error).__name__}: {error}"
            raise TrialFailed(self._fail(trial, text)) from error
        finally:
            sys.stderr = old_stderr
        value = cli.trainer.callback_metrics.get(self.spec.metric)
        if value is None:
            logged = sorted(cli.trainer.callback_metrics)
            raise TrialFailed(
                self._fail(
                    trial,
                    f"objective.metric={self.spec.metric!r} was not logged by the run; logged: {logged}",
                )
            )
        return float(value)

    @staticmethod
    def _fail(trial: Any, message: str) -> str:
        trial.set_user_attr("error", message)
        return message


class TrialFailed(Exception):
    """A trial failed (its error is in the trial's ``error`` user attribute); the sweep goes on."""


# ------------------------------------------------------------------------------------------ storage


def default_storage(logs_dir: str | Path, study_name: str) -> str:
    """``sqlite:///<logs_dir>/<study>_sweep/optuna.db`` (absolute; the folder is created)."""
    folder = results_dir(logs_dir, study_name)
    folder.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{folder / 'optuna.db'}"


def results_dir(logs_dir: str | Path, study_name: str) -> Path:
    """The sweep's results folder ``<logs_dir>/<study>_sweep``."""
    return Path(logs_dir).expanduser().resolve() / f"{study_name}_sweep"


def _safe_url(url: str) -> str:
    """``url`` with its password hidden."""
    try:
        from sqlalchemy.engine import make_url

        return str(make_url(url).render_as_string(hide_password=True))
    except Exception:
        return url.split("@")[-1]


def _with_driver(url: str) -> str:
    """``postgresql://...`` with the PostgreSQL driver that is installed (``psycopg2``, else ``psycopg``
    3): SQLAlchemy's default for a plain ``postgresql://`` is psycopg2 in 2.0 and psycopg 3 in 2.1."""
    import importlib.util

    scheme, sep, rest = url.partition("://")
    if scheme not in ("postgresql", "postgres") or not sep:
        return url
    for driver in ("psycopg2", "psycopg"):
        if importlib.util.find_spec(driver) is not None:
            return f"postgresql+{driver}://{rest}"
    return url


def open_storage(url: str) -> Any:
    """An Optuna ``RDBStorage`` on ``url``, with heartbeats so that trials of a killed worker are marked
    failed (after 2 minutes) and re-done; SQLite waits up to 60 s for a lock held by another worker.

    Raises:
        ConfigError: the URL cannot be used (bad scheme, missing driver, server not reachable).
    """
    import optuna
    import sqlalchemy.exc

    url = _with_driver(url)
    engine_kwargs: dict[str, Any] = {}
    if url.startswith("sqlite"):
        engine_kwargs = {"connect_args": {"timeout": 60}}
    last: Exception | None = None
    for attempt in range(5):  # two workers creating the same new database can race on its tables
        try:
            return optuna.storages.RDBStorage(
                url, engine_kwargs=engine_kwargs, heartbeat_interval=60, grace_period=120
            )
        except ImportError as error:
            raise ConfigError(
                f"--storage={_safe_url(url)}: the database driver is not installed ({error}); for "
                'PostgreSQL: pip install -e ".[postgres]" (psycopg2-binary)'
            ) from None
        except (sqlalchemy.exc.ArgumentError, ValueError) as error:
            raise ConfigError(
                f"--storage={_safe_url(url)}: not a usable database URL ({error}); use "
                "sqlite:///path/to/file.db or postgresql://user:password@host:5432/dbname"
            ) from None
        except (sqlalchemy.exc.OperationalError, sqlalchemy.exc.IntegrityError) as error:
            # IntegrityError: another worker created the tables at the same moment; OperationalError:
            # the SQLite file is locked (a server that cannot be reached is not retried)
            last = error
            if isinstance(error, sqlalchemy.exc.OperationalError) and not url.startswith("sqlite"):
                break
            time.sleep(0.5 * (attempt + 1))
    raise ConfigError(f"--storage={_safe_url(url)}: cannot open the database: {str(last).splitlines()[0]}")


# ------------------------------------------------------------------------------------------ results


def _short_names(keys: Sequence[str]) -> dict[str, str]:
    """Last component of each key (``lr``), or the full key where two would clash."""
    short = {key: key.rsplit(".", 1)[-1] for key in keys}
    counts: dict[str, int] = {}
    for name in short.values():
        counts[name] = counts.get(name, 0) + 1
    return {key: name if counts[name] == 1 else key for key, name in short.items()}


def _format(value: Any) -> str:
    value = decode(value)
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def progress_line(study: Any, trial: Any, n_trials: int, metric: str) -> str:
    """One line for a finished trial: number, state, value, params, the best so far, trials done."""
    from optuna.trial import TrialState

    names = _short_names(list(trial.params))
    params = ", ".join(f"{names[k]}={_format(v)}" for k, v in trial.params.items())
    state = {"FAIL": "failed"}.get(trial.state.name, trial.state.name.lower())
    if trial.state == TrialState.COMPLETE:
        what = f"{metric}={trial.value:.4f}"
    elif trial.state == TrialState.PRUNED:
        step = trial.last_step
        last = trial.intermediate_values.get(step) if step is not None else None
        what = f"at epoch {step} ({metric}={_format(last)})"
    else:
        what = trial.user_attrs.get("error", "")
    done = len(study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED)))
    try:
        best = study.best_trial
        best_text = f"best: trial {best.number} {metric}={best.value:.4f}"
    except ValueError:
        best_text = "best: none yet"
    return f"trial {trial.number} {state}: {what}  [{params}]  {best_text}  ({done}/{n_trials} finished)"


def write_trials_csv(study: Any, path: Path) -> Path:
    """Write every trial of ``study`` (number, state, value, params, epochs reported, duration,
    run folder, error) to ``path`` (atomically: temporary file, then rename)."""
    trials = sorted(study.get_trials(deepcopy=False), key=lambda t: t.number)
    keys: list[str] = []
    for trial in trials:
        keys += [k for k in trial.params if k not in keys]
    header = ["number", "state", "value", *keys, "epochs", "duration_s", "run_dir", "error"]
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with tmp.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(header)
        for t in trials:
            duration = t.duration.total_seconds() if t.duration is not None else ""
            writer.writerow(
                [
                    t.number,
                    t.state.name,
                    "" if t.value is None else t.value,
                    *[decode(t.params.get(k, "")) for k in keys],
                    len(t.intermediate_values),
                    f"{duration:.1f}" if duration != "" else "",
                    t.user_attrs.get("run_dir", ""),
                    t.user_attrs.get("error", ""),
                ]
            )
    tmp.replace(path)
    return path


def write_best_config(study: Any, path: Path) -> Path | None:
    """Write the best trial's resolved ``fit`` config to ``path``; ``None`` when no trial completed.

    The config is parsed from the trial's own ``fit`` options (its ``fit_args`` user attribute: the
    sweep's fit options plus its sampled values), as ``fit`` would, so ``fit --config path`` re-runs it.
    """
    try:
        best = study.best_trial
    except ValueError:
        return None
    config, parser = parse_fit_options(best.user_attrs["fit_args"])
    text = parser.dump(config)
    header = f"# Best trial {best.number} of study {study.study_name!r}: {best.value}\n"
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(header + text)
    tmp.replace(path)
    return path


def write_plots(study: Any, folder: Path) -> list[Path]:
    """Optuna's matplotlib plots (optimization history, parameter importances, parallel coordinates)
    as PNGs in ``folder``; a plot Optuna cannot draw yet (e.g. importances need two completed trials
    with different values) is skipped with a message."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import optuna.visualization.matplotlib as vis

    written = []
    plots: dict[str, Any] = {
        "optimization_history": vis.plot_optimization_history,
        "param_importances": vis.plot_param_importances,
        "parallel_coordinate": vis.plot_parallel_coordinate,
    }
    for name, plot in plots.items():
        path = folder / f"{name}.png"
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # ExperimentalWarning, empty-data warnings
                axes = plot(study)
                figure = axes.figure if hasattr(axes, "figure") else axes.flat[0].figure
                figure.set_size_inches(8, 6)
                figure.tight_layout()
                figure.savefig(path, dpi=100)
                plt.close(figure)
        except Exception as error:  # Optuna raises several types for "not enough trials"
            print(f"skipped {path.name}: {type(error).__name__}: {error}")
            continue
        written.append(path)
    return written


def write_results(study: Any, folder: Path) -> dict[str, Path]:
    """``trials.csv``, ``best.yaml`` and the PNG plots in ``folder``; returns what was written."""
    folder.mkdir(parents=True, exist_ok=True)
    written = {"trials": write_trials_csv(study, folder / "trials.csv")}
    best = write_best_config(study, folder / "best.yaml")
    if best is not None:
        written["best"] = best
    for path in write_plots(study, folder):
        written[path.stem] = path
    return written


# -------------------------------------------------------------------------------------- command line


HELP_EPILOG = f"""
The sweep YAML is the --config file that has a search_space (see configs/sweep/digits.yaml). Any
other --config file and every other option is a fit option applied to every trial
(`python -m {__package__} fit --help` lists them):

  {PROG} --config configs/sweep/digits.yaml --trainer.max_epochs=10 --n_trials 20

Start the same command in more processes (or on more machines, with --storage postgresql://...) to
share the work; re-run it to continue the study; --n_trials 0 only rewrites the results in
<logs_dir>/<study>_sweep/ (trials.csv, best.yaml, PNG plots).
"""


def _options_parser() -> Any:
    from jsonargparse import ArgumentParser, DefaultHelpFormatter

    class RawEpilog(DefaultHelpFormatter):
        """Keeps the line breaks of the description and epilog (as argparse's RawDescriptionHelpFormatter)."""

        def _fill_text(self, text: str, width: int, indent: str) -> str:
            return "".join(indent + line for line in text.splitlines(keepends=True))

    parser = ArgumentParser(
        prog=PROG,
        description="Hyperparameter search with Optuna; each trial is an ordinary fit run.",
        epilog=HELP_EPILOG,
        formatter_class=RawEpilog,
    )
    parser.add_argument(
        "--config",
        type=str | None,
        default=None,
        help="The sweep YAML (has a search_space). More --config files are fit configs.",
    )
    parser.add_argument(
        "--n_trials", type=int, default=20, help="Finished (complete or pruned) trials the study should have."
    )
    parser.add_argument(
        "--study_name", type=str | None, default=None, help="Study name (default: the sweep YAML's stem)."
    )
    parser.add_argument(
        "--storage",
        type=str | None,
        default=None,
        help="Optuna storage URL (default: sqlite:///<logs_dir>/<study>_sweep/optuna.db).",
    )
    parser.add_argument(
        "--timeout", type=float | None, default=None, help="Stop starting trials after this many seconds."
    )
    return parser


def split_args(args: Sequence[str]) -> tuple[list[str], Path | None, dict[str, Any], list[str]]:
    """Split the command line into sweep options, the sweep YAML (path), its content, and fit options.

    The sweep YAML is the ``--config`` file with a ``search_space`` key; other ``--config`` files stay
    among the fit options, in their place (later configs and overrides win, as in ``fit``).
    """
    sweep: list[str] = []
    fit: list[str] = []
    spec_path: Path | None = None
    spec_raw: dict[str, Any] = {}
    tokens = list(args)
    i = 0
    while i < len(tokens):
        token = tokens[i]
        name, eq, value = token.partition("=")
        takes_value = name in (*SWEEP_OPTIONS, "--config")
        if takes_value and not eq:
            if i + 1 >= len(tokens):
                raise ConfigError(f"{name} needs a value")
            value, i = tokens[i + 1], i + 1
        i += 1
        if name in SWEEP_OPTIONS:
            sweep += [name, value]
        elif name == "--config":
            raw = yaml.safe_load(Path(value).read_text()) if Path(value).is_file() else None
            if isinstance(raw, dict) and "search_space" in raw:
                if spec_path is not None:
                    raise ConfigError(f"two sweep configs: {spec_path} and {value}; pass one")
                spec_path, spec_raw = Path(value), raw
            else:
                fit += ["--config", value]  # fit reports a missing file itself
        else:
            fit.append(token)
    return sweep, spec_path, spec_raw, fit


def main(args: list[str]) -> None:
    """Run ``python -m project sweep ARGS`` (see the module docstring).

    Bad input (sweep YAML, fit options, storage URL) stops before any trial with one ``error:`` line
    and exit code 2. Ctrl-C stops after the current training batch, keeps the finished trials, writes
    the results and exits with 130.
    """
    _quiet_warnings()
    parser = _options_parser()
    if any(arg in ("-h", "--help") for arg in args):
        parser.parse_args(["--help"])
    sweep_args, spec_path, spec_raw, fit_args = split_args(args)
    options = parser.parse_args(sweep_args)
    if spec_path is None:
        raise ConfigError(
            "no sweep config: pass --config with a YAML that has a search_space (configs/sweep/)"
        )
    if options.n_trials < 0 or (options.timeout is not None and options.timeout <= 0):
        parser.error(f"--n_trials={options.n_trials} must be >= 0 and --timeout={options.timeout} > 0")
    spec = load_sweep_spec(spec_path, spec_raw)
    config, _ = parse_fit_options(fit_args)
    if config.get("run_name"):
        raise ConfigError("--run_name: the sweep names each trial's run folder itself (<study>_trial<NNN>)")
    keys = {}
    for key in spec.search_space:
        full = resolve_key(config, key)
        if full is None:
            raise ConfigError(
                f"{spec.path}: search_space key {key!r} is not a fit option of this config "
                f"(see `python -m {__package__} fit --print_config` for the keys)"
            )
        keys[key] = full
    study_name = options.study_name or spec.path.stem
    logs_dir = str(config.logs_dir)
    storage_url = options.storage or default_storage(logs_dir, study_name)
    run_sweep(spec, fit_args, keys, logs_dir, study_name, storage_url, options.n_trials, options.timeout)


def run_sweep(
    spec: SweepSpec,
    fit_args: list[str],
    keys: dict[str, str],
    logs_dir: str,
    study_name: str,
    storage_url: str,
    n_trials: int,
    timeout: float | None,
) -> Any:
    """Create or load the study, run trials until it has ``n_trials`` finished ones (or ``timeout``
    seconds passed), write the results; returns the study."""
    import optuna
    from optuna.study import MaxTrialsCallback
    from optuna.trial import TrialState

    optuna.logging.set_verbosity(optuna.logging.ERROR)  # one progress line of ours per trial instead
    storage = open_storage(storage_url)
    study = optuna.create_study(
        study_name=study_name,
        storage=storage,
        sampler=make_sampler(spec),
        pruner=make_pruner(spec),
        direction=cast(Literal["minimize", "maximize"], spec.direction),
        load_if_exists=True,
    )
    if study.direction.name.lower() != spec.direction:
        raise ConfigError(
            f"study {study_name!r} in {_safe_url(storage_url)} was created to "
            f"{study.direction.name.lower()}, "
            f"but {spec.path} says objective.direction={spec.direction}; use another --study_name"
        )
    for params in spec.enqueue_trials:
        study.enqueue_trial(params, skip_if_exists=True)
    finished = (TrialState.COMPLETE, TrialState.PRUNED)
    done = len(study.get_trials(deepcopy=False, states=finished))
    remaining = max(0, n_trials - done)
    folder = results_dir(logs_dir, study_name)
    print(
        f"Study {study_name!r} ({_safe_url(storage_url)}): {done} finished trial(s), running up to "
        f"{remaining} more; results in {folder}",
        flush=True,
    )
    objective = Objective(spec, fit_args, keys, logs_dir, study_name)

    failures: list[str] = []  # this process's failed trials in a row

    def report(study: Any, trial: Any) -> None:
        print(progress_line(study, trial, n_trials, spec.metric), flush=True)
        write_trials_csv(study, _ensure(folder) / "trials.csv")
        failures[:] = [*failures, trial.user_attrs.get("error", "")] if trial.state == TrialState.FAIL else []
        if len(failures) >= MAX_FAILURES_IN_A_ROW:
            study.stop()

    def on_sigint(signum: int, frame: FrameType | None) -> None:
        objective.interrupted = True
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGINT, on_sigint)
    interrupted = False
    try:
        if remaining:
            study.optimize(
                objective,
                timeout=timeout,
                catch=(Exception,),
                # Stop when the study (all workers) has n_trials finished or running trials; failed
                # trials do not count (they are re-done), but MAX_FAILURES_IN_A_ROW of them stop.
                callbacks=[report, MaxTrialsCallback(n_trials, states=(*finished, TrialState.RUNNING))],
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
    written = write_results(study, folder)
    done = len(study.get_trials(deepcopy=False, states=finished))
    print(f"{done} finished trial(s) in study {study_name!r}; results:")
    for path in written.values():
        print(f"  {path}")
    if len(failures) >= MAX_FAILURES_IN_A_ROW:
        raise ProjectError(
            f"{len(failures)} trials in a row failed, so the sweep stopped; the last error: {failures[-1]}"
        )
    if interrupted:
        raise SweepInterrupted(
            f"sweep interrupted by Ctrl-C; {done} finished trial(s) are kept in {_safe_url(storage_url)}. "
            "Re-run the same command to continue the study."
        )
    if "best" in written:
        best = study.best_trial
        print(f"Best: trial {best.number} {spec.metric}={best.value:.4f} ({best.user_attrs.get('run_dir')})")
        print(f"Re-run it: python -m {__package__} fit --config {written['best']}")
    return study


def _ensure(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    return folder


class SweepInterrupted(ProjectError):
    """The sweep was stopped by Ctrl-C; finished trials are kept (exit code 130)."""

    exit_code = 130
