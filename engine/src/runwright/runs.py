"""Run folders: one new folder per run under ``logs_dir`` (or the folder of the run a checkpoint
continues), the loggers pointed at it, its ``config.yaml`` and a continued run's ``metrics.csv``, and the
checkpoints of earlier runs (``--ckpt_path best|last``)."""

from __future__ import annotations

import contextlib
import csv
import importlib
import inspect
import itertools
import os
import shutil
import sys
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import torch
import yaml
from jsonargparse import Namespace
from lightning.pytorch import LightningModule, Trainer
from lightning.pytorch.cli import SaveConfigCallback
from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger, WandbLogger
from lightning.pytorch.utilities import rank_zero_only, rank_zero_warn

from . import private, slurm
from .errors import CheckpointError, ConfigError, RunExistsError

#: Set by the launching process so the DDP worker processes it starts reuse its run folder.
RUN_DIR_ENV = "RUNWRIGHT_RUN_DIR"

#: ``--ckpt_path`` values that name a checkpoint of the newest earlier run instead of a file.
CHECKPOINT_ALIASES = ("best", "last")

#: Keys of a fit's config that belong to that run alone: its ``config.yaml`` has them as null, so that
#: re-running it (``fit --config logs/A/config.yaml``) starts a new run instead of writing into A.
RUN_KEYS = ("run_name", "ckpt_path")


#: Model arguments set from the DataModule's attributes, where the model's class names the argument:
#: target -> source attribute.
DATA_LINKS = {"num_classes": "num_classes", "in_features": "num_features", "in_channels": "dims[0]"}


def linked_arguments(model_class: type) -> dict[str, str]:
    """The :data:`DATA_LINKS` whose target ``model_class`` names as an argument (not one its ``**kwargs``
    would take): only these are set from the DataModule."""
    parameters = inspect.signature(model_class).parameters
    return {target: source for target, source in DATA_LINKS.items() if target in parameters}


def class_of(class_path: str) -> type:
    """The class that a ``class_path`` such as ``torch.optim.SGD`` names (imported)."""
    module, _, name = class_path.rpartition(".")
    cls: type = getattr(importlib.import_module(module), name)
    return cls


def add_run_folder_arguments(parser: Any) -> None:
    """Add ``--logs_dir`` and ``--run_name`` (see :func:`create_run_dir`) to a jsonargparse parser."""
    parser.add_argument("--logs_dir", type=str, default="logs", help="Folder with one subfolder per run.")
    parser.add_argument("--run_name", type=str | None, default=None, help="Run folder name (default: auto).")


def create_run_dir(logs_dir: str | Path, subcommand: str, run_name: str | None = None) -> Path:
    """Create and return a new, empty run folder ``<logs_dir>/<run_name>``.

    Without ``run_name`` the name is ``<YYYY-mm-dd_HH-MM-SS>_<subcommand>``, with ``_2``, ``_3``, ...
    appended when two runs start in the same second (``mkdir`` without ``exist_ok`` makes the choice
    atomic). Under torchrun (``--rdzv-id`` or ``--standalone``) or SLURM, where every rank starts on
    its own, the default name is the job's (``torchrun-<id>``, ``slurm-<SLURM_JOB_ID>``), shared by all
    ranks. In the processes a launcher started for rank > 0 it is the launching process's folder
    (:data:`RUN_DIR_ENV`). Under SLURM the folder (named or not) is the job's
    (:func:`runwright.slurm.claim`): its tasks all use it, and a requeue of the job finds it again.

    Raises:
        RunExistsError: ``run_name`` exists already (under SLURM: and is not this job's), or is not a
            plain folder name.
    """
    if (inherited := os.environ.get(RUN_DIR_ENV)) and (
        "LOCAL_RANK" in os.environ or "SLURM_PROCID" in os.environ
    ):
        return Path(inherited)
    if run_name and (Path(run_name).name != run_name or run_name in (".", "..")):
        raise RunExistsError(f"run_name={run_name!r}: must be a plain folder name (no '/' or '..')")
    root = Path(logs_dir).expanduser().resolve()
    root.mkdir(parents=True, exist_ok=True)
    torchrun, slurm_job = os.environ.get("TORCHELASTIC_RUN_ID", "none"), slurm.job()
    job = f"torchrun-{torchrun}" if torchrun != "none" else slurm_job and slurm.default_run_name()
    if not (name := run_name or job):
        base = f"{datetime.now():%Y-%m-%d_%H-%M-%S}_{subcommand}"
        for attempt in itertools.count(1):
            with contextlib.suppress(FileExistsError):
                (run_dir := root / (base if attempt == 1 else f"{base}_{attempt}")).mkdir()
                break
    else:
        try:  # a job's folder may exist (every task of the job makes it, a requeue finds it)
            (run_dir := root / name).mkdir(exist_ok=slurm_job is not None or not run_name)
        except FileExistsError:
            raise RunExistsError(f"run_name={run_name!r}: {run_dir} exists; choose another name") from None
        if slurm_job is not None:  # the job owns it
            slurm.claim(run_dir, slurm_job, named=bool(run_name))
    os.environ[RUN_DIR_ENV] = str(run_dir)
    return run_dir


