"""Run folders: one new folder per run under ``logs_dir`` (or the folder of the run a checkpoint
continues), the loggers pointed at it, ``config.yaml`` and a continued run's ``metrics.csv``; finding
the checkpoints of earlier runs (``best``/``last``) and rebuilding a run's model and data outside the
Trainer (export, report)."""

from __future__ import annotations

import csv
import importlib
import os
import sys
import warnings
from datetime import datetime
from pathlib import Path
from typing import Any

import torch
import yaml
from jsonargparse import ArgumentParser, Namespace
from lightning.pytorch import LightningDataModule, LightningModule, Trainer
from lightning.pytorch.cli import SaveConfigCallback
from lightning.pytorch.loggers import CSVLogger, Logger, TensorBoardLogger, WandbLogger
from torch import Tensor

from . import deprecations
from .errors import CheckpointError, RunExistsError

#: Set by the launching process so the DDP worker processes it starts reuse its run folder.
RUN_DIR_ENV = "RUNWRIGHT_RUN_DIR"

#: ``--ckpt_path`` values that name a checkpoint of the newest earlier run instead of a file.
CHECKPOINT_ALIASES = ("best", "last")

#: Keys of a fit's config that belong to that run alone: its ``config.yaml`` has them as null, so that
#: re-running it (``fit --config logs/A/config.yaml``) starts a new run instead of writing into A.
RUN_KEYS = ("run_name", "ckpt_path")


def class_of(class_path: str) -> type:
    """The class that a ``class_path`` such as ``torch.optim.SGD`` names (imported)."""
    module, _, name = class_path.rpartition(".")
    cls: type = getattr(importlib.import_module(module), name)
    return cls


def _is_worker_process() -> bool:
    """True in a process that a launcher started for rank > 0 (or any torchrun/SLURM rank)."""
    return "LOCAL_RANK" in os.environ or "SLURM_PROCID" in os.environ


def add_run_folder_arguments(parser: Any) -> None:
    """Add ``--logs_dir`` and ``--run_name`` (see :func:`create_run_dir`) to a jsonargparse parser."""
    parser.add_argument("--logs_dir", type=str, default="logs", help="Folder with one subfolder per run.")
    parser.add_argument("--run_name", type=str | None, default=None, help="Run folder name (default: auto).")


def _launcher_job_name() -> str | None:
    """A run name shared by every rank of a torchrun or SLURM job, or ``None`` outside one."""
    torchrun_id = os.environ.get("TORCHELASTIC_RUN_ID", "none")
    if torchrun_id != "none":
        return f"torchrun-{torchrun_id}"
    if "SLURM_JOB_ID" in os.environ and "SLURM_PROCID" in os.environ:
        return f"slurm-{os.environ['SLURM_JOB_ID']}"
    return None


def create_run_dir(logs_dir: str | Path, subcommand: str, run_name: str | None = None) -> Path:
    """Create and return a new, empty run folder ``<logs_dir>/<run_name>``.

    Without ``run_name`` the name is ``<YYYY-mm-dd_HH-MM-SS>_<subcommand>``; if that folder exists
    (two runs started in the same second) ``_2``, ``_3``, ... is appended. ``mkdir`` without
    ``exist_ok`` makes the choice atomic, so runs started at the same time never share a folder.
    Under torchrun (with ``--rdzv-id`` or ``--standalone``) or SLURM every rank is started on its own,
    so the default name is the job's id (``torchrun-<id>``, ``slurm-<SLURM_JOB_ID>``) and all ranks
    share that folder. In the worker processes of a multi-process launch the folder the launching
    process created (passed down in :data:`RUN_DIR_ENV`) is returned instead.

    Raises:
        RunExistsError: ``run_name`` exists already, or is not a plain folder name.
    """
    inherited = os.environ.get(RUN_DIR_ENV)
    if inherited and _is_worker_process():
        return Path(inherited)
    root = Path(logs_dir).expanduser().resolve()
    root.mkdir(parents=True, exist_ok=True)
    job_name = _launcher_job_name()
    if not run_name and job_name:
        run_dir = root / job_name
        run_dir.mkdir(exist_ok=True)
    elif run_name:
        if Path(run_name).name != run_name or run_name in (".", ".."):
            raise RunExistsError(
                f"run_name={run_name!r}: must be a plain folder name (no '/' or '..'); the run folder is "
                f"created under logs_dir={str(logs_dir)!r}"
            )
        run_dir = root / run_name
        try:
            run_dir.mkdir()
        except FileExistsError:
            raise RunExistsError(
                f"run_name={run_name!r}: {run_dir} already exists; choose another name or leave "
                "run_name unset for an automatic one"
            ) from None
    else:
        base = f"{datetime.now():%Y-%m-%d_%H-%M-%S}_{subcommand}"
        for attempt in range(1, 10_000):
            run_dir = root / (base if attempt == 1 else f"{base}_{attempt}")
            try:
                run_dir.mkdir()
                break
            except FileExistsError:
                continue
    os.environ[RUN_DIR_ENV] = str(run_dir)
    return run_dir


