"""Provenance: which code, environment and seed produced a run, recorded where the run's results are.

Every run folder gets a ``provenance.yaml`` (the Trainer commands through the :class:`Provenance`
callback, ``export`` through :func:`write_provenance`); the same facts go into every checkpoint and the
W&B run config (key ``"provenance"``): ``command`` (``sys.orig_argv``), ``working_dir``, ``started``
(local time with its UTC offset), ``seed`` (``PL_GLOBAL_SEED`` or ``None``), ``git.package`` and
``git.working_dir`` (:func:`git_state` of the package's checkout, the code that ran, and of the working
directory, or ``"same checkout as package"``), ``versions`` (:func:`versions`) and ``devices``.

Loading a checkpoint saved under another major.minor version of torch or Lightning warns once per file
(:func:`warn_on_version_change`): results and even loading may differ.
"""

from __future__ import annotations

import importlib.metadata
import os
import platform
import shlex
import subprocess
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

import torch
import yaml
from lightning.pytorch import Callback, LightningModule, Trainer
from lightning.pytorch.loggers import WandbLogger
from lightning.pytorch.utilities import rank_zero_warn

from .runs import read_yaml, record_name, write_atomically

#: File name of the record in a run folder; its key in a checkpoint and in the W&B run config.
PROVENANCE_FILE, CHECKPOINT_KEY = "provenance.yaml", "provenance"
#: Longest diff (characters) kept, and most untracked file names listed.
MAX_DIFF_CHARS, MAX_UNTRACKED = 50_000, 20
#: Distributions whose versions are recorded (``torch`` gets its CUDA/cuDNN build as well).
VERSIONED = ("runwright", "torch", "lightning", "torchmetrics", "jsonargparse", "wandb", "numpy")


def git_state(folder: str | Path) -> dict[str, Any]:
    """The git state of the checkout that holds ``folder``; never raises.

    Returns ``{"path", "commit", "dirty", "diff", "untracked"}`` (``commit`` is ``None`` before the first
    commit; ``diff``, ``git diff HEAD`` of tracked files, is ``""`` when clean and cut at
    :data:`MAX_DIFF_CHARS` characters with a ``diff_cut`` note; at most :data:`MAX_UNTRACKED` untracked
    names), else (no checkout, no git, git failing) ``{"path", "git": "not a git checkout"}``.
    """
    path = str(Path(folder).resolve())

    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", path, *args], capture_output=True, text=True, check=True).stdout

    try:  # porcelain v2 starts with "# branch.oid <commit>" ("(initial)" before the first commit)
        top, status = git("rev-parse", "--show-toplevel").strip(), git("status", "--porcelain=v2", "-b")
        commit = None if (oid := status.split()[2]) == "(initial)" else oid
        dirty = any(line[0] not in "#?" for line in status.splitlines())
        diff = git("diff", "HEAD") if commit and dirty else ""
    except (OSError, subprocess.SubprocessError):
        return {"path": path, "git": "not a git checkout"}
    untracked = [line[2:] for line in status.splitlines() if line[0] == "?"][:MAX_UNTRACKED]
    state = dict(path=top, commit=commit, dirty=dirty, diff=diff[:MAX_DIFF_CHARS], untracked=untracked)
    if len(diff) > MAX_DIFF_CHARS:
        state["diff_cut"] = f"cut at {MAX_DIFF_CHARS} of {len(diff)} characters; see git diff {commit}"
    return state


def versions() -> dict[str, Any]:
    """Python and library versions (those that run: an imported module's ``__version__``, else the
    installed one; ``None`` when not installed), and torch's CUDA / cuDNN build (``None`` for a CPU one)."""
    found: dict[str, Any] = {"python": platform.python_version()}
    for n in VERSIONED:
        try:
            found[n] = str(getattr(sys.modules.get(n), "__version__", None) or importlib.metadata.version(n))
        except importlib.metadata.PackageNotFoundError:
            found[n] = None
    return {**found, "torch_cuda": torch.version.cuda, "torch_cudnn": torch.backends.cudnn.version()}


def collect(trainer: Trainer | None = None, package: str | None = None, **extra: Any) -> dict[str, Any]:
    """The facts (plain data: ``yaml.safe_dump``-able, loadable with ``weights_only``) of a run of the user's
    ``package`` (its checkout is ``git.package``; without one, the working directory's) on ``trainer``'s
    devices (the CPU without one); ``extra`` items (e.g. ``checkpoint=...``) are added at the top level."""
    source = Path(str(importlib.import_module(package).__file__)).parent if package else Path.cwd()
    git: dict[str, Any] = {"package": git_state(source), "working_dir": git_state(Path.cwd())}
    if git["working_dir"] == git["package"]:
        git["working_dir"] = "same checkout as package"
    gpus = trainer.device_ids if trainer and trainer.strategy.root_device.type == "cuda" else []
    cpu = f"cpu ({platform.machine()}, {os.cpu_count()} cores)"
    names = [torch.cuda.get_device_name(i) for i in gpus] or [cpu]
    seed = os.environ.get("PL_GLOBAL_SEED")
    return {
        "command": shlex.join(sys.orig_argv),
        "working_dir": str(Path.cwd()),
        "started": datetime.now().astimezone().isoformat(timespec="seconds"),  # local time, with its offset
        "seed": int(seed) if seed else None,
        **extra,
        "git": git,
        "versions": versions(),
        "devices": {"accelerator": type(trainer.accelerator).__name__ if trainer else None, "names": names},
    }


