"""``python -m project lr_find`` and ``python -m project scale_batch_size``:
Lightning's Tuner from the CLI.

Both take the same config files and overrides as ``fit`` (``--config``, ``--model.*``, ``--data.*``,
``--trainer.*``), create a run folder ``logs/<timestamp>_<command>/`` and write a small config there
that applies the suggestion to a later run: ``python -m project fit --config <that file>``.

- ``lr_find``: the LR range test (Smith 2017, "Cyclical Learning Rates for Training Neural Networks";
  Lightning's ``Tuner.lr_find``): ``--tune.num_training`` steps with the LR growing exponentially from
  ``--tune.min_lr`` to ``--tune.max_lr``. The suggestion is this module's :func:`suggest_lr` (not
  Lightning's ``suggestion()``, see there why), with a warning when the curve does not support it.
  Writes ``lr_find.png`` (loss vs LR, suggestion marked) and ``suggested_lr.yaml`` (the optimizer's
  ``class_path`` and ``lr``). The warmup-cosine callback and the health checks' loss checks are
  switched off for the test (the loss is meant to blow up at its end).
- ``scale_batch_size``: ``Tuner.scale_batch_size`` in ``power`` mode (doubles the configured batch size
  until memory runs out, ``--tune.max_trials`` batch sizes were tried, or the next size would exceed the
  training split) and writes ``suggested_batch_size.yaml`` (the DataModule's ``class_path`` and
  ``batch_size``).

Both print the command that reruns the tuned experiment with the suggestion: the same arguments
(``--config`` files and overrides, in order, without ``--tune.*``) followed by ``--config <file>``.
"""

from __future__ import annotations

import math
import shlex
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import yaml
from lightning.pytorch.cli import LightningArgumentParser
from lightning.pytorch.tuner import Tuner

from .cli import ProjectCLI


class _TuneCLI(ProjectCLI):
    """ProjectCLI without a subcommand: parses fit-style arguments and builds model, data, trainer."""

    def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        """Add the ``--tune.*`` options."""
        super().add_arguments_to_parser(parser)
        parser.add_argument("--tune.min_lr", type=float, default=1e-6, help="lr_find: first LR.")
        parser.add_argument("--tune.max_lr", type=float, default=1.0, help="lr_find: last LR.")
        parser.add_argument("--tune.num_training", type=int, default=100, help="lr_find: steps.")
        parser.add_argument(
            "--tune.max_trials", type=int, default=8, help="scale_batch_size: most batch sizes tried."
        )

    def parse_arguments(self, parser: LightningArgumentParser, args: Any) -> None:
        """Parse, then reject a bad ``--tune.*`` value before any run folder is created (exit 2)."""
        super().parse_arguments(parser, args)
        tune = self.config.tune
        if not 0 < tune.min_lr < tune.max_lr:
            parser.error(
                f"--tune.min_lr={tune.min_lr} and --tune.max_lr={tune.max_lr}: need 0 < min_lr < max_lr"
            )
        if tune.num_training < 2 or tune.max_trials < 1:
            parser.error(
                f"--tune.num_training={tune.num_training} (need >= 2) or --tune.max_trials={tune.max_trials} "
                "(need >= 1) is too small"
            )


def _cli(command: str, args: list[str]) -> _TuneCLI:
    # The LR range test drives the LR itself and makes the loss diverge on purpose.
    defaults = ["--lr_schedule.enabled=false", "--health.enabled=false", "--trainer.logger=false"]
    _TuneCLI.run_label = command
    return _TuneCLI(args=[*defaults, *args], run=False)


#: Smoothing factor of Lightning's LR-finder loss (``_LRCallback(beta=0.98)``, fastai's value).
LIGHTNING_LR_FINDER_BETA = 0.98