def run_dir_of(ckpt_path: str | Path) -> Path | None:
    """The run folder that holds ``ckpt_path`` (``<run>/checkpoints/<file>.ckpt`` next to
    ``<run>/config.yaml``; also in a subfolder of ``checkpoints/``, which a filename such as
    ``{epoch}-{val/acc:.3f}`` makes), or ``None`` for a checkpoint outside a run folder."""
    parents = Path(ckpt_path).expanduser().resolve().parents
    folder = next((parent for parent in parents if parent.name == "checkpoints"), None)
    run_dir = folder.parent if folder is not None else None
    return run_dir if run_dir is not None and (run_dir / "config.yaml").is_file() else None


def choose_run_dir(config: Namespace, subcommand: str) -> tuple[Path, bool]:
    """The run folder of this command and whether it continues an earlier run: ``fit --ckpt_path`` of a
    checkpoint inside a run folder continues that run there, unless ``--run_name`` names another run
    (a branch; the run's own name, as in the command that started it, continues it too); anything
    else gets a new folder (:func:`create_run_dir`)."""
    ckpt_path = config.get("ckpt_path")
    continued = run_dir_of(ckpt_path) if subcommand == "fit" and ckpt_path else None
    named = Path(config.logs_dir).expanduser().resolve() / str(config.run_name)
    if continued is not None and (not config.run_name or continued == named):
        return continued, True
    return create_run_dir(config.logs_dir, subcommand, config.run_name), False


def best_checkpoint_of(last: Path) -> Path:
    """The best checkpoint of the run whose ``last.ckpt`` is ``last``: the ``best_model_path`` that the
    run's own best-checkpoint callback (``--checkpoint.*``) recorded, looked up in the same folder.

    Reading the callback's own record makes ``best`` right for any ``save_top_k`` and any
    ``checkpoint.filename`` (``best-v1.ckpt`` may be better than ``best.ckpt``); a ``ModelCheckpoint``
    that the user added is never taken for it.

    Raises:
        CheckpointError: ``last`` does not exist, the run recorded no best checkpoint, or the file
            is gone.
    """
    if not last.is_file():
        raise CheckpointError(
            f"--ckpt_path=best: {last} does not exist, and the run's best checkpoint is read from it; "
            "pass the checkpoint's path"
        )
    state = torch.load(last, map_location="cpu", weights_only=True, mmap=True).get("callbacks", {})
    # (ModelCheckpoint: the same callback in checkpoints written before it was BestCheckpoint; only
    # there, so that a ModelCheckpoint the user added is never taken when the run has no best yet)
    prefix = "BestCheckpoint" if any(key.startswith("BestCheckpoint") for key in state) else "ModelCheckpoint"
    records = [
        value
        for key, value in state.items()
        if key.startswith(prefix) and value.get("monitor") and value.get("best_model_path")
    ]
    if not records:
        raise CheckpointError(f"--ckpt_path=best: {last} records no best checkpoint of its run")
    # relative to the callback's folder (a filename such as "{epoch}-{val/acc:.3f}" makes subfolders),
    # and looked up in this run folder (it may have moved since)
    path, folder = Path(records[0]["best_model_path"]), records[0].get("dirpath")
    relative = path.relative_to(folder) if folder and path.is_relative_to(folder) else Path(path.name)
    best = last.parent / relative
    if not best.is_file():
        raise CheckpointError(f"--ckpt_path=best: {best}, the best checkpoint its run recorded, is gone")
    return best


