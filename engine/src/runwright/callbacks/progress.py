"""Plain one-line progress for logs that are not a terminal (CI, ``| tee``, batch jobs)."""

from __future__ import annotations

import time
from typing import Any

from lightning.pytorch import Callback, LightningModule, Trainer
from lightning.pytorch.callbacks import ModelSummary, ProgressBar, RichModelSummary
from torchmetrics import Metric, MetricCollection

from ..progress import stdout_is_terminal


class LineProgressBar(ProgressBar):
    """Print one plain line every ``refresh_rate`` training batches and one per finished epoch.

    A line looks like ``epoch 3/30  batch 10/19  train/loss=0.1234  12.3 s``; the epoch line adds the
    validation metrics shown in the progress bar (``val/loss``, ``val/acc``, ...). No carriage returns
    or ANSI codes, so CI logs stay readable. The CLI uses it instead of the tqdm bar when stdout is
    not a terminal.

    Args:
        refresh_rate: Print every this many training batches (0: epoch lines only).
    """

    def __init__(self, refresh_rate: int = 50) -> None:
        super().__init__()
        if refresh_rate < 0:
            raise ValueError(f"refresh_rate={refresh_rate}: must be >= 0")
        self.refresh_rate = refresh_rate
        self._enabled = True
        self._start = time.perf_counter()

    def disable(self) -> None:
        """Stop printing (Lightning calls this on non-zero ranks)."""
        self._enabled = False

    def enable(self) -> None:
        """Print again."""
        self._enabled = True

    def _print(self, trainer: Trainer, pl_module: LightningModule, what: str, keys: tuple[str, ...]) -> None:
        """Print ``epoch <e>/<max><what>  <the metrics whose names start with keys>  <seconds> s``."""
        if not self._enabled:
            return
        total = trainer.max_epochs if trainer.max_epochs is not None and trainer.max_epochs >= 0 else "?"
        shown = {k: v for k, v in self.get_metrics(trainer, pl_module).items() if k.startswith(keys)}
        if not any(k.startswith(keys) and not k.endswith("_best") for k in shown):  # none with prog_bar=True
            logged = trainer.callback_metrics  # (a plain module's self.log("val_acc", ...): all it logged)
            shown = {k: float(v) for k, v in logged.items() if k.startswith(keys)} | shown
        metrics = "  ".join(
            f"{key}={value:.4g}" if isinstance(value, float) else f"{key}={value}"
            for key, value in shown.items()
        )
        seconds = time.perf_counter() - self._start
        print(f"epoch {trainer.current_epoch + 1}/{total}{what}  {metrics}  {seconds:.1f} s", flush=True)

    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        """Start the clock."""
        self._start = time.perf_counter()

    def on_train_batch_end(
        self, trainer: Trainer, pl_module: LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        """Print a line every ``refresh_rate`` batches."""
        if self.refresh_rate and (batch_idx + 1) % self.refresh_rate == 0:
            batches = f"  batch {batch_idx + 1}/{self.total_train_batches}"
            self._print(trainer, pl_module, batches, ("train/", "train_"))

    def on_train_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        """Print the epoch's summary line (after validation, which runs before this hook)."""
        self._print(
            trainer, pl_module, " done", ("train/", "train_", "val/", "val_")
        )  # (val_acc: a plain module)


class _WithoutMetricRows(ModelSummary):
    """A model summary without the rows of metric objects (torchmetrics modules: no parameters, no
    shapes; a BaseModule has a dozen of them)."""

    def on_fit_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        """Note the metric modules, then summarise as Lightning does."""
        self._metric_names = {
            name for name, m in pl_module.named_modules() if isinstance(m, (Metric, MetricCollection))
        }
        super().on_fit_start(trainer, pl_module)

    def summarize(self, summary_data: list[tuple[str, list[str]]], *args: Any, **kwargs: Any) -> None:  # type: ignore[override]
        """Lightning's table, its metric rows left out and the rows numbered again."""
        names = dict(summary_data)["Name"]
        keep = [i for i, name in enumerate(names) if name not in self._metric_names]
        rows = [(column, [values[i] for i in keep]) for column, values in summary_data]
        rows[0] = (rows[0][0], [str(i) if rows[0][1][i].strip() else " " for i in range(len(keep))])
        super().summarize(rows, *args, **kwargs)


class PlainModelSummary(_WithoutMetricRows, ModelSummary):
    """Lightning's plain-text model summary without metric rows."""


class RichSummary(_WithoutMetricRows, RichModelSummary):
    """Lightning's rich (terminal) model summary without metric rows."""


def default_extra_callbacks(trainer_config: dict[str, Any], callbacks: list[Callback]) -> list[Callback]:
    """The progress display and model summary the engine adds unless the config chose its own: on
    a terminal Lightning's bar and the rich summary; otherwise plain lines (:class:`LineProgressBar`)
    and the plain summary; depth 3 reaches the backbone's layers, metric objects left out."""
    extra: list[Callback] = []
    terminal = stdout_is_terminal()
    progress = trainer_config.get("enable_progress_bar") is not False and not terminal
    if progress and not any(isinstance(cb, ProgressBar) for cb in callbacks):
        extra.append(LineProgressBar())
    summary = trainer_config.get("enable_model_summary") is not False
    if summary and not any(isinstance(cb, ModelSummary) for cb in callbacks):
        extra.append((RichSummary if terminal else PlainModelSummary)(max_depth=3))
    return extra
