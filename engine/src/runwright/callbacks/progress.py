"""Plain one-line progress for logs that are not a terminal (CI, ``| tee``, batch jobs), and the model
summary without metric rows."""

from __future__ import annotations

import time
from typing import Any

from lightning.pytorch import Callback, LightningModule, Trainer
from lightning.pytorch.callbacks import (
    ModelSummary,
    ProgressBar,
    RichModelSummary,
    RichProgressBar,
    TQDMProgressBar,
)
from torchmetrics import Metric, MetricCollection

from ..checkpointing import BestCheckpoint
from ..console import stdout_is_terminal


class LineProgressBar(ProgressBar):
    """Print one plain line every ``refresh_rate`` training batches (0: none) and one per finished epoch,
    such as ``epoch 3/30 done  train/loss=0.1234  val/acc=0.9  best/val/acc=0.92  12.3 s`` (seconds since
    training started): the metrics logged with ``prog_bar=True`` (all the model logged when it marked
    none; on a batch line those training logs, not the last validation's), and on the epoch line also the
    monitored metric and its best score (``best/<monitor>``, the best checkpoint's). No carriage returns
    or ANSI codes.

    Raises:
        ValueError: ``refresh_rate`` is negative.
    """

    def __init__(self, refresh_rate: int = 50) -> None:
        super().__init__()
        if refresh_rate < 0:
            raise ValueError(f"refresh_rate={refresh_rate}: must be >= 0")
        self.refresh_rate, self.enabled = refresh_rate, True
        self._training_keys: set[str] = set()  # the values shown at batch ends before the first validation
        self._validated = False

    def disable(self) -> None:
        self.enabled = False

    def enable(self) -> None:
        self.enabled = True

    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._start = time.perf_counter()

    def on_validation_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._validated = self._validated or not trainer.sanity_checking

    def _print(self, trainer: Trainer, what: str, epoch_end: bool = False) -> None:
        # Every process reads the metrics, the disabled ones (DDP ranks > 0) too: reading an epoch's
        # synced metrics is a collective, and a callback after this one that syncs would otherwise wait
        # on rank 0's read while the other ranks wait on its own.
        logged = {k: float(v) for k, v in trainer.callback_metrics.items() if v.numel() == 1}
        shown = {k: float(v) for k, v in trainer.progress_bar_metrics.items()} or logged
        if not epoch_end:  # (a batch line: training's values, not the last validation's)
            self._training_keys |= set(shown) if not self._validated else set()
            shown = {k: v for k, v in shown.items() if k in self._training_keys}
        best = next((cb for cb in trainer.checkpoint_callbacks if isinstance(cb, BestCheckpoint)), None)
        if epoch_end and best is not None and best.monitor in logged and best.best_key:
            # (this epoch is scored after this hook: the best so far, this epoch's value included)
            value, score = logged[best.monitor], best.best_model_score
            scores = [value] if score is None else [value, float(score)]
            top = max(scores) if best.mode == "max" else min(scores)
            shown = {**shown, best.monitor: value, best.best_key: top}
        if not self.enabled:
            return
        metrics = "".join(f"  {key}={value:.4g}" for key, value in shown.items())
        elapsed = f"{time.perf_counter() - self._start:.1f} s"
        print(f"epoch {trainer.current_epoch + 1}/{trainer.max_epochs}{what}{metrics}  {elapsed}", flush=True)

    def on_train_batch_end(
        self, trainer: Trainer, pl_module: LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        """Print a line every ``refresh_rate`` batches."""
        if self.refresh_rate and (batch_idx + 1) % self.refresh_rate == 0:
            self._print(trainer, f"  batch {batch_idx + 1}/{self.total_train_batches}")

    def on_train_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        """Print the epoch's line (after validation, which runs before this hook)."""
        self._print(trainer, " done", epoch_end=True)


class PlainModelSummary(ModelSummary):
    """Lightning's model summary without the rows of metric objects (torchmetrics modules: no parameters,
    no shapes), its rows numbered again."""

    def on_fit_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._metrics = {n for n, m in pl_module.named_modules() if isinstance(m, (Metric, MetricCollection))}
        super().on_fit_start(trainer, pl_module)

    def summarize(self, summary_data: list[tuple[str, list[str]]], *args: Any, **kwargs: Any) -> None:  # type: ignore[override]
        keep = [i for i, name in enumerate(dict(summary_data)["Name"]) if name not in self._metrics]
        rows = [(column, [values[i] for i in keep]) for column, values in summary_data]
        rows[0] = (rows[0][0], [str(i) if rows[0][1][i].strip() else " " for i in range(len(keep))])
        super().summarize(rows, *args, **kwargs)


class RichSummary(PlainModelSummary, RichModelSummary):
    """Lightning's rich (terminal) model summary without metric rows."""


def console_callbacks(trainer_config: dict[str, Any], callbacks: list[Callback]) -> list[Callback]:
    """The config's ``callbacks`` as this console shows them, then the progress display and model summary
    the engine adds unless the config chose its own (depth 3 reaches the backbone's layers).

    On a terminal: the callbacks as given, Lightning's bar (when none is given) and the rich summary.
    Otherwise (a log, a pipe, CI) a bar that redraws itself in place, a ``TQDMProgressBar`` or
    ``RichProgressBar`` (a log gets carriage returns and ANSI codes, or nothing before the end), is
    replaced by a :class:`LineProgressBar` with its ``refresh_rate``; without a bar a
    ``LineProgressBar()`` is added, and the plain summary.
    """
    terminal = stdout_is_terminal()
    redrawn = () if terminal else (TQDMProgressBar, RichProgressBar)
    callbacks = [LineProgressBar(int(c.refresh_rate)) if isinstance(c, redrawn) else c for c in callbacks]
    bar = trainer_config.get("enable_progress_bar") is not False and not terminal
    if bar and not any(isinstance(cb, ProgressBar) for cb in callbacks):
        callbacks.append(LineProgressBar())
    summary = trainer_config.get("enable_model_summary") is not False
    if summary and not any(isinstance(cb, ModelSummary) for cb in callbacks):
        callbacks.append((RichSummary if terminal else PlainModelSummary)(max_depth=3))
    return callbacks
