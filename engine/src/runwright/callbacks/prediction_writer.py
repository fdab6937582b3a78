"""Write ``predict`` outputs to a CSV file."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

import torch
from lightning.pytorch import LightningModule, Trainer
from lightning.pytorch.callbacks import BasePredictionWriter

from ..errors import ConfigError
from ..runs import write_atomically


class CSVPredictionWriter(BasePredictionWriter):
    """Write one CSV row per predicted sample after ``trainer.predict`` (one predict dataloader).

    ``predict_step`` returns a dict of ``[B]`` or ``[B, K]`` tensors (the classifier's: ``pred`` int64,
    ``prob`` float, ``probs`` ``[B, K]``, optionally ``target``) or one such tensor (named ``pred``). The
    columns: ``index`` (the sample's position in the predict dataset), ``input`` when the DataModule has
    ``predict_inputs`` (a :class:`~runwright.inputs.PredictInputs`: its ``names``), then the dict's keys in
    order, a ``[B, K]`` value as ``K`` columns ``<key>_0`` ... ``<key>_<K-1>``. The ``skipped`` of
    ``predict_inputs`` go to ``skipped.csv`` next to it (``input``, ``reason``). With several processes
    (DDP) rank 0 gathers every process's rows and writes the one file, ordered by ``index``. Each file is
    written whole or not at all.

    Args:
        output_dir: Folder for the CSV; ``None`` means the trainer's log folder (the run folder).
        filename: Name of the CSV file.
    """

    def __init__(self, output_dir: str | None = None, filename: str = "predictions.csv") -> None:
        super().__init__(write_interval="epoch")
        self.output_dir, self.filename = output_dir, filename

    def on_predict_batch_start(self, trainer: Trainer, module: LightningModule, batch: Any, *_: Any) -> None:
        """Refuse Lightning's default ``predict_step`` (it passes the whole batch to ``forward``) on
        ``(inputs, targets)`` batches.

        Raises:
            ConfigError: the model has Lightning's ``predict_step`` and the batch is a tuple or list.
        """
        if type(module).predict_step is LightningModule.predict_step and isinstance(batch, (tuple, list)):
            raise ConfigError(
                f"predict: {type(module).__name__} has no predict_step (Lightning's default passes the whole "
                "batch to forward); add one: def predict_step(self, batch, batch_idx): return self(batch[0])"
            )

    def write_on_epoch_end(
        self, trainer: Trainer, pl_module: LightningModule, predictions: Any, batch_indices: Any
    ) -> None:
        """Write the predictions to the CSV and print its path."""
        outputs = [batch if isinstance(batch, dict) else {"pred": batch} for batch in predictions]
        inputs = getattr(getattr(trainer, "datamodule", None), "predict_inputs", None)
        index = [int(i) for batch in batch_indices[0] for i in batch]
        header = ["index", "input"] if inputs else ["index"]
        columns = [index, [inputs.names[i] for i in index]] if inputs else [index]
        for key in outputs[0] if outputs else ():
            tensor = torch.cat([output[key] for output in outputs])
            header += [key] if tensor.ndim == 1 else [f"{key}_{k}" for k in range(tensor[0].numel())]
            columns += tensor.reshape(len(tensor), -1).T.tolist()
        rows = list(zip(*columns, strict=True))
        if trainer.world_size > 1:  # each process predicted its share: rank 0 writes them all, in order
            gathered: list[Any] = [None] * trainer.world_size
            torch.distributed.all_gather_object(gathered, rows)
            rows = sorted((row for part in gathered for row in part), key=lambda row: row[0])
        # on every process: trainer.log_dir is a broadcast under DDP
        folder = Path(self.output_dir or trainer.log_dir or trainer.default_root_dir)
        if trainer.is_global_zero:
            folder.mkdir(parents=True, exist_ok=True)
            path = write_csv(folder / self.filename, [header, *rows])
            print(f"Predictions ({len(rows)} row{'s' * (len(rows) != 1)}) written to {path}")
            if skipped := inputs.skipped if inputs else []:
                path = write_csv(folder / "skipped.csv", [("input", "reason"), *skipped])
                print(f"{len(skipped)} input file{'s' * (len(skipped) != 1)} skipped: {path}")


def write_csv(path: Path, rows: list[Any]) -> Path:
    """Write ``rows`` to the CSV file ``path`` whole or not at all; returns ``path``
    (:func:`~runwright.runs.write_atomically`)."""

    def write(temporary: Path) -> None:
        with temporary.open("w", newline="") as handle:
            csv.writer(handle).writerows(rows)

    return write_atomically(path, write)
