"""Every private Lightning, jsonargparse and torch attribute the engine uses, behind one function each,
and their registry :data:`PRIVATE_ATTRIBUTES`, which ``tests/test_private_apis.py`` checks against the
installed versions so that an upgrade that moves one fails there, loudly. Each is used only where no
public API gives what the engine promises (the reason is in the registry)."""

from __future__ import annotations

import functools
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any, get_args

import torch
from jsonargparse import Namespace
from jsonargparse._typehints import get_all_subclass_paths
from lightning.fabric.utilities.apply_func import convert_tensors_to_scalars
from lightning.pytorch import Trainer
from lightning.pytorch.callbacks import ModelCheckpoint, WeightAveraging
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI
from lightning.pytorch.loggers import Logger
from lightning.pytorch.tuner import lr_finder
from torch.optim.swa_utils import AveragedModel

#: (owner, attribute, why): every private attribute below.
PRIVATE_ATTRIBUTES = (
    ("LightningCLI", "_parse_ckpt_path", "overridden to read nothing: the engine reads the checkpoint once"),
    ("LightningCLI", "_subcommand_parsers", "the parser of the subcommand being run (its defaults, errors)"),
    ("_FitLoop", "_data_fetcher", "a new iterator when a resume lands after an epoch's last batch"),
    ("_FitLoop", "_combined_loader", "whether the training loader was built before the restore"),
    ("_FitLoop", "_combined_loader_states_to_load", "loader state a too-early setup_data missed"),
    ("_FitLoop", "_load_combined_loader_states", "load that state after all (Lightning #20550)"),
    ("_TrainingEpochLoop", "_batches_that_stepped", "the loggers' step after some resumes"),
    ("_TrainingEpochLoop", "_broadcast_sigterm_tensor", "rank 0's stop request, broadcast every batch"),
    ("Trainer", "_signal_connector", "Lightning's SIGTERM handling, whose handler the engine replaces"),
    ("_SignalConnector", "_sigterm_notifier_fn", "Lightning's SIGTERM handler: a collective inside it hangs"),
    ("ModelCheckpoint", "_every_n_train_steps", "whether a checkpoint saves every N steps"),
    ("ModelCheckpoint", "_train_time_interval", "whether a checkpoint saves every so often"),
    ("ModelCheckpoint", "_should_skip_saving_checkpoint", "whether it saved at this step (or must not save)"),
    ("ModelCheckpoint", "_save_topk_checkpoint", "save last.ckpt at the run's end, as its triggers save it"),
    ("ModelCheckpoint", "_monitor_candidates", "the values a save formats and scores"),
    ("ModelCheckpoint", "_last_global_step_saved", "whether it saved at this step, before a validation"),
    ("Trainer", "_results", "what the model logged with sync_dist=True (DDP evaluation)"),
    ("Trainer", "_logger_connector", "the loggers' rows: the engine's values, metrics.csv"),
    ("ArgumentParser", "_parse_known_args_internal", "the arguments no option took, for 'did you mean'"),
    ("jsonargparse._typehints", "adapt_typehints", "typehint, return_type, val_class: a class, its bases"),
    ("jsonargparse._util", "import_object", "its name: a short class name that names no class"),
    ("jsonargparse._typehints", "get_all_subclass_paths", "the class paths a short name is resolved among"),
    ("lightning.pytorch.tuner.lr_finder", "tqdm", "the LR finder's progress bar, which has no switch"),
    ("WeightAveraging", "_average_model", "the average, to use the trained weights until it exists"),
    ("torch._inductor.cpp_builder", "get_cpp_compiler", "inductor's C++ compiler, before a run compiles"),
    ("optuna.storages._heartbeat", "BaseHeartbeat", "heartbeats for a journal file (RDBStorage's only)"),
    ("BaseHeartbeat", "_get_stale_trial_ids", "the trials whose heartbeat is stale, which Optuna fails"),
    ("FrozenTrial", "_trial_id", "a trial's id in its storage, under which its heartbeat is recorded"),
)


def subcommand_parser(cli: LightningCLI) -> LightningArgumentParser | None:
    """The parser of the subcommand ``cli`` runs (``None`` without a subcommand: ``run=False``)."""
    subcommand = cli.config.get("subcommand")
    return cli._subcommand_parsers.get(subcommand) if subcommand else None


def average_model(callback: WeightAveraging) -> AveragedModel | None:
    """The ``AveragedModel`` of a weight-averaging callback (``None`` outside ``fit``)."""
    return callback._average_model