def write_provenance(folder: str | Path, facts: dict[str, Any], name: str = PROVENANCE_FILE) -> Path:
    """Write ``facts`` to ``folder/<name>`` and return its path. Each non-empty diff goes into its own
    file, ``<name stem>.<checkout>.diff`` (plain text that ``git apply`` takes), named in the YAML. Each
    file is written whole or not at all (:func:`~runwright.runs.write_atomically`)."""
    (folder := Path(folder)).mkdir(parents=True, exist_ok=True)
    record: dict[str, Any] = {**facts, "git": {}}
    for checkout, state in facts["git"].items():
        if isinstance(state, dict) and state.get("diff"):
            write_atomically(folder / (diff := f"{Path(name).stem}.{checkout}.diff"), state["diff"])
            state = {**state, "diff": f"{diff} ({len(state['diff'])} characters)"}
        record["git"][checkout] = state
    return write_atomically(
        folder / name, yaml.safe_dump(record, sort_keys=False, allow_unicode=True, width=110)
    )


def read_provenance(run_dir: str | Path) -> dict[str, Any] | None:
    """The ``provenance.yaml`` of ``run_dir`` as a dict, or ``None`` when it has none."""
    return read_yaml(Path(run_dir) / PROVENANCE_FILE)


def summary(facts: dict[str, Any]) -> str:
    """One line: the package's commit (and ``dirty``), torch, lightning and the seed."""
    git, found = facts["git"]["package"], facts["versions"]
    dirty = " (dirty)" if git.get("dirty") else ""
    code = f"commit {git['commit'][:12]}{dirty}" if git.get("commit") else git.get("git", "no commit")
    return f"{code}, torch {found['torch']}, lightning {found['lightning']}, seed {facts['seed']}"


class Provenance(Callback):
    """Write ``provenance.yaml`` into the run folder (``trainer.log_dir``) when a stage starts (a
    continued run, ``fit --ckpt_path``, adds ``provenance.resume-<n>.yaml`` next to it, as it does
    ``config.resume-<n>.yaml``), add the same facts to every checkpoint saved
    (``checkpoint["provenance"]``) and to the W&B run config."""

    def __init__(self, package: str | None = None) -> None:
        self.package = package
        self.facts: dict[str, Any] = {}

    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        """Collect the facts once, write the file and update W&B (rank 0)."""
        if self.facts:
            return
        folder = Path(trainer.log_dir or trainer.default_root_dir)  # on every rank: log_dir broadcasts
        self.facts = collect(trainer, self.package)
        if trainer.is_global_zero:
            write_provenance(folder, self.facts, record_name(folder, PROVENANCE_FILE))
            for logger in (logger for logger in trainer.loggers if isinstance(logger, WandbLogger)):
                logger.experiment.config.update({CHECKPOINT_KEY: self.facts}, allow_val_change=True)

    def on_save_checkpoint(
        self, trainer: Trainer, pl_module: LightningModule, checkpoint: dict[str, Any]
    ) -> None:
        """Store the facts in ``checkpoint["provenance"]``."""
        checkpoint[CHECKPOINT_KEY] = self.facts


class VersionChangeWarning(UserWarning):
    """A checkpoint was saved under another major.minor version of torch or Lightning."""


_warned: set[str] = set()


def warn_on_version_change(checkpoint: dict[str, Any], path: str | Path) -> list[str]:
    """Warn (a :class:`VersionChangeWarning`, once per file per process) when ``checkpoint`` was saved
    under another major.minor version of Lightning (``pytorch-lightning_version``, which Lightning
    stores in every checkpoint) or of torch (``provenance.versions.torch``, stored by
    :class:`Provenance`). Returns the differences found (empty when none)."""
    saved = {**(checkpoint.get(CHECKPOINT_KEY) or {}).get("versions", {})}
    saved["lightning"], running = checkpoint.get("pytorch-lightning_version"), versions()
    changes = [
        f"{name} {saved[name]} (now {running[name]})"
        for name in ("lightning", "torch")
        if saved.get(name) and saved[name].split(".")[:2] != running[name].split(".")[:2]
    ]
    if changes and (key := str(Path(path).resolve())) not in _warned:
        _warned.add(key)
        message = f"checkpoint {str(path)!r} was saved under {', '.join(changes)}: results may differ"
        rank_zero_warn(f"{message}; install the versions in its provenance", 5, category=VersionChangeWarning)
    return changes