def resolve_checkpoint(ckpt_path: str, logs_dir: str | Path = "logs") -> Path:
    """The checkpoint file that ``--ckpt_path`` names, for every command (fit, validate, test,
    predict, export, report).

    The newest run is the run folder under ``logs_dir`` with the newest checkpoint file (by
    modification time). ``last`` is its ``checkpoints/last.ckpt``; ``best`` is its best checkpoint
    (:func:`best_checkpoint_of`); anything else is a path.

    Raises:
        CheckpointError: no such file, no run under ``logs_dir`` has a checkpoint, or the newest run
            has no ``last.ckpt`` (an older run's is never taken instead).
    """
    if ckpt_path not in CHECKPOINT_ALIASES:
        path = Path(ckpt_path).expanduser()
        if not path.is_file():
            raise CheckpointError(
                f"--ckpt_path={ckpt_path!r}: no such file. Pass a checkpoint file, or 'best'/'last' for "
                f"the newest run under --logs_dir={str(logs_dir)!r}"
            )
        return path
    root = Path(logs_dir).expanduser()
    candidates = sorted(root.glob("*/checkpoints/**/*.ckpt"), key=lambda p: p.stat().st_mtime)
    if not candidates:
        raise CheckpointError(
            f"--ckpt_path={ckpt_path}: no run under {root.resolve()} has checkpoints; "
            "train one with `fit` first, or pass the checkpoint's path"
        )
    run_dir = root / candidates[-1].relative_to(root).parts[0]
    last = run_dir / "checkpoints" / "last.ckpt"
    if ckpt_path == "last" and not last.is_file():
        raise CheckpointError(
            f"--ckpt_path=last: the newest run, {run_dir}, has no checkpoints/last.ckpt; pass the path "
            "of the checkpoint you mean"
        )
    return last if ckpt_path == "last" else best_checkpoint_of(last)


def run_logger_config(logger: Any, run_dir: Path, wandb_id: str | None = None) -> Any:
    """The loggers of ``logger`` (a config: ``class_path`` namespaces, a list of them, ``True`` or
    ``False``) pointed at ``run_dir``, as a new config (``logger`` itself is not changed).

    CSV and TensorBoard loggers write straight into the run folder, W&B into ``<run_dir>/wandb``, named
    after the run folder unless a name is set, and with ``wandb_id`` (resumed) when continuing a run;
    the environment variable ``WANDB_MODE=online`` (upload) or ``disabled`` (W&B off) overrides its
    ``offline`` default. A ``CSVLogger`` is added when there is none, so every run keeps a
    ``metrics.csv``; ``True`` (Lightning's default logger) becomes just that one, ``False``/``None``
    (logging off) stay as they are.
    """
    if logger is None or logger is False:
        return logger
    items = [] if logger is True else (list(logger) if isinstance(logger, list) else [logger])
    items = [item.clone() for item in items]
    if not any(issubclass(class_of(item.class_path), CSVLogger) for item in items):
        items.append(Namespace(class_path=f"{CSVLogger.__module__}.CSVLogger", init_args=Namespace()))
    for item in items:
        cls, init_args = class_of(item.class_path), item.get("init_args") or Namespace()
        init_args.save_dir = str(run_dir)
        if issubclass(cls, (CSVLogger, TensorBoardLogger)):
            init_args.name, init_args.version = "", ""
        elif issubclass(cls, WandbLogger):
            import wandb

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


