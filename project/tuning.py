"""``python -m project lr_find`` and ``python -m project scale_batch_size``:
Lightning's Tuner from the CLI.

Both take the same config files and overrides as ``fit`` (``--config``, ``--model.*``, ``--data.*``,
``--trainer.*``), create a run folder ``logs/<timestamp>_<command>/`` and write a small config there
that applies the suggestion to a later run: ``python -m project fit --config <that file>``.

- ``lr_find``: the LR range test (Smith 2017, "Cyclical Learning Rates for Training Neural Networks";
  Lightning's ``Tuner.lr_find``): ``--tune.num_training`` steps with the LR growing exponentially from
  ``--tune.min_lr`` to ``--tune.max_lr``; the suggestion is the LR at the steepest descent of the
  smoothed loss. Writes ``lr_find.png`` (loss vs LR, suggestion marked) and ``suggested_lr.yaml``
  (``model.init_args.optimizer.init_args.lr``). The warmup-cosine callback and the health checks'
  loss checks are switched off for the test (the loss is meant to blow up at its end).
- ``scale_batch_size``: ``Tuner.scale_batch_size`` in ``power`` mode (doubles the configured batch size
  until memory runs out or ``--tune.max_trials`` batch sizes were tried) and writes
  ``suggested_batch_size.yaml`` (``data.init_args.batch_size``).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

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
    suggestion = finder.suggestion()
    import matplotlib

    matplotlib.use("Agg")
    figure: Any = finder.plot(suggest=True)
    plot = cli.run_dir / "lr_find.png"
    figure.savefig(plot, dpi=100)
    if suggestion is None or not math.isfinite(suggestion):
        raise RuntimeError(
            f"lr_find could not suggest an LR (too few finite losses); see {plot} and try more "
            "--tune.num_training steps or a narrower --tune.min_lr/--tune.max_lr range"
        )
    path = cli.run_dir / "suggested_lr.yaml"
    _write_config(path, {"model": {"init_args": {"optimizer": {"init_args": {"lr": float(suggestion)}}}}})
    print(f"Suggested LR: {suggestion:.3g} (plot: {plot})")
    print(f"Use it: python -m project fit --config {path}")
    return float(suggestion), path


def scale_batch_size(args: list[str]) -> tuple[int, Path]:
    """Find the largest batch size that fits; returns it and the path of the written config."""
    cli = _cli("scale_batch_size", args)
    start = int(getattr(cli.datamodule, "batch_size", 2))
    size = Tuner(cli.trainer).scale_batch_size(
        cli.model,
        datamodule=cli.datamodule,
        mode="power",
        init_val=start,
        max_trials=cli.config.tune.max_trials,
    )
    if size is None:
        raise RuntimeError("scale_batch_size returned no result")
    path = cli.run_dir / "suggested_batch_size.yaml"
    _write_config(path, {"data": {"init_args": {"batch_size": int(size)}}})
    print(
        f"Batch size: {size} (doubled from {start} until memory ran out or after "
        f"--tune.max_trials={cli.config.tune.max_trials} trials)"
    )
    print(f"Use it: python -m project fit --config {path}")
    return int(size), path


def _write_config(path: Path, config: dict[str, Any]) -> None:
    path.write_text(yaml.safe_dump(config, sort_keys=False))


def main(args: list[str]) -> None:
    """Dispatch ``lr_find ARGS`` / ``scale_batch_size ARGS`` (the first item names the command)."""
    command, rest = args[0], args[1:]
    (lr_find if command == "lr_find" else scale_batch_size)(rest)
