"""``python -m <package> lr_find`` and ``python -m <package> scale_batch_size``: Lightning's ``Tuner`` from
the command line, with the same config files and overrides as ``fit``. Each writes into its run folder
``logs/<timestamp>_<command>/`` a small config that applies its suggestion and prints the ``fit``
command that reruns the experiment with it."""

from __future__ import annotations

import contextlib
import shlex
from collections.abc import Sequence, Sized
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import yaml
from lightning.pytorch.cli import LightningArgumentParser
from lightning.pytorch.tuner import Tuner
from lightning.pytorch.utilities.exceptions import MisconfigurationException

from ..cli import ProjectCLI
from ..console import stdout_is_terminal
from ..errors import ConfigError, ProjectError, first_line
from ..private import lr_finder_without_progress_bar
from ..runs import write_atomically

#: The smoothing factor of Lightning's LR finder (``_LRCallback(beta=0.98)``), undone by :func:`raw_losses`.
LIGHTNING_BETA = 0.98
#: Largest batch size Lightning's ``scale_batch_size`` tries (its ``max_val`` default).
LIGHTNING_MAX_BATCH_SIZE = 8192


class _TuneCLI(ProjectCLI):
    """ProjectCLI without a subcommand for the tuning ``command``: parses fit-style arguments and builds
    model, data and trainer (logger off) in a run folder ``<timestamp>_<command>``. Used as a context
    manager (``ProjectCLI``'s): afterwards, and after a failed start, the environment is as before
    (``seed_everything``'s variables, the run folder's)."""

    def __init__(self, command: str, args: list[str], package: str) -> None:
        self.run_label = command  # this instance's run folder suffix
        super().__init__(args=args, run=False, package=package)

    def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        """Add the ``--tune.*`` options."""
        super().add_arguments_to_parser(parser)
        parser.add_argument("--tune.min_lr", type=float, default=1e-6, help="lr_find: first LR.")
        parser.add_argument("--tune.max_lr", type=float, default=1.0, help="lr_find: last LR.")
        parser.add_argument("--tune.num_training", type=int, default=100, help="lr_find: steps.")
        parser.add_argument("--tune.max_trials", type=int, default=8, help="scale_batch_size: most tries.")

    def parse_arguments(self, parser: LightningArgumentParser, args: Any) -> None:
        """Parse, then move the ``--tune.*`` values from the config (then a fit's, as ``config.yaml``)
        to :attr:`tune` and reject a bad one before any run folder is created (exit 2); say that a
        ``ckpt_path`` (given, or in a run's config) is not used (a tuner trains a new model of the
        experiment's config); switch the logger off, and for ``lr_find`` run exactly
        ``--tune.num_training`` training steps (no validation, no epoch limit)."""
        super().parse_arguments(parser, args)
        if (ckpt_path := self.config.get("ckpt_path")) is not None:
            print(
                f"{self.run_label} does not use --ckpt_path={ckpt_path}: it trains a new model of the "
                "experiment's config (for a run's experiment, give --config logs/<run>/config.yaml)"
            )
            self.config.ckpt_path = None
        self.dropped_ckpt_path = ckpt_path is not None  # (a tuner trains a new model)
        self.tune = tune = self.config.pop("tune")
        if not (0 < tune.min_lr < tune.max_lr and tune.num_training >= 2 and tune.max_trials >= 1):
            given = ", ".join(f"--tune.{key}={value}" for key, value in vars(tune).items())
            parser.error(f"{given}: need 0 < min_lr < max_lr, num_training >= 2 and max_trials >= 1")
        self.config.trainer.logger = False
        if self.run_label == "lr_find":  # the finder's steps, not the experiment's epochs
            self.config.trainer.max_epochs, self.config.trainer.max_steps = -1, tune.num_training


def raw_losses(smoothed: Sequence[float], beta: float = LIGHTNING_BETA) -> np.ndarray:
    """The training loss of each step, ``[T]`` float64, from the losses Lightning's LR finder keeps: step
    ``t`` (1-based) stores ``avg_t / (1 - beta ** (t + 1))``, where ``avg_t = beta * avg_{t-1} + (1 - beta)
    * loss_t`` (the bias correction one step off: the first stored loss is ``loss_1 / (1 + beta)``, about
    half the first loss). Exact up to float rounding; NaN where a step had no loss and after a NaN."""
    steps = np.arange(1, len(smoothed) + 1)
    averages = np.asarray(smoothed, dtype=np.float64) * (1 - beta ** (steps + 1))
    return (averages - beta * np.concatenate([[0.0], averages[:-1]])) / (1 - beta)