def keep_metrics_csv(loggers: list[Logger], last_step: int) -> None:
    """Keep the rows a continued run logged up to its checkpoint's step in its ``metrics.csv``.

    Lightning's CSV logger deletes a ``metrics.csv`` it finds in its folder when it starts; the rows
    are read first and logged again through the logger (``log_metrics``), so the new rows follow them
    in the same file. Rows from ``last_step`` on (logged after the checkpoint, before the run stopped)
    are dropped, as the continued run logs those steps again.
    """
    for logger in loggers:
        if not isinstance(logger, CSVLogger) or not (path := Path(logger.log_dir) / "metrics.csv").is_file():
            continue
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
    built), and a fit's :data:`RUN_KEYS` are saved as null, so ``fit --config <run>/config.yaml``
    repeats the experiment in a new run; so are those of a run built without a subcommand
    (``ProjectCLI(run=False)``: a sweep's trial, a tuner). A continued run (``fit --ckpt_path`` into
    its own folder) keeps the first ``config.yaml`` and saves its own as ``config.resume-<n>.yaml``.
    Deprecated names (``deprecations.RENAMED``) are not saved: their values are under the new names.
    """

    def __init__(self, parser: Any, config: Namespace, *args: Any, **kwargs: Any) -> None:
        portable = config.clone()
        for old in deprecations.RENAMED:
            if old in portable:
                del portable[old]
        # (a subcommand parser's name ends with the subcommand)
        if parser.prog.split()[-1] not in ("validate", "test", "predict"):
            for key in RUN_KEYS:
                if key in portable:
                    portable[key] = None
        super().__init__(parser, portable, *args, **kwargs)

    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        """Pick a free file name, then save (Lightning) and call :meth:`save_config` on rank 0."""
        self.folder = folder = Path(trainer.log_dir or ".")  # broadcasts: every rank asks
        index = 1
        while trainer.is_global_zero and not self.already_saved and (folder / self.config_filename).exists():
            self.config_filename = f"config.resume-{index}.yaml"
            index += 1
        self.config_filename = trainer.strategy.broadcast(self.config_filename)  # rank 0's choice
        super().setup(trainer, pl_module, stage)

    def save_config(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        """Log the saved config to every ``WandbLogger`` of the trainer (read back from the file).

        Runs on rank 0 only, so it must not ask ``trainer.log_dir`` (a broadcast: the other ranks would
        never answer and DDP would hang); it uses the folder :meth:`setup` found.
        """
        saved = self.folder / self.config_filename
        for logger in trainer.loggers:
            if isinstance(logger, WandbLogger) and saved.is_file():
                config = yaml.safe_load(saved.read_text())
                logger.experiment.config.update({"config": config}, allow_val_change=True)


def finish_wandb_run(is_global_zero: bool = True) -> None:
    """Close the current W&B run, if any (the next run in this process starts its own); for an
    offline run, print (on rank 0) the one ``wandb sync`` command that uploads it: every offline part of
    this W&B run (a continued run adds one per ``fit --ckpt_path``), oldest first, which ``wandb sync``
    uploads in that order as one run."""
    wandb = sys.modules.get("wandb")
    run = getattr(wandb, "run", None)
    if run is None:
        return
    offline, sync_dir, run_id = bool(getattr(run, "offline", False)), getattr(run, "sync_dir", None), run.id
    run.finish()
    if offline and sync_dir and is_global_zero:
        folder = Path(sync_dir)
        parts = sorted(folder.parent.glob(f"offline-run-*-{run_id}")) or [folder]
        print(f"W&B run saved offline; upload it with: wandb sync {' '.join(map(str, parts))}")


def saved_classes(checkpoint: dict[str, Any], run_dir: Path | None = None) -> dict[str, Any]:
    """The ``model`` and ``data`` configs (``{class_path, init_args}``) that LightningCLI saved in a
    checkpoint's ``hyper_parameters`` and ``datamodule_hyper_parameters`` (``_class_path`` plus the
    arguments). A part the checkpoint has no class for (a class that does not call
    ``save_hyperparameters``, as a DataModule written the way Lightning's docs write one) is taken from
    the ``config.yaml`` of ``run_dir``, the run that wrote the checkpoint; else it is absent (e.g. a
    checkpoint of plain Lightning outside a run folder)."""
    configs = {}
    for name, key in (("model", "hyper_parameters"), ("data", "datamodule_hyper_parameters")):
        saved = {k: v for k, v in (checkpoint.get(key) or {}).items() if k != "_instantiator"}
        if class_path := saved.pop("_class_path", None):
            configs[name] = {"class_path": class_path, "init_args": saved}
    if run_dir is not None and len(configs) < 2:
        recorded = yaml.safe_load((run_dir / "config.yaml").read_text()) or {}
        for name in ("model", "data"):
            if name not in configs and isinstance(recorded.get(name), dict):
                configs[name] = recorded[name]
    return configs


def run_config_of(ckpt_path: Path) -> Path:
    """The ``config.yaml`` of the run that wrote ``ckpt_path`` (``<run>/checkpoints/x.ckpt``).

    Raises:
        CheckpointError: ``ckpt_path`` is not in a run folder's ``checkpoints/`` next to its
            ``config.yaml`` (pass the config explicitly then).
    """
    run_dir = run_dir_of(ckpt_path)
    if run_dir is None:
        raise CheckpointError(
            f"{ckpt_path} is not inside a run folder (<run>/checkpoints/<file>.ckpt next to "
            "<run>/config.yaml). Pass the run's config with --config PATH"
        )
    return run_dir / "config.yaml"


def load_model(ckpt_path: str | Path) -> LightningModule:
    """Build the model saved in a LightningCLI checkpoint, in eval mode on the CPU.

    The checkpoint is read with ``torch.load(weights_only=True)``: its ``hyper_parameters`` hold the
    model's ``_class_path`` and init arguments (saved by LightningCLI), which Lightning's trusted
    instantiator turns back into the model (importing its module by its full dotted path); then the
    weights are loaded.
    """
    from .checkpointing import load_checkpoint

    load_checkpoint(ckpt_path)  # clear errors, and a warning when saved under other torch/Lightning versions
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Attribute .* is an instance of `nn.Module`")
        model = LightningModule.load_from_checkpoint(str(ckpt_path), map_location="cpu", weights_only=True)
    return model.eval()


def load_datamodule(config_path: str | Path) -> LightningDataModule:
    """Instantiate the ``data`` section (``class_path`` + ``init_args``) of a run's ``config.yaml``.

    Raises:
        ValueError: the file has no ``data`` section.
    """
    config = yaml.safe_load(Path(config_path).read_text()) or {}
    if not isinstance(config.get("data"), dict):
        raise ValueError(f"{config_path}: no 'data' section (class_path, init_args) to build the data from")
    parser = ArgumentParser(exit_on_error=False)
    parser.add_subclass_arguments(LightningDataModule, "data", required=True, fail_untyped=False)
    datamodule: LightningDataModule = parser.instantiate(parser.parse_object({"data": config["data"]})).data
    return datamodule


def split_batch(batch: Any) -> tuple[Any, Tensor | None]:
    """Split a batch into ``(inputs, targets)``: a list or tuple is ``(inputs, targets, ...)``, a dict
    its ``"input"``/``"target"`` entries (else its first and second), anything else inputs alone."""
    if isinstance(batch, dict):
        values = list(batch.values())
        inputs = batch.get("input", values[0] if values else None)
        return inputs, batch.get("target", values[1] if len(values) > 1 else None)
    if isinstance(batch, (list, tuple)):
        return batch[0], (batch[1] if len(batch) > 1 else None)
    return batch, None


@torch.no_grad()
def predict_test_split(
    model: torch.nn.Module, datamodule: LightningDataModule, desc: str = "test split"
) -> tuple[Tensor, Tensor]:
    """Run ``model`` over the whole test split; return ``(outputs [N, ...] float32, targets [N])``."""
    from .progress import track

    datamodule.setup("test")
    loader = datamodule.test_dataloader()
    outputs, targets = [], []
    for batch in track(loader, total=len(loader), desc=desc):
        inputs, target = split_batch(batch)
        outputs.append(model(inputs).float())
        if target is not None:
            targets.append(target)
    return torch.cat(outputs), torch.cat(targets) if targets else torch.empty(0, dtype=torch.int64)