def write_atomically(path: str | Path, write: Callable[[Path], object] | str) -> Path:
    """Write ``path`` whole or not at all: ``write(temporary)`` (or, ``write`` a string, that text)
    writes a temporary file next to it (``.<name>.tmp-<pid>``: a writer that reads the format from the
    file name must be told it), which then replaces ``path`` (``os.replace``, atomic on one file
    system). Returns ``path``.

    Raises:
        OSError: what ``write`` or the replace raised, naming ``path`` (a failed ``write`` names no
            file); the temporary file is removed.
    """
    path = Path(path)
    temporary = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        temporary.write_text(write) if isinstance(write, str) else write(temporary)
        os.replace(temporary, path)
    except OSError as error:
        if error.filename is None or error.filename in (temporary, str(temporary)):
            error.filename = str(path)
        raise
    finally:
        temporary.unlink(missing_ok=True)
    return path


def read_yaml(path: Path) -> Any:
    """The data of the YAML file ``path``, or ``None`` when there is no such file."""
    return yaml.safe_load(path.read_text()) if path.is_file() else None


def record_name(folder: Path, name: str) -> str:
    """The file name of a run's record (``config.yaml``, ``provenance.yaml``) in its run folder ``folder``:
    ``name``, or in a continued run, which keeps the first, the first free ``<stem>.resume-<n>.yaml``
    (``n`` = 1, 2, ...; a record deleted by hand is not overwritten by the next but one)."""
    stem = name.removesuffix(".yaml")
    names = (f"{stem}.resume-{n}.yaml" if n else name for n in itertools.count())
    return next(record for record in names if not (folder / record).exists())


def run_dir_of(ckpt_path: str | Path) -> Path | None:
    """The run folder that holds ``ckpt_path`` (``<run>/checkpoints/**/<file>.ckpt`` next to
    ``<run>/config.yaml``), or ``None`` for a checkpoint outside a run folder."""
    folder = next(
        (p for p in Path(ckpt_path).expanduser().resolve().parents if p.name == "checkpoints"), None
    )
    return folder.parent if folder is not None and (folder.parent / "config.yaml").is_file() else None


def choose_run_dir(config: Namespace, subcommand: str) -> tuple[Path, bool]:
    """The run folder of this command and whether it continues an earlier run: ``fit --ckpt_path`` of a
    checkpoint inside a run folder continues that run there, unless ``--run_name`` names another run
    (a branch); anything else gets a new folder (:func:`create_run_dir`)."""
    ckpt_path = config.get("ckpt_path")
    continued = run_dir_of(ckpt_path) if subcommand == "fit" and ckpt_path else None
    named = Path(config.logs_dir).expanduser().resolve() / str(config.run_name)
    if continued is not None and (not config.run_name or continued == named):
        return continued, True
    return create_run_dir(config.logs_dir, subcommand, config.run_name), False


#: The run folders this process holds locked (:func:`lock_run`), as descriptors.
LOCKED: set[int] = set()