def load_missed_loader_state(trainer: Trainer) -> bool:
    """When a model's ``configure_optimizers`` asked for ``trainer.estimated_stepping_batches``, Lightning
    built the training loader before restoring the checkpoint's loader state (Lightning #20550): load
    that state now, in a run that restarts mid-epoch, or forget it at an epoch boundary. Returns whether
    the epoch then needs a new iterator (the boundary case)."""
    loop = trainer.fit_loop
    if not loop._combined_loader_states_to_load or loop._combined_loader is None:
        return False
    if loop.restarting:
        loop._load_combined_loader_states()  # the interrupted epoch continues where it was
        iter(loop._data_fetcher)  # type: ignore[arg-type]
        return False
    loop._combined_loader_states_to_load = []
    return True


def new_epoch_iterator(trainer: Trainer) -> None:
    """Give the training loader a new iterator for ``current_epoch`` (its sampler's epoch set first)."""
    sampler = getattr(trainer.train_dataloader, "sampler", None)
    if callable(getattr(sampler, "set_epoch", None)):
        sampler.set_epoch(trainer.current_epoch)  # type: ignore[union-attr]
    iter(trainer.fit_loop._data_fetcher)  # type: ignore[arg-type]


def handle_sigterm(trainer: Trainer, handler: Callable[[int, FrameType | None], None] | None) -> None:
    """Make ``handler(signum, frame)`` the SIGTERM handler Lightning registers when ``trainer`` starts a
    stage (call it before), in place of its own (``_SignalConnector._sigterm_notifier_fn``), which
    broadcasts from inside the signal handler: a collective at whatever point the process was, which
    hangs every process when that point is inside another collective. ``None``: Lightning's again."""
    connector = trainer._signal_connector
    if handler is not None:
        connector._sigterm_notifier_fn = handler  # type: ignore[method-assign,assignment]
    elif "_sigterm_notifier_fn" in vars(connector):
        del connector._sigterm_notifier_fn


def broadcast_stop_request(
    trainer: Trainer,
    request: Callable[[], int] | None,
    stop: Callable[[int], BaseException] | None = None,
) -> None:
    """Under DDP Lightning broadcasts rank 0's SIGTERM flag at the start of every training batch, before
    it is fetched (``_TrainingEpochLoop._broadcast_sigterm_tensor``; not on one process). Make that
    broadcast carry ``request()`` of rank 0 instead (0: go on; else a signal number): when it is not 0,
    every process raises ``stop(signum)`` there, at the same step. No collective is added. ``None``:
    Lightning's broadcast again."""
    loop = trainer.fit_loop.epoch_loop
    if request is None or stop is None:
        vars(loop).pop("_broadcast_sigterm_tensor", None)
        return

    def broadcast() -> None:
        signum = torch.tensor([request()], device=trainer.strategy.root_device)
        torch.distributed.broadcast(signum, src=0)
        if signum.item():
            raise stop(int(signum.item()))

    loop._broadcast_sigterm_tensor = broadcast  # type: ignore[method-assign]


def step_or_time_trigger(checkpoint: ModelCheckpoint) -> str | None:
    """``"every_n_train_steps=N"`` or ``"train_time_interval=..."`` when ``checkpoint`` saves on one of
    those triggers (every N training steps, or once that much time passed), else ``None``."""
    if checkpoint._every_n_train_steps:
        return f"every_n_train_steps={checkpoint._every_n_train_steps}"
    if checkpoint._train_time_interval is not None:
        return f"train_time_interval={checkpoint._train_time_interval}"
    return None


def save_unless_saved(checkpoint: ModelCheckpoint, trainer: Trainer) -> None:
    """Save ``checkpoint``'s file now, as its triggers save it, unless it saved at this step already (or
    must not save now: outside ``fit``, in the sanity check, with ``fast_dev_run``)."""
    if not checkpoint._should_skip_saving_checkpoint(trainer):
        checkpoint._save_topk_checkpoint(trainer, checkpoint._monitor_candidates(trainer))


def save_again(checkpoint: ModelCheckpoint, trainer: Trainer) -> None:
    """Save ``checkpoint``'s file again when it saved at this step of ``fit`` already (not in the sanity
    check), so that the file holds what ran since at this step (e.g. a validation and its best score)."""
    fitting = trainer.state.fn == "fit" and not trainer.sanity_checking
    if fitting and checkpoint._last_global_step_saved == trainer.global_step:
        checkpoint._save_topk_checkpoint(trainer, checkpoint._monitor_candidates(trainer))


