"""Write ``predict`` outputs to a CSV file."""

from __future__ import annotations

import csv
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from lightning.pytorch import LightningModule, Trainer
from lightning.pytorch.callbacks import BasePredictionWriter

from ..errors import ConfigError


class CSVPredictionWriter(BasePredictionWriter):
    """Write one CSV row per predicted sample after ``trainer.predict``.

    Each ``predict_step`` returns a dict of ``[B]`` or ``[B, K]`` tensors (for the classifier:
    ``pred`` int64, ``prob`` float, ``probs`` ``[B, K]``, optionally ``target``), or one such tensor
    (the column ``pred``). Columns are ``index``
    (the sample's position in the predict dataset), ``input`` when the DataModule names its inputs
    (the ``names`` of its ``predict_inputs``, a ``runwright.inputs.PredictInputs``: the file name,
    or ``file:line`` of a CSV row, for ``--data.predict_path``), then the dict's keys in order; a
    ``[B, K]`` value becomes ``K`` columns ``<key>_0`` ... ``<key>_<K-1>``. Files the DataModule
    skipped (the ``skipped`` of its ``predict_inputs``) are listed in ``skipped.csv``
    next to it (``input``, ``reason``). The file is ``<output_dir>/<filename>``, where
    ``output_dir`` defaults to ``trainer.log_dir`` (the run folder). With several processes (DDP)
    rank 0 gathers every process's rows and writes the one file, ordered by ``index``.

    Args:
        output_dir: Folder for the CSV; ``None`` means the trainer's log folder.
        filename: Name of the CSV file.
    """

    def __init__(self, output_dir: str | None = None, filename: str = "predictions.csv") -> None:
        super().__init__(write_interval="epoch")
        self.output_dir = output_dir
        self.filename = filename

    def on_predict_batch_start(
        self,
        trainer: Trainer,
        pl_module: LightningModule,
        batch: Any,
        batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None:
        """Refuse a model without its own ``predict_step`` given ``(inputs, targets)`` batches (Lightning's
        default ``predict_step`` passes the whole batch to ``forward``).

        Raises:
            ConfigError: the model has Lightning's ``predict_step`` and the batch is a tuple or list.
        """
        if type(pl_module).predict_step is LightningModule.predict_step and isinstance(batch, (tuple, list)):
            raise ConfigError(
                f"predict: {type(pl_module).__name__} has no predict_step, and Lightning's default passes "
                f"the whole batch (a {type(batch).__name__} of {len(batch)}) to forward; add one, e.g. "
                "def predict_step(self, batch, batch_idx): return self(batch[0]).softmax(dim=1)"
            )

    def write_on_epoch_end(
        self,
        trainer: Trainer,
        pl_module: LightningModule,
        predictions: Sequence[Any],
        batch_indices: Sequence[Any],
    ) -> None:
        """Write all predictions of the epoch (dataloader 0) to the CSV and print its path.

        Raises:
            ConfigError: ``predict_step`` returned something other than a tensor or a dict of them.
        """
        folder = Path(self.output_dir or trainer.log_dir or trainer.default_root_dir)
        batches = predictions[0] if predictions and isinstance(predictions[0], list) else predictions
        indices = batch_indices[0] if batch_indices and isinstance(batch_indices[0], list) else batch_indices
        batches = [{"pred": batch} if isinstance(batch, torch.Tensor) else batch for batch in batches]
        wrong = [type(batch).__name__ for batch in batches if not isinstance(batch, dict)]
        if wrong:
            raise ConfigError(
                f"predict_step returned {wrong[0]}; the predictions CSV needs a tensor [B] or [B, K], or a "
                "dict of them such as {'pred': ..., 'prob': ...}"
            )
        columns: dict[str, torch.Tensor] = {}
        for key in batches[0] if batches else ():
            tensor = torch.cat([torch.as_tensor(batch[key]).detach().cpu() for batch in batches])
            if tensor.ndim == 2:  # [N, K]: one column per k
                columns.update({f"{key}_{k}": column for k, column in enumerate(tensor.T)})
            else:
                columns[key] = tensor
        size = len(next(iter(columns.values()), []))
        index = [int(i) for batch in indices for i in batch]
        if len(index) != size:  # Lightning had no sample indices (the loader is not a DataLoader)
            index = list(range(size))
        # the inputs a BaseDataModule read from its predict_path
        found = getattr(getattr(trainer, "datamodule", None), "predict_inputs", None)
        names = found.names if found is not None else None  # one per input (#15)
        header = ["index", *(["input"] if names is not None else []), *columns] if columns else []
        table = zip(index, *(column.tolist() for column in columns.values()), strict=True)
        rows = [[i, *([names[i]] if names is not None else []), *values] for i, *values in table]
        if trainer.world_size > 1 and torch.distributed.is_initialized():
            # every process predicted its own share (each sample once): rank 0 writes them all, in order
            gathered: list[Any] = [None] * trainer.world_size
            torch.distributed.all_gather_object(gathered, (header, rows))
            header = next((h for h, _ in gathered if h), header)
            rows = sorted((row for _, part in gathered for row in part), key=lambda row: row[0])
        if not trainer.is_global_zero:
            return
        folder.mkdir(parents=True, exist_ok=True)
        with (folder / self.filename).open("w", newline="") as handle:
            csv.writer(handle).writerows([header, *rows] if header else [])
        print(f"Predictions ({len(rows)} row{'s' * (len(rows) != 1)}) written to {folder / self.filename}")
        if found is not None and found.skipped:
            with (folder / "skipped.csv").open("w", newline="") as handle:
                csv.writer(handle).writerows([("input", "reason"), *found.skipped])
            count = len(found.skipped)
            print(f"{count} input file{'s' * (count != 1)} skipped (not predicted), listed in {handle.name}")