def _unlock_in_child() -> None:
    """A forked child (a DataLoader worker) holds none of its parent's run locks."""
    while LOCKED:
        os.close(LOCKED.pop())


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_unlock_in_child)


def lock_run(run_dir: Path) -> int | None:
    """Lock the folder ``run_dir`` for this process's fit of the run (``flock`` on the folder itself:
    released when the process ends, however it ends, so a requeued job takes it again; a forked child
    such as a DataLoader worker does not keep it); returns the descriptor to give :func:`unlock_run`, or
    ``None`` on other ranks and where folders cannot be locked (Windows; NFS, which locks only files
    open for writing).

    Raises:
        RunExistsError: another process holds it (a fit of this run is still going).
    """
    if getattr(rank_zero_only, "rank", 0) > 0 or sys.platform == "win32":
        return None
    import fcntl

    folder = os.open(run_dir, os.O_RDONLY)
    try:
        fcntl.flock(folder, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as error:
        os.close(folder)
        if isinstance(error, BlockingIOError):
            raise RunExistsError(
                f"{run_dir} is being trained by another process: wait until it ends, or branch off with "
                "--run_name <a new name>"
            ) from None
        return None
    LOCKED.add(folder)
    return folder


def unlock_run(folder: int) -> None:
    """Release the lock of :func:`lock_run`."""
    LOCKED.discard(folder)
    os.close(folder)


def best_checkpoint_of(last: Path) -> Path:
    """The best checkpoint of the run whose ``last.ckpt`` is ``last``: the ``best_model_path`` that the
    run's own :class:`~runwright.checkpointing.BestCheckpoint` recorded, looked up in the same folder
    (the run may have moved), or as recorded when it was saved in its own ``--checkpoint.dirpath``.
    Right for any ``save_top_k`` and ``checkpoint.filename``; a user's own ``ModelCheckpoint`` is never
    taken for it.

    Raises:
        CheckpointError: ``last`` does not exist, records no best checkpoint, or that file is gone.
    """
    if not last.is_file():
        raise CheckpointError(f"--ckpt_path=best: {last}, which records the best checkpoint, does not exist")
    state = torch.load(last, map_location="cpu", weights_only=True, mmap=True).get("callbacks", {})
    records = [v for k, v in state.items() if k.startswith("BestCheckpoint") and v.get("best_model_path")]
    if not records:
        raise CheckpointError(
            f"--ckpt_path=best: {last} records no best checkpoint of its run (its --checkpoint saved none); "
            "use --ckpt_path last, the end of its latest epoch, or pass a checkpoint file"
        )
    path, folder = Path(records[0]["best_model_path"]), records[0].get("dirpath")
    own = any(v.get("dirpath") != folder for k, v in state.items() if k.startswith("LastCheckpoint"))
    inside = folder and path.is_relative_to(folder)
    best = path if own else last.parent / (path.relative_to(folder) if inside else path.name)
    if not best.is_file():
        raise CheckpointError(f"--ckpt_path=best: {best}, the best checkpoint its run recorded, is gone")
    return best


def resolve_checkpoint(ckpt_path: str, logs_dir: str | Path = "logs", option: str = "--ckpt_path") -> Path:
    """The checkpoint file that ``option`` (``--ckpt_path``, ``--init_from``) names, for every command: a
    path, or ``last``/``best`` of the newest run under ``logs_dir`` (the run folder with the newest
    checkpoint file), its ``checkpoints/last.ckpt`` or its best checkpoint (:func:`best_checkpoint_of`).

    Raises:
        CheckpointError: no such file (or a folder), no run under ``logs_dir`` has a checkpoint, or the
            newest run has no ``last.ckpt`` (an older run's is never taken instead); named by ``option``.
    """
    if ckpt_path not in CHECKPOINT_ALIASES:
        if not (path := Path(ckpt_path).expanduser()).is_file():
            what = "a folder, not a checkpoint file" if path.is_dir() else "no such file"
            raise CheckpointError(f"{option}={ckpt_path!r}: {what} (or pass best/last of the newest run)")
        return path
    root = Path(logs_dir).expanduser()
    candidates = sorted(root.glob("*/checkpoints/**/*.ckpt"), key=lambda p: p.stat().st_mtime)
    if not candidates:
        raise CheckpointError(
            f"{option}={ckpt_path}: no run under {root.resolve()} has checkpoints; train one"
        )
    last = root / candidates[-1].relative_to(root).parts[0] / "checkpoints" / "last.ckpt"
    if ckpt_path == "last" and not last.is_file():
        raise CheckpointError(f"{option}=last: the newest run has no {last}; pass the checkpoint's path")
    return last if ckpt_path == "last" else best_checkpoint_of(last)


def run_logger_config(logger: Any, run_dir: Path, wandb_id: str | None = None) -> Any:
    """The loggers of ``logger`` (a config: ``class_path`` namespaces, a list of them, ``True`` or
    ``False``) pointed at ``run_dir``, as a new config (``logger`` itself is not changed).

    CSV and TensorBoard loggers write straight into the run folder, W&B into ``<run_dir>/wandb``, named
    after the run folder unless a name is set, and with ``wandb_id`` (resumed) when continuing a run;
    the environment variable ``WANDB_MODE=online`` (upload) or ``disabled`` (W&B off) overrides its
    ``offline`` default. ``True`` (Lightning's default logger) becomes a ``CSVLogger``; ``False``/``None``
    (logging off) stay as they are. No logger is added (:func:`metrics_csv` keeps the run's
    ``metrics.csv`` without one).
    """
    if logger is None or logger is False:
        return logger
    if logger is True:
        logger = Namespace(class_path=f"{CSVLogger.__module__}.CSVLogger", init_args=Namespace())
    items = [item.clone() for item in (logger if isinstance(logger, list) else [logger])]
    for item in items:
        cls, init_args = class_of(item.class_path), item.get("init_args") or Namespace()
        init_args.save_dir = str(run_dir)
        if issubclass(cls, (CSVLogger, TensorBoardLogger)):
            init_args.name, init_args.version = "", ""
        elif issubclass(cls, WandbLogger):
            try:
                import wandb
            except ImportError:
                raise ConfigError(
                    "trainer.logger WandbLogger needs the wandb package: pip install wandb, or log elsewhere "
                    "(e.g. --config configs/logger/tensorboard.yaml)"
                ) from None

            # W&B's console follows WANDB_SILENT (set by progress.quiet_console) only from its setup on;
            # its check of Lightning's anonymous=None comes before that and warns that it does nothing
            silent = os.environ.get("WANDB_SILENT", "").lower() in ("true", "1", "yes")
            wandb.termsetup(wandb.Settings(silent=silent), None)
            init_args.name = init_args.get("name") or run_dir.name
            if os.environ.get("WANDB_MODE", "").lower() in ("online", "disabled"):
                init_args.offline = False  # else WandbLogger(offline=True) overrides WANDB_MODE
            if wandb_id and not init_args.get("id"):
                init_args.id = wandb_id
                item.dict_kwargs = {**(item.get("dict_kwargs") or {}), "resume": "allow"}
        item.init_args = init_args
    return items if len(items) > 1 else items[0]


def wandb_id_of(run_dir: Path) -> str | None:
    """The W&B run id of a run folder (from ``<run_dir>/wandb/latest-run``), or ``None``."""
    latest = run_dir / "wandb" / "latest-run"
    return latest.resolve().name.rsplit("-", 1)[-1] if latest.exists() else None


def metrics_csv(trainer: Trainer, run_dir: Path) -> CSVLogger | None:
    """The logger that writes the run's ``metrics.csv`` (every row the trainer's loggers get): the user's
    own ``CSVLogger`` when there is one, else a ``CSVLogger`` of the run folder that is handed the same rows
    (:func:`~runwright.private.tee_logged_metrics`) without being one of the user's loggers. ``None``
    without loggers (logging off)."""
    if not trainer.loggers:
        return None
    if own := next((logger for logger in trainer.loggers if isinstance(logger, CSVLogger)), None):
        return own
    private.tee_logged_metrics(trainer, sink := CSVLogger(run_dir, name="", version=""))
    return sink


def keep_metrics_csv(logger: CSVLogger, last_step: int) -> None:
    """Keep the rows a continued run logged up to its checkpoint's step in its ``metrics.csv``.

    Lightning's CSV logger deletes a ``metrics.csv`` it finds in its folder when it starts; the rows
    are read first and logged again through the logger (``log_metrics``), so the new rows follow them
    in the same file. Rows from ``last_step`` on (logged after the checkpoint, before the run stopped)
    are dropped, as the continued run logs those steps again.
    """
    if not (path := Path(logger.log_dir) / "metrics.csv").is_file():
        return
    with path.open(newline="") as handle:
        rows = [row for row in csv.DictReader(handle) if row.get("step")]
    logger.experiment  # noqa: B018 (starts the writer, which deletes the file)
    for row in rows:
        step = int(float(row.pop("step")))
        if step < last_step:  # rows at last_step were logged after the checkpoint was saved
            logger.log_metrics({key: _number(value) for key, value in row.items() if value}, step=step)
    logger.save()


def _number(text: str) -> float:
    """A CSV cell as Lightning wrote it: ``3`` stays an int (the epoch column), ``0.25`` a float."""
    return int(text) if text.lstrip("-").isdigit() else float(text)


class SaveConfig(SaveConfigCallback):
    """Save the experiment's config as ``config.yaml`` in the run folder, and as W&B's run config.

    The run folder is never in the config (the loggers and checkpoints are pointed at it when they are
    built), and a fit's :data:`RUN_KEYS` are left out (not null, which would override a value given
    before the ``--config``: ``validate --ckpt_path best --config <run>/config.yaml``), so ``fit --config
    <run>/config.yaml`` repeats the experiment in a new run; so are those of a run built without a subcommand
    (``ProjectCLI(run=False)``: a sweep's trial, a tuner). ``validate``, ``test`` and ``predict`` keep
    their ``ckpt_path`` (what they evaluated) but not their ``run_name``, so that their config too runs
    again in a new folder. A continued run (``fit --ckpt_path`` into
    its own folder) keeps the first ``config.yaml`` and saves its own as ``config.resume-<n>.yaml``.
    """

    def __init__(self, parser: Any, config: Namespace, *args: Any, **kwargs: Any) -> None:
        portable = config.clone()
        evaluation = parser.prog.split()[-1] in ("validate", "test", "predict")  # (the subcommand parser's)
        for key in set(RUN_KEYS) & set(portable.keys()):
            if not (evaluation and key == "ckpt_path"):  # an evaluation's config names what it evaluated
                portable.pop(key)  # (not null: a value given before --config of it is kept)
        super().__init__(parser, portable, *args, **kwargs)

    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        """Pick a free file name, then save (Lightning) and call :meth:`save_config` on rank 0."""
        self.folder = Path(trainer.log_dir or ".")  # broadcasts: every rank asks
        if trainer.is_global_zero and not self.already_saved:
            self.config_filename = record_name(self.folder, self.config_filename)
        self.config_filename = trainer.strategy.broadcast(self.config_filename)  # rank 0's choice
        super().setup(trainer, pl_module, stage)

    def save_config(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        """Log the saved config to every ``WandbLogger`` of the trainer (read back from the file).

        Runs on rank 0 only, so it must not ask ``trainer.log_dir`` (a broadcast: the other ranks would
        never answer and DDP would hang); it uses the folder :meth:`setup` found.
        """
        for logger in trainer.loggers:
            if isinstance(logger, WandbLogger) and (config := read_yaml(self.folder / self.config_filename)):
                logger.experiment.config.update({"config": config}, allow_val_change=True)


def finish_wandb_run(is_global_zero: bool = True) -> None:
    """Close the current W&B run, if any (the next run in this process starts its own); for an
    offline run, print (on rank 0) the one ``wandb sync`` command that uploads it: every offline part of
    this W&B run (a continued run adds one per ``fit --ckpt_path``), oldest first, which ``wandb sync``
    uploads in that order as one run."""
    if (run := getattr(sys.modules.get("wandb"), "run", None)) is None:
        return
    offline, sync_dir, run_id = bool(getattr(run, "offline", False)), getattr(run, "sync_dir", None), run.id
    run.finish()
    if offline and sync_dir and is_global_zero:
        folder = Path(sync_dir)
        parts = sorted(folder.parent.glob(f"offline-run-*-{run_id}")) or [folder]
        print(f"W&B run saved offline; upload it with: wandb sync {' '.join(map(str, parts))}")


def discard_new_run(run_dir: Path, logs_dir_too: bool) -> None:
    """Delete a command's new run folder ``run_dir`` unless it holds a checkpoint (the loggers may have
    written their first files before a setting was found bad), closing its W&B run silently, and the logs
    folder above it when ``logs_dir_too`` (the command created it) and it is left empty. Under DDP only
    rank 0 deletes."""
    kept = any(run_dir.glob("checkpoints/**/*.ckpt"))  # (none in a folder that is gone)
    if getattr(rank_zero_only, "rank", 0) > 0 or kept or not run_dir.is_dir():
        return
    finish_wandb_run(is_global_zero=False)
    shutil.rmtree(run_dir, ignore_errors=True)
    if logs_dir_too:
        with contextlib.suppress(OSError):
            run_dir.parent.rmdir()


def discard_added(run_dir: Path, entries: set[Path]) -> None:
    """Delete what a command added to the run folder ``run_dir`` (its entries other than ``entries``: a
    refused resume's ``config.resume-<n>.yaml`` and provenance records). Under DDP only rank 0 deletes."""
    if getattr(rank_zero_only, "rank", 0) > 0:
        return
    for path in set(run_dir.iterdir()) - entries:
        shutil.rmtree(path) if path.is_dir() else path.unlink()


def saved_run(
    checkpoint: dict[str, Any], run_dir: Path | None = None, groups: tuple[str, ...] = ()
) -> dict[str, Any]:
    """The run that wrote ``checkpoint``, as a config: the ``model`` and ``data`` configs
    (``{class_path, init_args}``) and the sections ``groups`` (the engine's callbacks: ``checkpoint``,
    ``health``, ...) of the ``config.yaml`` of ``run_dir``, the run folder that holds it, with the
    ``hyper_parameters`` and ``datamodule_hyper_parameters`` that LightningCLI saved in the checkpoint
    (``_class_path`` plus the arguments) over them: so a class that saves no hyperparameters (a DataModule
    written the way Lightning's docs write one) or leaves some out (``save_hyperparameters(ignore=["net"])``)
    is rebuilt from ``config.yaml``, and a checkpoint outside a run folder (e.g. moved) from its own.

    A linked argument (:data:`DATA_LINKS`) that the model's class does not name, saved by an earlier
    engine, is left out with a warning (the class never took it)."""
    recorded = read_yaml(run_dir / "config.yaml") or {} if run_dir is not None else {}
    # (data is None in a run without a DataModule: its loaders are the model's)
    configs = {name: recorded[name] for name in ("model", "data", *groups) if name in recorded}
    for name, key in (("model", "hyper_parameters"), ("data", "datamodule_hyper_parameters")):
        saved = {k: v for k, v in (checkpoint.get(key) or {}).items() if k != "_instantiator"}
        if not (class_path := saved.pop("_class_path", None)):
            continue
        section = configs.get(name) or {}
        init_args = dict(section.get("init_args") or {}) if section.get("class_path") == class_path else {}
        configs[name] = {"class_path": class_path, "init_args": {**init_args, **saved}}
    model = configs.get("model", {}).get("init_args", {})
    if unknown := [
        key
        for key in DATA_LINKS
        if key in model and key not in linked_arguments(class_of(configs["model"]["class_path"]))
    ]:
        rank_zero_warn(
            f"the checkpoint's hyperparameters hold {', '.join(unknown)}, which "
            f"{configs['model']['class_path']} does not take (an earlier runwright saved the DataModule's "
            "value there): left out",
            stacklevel=6,  # (LightningCLI's parsing: shown as one line, without a source line)
        )
        for key in unknown:
            del model[key]
    return configs
