"""``python -m <package> report RUN_DIR``: PNG plots of a run from its ``metrics.csv`` (and its
checkpoint).

Writes into ``RUN_DIR/report/`` (or ``--output``), each ``WIDTH x HEIGHT`` pixels (640 x 480):
``loss.png`` (``train/loss`` per logged step, ``val/loss`` per epoch, against the optimizer step),
``accuracy.png`` (``train/acc`` and ``val/acc`` per epoch), ``lr.png`` (``train/lr`` against the
optimizer step), ``memory.png`` (every ``memory/*`` key, MiB), and ``confusion_matrix.png``: counts of
(true, predicted class) on the test split, predicted by the run's ``checkpoints/best.ckpt`` (or
``--ckpt_path``) on the data of the run's ``config.yaml``, so it works for any finished ``fit`` run.
A plot without data is skipped with a message. The run's provenance (``provenance.yaml``) is summed
up in one line; ``--print_provenance`` prints all of it and its diffs, and writes no plots.
"""

from __future__ import annotations

import csv
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..errors import CheckpointError
from ..provenance import PROVENANCE_FILE, read_provenance
from ..provenance import summary as provenance_summary

#: Size of every figure in pixels, and its dots per inch.
WIDTH, HEIGHT, DPI = 640, 480, 100


def read_metrics(path: Path) -> list[dict[str, float]]:
    """Rows of a Lightning ``metrics.csv``, the empty cells dropped and the rest as floats."""
    with path.open(newline="") as handle:
        return [{key: float(value) for key, value in row.items() if value} for row in csv.DictReader(handle)]


def series(rows: Sequence[dict[str, float]], key: str, x: str = "step") -> tuple[list[float], list[float]]:
    """The ``(x, y)`` points of ``key`` over the rows that have both ``x`` and ``key``."""
    points = [(row[x], row[key]) for row in rows if key in row and x in row]
    return [p[0] for p in points], [p[1] for p in points]


def new_figure() -> tuple[Any, Any]:
    """A matplotlib ``(figure, axes)`` of ``WIDTH x HEIGHT`` pixels; a bare ``Figure``, not pyplot, so no
    display backend is chosen and nothing needs closing. Write it with ``figure.savefig(path)`` (PNG)."""
    from matplotlib.figure import Figure

    figure = Figure(figsize=(WIDTH / DPI, HEIGHT / DPI), dpi=DPI, layout="tight")
    return figure, figure.subplots()


def plot_lines(
    rows: Sequence[dict[str, float]], keys: Sequence[str], x: str, title: str, ylabel: str, path: Path
) -> Path | None:
    """Plot ``keys`` against ``x`` into ``path``; ``None`` (nothing written) when no key has data."""
    lines = {key: points for key in keys if (points := series(rows, key, x))[0]}
    if not lines:
        return None
    figure, axes = new_figure()
    for key, (xs, ys) in lines.items():
        axes.plot(xs, ys, marker="o" if len(xs) <= 50 else None, markersize=3, label=key)
    axes.set(title=title, xlabel="optimizer step" if x == "step" else x, ylabel=ylabel)
    axes.grid(alpha=0.3)
    axes.legend()
    figure.savefig(path)
    return path


