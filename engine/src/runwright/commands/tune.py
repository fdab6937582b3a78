"""``python -m <package> lr_find`` and ``python -m <package> scale_batch_size``:
tuning from the CLI, with the same config files and overrides as ``fit``. Each creates a run folder
``logs/<timestamp>_<command>/``, writes a small config there that applies its suggestion, and prints
the ``fit`` command that reruns the experiment with it (:func:`rerun_command`).
"""

from __future__ import annotations

import math
import shlex
from collections.abc import Mapping, Sequence, Sized
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import yaml
from lightning.pytorch import Callback, LightningModule, Trainer
from lightning.pytorch.cli import LightningArgumentParser, SaveConfigCallback
from lightning.pytorch.tuner import Tuner

from ..cli import ProjectCLI
from ..errors import ConfigError, ProjectError
from ..provenance import Provenance


class _TuneCLI(ProjectCLI):
    """ProjectCLI without a subcommand for the tuning ``command``: parses fit-style arguments and builds
    model, data and trainer (logger off) in a run folder ``<timestamp>_<command>``. Used as a context
    manager (``ProjectCLI``'s): afterwards, and after a failed start, the environment is as before
    (``seed_everything``'s variables, the run folder's)."""

    def __init__(self, command: str, args: list[str], package: str) -> None:
        self.run_label = command  # this instance's run folder suffix
        try:
            super().__init__(args=args, run=False, package=package)
        except BaseException:  # e.g. a bad argument or class (exit 2) after seeding
            self.__exit__()
            raise

    def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        """Add the ``--tune.*`` options."""
        super().add_arguments_to_parser(parser)
        parser.add_argument("--tune.min_lr", type=float, default=1e-6, help="lr_find: first LR.")
        parser.add_argument("--tune.max_lr", type=float, default=1.0, help="lr_find: last LR.")
        parser.add_argument("--tune.num_training", type=int, default=100, help="lr_find: steps.")
        parser.add_argument("--tune.max_trials", type=int, default=8, help="scale_batch_size: most tries.")

    def parse_arguments(self, parser: LightningArgumentParser, args: Any) -> None:
        """Parse, then reject a bad ``--tune.*`` value before any run folder is created (exit 2); switch
        the logger off, and for ``lr_find`` run exactly ``--tune.num_training`` training steps (no
        validation, no epoch limit)."""
        super().parse_arguments(parser, args)
        tune, trainer = self.config.tune, self.config.trainer
        if not (0 < tune.min_lr < tune.max_lr and tune.num_training >= 2 and tune.max_trials >= 1):
            given = ", ".join(f"--tune.{key}={value}" for key, value in vars(tune).items())
            parser.error(f"{given}: need 0 < min_lr < max_lr, num_training >= 2 and max_trials >= 1")
        trainer.logger = False
        if self.run_label == "lr_find":
            trainer.max_steps, trainer.max_epochs, trainer.limit_val_batches = tune.num_training, -1, 0


