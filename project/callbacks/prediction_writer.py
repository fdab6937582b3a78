"""Write ``predict`` outputs to a CSV file."""

from __future__ import annotations

import csv
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from lightning.pytorch import LightningModule, Trainer
from lightning.pytorch.callbacks import BasePredictionWriter

log = logging.getLogger(__name__)


class CSVPredictionWriter(BasePredictionWriter):
    """Write one CSV row per predicted sample after ``trainer.predict``.

    Each ``predict_step`` must return a dict of ``[B]`` tensors (for the classifier: ``pred`` int64,
    ``prob`` float, optionally ``target``). Columns are ``index`` (the sample's position in the
    predict dataset), then the dict's keys in order. The file is ``<output_dir>/<filename>``, where
    ``output_dir`` defaults to ``trainer.log_dir`` (the run folder); with several processes each
    rank writes ``predictions_rank<r>.csv``.

    Args:
        output_dir: Folder for the CSV; ``None`` means the trainer's log folder.
        filename: Name of the CSV file.
    """

    def __init__(self, output_dir: str | None = None, filename: str = "predictions.csv") -> None:
        super().__init__(write_interval="epoch")
        self.output_dir = output_dir
        self.filename = filename
        self.path: Path | None = None

    def write_on_epoch_end(
        self,
        trainer: Trainer,
        pl_module: LightningModule,
        predictions: Sequence[Any],
        batch_indices: Sequence[Any],
    ) -> None:
        """Write all predictions of the epoch (dataloader 0) to the CSV and log its path."""
        folder = Path(self.output_dir or trainer.log_dir or trainer.default_root_dir)
        folder.mkdir(parents=True, exist_ok=True)
        name = self.filename
        if trainer.world_size > 1:
            name = f"{Path(name).stem}_rank{trainer.global_rank}{Path(name).suffix}"
        path = folder / name
        batches = predictions[0] if predictions and isinstance(predictions[0], list) else predictions
        indices = batch_indices[0] if batch_indices and isinstance(batch_indices[0], list) else batch_indices
        rows = 0
        with path.open("w", newline="") as handle:
            writer: Any = None
            offset = 0
            for position, batch in enumerate(batches):
                if not isinstance(batch, dict):
                    raise TypeError(
                        f"predict_step returned {type(batch).__name__}; CSVPredictionWriter needs a dict "
                        "of [B] tensors such as {'pred': ..., 'prob': ...}"
                    )
                columns = {key: torch.as_tensor(value).detach().cpu() for key, value in batch.items()}
                size = len(next(iter(columns.values())))
                if position < len(indices) and len(indices[position]) == size:
                    index = [int(i) for i in indices[position]]
                else:
                    index = list(range(offset, offset + size))
                offset += size
                if writer is None:
                    writer = csv.writer(handle)
                    writer.writerow(["index", *columns])
                for row in range(size):
                    writer.writerow([index[row], *(columns[key][row].item() for key in columns)])
                    rows += 1
        self.path = path
        log.info("Wrote %d predictions to %s", rows, path)
        print(f"Predictions ({rows} rows) written to {path}")