def write_report(
    run_dir: Path, output: Path, ckpt_path: Path | None = None, config_path: Path | None = None
) -> dict[str, Path]:
    """Write the report's PNGs for ``run_dir`` into ``output``; returns ``{plot name: path}``.
    ``ckpt_path`` / ``config_path`` default to the run's best checkpoint (the one its ``last.ckpt``
    records, :func:`~runwright.runs.best_checkpoint_of`) / ``config.yaml``. The loss and accuracy
    plots take ``train/<name>`` and ``val/<name>`` keys, or a plain LightningModule's ``train_<name>``."""
    from lightning.pytorch.utilities.model_helpers import is_overridden

    from ..runs import best_checkpoint_of, load_datamodule, load_model, predict_test_split

    rows = read_metrics(run_dir / "metrics.csv")
    output.mkdir(parents=True, exist_ok=True)
    stages = [f"{stage}{sep}" for stage in ("train", "val") for sep in "/_"]
    memory = sorted({key for row in rows for key in row if key.startswith("memory/")})
    plots = {
        "loss": ([f"{stage}loss" for stage in stages], "step", "Loss", "loss"),
        "accuracy": ([f"{stage}acc" for stage in stages], "epoch", "Accuracy", "accuracy"),
        "lr": (["train/lr"], "step", "Learning rate schedule", "learning rate"),
        "memory": (memory, "step", "Memory", "MiB"),
    }
    written: dict[str, Path] = {}
    for name, (keys, x, title, ylabel) in plots.items():
        if path := plot_lines(rows, keys, x, title, ylabel, output / f"{name}.png"):
            written[name] = path
        else:
            print(f"skipped {name}.png: no {', '.join(keys) or 'memory/*'} values in metrics.csv")
    config = config_path or run_dir / "config.yaml"
    try:
        ckpt = ckpt_path or best_checkpoint_of(run_dir / "checkpoints" / "last.ckpt")
    except CheckpointError as error:
        print(f"skipped confusion_matrix.png: {error}")
        return written
    datamodule = load_datamodule(config) if config.is_file() else None
    if datamodule is None or not is_overridden("test_dataloader", datamodule):
        print(f"skipped confusion_matrix.png: needs {config} with a test_dataloader in its data")
        return written
    logits, targets = predict_test_split(load_model(ckpt), datamodule, desc="confusion matrix")
    if targets.dtype.is_floating_point or logits.ndim != 2 or logits.shape[1] < 2:
        print("skipped confusion_matrix.png: the model is not a classifier (needs [N, K] logits)")
    elif len(targets):  # rows: true class, columns: predicted class; counts
        from sklearn.metrics import ConfusionMatrixDisplay

        figure, axes = new_figure()
        preds = logits.argmax(-1)
        ConfusionMatrixDisplay.from_predictions(targets, preds, ax=axes, colorbar=False)
        correct = int((preds == targets).sum())
        axes.set_title(f"Test split: {correct}/{len(targets)} correct ({correct / len(targets):.3f})")
        figure.savefig(written.setdefault("confusion_matrix", output / "confusion_matrix.png"))
    return written


def main(args: list[str], package: str) -> None:
    """Run ``python -m <package> report ARGS`` (exit code 2 on bad input, a bad
    ``--ckpt_path`` included: :class:`~runwright.errors.CheckpointError` from
    :func:`~runwright.runs.resolve_checkpoint`)."""
    from jsonargparse import ArgumentParser

    from ..runs import resolve_checkpoint

    parser = ArgumentParser(prog=f"python -m {package} report", description=__doc__)
    parser.add_argument("run_dir", type=Path, help="Run folder (holds metrics.csv).")
    parser.add_argument("--output", type=Path | None, help="Folder for the PNGs (default RUN_DIR/report).")
    parser.add_argument("--ckpt_path", type=str | None, help="For the confusion matrix (default: best).")
    parser.add_argument("--config", type=Path | None, help="Run config for the data (default: the run's).")
    parser.add_argument("--logs_dir", type=str, default="logs", help="Where --ckpt_path=best|last looks.")
    parser.add_argument("--print_provenance", action="store_true", help="Print provenance.yaml and diffs.")
    cfg = parser.parse_args(args[1:])
    run_dir = cfg.run_dir
    needed = PROVENANCE_FILE if cfg.print_provenance else "metrics.csv"
    if not (run_dir / needed).is_file():
        parser.error(f"RUN_DIR={str(run_dir)!r}: no {needed} there; pass a run folder such as logs/<run>")
    if cfg.print_provenance:
        print((run_dir / PROVENANCE_FILE).read_text(), end="")
        for diff in sorted(run_dir.glob("provenance.*.diff")):
            print(f"--- {diff.name} ---\n{diff.read_text()}", end="")
        return
    ckpt = resolve_checkpoint(cfg.ckpt_path, cfg.logs_dir) if cfg.ckpt_path else None
    if facts := read_provenance(run_dir):
        print(f"provenance: {provenance_summary(facts)} (--print_provenance shows all)")
    for path in write_report(run_dir, cfg.output or run_dir / "report", ckpt, cfg.config).values():
        print(f"wrote {path}")