@dataclass
class LRSuggestion:
    """What :func:`suggest_lr` found: the LR and its step (``None`` from fewer than 5 finite losses), the
    smoothed curve it was read from, and warnings."""

    lr: float | None
    index: int | None
    smoothed: np.ndarray
    warnings: list[str]


def suggest_lr(lrs: Sequence[float] | np.ndarray, losses: Sequence[float] | np.ndarray) -> LRSuggestion:
    """Suggest an initial LR from the per-step LRs and raw training losses, ``[T]`` each (Smith 2017,
    section 3.3): the steepest descent of the loss per decade of LR before its minimum, read from the
    losses before the first non-finite one.

    The loss is smoothed by a centred moving average over ``max(5, T // 10)`` steps (odd), which, unlike
    an exponential one, does not shift the curve towards higher LRs. ``warnings`` flag an unreliable
    suggestion: the loss fell by less than 10%, the suggestion is on the flat start (within 2% of the
    start), the minimum is at the last step (raise ``max_lr``), or a tenth of the LR at the minimum
    (Smith's other rule) is more than 10x away.
    """
    lr, loss = np.asarray(lrs, dtype=np.float64), np.asarray(losses, dtype=np.float64)
    end = next(iter(np.flatnonzero(~np.isfinite(loss))), len(loss))
    if end < 5:
        return LRSuggestion(None, None, loss[:end], ["fewer than 5 finite losses"])
    lr, loss, width = lr[:end], loss[:end], max(5, end // 10) | 1
    smoothed = np.convolve(np.pad(loss, width // 2, mode="edge"), np.ones(width) / width, mode="valid")
    minimum = int(np.argmin(smoothed))
    index = int(np.argmin(np.gradient(smoothed, np.log10(lr))[: minimum + 1]))  # the steepest descent
    start, low, notes = float(smoothed[0]), float(smoothed[minimum]), []
    if not low < 0.9 * start:
        notes.append(f"the smoothed loss fell only from {start:.4g} to {low:.4g} (less than 10%)")
    elif not smoothed[index] < 0.98 * start:
        notes.append(f"the suggestion {lr[index]:.3g} is on the flat start of the curve")
    if minimum == end - 1:
        notes.append("the loss was still falling at --tune.max_lr; raise it")
    if not 0.1 <= lr[index] / (tenth := lr[minimum] / 10) <= 10:
        notes.append(f"a tenth of the LR at the minimum loss ({tenth:.3g}) is over 10x from the suggestion")
    return LRSuggestion(float(lr[index]), index, smoothed, notes)


def lr_find(args: list[str], package: str) -> tuple[float, Path | None]:
    """Run Lightning's LR range test (``Tuner.lr_find``, exponential, early stop at 4x the best loss)
    from ``--tune.min_lr`` to ``--tune.max_lr`` over ``--tune.num_training`` steps, and suggest an LR
    from the raw losses (:func:`raw_losses`, :func:`suggest_lr`). Writes into the run folder
    ``lr_find.csv`` (``lr,loss`` per step), ``lr_find.png`` (the losses and their smoothed curve vs LR,
    the suggestion marked) and ``suggested_lr.yaml``, the LR as ``model.init_args.optimizer`` for a model
    with an ``optimizer`` argument (``BaseModule``), else as its ``lr`` or ``learning_rate`` argument (a
    model with none gets no file). Returns the LR and the file (or ``None``).

    Raises:
        ProjectError: fewer than 5 finite losses to suggest an LR from (exit code 1; the plot is written).
    """
    from .report import new_figure, save_png

    with _TuneCLI("lr_find", args, package) as cli:  # bad --tune.* stop here
        if not cli.model.automatic_optimization:  # (the finder reads the loss that training_step returns)
            raise ConfigError(
                f"lr_find: {type(cli.model).__name__} sets automatic_optimization = False; Lightning's LR "
                "finder needs automatic optimization (training_step returning the loss)"
            )
        lr_range = {key: value for key, value in vars(cli.tune).items() if key != "max_trials"}
        quiet = contextlib.nullcontext() if stdout_is_terminal() else lr_finder_without_progress_bar()
        try:
            with quiet:
                finder = Tuner(cli.trainer).lr_find(
                    cli.model, datamodule=cli.datamodule, update_attr=False, **lr_range
                )
        except MisconfigurationException as error:  # e.g. a model with two optimizers
            raise ConfigError(f"lr_find: {first_line(error)}") from None
        assert finder is not None  # (None only with fast_dev_run)
        lrs, losses = np.array(finder.results["lr"]), raw_losses(finder.results["loss"])
        rows = [f"{lr:.9g},{loss:.9g}\n" for lr, loss in zip(lrs, losses, strict=True)]
        write_atomically(cli.run_dir / "lr_find.csv", "lr,loss\n" + "".join(rows))
        found, plot = suggest_lr(lrs, losses), cli.run_dir / "lr_find.png"
        figure, axes = new_figure()
        axes.plot(lrs, losses, color="0.75", linewidth=1, label="loss per step")
        axes.plot(lrs[: len(found.smoothed)], found.smoothed, color="C0", label="smoothed (centred mean)")
        if (i := found.index) is not None:
            axes.plot(lrs[i], found.smoothed[i], "o", color="C3", label=f"suggestion {found.lr:.3g}")
        axes.set(xscale="log", xlabel="learning rate", ylabel="training loss")
        axes.legend()
        save_png(figure, plot)
        if found.lr is None:
            raise ProjectError(f"lr_find could not suggest an LR (fewer than 5 finite losses); see {plot}")
        model, init_args = cli.config.model.class_path, cli.config.model.get("init_args") or {}
        name = next((name for name in ("optimizer", "lr", "learning_rate") if name in init_args), None)
        # jsonargparse gives even a default optimizer class a class_path
        optimizer = init_args["optimizer"]["class_path"] if name == "optimizer" else None
        target = f"{optimizer} on {model}" if optimizer else f"{model}'s {name}"
        setting = {"class_path": optimizer, "init_args": {"lr": found.lr}} if optimizer else found.lr
        print(f"Suggested LR: {found.lr:.3g}" + (f" for {target}" if name else "") + f" (plot: {plot})")
        for note in found.warnings:
            print(f"Warning: the suggestion may be unreliable: {note}; look at {plot}")
        if name is None:
            print(
                f"{model} has no optimizer, lr or learning_rate argument: set lr={found.lr:.3g} where its "
                "configure_optimizers builds the optimizer"
            )
            return found.lr, None
        config = {"model": {"init_args": {name: setting}}}
        return found.lr, _suggest(cli.run_dir / "suggested_lr.yaml", config, args, cli)


def scale_batch_size(args: list[str], package: str) -> tuple[int, Path]:
    """Find the largest batch size that fits, doubling from the configured one; returns it and the path
    of the written config. The trials are capped so that the last size is at most the training split
    (Lightning stops only once it reaches the split: 2,048 on 1,168 samples); the message says which
    limit ended the search."""
    with _TuneCLI("scale_batch_size", args, package) as cli:
        start, requested = int(getattr(cli.datamodule, "batch_size", 2)), cli.tune.max_trials
        cli.datamodule.setup("fit")
        dataset = cli.datamodule.train_dataloader().dataset
        samples = len(dataset) if isinstance(dataset, Sized) else None  # an iterable dataset may have none
        if samples is not None and start > samples:
            cli.parser.error(f"data.batch_size={start} is larger than the training split ({samples} samples)")
        trials = requested if samples is None else min(requested, int(np.log2(samples / start)) + 1)
        size = Tuner(cli.trainer).scale_batch_size(
            cli.model, datamodule=cli.datamodule, init_val=start, max_trials=trials
        )
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
        config = {"data": {"class_path": cli.config.data.class_path, "init_args": {"batch_size": size}}}
        return size, _suggest(cli.run_dir / "suggested_batch_size.yaml", config, args, cli)


def _suggest(path: Path, config: dict[str, Any], args: list[str], cli: _TuneCLI) -> Path:
    """Write the suggestion ``config`` to ``path`` (with ``ckpt_path: null`` when ``cli`` did not use
    one: the tuned experiment starts afresh, also from a run's config that names a checkpoint); print
    the ``fit`` command that reruns the tuned experiment with it: ``args`` (the tuner's own arguments,
    ``--config`` files and overrides in their order) without ``--tune.*`` and ``--ckpt_path``, then
    ``--config path`` (last, so it wins)."""
    fresh = {"ckpt_path": None} if cli.dropped_ckpt_path else {}
    write_atomically(path, yaml.safe_dump({**config, **fresh}, sort_keys=False))
    own = ("--tune.", "--ckpt_path")  # (and the value after one without "=")
    pairs = zip(["", *args], args, strict=False)
    kept = [
        arg
        for last, arg in pairs
        if not arg.startswith(own) and not (last.startswith(own) and "=" not in last)
    ]
    print(f"Use it: {shlex.join(['python', '-m', cli.package, 'fit', *kept, '--config', str(path)])}")
    return path


def main(args: list[str], package: str) -> None:
    """Dispatch ``lr_find ARGS`` / ``scale_batch_size ARGS`` (the first item names the command)."""
    (lr_find if args[0] == "lr_find" else scale_batch_size)(args[1:], package)
