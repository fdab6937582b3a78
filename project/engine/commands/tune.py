"""``python -m project lr_find`` and ``python -m project scale_batch_size``:
Lightning's ``Tuner`` from the CLI, with the same config files and overrides as ``fit``. Each creates a
run folder ``logs/<timestamp>_<command>/``, writes a small config there that applies its suggestion,
and prints the ``fit`` command that reruns the experiment with it (:func:`rerun_command`).
"""

from __future__ import annotations

import math
import shlex
from collections.abc import Sequence, Sized
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import yaml
from lightning.pytorch.cli import LightningArgumentParser
from lightning.pytorch.tuner import Tuner

from ..cli import ProjectCLI
from ..errors import ProjectError

#: The package whose command this is (``project``; a generated repo's own name).
PACKAGE = __package__.split(".")[0]


class _TuneCLI(ProjectCLI):
    """ProjectCLI without a subcommand: parses fit-style arguments and builds model, data, trainer."""

    def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        """Add the ``--tune.*`` options."""
        super().add_arguments_to_parser(parser)
        parser.add_argument("--tune.min_lr", type=float, default=1e-6, help="lr_find: first LR.")
        parser.add_argument("--tune.max_lr", type=float, default=1.0, help="lr_find: last LR.")
        parser.add_argument("--tune.num_training", type=int, default=100, help="lr_find: steps.")
        parser.add_argument("--tune.max_trials", type=int, default=8, help="scale_batch_size: most tries.")

    def parse_arguments(self, parser: LightningArgumentParser, args: Any) -> None:
        """Parse, then reject a bad ``--tune.*`` value before any run folder is created (exit 2)."""
        super().parse_arguments(parser, args)
        tune = self.config.tune
        if not (0 < tune.min_lr < tune.max_lr and tune.num_training >= 2 and tune.max_trials >= 1):
            given = ", ".join(f"--tune.{key}={value}" for key, value in vars(tune).items())
            parser.error(f"{given}: need 0 < min_lr < max_lr, num_training >= 2 and max_trials >= 1")


def _cli(command: str, args: list[str]) -> _TuneCLI:
    # The LR range test drives the LR itself and makes the loss diverge on purpose.
    defaults = ["--lr_schedule.enabled=false", "--health.enabled=false", "--trainer.logger=false"]
    _TuneCLI.run_label = command
    return _TuneCLI(args=[*defaults, *args], run=False)


def unsmooth_lightning_losses(smoothed: Sequence[float], beta: float = 0.98) -> np.ndarray:
    """The per-step training losses (float64 ``[T]``) behind the curve Lightning's LR finder records
    with the smoothing factor ``beta`` (``_LRCallback(beta=0.98)``, fastai's value).

    Lightning 2.6 (``tuner.lr_finder._LRCallback``) records ``s_t = a_t / (1 - beta**(t + 2))`` with
    ``a_t = beta * a_{t-1} + (1 - beta) * loss_t`` at optimizer step ``t`` (its bias correction is one
    step off), so its curve starts at about half the true loss and climbs for ~50 steps. This inverts
    that formula (a test pins it); from the first non-finite value on, the result is NaN.
    """
    raw = np.full(len(smoothed), np.nan)
    previous = 0.0
    for t, value in enumerate(smoothed):
        if not math.isfinite(value):
            return raw  # Lightning stopped updating its average; nothing after it can be recovered
        average = value * (1 - beta ** (t + 2))
        raw[t] = (average - beta * previous) / (1 - beta)
        previous = average
    return raw


@dataclass
class LRSuggestion:
    """What :func:`suggest_lr` found: the LR, the smoothed curve it was read from, and warnings."""

    lr: float | None
    index: int | None
    smoothed: np.ndarray
    warnings: list[str]