def align_logger_step(trainer: Trainer) -> None:
    """Set the loggers' step (the epoch loop's ``_batches_that_stepped``) to ``global_step``: some
    checkpoints saved at an epoch's end restore it one ahead (step ``k`` logged at ``k + 1``)."""
    trainer.fit_loop.epoch_loop._batches_that_stepped = trainer.global_step


def log_metrics(trainer: Trainer, metrics: dict[str, float], epoch_end: bool = False) -> None:
    """Hand ``metrics`` and the ``epoch`` to the trainer's loggers as Lightning hands them what a model logs
    (``_LoggerConnector.log_metrics``; a no-op without loggers): at the loggers' current step (the epoch
    loop's ``_batches_that_stepped``), or with ``epoch_end`` in a training epoch's end hooks, at the step
    of the epoch's last batch, where Lightning logs the epoch's values. For the engine's own values, which
    it never logs through the user's module."""
    step = trainer.fit_loop.epoch_loop._batches_that_stepped - epoch_end
    trainer._logger_connector.log_metrics({**metrics, "epoch": trainer.current_epoch}, step)  # type: ignore[dict-item]


def tee_logged_metrics(trainer: Trainer, sink: Logger) -> None:
    """Also hand ``sink`` every row of metrics that Lightning hands the trainer's loggers (the values and
    the step, as ``_LoggerConnector.log_metrics`` computes it), without making it one of
    ``trainer.loggers`` (the list a model's ``self.loggers`` returns: the user's loggers only)."""
    connector = trainer._logger_connector
    log = connector.log_metrics

    def log_and_tee(metrics: Any, step: int | None = None) -> None:
        log(metrics, step)
        if not trainer.loggers or not metrics:  # (Lightning logs nothing then)
            return
        scalars = convert_tensors_to_scalars(metrics)
        if step is None and (step := scalars.pop("step", None)) is None:
            scalars.setdefault("epoch", trainer.current_epoch)
            step = trainer.fit_loop.epoch_loop._batches_that_stepped
        sink.log_metrics(scalars, step=int(step))
        sink.save()

    connector.log_metrics = log_and_tee  # type: ignore[method-assign]


def synced_logs(trainer: Trainer) -> list[str]:
    """Names of the values the running loop's model logged in its step (``validation_step``,
    ``test_step``) with ``self.log(..., sync_dist=True)`` as a mean or on every step (``trainer._results``);
    torchmetrics ``Metric`` objects, and values logged once per process in an epoch hook (e.g. a
    ``MaxMetric``'s result in ``on_validation_epoch_end``), are not listed."""
    results = trainer._results
    return sorted(
        {
            metric.meta.name
            for metric in (results or {}).values()
            if metric.is_tensor
            and metric.meta.sync.should
            and metric.meta.fx.endswith("_step")
            and (metric.meta.on_step or metric.meta.is_mean_reduction)
        }
    )


class RecordsUnrecognized(LightningArgumentParser):
    """LightningCLI's parser that keeps ``unrecognized``: the command-line arguments no option took (the
    second value of jsonargparse's ``_parse_known_args_internal``), for the closest option's name; and
    ``settled``: the config its arguments start from (the defaults), which each ``--config`` then moves on."""

    unrecognized: list[str] = []
    settled: Namespace | None = None

    def _parse_known_args_internal(self, *args: Any, **kwargs: Any) -> tuple[Namespace, list[str]]:
        start = kwargs.get("namespace")
        self.settled = start.clone() if isinstance(start, Namespace) else None
        namespace, self.unrecognized = super()._parse_known_args_internal(*args, **kwargs)
        return namespace, self.unrecognized


def unresolved_class_name(error: BaseException) -> tuple[str, tuple[type, ...], list[str]] | None:
    """The short class name (``--model=Clasifier``) that jsonargparse found no class for, the classes it
    had to be a subclass of, and the class paths a short name is resolved among; ``None`` for another
    error. Read from the frames of ``error``'s traceback: the typehint is a local of ``adapt_typehints``
    (a class, a union, or a callable's ``return_type``) and the name one of ``import_object``."""
    bases: tuple[type, ...] = ()
    for code, local in _frames(error):
        if code == "adapt_typehints":
            for hint in (local.get("typehint"), local.get("return_type")):
                bases = _classes(hint) or bases
        name = local.get("name")
        if code == "import_object" and bases and isinstance(name, str) and name.isidentifier():
            return name, bases, [path for base in bases for path in get_all_subclass_paths(base)]
    return None