def unsmooth_lightning_losses(
    smoothed: Sequence[float], beta: float = LIGHTNING_LR_FINDER_BETA
) -> np.ndarray:
    """Recover the per-step training losses from the curve Lightning's LR finder records.

    Lightning 2.6 (``lightning.pytorch.tuner.lr_finder._LRCallback``) records
    ``s_t = a_t / (1 - beta**(t + 2))`` with ``a_t = beta * a_{t-1} + (1 - beta) * loss_t`` for the
    ``t``-th optimizer step (0-based): its bias correction uses ``trainer.global_step``, which is
    already ``t + 1`` when the loss is recorded, so the curve starts at about half the true loss
    (``s_0 = 0.02 / 0.0396 * loss_0``) and climbs for the first ~50 steps. That, not training, is why its
    curve starts well below the initial loss. Inverting the formula gives the raw losses back
    (float64, ``[T]``); a test pins the formula. Non-finite entries stay NaN and restart the recursion.
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
    warnings: list[str] = field(default_factory=list)


def suggest_lr(lrs: Sequence[float], losses: Sequence[float] | np.ndarray) -> LRSuggestion:
    """Suggest an initial LR from an LR range test (Smith 2017, section 3.3).

    ``lrs`` and ``losses`` are the per-step LRs and raw (unsmoothed) training losses, ``[T]`` each.
    The losses are smoothed with a centred moving average over ``w = max(5, T // 10)`` steps (odd),
    which, unlike an exponential moving average, does not shift the curve towards higher LRs. The
    suggestion is the LR of the steepest descent of the smoothed loss (per decade of LR) among the
    steps before its minimum, so neither the flat start nor the divergence at the end can win.

    The suggestion is flagged unreliable (``warnings``) when the loss fell by less than 10% from its
    start, when the steepest descent sits where the loss is still within 2% of its start (the flat
    part), when the minimum is at the last step (the range ended before the loss turned up: raise
    ``max_lr``), or when Smith's other rule of thumb, a tenth of the LR at the minimum, differs from
    it by more than 10x.
    """
    lr = np.asarray(lrs, dtype=np.float64)
    loss = np.asarray(losses, dtype=np.float64)
    finite = np.isfinite(loss)
    if finite.sum() < 5:
        return LRSuggestion(None, None, loss, ["fewer than 5 finite losses"])
    last = int(np.flatnonzero(finite)[-1]) if finite.all() else int(np.argmin(finite)) - 1
    lr, loss = lr[: last + 1], loss[: last + 1]
    width = max(5, len(loss) // 10) | 1
    half = width // 2
    padded = np.pad(loss, (half, half), mode="edge")
    smoothed = np.convolve(padded, np.ones(width) / width, mode="valid")
    minimum = int(np.argmin(smoothed))
    slope = np.gradient(smoothed, np.log10(lr))
    index = int(np.argmin(slope[: minimum + 1])) if minimum > 0 else 0
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
    skip_value = False
    for arg in args:
        if skip_value:
            skip_value = False
            continue
        if arg.startswith("--tune."):
            skip_value = "=" not in arg
            continue
        kept.append(arg)
    return shlex.join(["python", "-m", str(__package__), "fit", *kept, "--config", str(suggestion)])


def _class_path(value: Any) -> str | None:
    """``class_path`` of a config value (a jsonargparse ``Namespace`` or dict), if it has one."""
    getter = getattr(value, "get", None)
    return getter("class_path") if getter is not None else None


def lr_find(args: list[str]) -> tuple[float, Path]:
    """Run the LR range test; returns the suggested LR and the path of the written config."""
    cli = _cli("lr_find", args)
    options = cli.config.tune
    if not 0 < options.min_lr < options.max_lr:
        cli.parser.error(
            f"--tune.min_lr={options.min_lr} and --tune.max_lr={options.max_lr}: need 0 < min < max"
        )
    finder = Tuner(cli.trainer).lr_find(
        cli.model,
        datamodule=cli.datamodule,
        min_lr=options.min_lr,
        max_lr=options.max_lr,
        num_training=options.num_training,
        update_attr=False,
    )
    if finder is None:
        raise RuntimeError("lr_find returned no result (it does not run on non-zero ranks)")
    lrs = list(finder.results["lr"])
    losses = unsmooth_lightning_losses(finder.results["loss"])
    found = suggest_lr(lrs, losses)
    plot = cli.run_dir / "lr_find.png"
    _plot_lr_curve(plot, lrs, losses, found)
    if found.lr is None or not math.isfinite(found.lr):
        raise RuntimeError(
            f"lr_find could not suggest an LR (too few finite losses); see {plot} and try more "
            "--tune.num_training steps or a narrower --tune.min_lr/--tune.max_lr range"
        )
    optimizer = cli.config.model.init_args.get("optimizer")
    optimizer_class = _class_path(optimizer) or "torch.optim.AdamW"
    path = cli.run_dir / "suggested_lr.yaml"
    model_class = cli.config.model.get("class_path")
    _write_config(
        path,
        {
            "model": {
                "init_args": {"optimizer": {"class_path": optimizer_class, "init_args": {"lr": found.lr}}}
            }
        },
        f"LR suggested by lr_find for {optimizer_class} on {model_class}",
    )
    print(f"Suggested LR: {found.lr:.3g} for {optimizer_class} (plot: {plot})")
    for note in found.warnings:
        print(f"Warning: the suggestion may be unreliable: {note}; look at {plot}")
    print(f"Use it: {rerun_command(args, path)}")
    return found.lr, path


def _plot_lr_curve(path: Path, lrs: Sequence[float], losses: np.ndarray, found: LRSuggestion) -> None:
    """Write ``path``: raw and smoothed training loss vs LR (log x axis), the suggestion marked."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    figure, axes = plt.subplots(figsize=(6.4, 4.8))
    axes.plot(lrs, losses, color="0.75", linewidth=1, label="loss per step")
    axes.plot(lrs[: len(found.smoothed)], found.smoothed, color="C0", label="smoothed (centred mean)")
    if found.index is not None:
        axes.plot(
            lrs[found.index], found.smoothed[found.index], "o", color="C3", label=f"suggestion {found.lr:.3g}"
        )
    finite = losses[np.isfinite(losses)]
    if len(finite):  # keep the divergence at the end from squashing the rest of the curve
        axes.set_ylim(float(finite.min()) * 0.9, float(np.percentile(finite, 95)) * 1.5)
    axes.set_xscale("log")
    axes.set_xlabel("learning rate")
    axes.set_ylabel("training loss")
    axes.legend()
    figure.savefig(path, dpi=100)
    plt.close(figure)


def train_split_size(datamodule: Any) -> int | None:
    """Number of samples in the DataModule's training split (after ``setup("fit")``), if it has a length."""
    datamodule.setup("fit")
    dataset = getattr(datamodule, "train_set", None)
    if dataset is None:
        dataset = getattr(datamodule.train_dataloader(), "dataset", None)
    try:
        return len(dataset)  # type: ignore[arg-type]
    except TypeError:
        return None


#: Largest batch size Lightning's ``scale_batch_size`` tries (its ``max_val`` default).
LIGHTNING_MAX_BATCH_SIZE = 8192


def scale_batch_size(args: list[str]) -> tuple[int, Path]:
    """Find the largest batch size that fits; returns it and the path of the written config.

    The search doubles from the configured batch size. It never goes past the training split: Lightning
    stops only once the batch size is at least the dataset's length, so after 1,024 on 1,168 samples
    it would try (and suggest) 2,048, which is one short batch per epoch. The number of trials is
    capped so that the last size tried is at most the training split, and the message says which limit
    ended the search.
    """
    cli = _cli("scale_batch_size", args)
    start = int(getattr(cli.datamodule, "batch_size", 2))
    requested = int(cli.config.tune.max_trials)
    samples = train_split_size(cli.datamodule)
    trials = requested
    if samples is not None:
        if start > samples:
            cli.parser.error(
                f"data.batch_size={start} is larger than the training split ({samples} samples); "
                f"start from a smaller --data.batch_size"
            )
        trials = min(requested, math.floor(math.log2(samples / start)) + 1)
    size = Tuner(cli.trainer).scale_batch_size(
        cli.model,
        datamodule=cli.datamodule,
        mode="power",
        init_val=start,
        max_trials=trials,
    )
    if size is None:
        raise RuntimeError("scale_batch_size returned no result")
    largest_tried = start * 2 ** (trials - 1)
    if size < largest_tried and size < LIGHTNING_MAX_BATCH_SIZE:
        reason = f"batch size {size * 2} ran out of memory"
    elif size >= LIGHTNING_MAX_BATCH_SIZE:
        reason = f"Lightning's limit is {LIGHTNING_MAX_BATCH_SIZE}"
    elif trials < requested:
        reason = f"the next size ({size * 2}) would exceed the training split of {samples} samples"
    else:
        reason = f"--tune.max_trials={requested} sizes were tried; raise it to search further"
    path = cli.run_dir / "suggested_batch_size.yaml"
    data_class = cli.config.data.get("class_path")
    _write_config(
        path,
        {"data": {"class_path": data_class, "init_args": {"batch_size": int(size)}}},
        f"batch size suggested by scale_batch_size for {data_class}",
    )
    print(f"Batch size: {size} (doubled from {start}; stopped because {reason})")
    print(f"Use it: {rerun_command(args, path)}")
    return int(size), path


def _write_config(path: Path, config: dict[str, Any], comment: str) -> None:
    path.write_text(f"# {comment}\n" + yaml.safe_dump(config, sort_keys=False))


def main(args: list[str]) -> None:
    """Dispatch ``lr_find ARGS`` / ``scale_batch_size ARGS`` (the first item names the command)."""
    command, rest = args[0], args[1:]
    (lr_find if command == "lr_find" else scale_batch_size)(rest)