def suggest_lr(lrs: Sequence[float], losses: Sequence[float] | np.ndarray) -> LRSuggestion:
    """Suggest an initial LR from the per-step LRs and raw training losses, ``[T]`` each (Smith 2017,
    section 3.3): the steepest descent of the loss per decade of LR before its minimum.

    The loss is smoothed by a centred moving average over ``max(5, T // 10)`` steps (odd), which, unlike
    an exponential one, does not shift the curve towards higher LRs. ``warnings`` flag an unreliable
    suggestion: the loss fell by less than 10%, the suggestion is on the flat start (within 2% of the
    start), the minimum is at the last step (raise ``max_lr``), or a tenth of the LR at the minimum
    (Smith's other rule) is more than 10x away.
    """
    lr = np.asarray(lrs, dtype=np.float64)
    loss = np.asarray(losses, dtype=np.float64)
    finite = np.isfinite(loss)
    if finite.sum() < 5:
        return LRSuggestion(None, None, loss, ["fewer than 5 finite losses"])
    end = len(loss) if finite.all() else int(np.argmin(finite))  # up to the first non-finite loss
    lr, loss = lr[:end], loss[:end]
    width = max(5, len(loss) // 10) | 1
    padded = np.pad(loss, (width // 2, width // 2), mode="edge")
    smoothed = np.convolve(padded, np.ones(width) / width, mode="valid")
    minimum = int(np.argmin(smoothed))
    slope = np.gradient(smoothed, np.log10(lr))
    index = int(np.argmin(slope[: minimum + 1]))
    start, low = float(smoothed[0]), float(smoothed[minimum])
    notes: list[str] = []
    if not low < 0.9 * start:
        notes.append(f"the smoothed loss fell only from {start:.4g} to {low:.4g} (less than 10%)")
    elif not smoothed[index] < 0.98 * start:
        notes.append(f"the suggestion {lr[index]:.3g} is on the flat start of the curve")
    if minimum == len(smoothed) - 1:
        notes.append("the loss was still falling at --tune.max_lr; raise it")
    tenth = lr[minimum] / 10
    if not 0.1 <= lr[index] / tenth <= 10:
        notes.append(
            f"a tenth of the LR at the minimum loss ({tenth:.3g}) is more than 10x away from the suggestion"
        )
    return LRSuggestion(float(lr[index]), index, smoothed, notes)


def rerun_command(args: Sequence[str], suggestion: Path) -> str:
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
    return shlex.join(["python", "-m", PACKAGE, "fit", *kept, "--config", str(suggestion)])


def lr_find(args: list[str]) -> tuple[float, Path]:
    """Run the LR range test (Smith 2017, "Cyclical Learning Rates for Training Neural Networks";
    ``Tuner.lr_find``) from ``--tune.min_lr`` to ``--tune.max_lr`` over ``--tune.num_training`` steps,
    with the warmup-cosine callback, the health checks and the logger off (the loss is meant to blow up
    at the end). Writes ``lr_find.png`` (raw and smoothed training loss vs LR, the suggestion marked) and
    ``suggested_lr.yaml`` with the :func:`suggest_lr` LR (not Lightning's ``suggestion()``, see
    :func:`unsmooth_lightning_losses`); returns that LR and the config's path.

    Raises:
        ProjectError: too few finite losses to suggest an LR (exit code 1; the plot is written).
    """
    from .report import new_figure

    cli = _cli("lr_find", args)  # bad --tune.* values stopped there (exit 2), before any run folder
    options = cli.config.tune
    finder = Tuner(cli.trainer).lr_find(
        cli.model,
        datamodule=cli.datamodule,
        min_lr=options.min_lr,
        max_lr=options.max_lr,
        num_training=options.num_training,
        update_attr=False,
    )
    assert finder is not None  # None only on ranks > 0; the tuning commands run in one process
    lrs = list(finder.results["lr"])
    losses = unsmooth_lightning_losses(finder.results["loss"])
    found = suggest_lr(lrs, losses)
    plot = cli.run_dir / "lr_find.png"
    figure, axes = new_figure()
    axes.plot(lrs, losses, color="0.75", linewidth=1, label="loss per step")
    axes.plot(lrs[: len(found.smoothed)], found.smoothed, color="C0", label="smoothed (centred mean)")
    if found.index is not None:
        axes.plot(
            lrs[found.index], found.smoothed[found.index], "o", color="C3", label=f"suggestion {found.lr:.3g}"
        )
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
    optimizer = cli.config.model.init_args.get("optimizer") or {}
    optimizer_class = optimizer.get("class_path", "torch.optim.AdamW")
    path = cli.run_dir / "suggested_lr.yaml"
    suggestion = {"optimizer": {"class_path": optimizer_class, "init_args": {"lr": found.lr}}}
    comment = f"LR suggested by lr_find for {optimizer_class} on {cli.config.model.get('class_path')}"
    _write_config(path, {"model": {"init_args": suggestion}}, comment)
    print(f"Suggested LR: {found.lr:.3g} for {optimizer_class} (plot: {plot})")
    for note in found.warnings:
        print(f"Warning: the suggestion may be unreliable: {note}; look at {plot}")
    print(f"Use it: {rerun_command(args, path)}")
    return found.lr, path


#: Largest batch size Lightning's ``scale_batch_size`` tries (its ``max_val`` default).
LIGHTNING_MAX_BATCH_SIZE = 8192


def scale_batch_size(args: list[str]) -> tuple[int, Path]:
    """Find the largest batch size that fits, doubling from the configured one; returns it and the path
    of the written config. The trials are capped so that the last size is at most the training split
    (Lightning stops only once it reaches the split: 2,048 on 1,168 samples); the message says which
    limit ended the search."""
    cli = _cli("scale_batch_size", args)
    start = int(getattr(cli.datamodule, "batch_size", 2))
    requested = int(cli.config.tune.max_trials)
    cli.datamodule.setup("fit")
    dataset = cli.datamodule.train_dataloader().dataset
    samples = len(dataset) if isinstance(dataset, Sized) else None  # an iterable dataset may have none
    trials = requested
    if samples is not None:
        if start > samples:
            cli.parser.error(
                f"data.batch_size={start} is larger than the training split ({samples} samples); "
                f"start from a smaller --data.batch_size"
            )
        trials = min(requested, math.floor(math.log2(samples / start)) + 1)
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
    path = cli.run_dir / "suggested_batch_size.yaml"
    data_class = cli.config.data.get("class_path")
    suggested = {"data": {"class_path": data_class, "init_args": {"batch_size": int(size)}}}
    _write_config(path, suggested, f"batch size suggested by scale_batch_size for {data_class}")
    print(f"Batch size: {size} (doubled from {start}; stopped because {reason})")
    print(f"Use it: {rerun_command(args, path)}")
    return int(size), path


def _write_config(path: Path, config: dict[str, Any], comment: str) -> None:
    path.write_text(f"# {comment}\n" + yaml.safe_dump(config, sort_keys=False))


def main(args: list[str]) -> None:
    """Dispatch ``lr_find ARGS`` / ``scale_batch_size ARGS`` (the first item names the command)."""
    (lr_find if args[0] == "lr_find" else scale_batch_size)(args[1:])
