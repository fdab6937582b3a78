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

import copy
import os
import platform
import shlex
import subprocess
import sys
import warnings
from datetime import datetime
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import yaml
from lightning.pytorch import LightningModule, Trainer
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.loggers import WandbLogger

#: File name of the record in a run folder.
PROVENANCE_FILE = "provenance.yaml"
#: Key of the record in a checkpoint and in the W&B run config.
CHECKPOINT_KEY = "provenance"
#: Longest diff (characters) kept; a longer one is cut and says so.
MAX_DIFF_CHARS = 50_000
#: Most untracked file names listed.
MAX_UNTRACKED = 20
#: Distributions whose versions are recorded (``torch`` gets its CUDA/cuDNN build as well).
VERSIONED = ("runwright", "torch", "lightning", "torchmetrics", "jsonargparse", "wandb", "numpy")


def _git(folder: str, *args: str, check: bool = True) -> str:
    """Output of ``git -C folder ARGS`` (with ``check``, raises ``CalledProcessError`` on a non-zero exit)."""
    command = ["git", "-C", folder, *args]
    return subprocess.run(command, capture_output=True, text=True, check=check, timeout=30).stdout


def git_state(folder: str | Path) -> dict[str, Any]:
    """The git state of the checkout that holds ``folder``; never raises for a missing checkout or git.

    Returns ``{"path", "commit", "dirty", "diff", "untracked"}`` (``commit`` is ``None`` before the
    first commit; ``diff``, ``git diff HEAD`` of tracked files, is ``""`` when clean and cut at
    :data:`MAX_DIFF_CHARS` characters with a ``diff_cut`` note; at most :data:`MAX_UNTRACKED` untracked
    names), else ``{"path", "git": "not a git checkout" | "git is not installed"}``, or
    ``{"path", "commit", "git": "git failed: ..."}`` when ``git status``/``git diff`` fail.
    """
    path = str(Path(folder).resolve())
    try:
        top = str(Path(_git(path, "rev-parse", "--show-toplevel").strip()))
    except FileNotFoundError:
        return {"path": path, "git": "git is not installed"}
    except (subprocess.SubprocessError, OSError):
        return {"path": path, "git": "not a git checkout"}
    commit = _git(top, "rev-parse", "-q", "--verify", "HEAD", check=False).strip() or None  # None: no commit
    state: dict[str, Any] = {"path": top, "commit": commit}
    try:
        status = _git(top, "status", "--porcelain", "--untracked-files=normal").splitlines()
        state["dirty"] = any(not line.startswith("??") for line in status)
        diff = _git(top, "diff", "HEAD") if commit and state["dirty"] else ""
    except subprocess.SubprocessError as error:  # never stops a run
        reason = ((getattr(error, "stderr", None) or "").strip() or str(error)).splitlines()[0]
        return {**state, "git": f"git failed: {reason}"}
    untracked = [line[3:] for line in status if line.startswith("??")]
    more = [f"... and {len(untracked) - MAX_UNTRACKED} more"] if len(untracked) > MAX_UNTRACKED else []
    state.update(diff=diff[:MAX_DIFF_CHARS], untracked=untracked[:MAX_UNTRACKED] + more)
    if len(diff) > MAX_DIFF_CHARS:
        state["diff_cut"] = (
            f"cut at {MAX_DIFF_CHARS} of {len(diff)} characters; `git diff {commit}` shows all"
        )
    return state


def versions() -> dict[str, Any]:
    """Python and library versions, and torch's CUDA / cuDNN build (``None`` for a CPU build)."""
    import torch

    found: dict[str, Any] = {"python": platform.python_version()}
    for name in VERSIONED:
        try:  # the version that runs (torch's with its build: 2.4.1+cu121)
            found[name] = str(getattr(sys.modules.get(name), "__version__", None) or version(name))
        except PackageNotFoundError:
            found[name] = None
    return {**found, "torch_cuda": torch.version.cuda, "torch_cudnn": torch.backends.cudnn.version()}


def devices(trainer: Trainer | None = None) -> dict[str, Any]:
    """The accelerator and the names of the devices ``trainer`` runs on (the CPU without a trainer, as
    for ``export``), e.g. ``{"accelerator": "CUDAAccelerator", "names": ["NVIDIA H100 80GB HBM3"]}``."""
    import torch

    name = type(trainer.accelerator).__name__ if trainer is not None else "none"
    if trainer is not None and trainer.strategy.root_device.type == "cuda":
        return {"accelerator": name, "names": [torch.cuda.get_device_name(i) for i in trainer.device_ids]}
    cpu = f"cpu ({platform.processor() or platform.machine()}, {os.cpu_count()} cores)"
    return {"accelerator": name, "names": [cpu]}


def collect(trainer: Trainer | None = None, package: str | None = None, **extra: Any) -> dict[str, Any]:
    """All the facts above as plain data (``yaml.safe_dump``-able, loadable with ``weights_only``) for a
    run of the user's ``package`` (its checkout is ``git.package``; without it, the working
    directory's); ``extra`` items (e.g. ``checkpoint=...``) are added at the top level."""
    import importlib

    module = importlib.import_module(package) if package else None
    source = Path(str(module.__file__)).resolve().parent if module is not None else Path.cwd()
    package_git, working = git_state(source), git_state(Path.cwd())
    seed = os.environ.get("PL_GLOBAL_SEED", "")
    same = "commit" in working and working["path"] == package_git["path"]
    return {
        "command": shlex.join(getattr(sys, "orig_argv", sys.argv)),
        "working_dir": str(Path.cwd()),
        "started": datetime.now().astimezone().isoformat(timespec="seconds"),  # local time, with its offset
        "seed": int(seed) if seed.lstrip("-").isdigit() else None,
        **extra,
        "git": {"package": package_git, "working_dir": "same checkout as package" if same else working},
        "versions": versions(),
        "devices": devices(trainer),
    }