class LRRangeTest(Callback):
    """The LR range test (Smith 2017, "Cyclical Learning Rates for Training Neural Networks", section
    3.3) as the callback of one ``fit``: optimizer step ``t`` of ``num_steps`` runs with the LR
    ``min_lr * (max_lr / min_lr) ** (t / (num_steps - 1))`` in every param group, and :attr:`lrs` and
    :attr:`losses` record each step's LR and raw training loss (what ``training_step`` returned; NaN
    for nothing). The run stops after the first non-finite loss.

    The model's LR schedulers are dropped for the run (as Lightning's ``lr_find`` drops them): the test
    sets the LR itself, and a ``ReduceLROnPlateau`` would wait for a validation metric it never computes.

    Raises:
        ConfigError: the model has more than one optimizer.
    """

    def __init__(self, min_lr: float, max_lr: float, num_steps: int) -> None:
        self.schedule = np.geomspace(min_lr, max_lr, num_steps)
        self.lrs: list[float] = []
        self.losses: list[float] = []

    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        """Check for one optimizer; drop the model's LR schedulers."""
        if (count := len(trainer.optimizers)) != 1:
            raise ConfigError(f"lr_find tests one optimizer's LR; {type(pl_module).__name__} has {count}")
        trainer.strategy.lr_scheduler_configs = []

    def on_train_batch_start(
        self, trainer: Trainer, pl_module: LightningModule, batch: Any, batch_idx: int
    ) -> None:
        """Set the LR of the coming optimizer step."""
        lr = float(self.schedule[min(trainer.global_step, len(self.schedule) - 1)])
        for group in trainer.optimizers[0].param_groups:
            group["lr"] = lr

    def on_train_batch_end(
        self, trainer: Trainer, pl_module: LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        """Record the step's LR and loss (once per optimizer step when gradients accumulate)."""
        if trainer.global_step == len(self.losses):
            return  # accumulating: no optimizer step yet
        loss = outputs.get("loss") if isinstance(outputs, Mapping) else outputs
        self.lrs.append(float(trainer.optimizers[0].param_groups[0]["lr"]))
        self.losses.append(math.nan if loss is None else float(loss))
        if not math.isfinite(self.losses[-1]):
            trainer.should_stop = True


@dataclass
class LRSuggestion:
    """What :func:`suggest_lr` found: the LR, the smoothed curve it was read from, and warnings."""

    lr: float | None
    index: int | None
    smoothed: np.ndarray
    warnings: list[str]


def suggest_lr(lrs: Sequence[float] | np.ndarray, losses: Sequence[float] | np.ndarray) -> LRSuggestion:
    """Suggest an initial LR from the per-step LRs and raw training losses, ``[T]`` each (Smith 2017,
    section 3.3): the steepest descent of the loss per decade of LR before its minimum.

    The loss is smoothed by a centred moving average over ``max(5, T // 10)`` steps (odd), which, unlike
    an exponential one, does not shift the curve towards higher LRs. ``warnings`` flag an unreliable
    suggestion: the loss fell by less than 10%, the suggestion is on the flat start (within 2% of the
    start), the minimum is at the last step (raise ``max_lr``), or a tenth of the LR at the minimum
    (Smith's other rule) is more than 10x away.
    """
    lr, loss = (np.asarray(values, dtype=np.float64) for values in (lrs, losses))
    finite = np.isfinite(loss)
    if finite.sum() < 5:
        return LRSuggestion(None, None, loss, ["fewer than 5 finite losses"])
    end = len(loss) if finite.all() else int(np.argmin(finite))  # up to the first non-finite loss
    lr, loss = lr[:end], loss[:end]
    width = max(5, len(loss) // 10) | 1
    smoothed = np.convolve(np.pad(loss, width // 2, mode="edge"), np.ones(width) / width, mode="valid")
    minimum = int(np.argmin(smoothed))
    index = int(np.argmin(np.gradient(smoothed, np.log10(lr))[: minimum + 1]))  # the steepest descent
    start, low = float(smoothed[0]), float(smoothed[minimum])
    notes: list[str] = []
    if not low < 0.9 * start:
        notes.append(f"the smoothed loss fell only from {start:.4g} to {low:.4g} (less than 10%)")
    elif not smoothed[index] < 0.98 * start:
        notes.append(f"the suggestion {lr[index]:.3g} is on the flat start of the curve")
    if minimum == len(smoothed) - 1:
        notes.append("the loss was still falling at --tune.max_lr; raise it")
    if not 0.1 <= lr[index] / (tenth := lr[minimum] / 10) <= 10:
        notes.append(f"a tenth of the LR at the minimum loss ({tenth:.3g}) is over 10x from the suggestion")
    return LRSuggestion(float(lr[index]), index, smoothed, notes)


def rerun_command(args: Sequence[str], suggestion: Path, package: str) -> str:
    """The ``fit`` command that reruns the tuned experiment with the suggestion: ``args`` (the tuner's
    own arguments, ``--config`` files and overrides in their order) without ``--tune.*``, then
    ``--config suggestion`` (last, so it wins)."""
    kept: list[str] = []
    tokens = iter(args)
    for arg in tokens:
        if not arg.startswith("--tune."):
            kept.append(arg)
        elif "=" not in arg:
            next(tokens, None)  # the option's value
    return shlex.join(["python", "-m", package, "fit", *kept, "--config", str(suggestion)])


def lr_find(args: list[str], package: str) -> tuple[float, Path | None]:
    """Run the LR range test (:class:`LRRangeTest`) from ``--tune.min_lr`` to ``--tune.max_lr`` over
    ``--tune.num_training`` steps of one ``fit`` on the training split, without validation, checkpoints,
    health checks (the loss is meant to blow up at the end), progress bar or logger. Writes into the run
    folder ``lr_find.csv`` (``lr,loss`` per step), ``lr_find.png`` (loss and smoothed loss vs LR, the
    suggestion marked) and ``suggested_lr.yaml`` with the :func:`suggest_lr` LR, set as
    ``model.init_args.optimizer`` for a model with an ``optimizer`` argument (e.g. ``BaseModule``), else as
    its ``lr`` or ``learning_rate`` argument; a model with none of them gets no file, and the printed
    lines say how to use the LR. Returns the LR and the file (or ``None``).

    Raises:
        ProjectError: too few finite losses to suggest an LR (exit code 1; the plot is written).
        ConfigError: the model has more than one optimizer (exit code 2).
    """
    from .report import new_figure

    with _TuneCLI(
        "lr_find", args, package
    ) as cli:  # bad --tune.* values stop here (exit 2), before a run folder
        options = cli.config.tune
        test = LRRangeTest(options.min_lr, options.max_lr, options.num_training)
        # only what records the run stays (config.yaml, provenance): no checkpoints, checks or progress
        kept = [cb for cb in cli.trainer.callbacks if isinstance(cb, (SaveConfigCallback, Provenance))]  # type: ignore[attr-defined]
        cli.trainer.callbacks = [test, *kept]  # type: ignore[attr-defined]
        print(f"lr_find: {options.num_training} steps, LR from {options.min_lr:.3g} to {options.max_lr:.3g}")
        cli.trainer.fit(cli.model, datamodule=cli.datamodule)
    lrs, losses = np.array(test.lrs), np.array(test.losses)
    np.savetxt(cli.run_dir / "lr_find.csv", np.c_[lrs, losses], "%.9g", ",", header="lr,loss", comments="")
    found = suggest_lr(lrs, losses)
    plot = cli.run_dir / "lr_find.png"
    figure, axes = new_figure()
    axes.plot(lrs, losses, color="0.75", linewidth=1, label="loss per step")
    axes.plot(lrs[: len(found.smoothed)], found.smoothed, color="C0", label="smoothed (centred mean)")
    if (i := found.index) is not None:
        axes.plot(lrs[i], found.smoothed[i], "o", color="C3", label=f"suggestion {found.lr:.3g}")
    finite = losses[np.isfinite(losses)]
    if len(finite):  # keep the divergence at the end from squashing the rest of the curve
        axes.set_ylim(float(finite.min()) * 0.9, float(np.percentile(finite, 95)) * 1.5)
    axes.set(xscale="log", xlabel="learning rate", ylabel="training loss")
    axes.legend()
    figure.savefig(plot)
    if found.lr is None:
        raise ProjectError(
            f"lr_find could not suggest an LR (too few finite losses); see {plot} and try more "
            "--tune.num_training steps or a narrower --tune.min_lr/--tune.max_lr range"
        )
    model_class, init_args = cli.config.model.get("class_path"), cli.config.model.get("init_args") or {}
    name = next((name for name in ("optimizer", "lr", "learning_rate") if name in init_args), None)
    setting: Any = found.lr
    target = f"{model_class}'s {name}"
    if name == "optimizer":  # jsonargparse gives even a default optimizer class a class_path
        optimizer = init_args["optimizer"].get("class_path")
        target = f"{optimizer} on {model_class}"
        setting = {"class_path": optimizer, "init_args": {"lr": found.lr}}
    print(f"Suggested LR: {found.lr:.3g}" + (f" for {target}" if name else "") + f" (plot: {plot})")
    for note in found.warnings:
        print(f"Warning: the suggestion may be unreliable: {note}; look at {plot}")
    if name is None:
        print(
            f"{model_class} has no optimizer, lr or learning_rate argument: set lr={found.lr:.3g} where its "
            "configure_optimizers builds the optimizer"
        )
        return found.lr, None
    config, comment = {"model": {"init_args": {name: setting}}}, f"LR suggested by lr_find for {target}"
    return found.lr, _suggest(cli.run_dir / "suggested_lr.yaml", config, comment, args, package)


#: Largest batch size Lightning's ``scale_batch_size`` tries (its ``max_val`` default).
LIGHTNING_MAX_BATCH_SIZE = 8192


def scale_batch_size(args: list[str], package: str) -> tuple[int, Path]:
    """Find the largest batch size that fits, doubling from the configured one; returns it and the path
    of the written config. The trials are capped so that the last size is at most the training split
    (Lightning stops only once it reaches the split: 2,048 on 1,168 samples); the message says which
    limit ended the search."""
    with _TuneCLI("scale_batch_size", args, package) as cli:
        start = int(getattr(cli.datamodule, "batch_size", 2))
        requested = int(cli.config.tune.max_trials)
        cli.datamodule.setup("fit")
        dataset = cli.datamodule.train_dataloader().dataset
        samples = len(dataset) if isinstance(dataset, Sized) else None  # an iterable dataset may have none
        if samples is not None and start > samples:
            cli.parser.error(
                f"data.batch_size={start} is larger than the training split ({samples} samples); "
                f"start from a smaller --data.batch_size"
            )
        trials = requested if samples is None else min(requested, math.floor(math.log2(samples / start)) + 1)
        tuner = Tuner(cli.trainer)
        size = tuner.scale_batch_size(cli.model, datamodule=cli.datamodule, init_val=start, max_trials=trials)
        assert size is not None  # None only on ranks > 0; the tuning commands run in one process
    if size < min(start * 2 ** (trials - 1), LIGHTNING_MAX_BATCH_SIZE):  # below the largest size tried
        reason = f"batch size {size * 2} ran out of memory"
    elif size >= LIGHTNING_MAX_BATCH_SIZE:
        reason = f"Lightning's limit is {LIGHTNING_MAX_BATCH_SIZE}"
    elif trials < requested:
        reason = f"the next size ({size * 2}) would exceed the training split of {samples} samples"
    else:
        reason = f"--tune.max_trials={requested} sizes were tried; raise it to search further"
    print(f"Batch size: {size} (doubled from {start}; stopped because {reason})")
    data_class = cli.config.data.get("class_path")
    config = {"data": {"class_path": data_class, "init_args": {"batch_size": int(size)}}}
    comment = f"batch size suggested by scale_batch_size for {data_class}"
    return int(size), _suggest(cli.run_dir / "suggested_batch_size.yaml", config, comment, args, package)


def _suggest(path: Path, config: dict[str, Any], comment: str, args: list[str], package: str) -> Path:
    """Write the suggestion ``config`` to ``path`` under a ``# comment`` line; print the command using it."""
    path.write_text(f"# {comment}\n" + yaml.safe_dump(config, sort_keys=False))
    print(f"Use it: {rerun_command(args, path, package)}")
    return path


def main(args: list[str], package: str) -> None:
    """Dispatch ``lr_find ARGS`` / ``scale_batch_size ARGS`` (the first item names the command)."""
    (lr_find if args[0] == "lr_find" else scale_batch_size)(args[1:], package)
