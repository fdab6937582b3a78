"""``python -m <package> report RUN_DIR``: PNG plots of a run from its ``metrics.csv`` and its checkpoint.

Writes into ``RUN_DIR/report/`` (or ``--output``), each ``WIDTH x HEIGHT`` pixels, against the optimizer
step: ``loss.png`` (train and val loss), ``accuracy.png``, ``lr.png`` (``train/lr``), ``memory.png``
(``memory/*``, MiB), and ``confusion_matrix.png``: the run's best checkpoint (or ``--ckpt_path``) on the
test split of the data in the run's ``config.yaml``. A plot without data is skipped with a message.
``--print_provenance`` prints the run's ``provenance.yaml`` and its diffs instead.
"""

from __future__ import annotations

import csv
import fnmatch
import functools
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from jsonargparse import ArgumentError, ArgumentParser
from matplotlib.figure import Figure
from torchmetrics.classification import MulticlassConfusionMatrix

from ..errors import ConfigError, ProjectError, first_line
from ..provenance import PROVENANCE_FILE, read_provenance, summary
from ..runs import best_checkpoint_of, resolve_checkpoint, write_atomically
from . import rebuild

#: Size of every figure in pixels, and its dots per inch.
WIDTH, HEIGHT, DPI = 640, 480, 100
#: Plot name -> the ``metrics.csv`` keys it draws (any key holding ``loss``: ``train/loss``, ``val_loss``,
#: Lightning's ``train_loss_epoch``; ``acc`` likewise).
PLOTS = {"loss": "*loss*", "accuracy": "*acc*", "lr": "train/lr", "memory": "memory/*"}


def read_metrics(path: Path) -> list[dict[str, float]]:
    """Rows of a Lightning ``metrics.csv``, the empty cells dropped and the rest as floats."""
    with path.open(newline="") as handle:
        return [{key: float(value) for key, value in row.items() if value} for row in csv.DictReader(handle)]


def series(rows: Sequence[dict[str, float]], key: str, x: str = "step") -> tuple[list[float], list[float]]:
    """The ``(x, y)`` points of ``key`` over the rows that have both ``x`` and ``key``."""
    rows = [row for row in rows if key in row and x in row]
    return [row[x] for row in rows], [row[key] for row in rows]


def new_figure() -> tuple[Any, Any]:
    """A matplotlib ``(figure, axes)`` of ``WIDTH x HEIGHT`` pixels; a bare ``Figure``, not pyplot, so no
    display backend is chosen and nothing needs closing. Write it with ``figure.savefig(path)`` (PNG)."""
    figure = Figure(figsize=(WIDTH / DPI, HEIGHT / DPI), dpi=DPI, layout="tight")
    return figure, figure.subplots()


def save_png(figure: Any, path: Path, **options: Any) -> Path:
    """Write ``figure`` to ``path`` as a PNG (``options``: more ``savefig`` arguments), whole or not at
    all; ``path``."""
    return write_atomically(path, functools.partial(figure.savefig, format="png", **options))


def write_report(run_dir: Path, output: Path, package: str, ckpt: Path | None = None) -> dict[str, Path]:
    """Write the report's PNGs for ``run_dir`` into ``output``, each :data:`PLOTS` entry against the
    optimizer step, and the confusion matrix of ``ckpt`` (default: the run's best checkpoint, the one its
    ``last.ckpt`` records) on the test split of the run's ``config.yaml``. Returns ``{plot name: path}``;
    prints why a plot was skipped. Each PNG is written whole or not at all."""
    rows, written = read_metrics(run_dir / "metrics.csv"), dict[str, Path]()
    output.mkdir(parents=True, exist_ok=True)
    for name, pattern in PLOTS.items():
        if not (keys := sorted({key for row in rows for key in row if fnmatch.fnmatchcase(key, pattern)})):
            print(f"skipped {name}.png: no {pattern} values in metrics.csv")
            continue
        figure, axes = new_figure()
        for key in keys:
            axes.plot(*series(rows, key), marker=".", label=key)
        axes.set(xlabel="optimizer step", ylabel=name)
        axes.legend()
        written[name] = save_png(figure, output / f"{name}.png")
    try:
        ckpt = ckpt or best_checkpoint_of(run_dir / "checkpoints" / "last.ckpt")
        args, parser = ["--ckpt_path", str(ckpt)], {"exit_on_error": False}
        with rebuild.RebuildCLI(args=args, run=False, package=package, parser_kwargs=parser) as cli:
            try:
                logits, targets = rebuild.predict_test_split(cli.model, cli.data_source)
            except (RuntimeError, TypeError, ValueError) as error:  # (the model does not take its x)
                raise ConfigError(f"{type(cli.model).__name__}(x) failed: {first_line(error)}") from None
        if targets.dtype.is_floating_point or logits.ndim != 2 or logits.shape[1] < 2:
            raise ConfigError("the model is not a classifier (needs [N, K] logits and class targets)")
    except (ProjectError, ArgumentError, FileNotFoundError) as error:
        print(f"skipped confusion_matrix.png: {first_line(error)} (drawn for (x, y) classifiers)")
        return written
    matrix, (figure, axes) = MulticlassConfusionMatrix(logits.shape[1]), new_figure()
    matrix.plot(matrix(logits, targets), ax=axes)  # rows: true class, columns: predicted class
    written["confusion_matrix"] = save_png(figure, output / "confusion_matrix.png")
    return written


def main(args: list[str], package: str) -> None:
    """Run ``python -m <package> report ARGS`` (exit code 2 on bad input, a bad ``--ckpt_path`` included:
    :class:`~runwright.errors.CheckpointError` from :func:`~runwright.runs.resolve_checkpoint`)."""
    parser = ArgumentParser(prog=f"python -m {package} report", description=__doc__)
    parser.add_argument("run_dir", type=Path, help="Run folder (holds metrics.csv).")
    parser.add_argument("--output", type=Path | None, help="Folder for the PNGs (default RUN_DIR/report).")
    parser.add_argument("--ckpt_path", type=str | None, help="For the confusion matrix (default: best).")
    parser.add_argument("--logs_dir", type=str, default="logs", help="Where --ckpt_path=best|last looks.")
    parser.add_argument("--print_provenance", action="store_true", help="Print provenance.yaml and diffs.")
    cfg = parser.parse_args(args[1:])
    run_dir, needed = cfg.run_dir, PROVENANCE_FILE if cfg.print_provenance else "metrics.csv"
    if not (run_dir / needed).is_file():
        parser.error(f"RUN_DIR={str(run_dir)!r}: no {needed} there; pass a run folder such as logs/<run>")
    if cfg.print_provenance:
        print((run_dir / PROVENANCE_FILE).read_text(), end="")
        for diff in sorted(run_dir.glob("provenance.*.diff")):
            print(f"--- {diff.name} ---\n{diff.read_text()}", end="")
        return
    ckpt = resolve_checkpoint(cfg.ckpt_path, cfg.logs_dir) if cfg.ckpt_path else None
    if facts := read_provenance(run_dir):
        print(f"provenance: {summary(facts)} (--print_provenance shows all)")
    for path in write_report(run_dir, cfg.output or run_dir / "report", package, ckpt).values():
        print(f"wrote {path}")