def write_provenance(folder: str | Path, facts: dict[str, Any], name: str = PROVENANCE_FILE) -> Path:
    """Write ``facts`` to ``folder/<name>`` and return its path. Each non-empty diff goes into its own
    file, ``<name stem>.<checkout>.diff`` (plain text that ``git apply`` takes), named in the YAML."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    record = copy.deepcopy(facts)
    for checkout, state in record.get("git", {}).items():
        if isinstance(state, dict) and state.get("diff"):
            diff_file = folder / f"{Path(name).stem}.{checkout}.diff"
            diff_file.write_text(state["diff"])
            state["diff"] = f"{diff_file.name} ({len(state['diff'])} characters)"
    path = folder / name
    path.write_text(yaml.safe_dump(record, sort_keys=False, allow_unicode=True, width=110))
    return path


def read_provenance(run_dir: str | Path) -> dict[str, Any] | None:
    """The ``provenance.yaml`` of ``run_dir`` as a dict, or ``None`` when it has none."""
    path = Path(run_dir) / PROVENANCE_FILE
    return yaml.safe_load(path.read_text()) if path.is_file() else None


def summary(facts: dict[str, Any]) -> str:
    """One line: the package's commit (and ``dirty``), torch, lightning and the seed."""
    git = facts.get("git", {}).get("package", {})
    code = git.get("git", "no commit")  # "not a git checkout", "git is not installed", ...
    if git.get("commit"):
        code = f"commit {git['commit'][:12]}" + (" (dirty)" if git.get("dirty") else "")
    found = facts.get("versions", {})
    return f"{code}, torch {found.get('torch')}, lightning {found.get('lightning')}, seed {facts.get('seed')}"


class Provenance(Callback):
    """Write ``provenance.yaml`` into the run folder (``trainer.log_dir``) when a stage starts (a
    continued run, ``fit --ckpt_path``, adds ``provenance.resume-<n>.yaml`` next to it, as it does
    ``config.resume-<n>.yaml``), add the same facts to every checkpoint saved
    (``checkpoint["provenance"]``) and to the W&B run config."""

    def __init__(self, package: str | None = None) -> None:
        self.package = package
        self.facts: dict[str, Any] | None = None

    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        """Collect the facts once, write the file and update W&B (rank 0)."""
        folder = trainer.log_dir or trainer.default_root_dir  # (broadcasts: asked on every rank)
        if self.facts is not None:
            return
        self.facts = collect(trainer, self.package)
        if not trainer.is_global_zero:
            return
        name, index = PROVENANCE_FILE, 1
        while (Path(folder) / name).exists():  # a continued run keeps the first command's record
            name, index = f"provenance.resume-{index}.yaml", index + 1
        write_provenance(folder, self.facts, name)
        for logger in trainer.loggers:
            if isinstance(logger, WandbLogger):
                logger.experiment.config.update({CHECKPOINT_KEY: self.facts}, allow_val_change=True)

    def on_save_checkpoint(
        self, trainer: Trainer, pl_module: LightningModule, checkpoint: dict[str, Any]
    ) -> None:
        """Store the facts in ``checkpoint["provenance"]``."""
        checkpoint[CHECKPOINT_KEY] = self.facts


class VersionChangeWarning(UserWarning):
    """A checkpoint was saved under another major.minor version of torch or Lightning."""


_warned: set[str] = set()


def _major_minor(text: str) -> list[str]:
    """``["2", "4"]`` for the version ``2.4.1+cu121``."""
    return str(text).split("+")[0].split(".")[:2]


def warn_on_version_change(checkpoint: dict[str, Any], path: str | Path) -> list[str]:
    """Warn (a :class:`VersionChangeWarning`, once per file per process) when ``checkpoint`` was saved
    under another major.minor version of Lightning (``pytorch-lightning_version``, which Lightning
    stores in every checkpoint) or of torch (``provenance.versions.torch``, stored by
    :class:`Provenance`). Returns the differences found (empty when none)."""
    import lightning
    import torch

    saved_versions = (checkpoint.get(CHECKPOINT_KEY) or {}).get("versions") or {}
    pairs = {  # Lightning stores its version in every checkpoint
        "lightning": (checkpoint.get("pytorch-lightning_version"), lightning.__version__),
        "torch": (saved_versions.get("torch"), torch.__version__),
    }
    changes = [
        f"{name} {saved} (now {running})"
        for name, (saved, running) in pairs.items()
        if saved is not None and _major_minor(saved) != _major_minor(running)
    ]
    key = str(Path(path).resolve())
    if changes and key not in _warned:
        _warned.add(key)
        message = f"checkpoint {str(path)!r} was saved under {', '.join(changes)}: results may differ"
        warnings.warn(f"{message}; install the versions in its provenance", VersionChangeWarning, 2)
    return changes