def rejected_class(error: BaseException) -> tuple[type, tuple[type, ...]] | None:
    """The class that a class path named (``--model=acme.Net``) which jsonargparse rejected for not being a
    subclass of the argument's type, and the classes it had to be a subclass of; ``None`` for another
    error. Read from the frames of ``error``'s traceback: ``val_class`` and ``typehint`` are locals of
    ``adapt_typehints``, ``subclass`` is ``False`` there when the class was rejected."""
    for code, local in _frames(error):
        given, bases = local.get("val_class"), _classes(local.get("typehint"))
        if code == "adapt_typehints" and local.get("subclass") is False and isinstance(given, type) and bases:
            return given, bases
    return None


def instance_typed(error: BaseException, bases: tuple[type, ...]) -> type | None:
    """The class among ``bases`` (``torch.optim.Optimizer``, an LR scheduler) that an argument is typed as,
    when jsonargparse failed to build one for it (an optimizer needs the model's parameters: Hydra's
    partial pattern, which LightningCLI spells ``OptimizerCallable``); ``None`` for another error. Read from
    the frames of ``error``'s traceback: ``typehint`` is a local of ``adapt_typehints``."""
    for code, local in _frames(error):
        hint = local.get("typehint")
        if code == "adapt_typehints" and isinstance(hint, type) and issubclass(hint, bases):
            return hint
    return None


def _frames(error: BaseException) -> Iterator[tuple[str, dict[str, Any]]]:
    """The function name and the locals of each frame of ``error``'s traceback, outermost first."""
    return ((frame.f_code.co_name, frame.f_locals) for frame, _ in traceback.walk_tb(error.__traceback__))


def _classes(hint: Any) -> tuple[type, ...]:
    """The classes a type hint names: itself, or the members of a union (``None`` left out)."""
    return tuple(c for c in (hint, *get_args(hint)) if isinstance(c, type) and c is not type(None))


def cpp_compiler_problem() -> str | None:
    """Why inductor finds no C++ compiler for CPU code (torch's own search, ``get_cpp_compiler``: the
    ``CXX`` environment variable, else ``g++``, each run with ``--version``), or ``None`` when it finds
    one."""
    from torch._inductor.cpp_builder import get_cpp_compiler

    try:
        get_cpp_compiler()
    except (RuntimeError, OSError) as error:
        return str(error).strip().partition("\n")[0]
    return None


@contextmanager
def lr_finder_without_progress_bar() -> Iterator[None]:
    """``Tuner.lr_find`` without its tqdm bar (its callback always draws one), for output that is not a
    terminal, where each redraw would be a line."""
    bar = lr_finder.tqdm
    lr_finder.tqdm = functools.partial(bar, disable=True)
    try:
        yield
    finally:
        lr_finder.tqdm = bar


def journal_storage(path: str, heartbeat_interval: int, retry: Callable[..., None]) -> Any:
    """Optuna's ``JournalStorage`` on the file ``path`` (``JournalFileBackend``: its default symlink lock
    is safe on NFS) with the heartbeats that only Optuna's ``RDBStorage`` has: a running trial records
    the time (system attribute ``heartbeat:<trial id>``: a retried copy of a trial does not inherit its
    heartbeat) every ``heartbeat_interval`` seconds; one without a heartbeat (or start) for twice as long
    is failed by the next worker that looks (``optuna.storages.fail_stale_trials``, which Optuna's
    ``optimize`` calls before each trial) and handed to ``retry``."""
    from optuna.storages import JournalStorage
    from optuna.storages._heartbeat import BaseHeartbeat
    from optuna.storages.journal import JournalFileBackend
    from optuna.trial import TrialState

    class HeartbeatJournalStorage(JournalStorage, BaseHeartbeat):
        def record_heartbeat(self, trial_id: int) -> None:
            self.set_trial_system_attr(trial_id, f"heartbeat:{trial_id}", time.time())

        def _get_stale_trial_ids(self, study_id: int) -> list[int]:
            limit, stale = time.time() - 2 * heartbeat_interval, []
            for trial in self.get_all_trials(study_id, deepcopy=False, states=(TrialState.RUNNING,)):
                start = trial.datetime_start.timestamp() if trial.datetime_start else time.time()
                if trial.system_attrs.get(f"heartbeat:{trial._trial_id}", start) < limit:
                    stale.append(trial._trial_id)
            return stale

        def get_heartbeat_interval(self) -> int:
            return heartbeat_interval

        def get_heartbeat_stale_trial_callback(self) -> Callable[..., None]:
            return retry

    return HeartbeatJournalStorage(JournalFileBackend(path))
