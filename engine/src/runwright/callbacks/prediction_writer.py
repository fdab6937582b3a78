"""Write ``predict`` outputs to a CSV file."""

from __future__ import annotations

import csv
import itertools
from pathlib import Path
from typing import Any

import torch
from lightning.pytorch import LightningModule, Trainer
from lightning.pytorch.callbacks import BasePredictionWriter

from ..errors import ConfigError
from ..runs import write_atomically


class CSVPredictionWriter(BasePredictionWriter):
    """Write one CSV row per predicted sample after ``trainer.predict``, every predict loader's.

    ``predict_step`` returns per batch a tensor ``[B]`` or ``[B, ...]`` (a column ``pred``), a tuple or list
    of them (``pred_0``, ``pred_1``, ...) or a dict of them (the classifier's: ``pred`` int64, ``prob``
    float, ``probs`` ``[B, K]``, optionally ``target``), or a list of ``B`` strings or numbers. The
    columns: ``dataloader_idx`` (with several predict loaders), ``index`` (the sample's position in its
    loader's dataset; for an ``IterableDataset``, in the order it yielded), ``input`` when the DataModule
    has ``predict_inputs`` (a :class:`~runwright.inputs.PredictInputs`: its ``names``), then the outputs, a
    ``[B, K]`` value as ``K`` columns ``<key>_0`` ... ``<key>_<K-1>`` (a column a loader lacks is empty).
    The ``skipped`` of ``predict_inputs`` go to ``skipped.csv`` next to it (``input``, ``reason``). With
    several processes (DDP) rank 0 gathers every process's rows and writes the one file, ordered by loader
    and ``index``. Each file is written whole or not at all.

    Args:
        output_dir: Folder for the CSV; ``None`` means the trainer's log folder (the run folder).
        filename: Name of the CSV file.

    Raises:
        ConfigError: Lightning's default ``predict_step`` on ``(inputs, targets)`` batches, or outputs
            that are not one value per sample.
    """

    def __init__(self, output_dir: str | None = None, filename: str = "predictions.csv") -> None:
        super().__init__(write_interval="epoch")
        self.output_dir, self.filename = output_dir, filename

    def on_predict_batch_start(self, trainer: Trainer, module: LightningModule, batch: Any, *_: Any) -> None:
        """Refuse Lightning's default ``predict_step`` (it passes the whole batch to ``forward``) on
        ``(inputs, targets)`` batches."""
        if type(module).predict_step is LightningModule.predict_step and isinstance(batch, (tuple, list)):
            raise ConfigError(
                f"predict: {type(module).__name__} has no predict_step (Lightning's default passes the whole "
                "batch to forward); add one: def predict_step(self, batch, batch_idx): return self(batch[0])"
            )

    def write_on_epoch_end(
        self, trainer: Trainer, pl_module: LightningModule, predictions: Any, batch_indices: Any
    ) -> None:
        """Write the predictions to the CSV and print its path."""
        several = len(trainer.num_predict_batches) > 1  # (Lightning nests them per loader then)
        inputs = getattr(getattr(trainer, "datamodule", None), "predict_inputs", None)
        rows: list[dict[str, Any]] = []
        ranks = trainer.world_size
        for loader, outputs in enumerate(predictions if several else [predictions]):
            samples = [row for batch in outputs for row in sample_rows(batch)]
            # an IterableDataset has no indices: its order (sharded by sample under DDP: every world_size-th)
            indices = [i for batch in batch_indices[loader] for i in batch] if batch_indices else []
            positions = indices or range(trainer.global_rank, len(samples) * ranks, ranks)
            head = {"dataloader_idx": loader} if several else {}
            for index, row in zip(positions, samples, strict=True):
                named = {"input": inputs.names[index]} if inputs else {}
                rows.append({**head, "index": int(index), **named, **row})
        if ranks > 1:  # each process predicted its share: rank 0 writes them all, in order
            gathered: list[Any] = [None] * ranks
            torch.distributed.all_gather_object(gathered, rows)
            rows = sorted(itertools.chain(*gathered), key=lambda r: (r.get("dataloader_idx", 0), r["index"]))
        # on every process: trainer.log_dir is a broadcast under DDP
        folder = Path(self.output_dir or trainer.log_dir or trainer.default_root_dir)
        if trainer.is_global_zero:
            header = list(dict.fromkeys(key for row in rows for key in row))
            folder.mkdir(parents=True, exist_ok=True)
            table = [header, *([row.get(key, "") for key in header] for row in rows)]
            path = write_csv(folder / self.filename, table)
            print(f"Predictions ({len(rows)} row{'s' * (len(rows) != 1)}) written to {path}")
            if skipped := inputs.skipped if inputs else []:
                path = write_csv(folder / "skipped.csv", [("input", "reason"), *skipped])
                print(f"{len(skipped)} input file{'s' * (len(skipped) != 1)} skipped: {path}")


def sample_rows(output: Any) -> list[dict[str, Any]]:
    """The rows of one batch's ``predict_step`` output (see :class:`CSVPredictionWriter`), a dict of column
    values per sample.

    Raises:
        ConfigError: an output that is not one value per sample (a scalar, or values of different lengths).
    """
    if isinstance(output, (list, tuple)) and output and all(isinstance(v, torch.Tensor) for v in output):
        output = {f"pred_{i}": value for i, value in enumerate(output)}
    elif not isinstance(output, dict):
        output = {"pred": output}
    columns: dict[str, list[Any]] = {}  # column -> its value per sample
    for key, value in output.items():
        if isinstance(value, torch.Tensor) and value.ndim > 0:
            flat = value.detach().cpu().reshape(len(value), -1)
            names = [key] if value.ndim == 1 else [f"{key}_{k}" for k in range(flat.shape[1])]
            columns.update(zip(names, flat.T.tolist(), strict=True))
        elif isinstance(value, (list, tuple)):
            columns[key] = list(value)
        else:
            raise ConfigError(
                f"predict: predict_step returned {key}={type(value).__name__} {value!r:.40}, not a value per "
                "sample; return a tensor [B] or [B, K], a tuple or dict of them, or a list of B values"
            )
    lengths = {len(values) for values in columns.values()}
    if len(lengths) > 1:
        raise ConfigError(f"predict: predict_step returned outputs of different lengths {sorted(lengths)}")
    return [dict(zip(columns, values, strict=True)) for values in zip(*columns.values(), strict=True)]


def write_csv(path: Path, rows: list[Any]) -> Path:
    """Write ``rows`` to the CSV file ``path`` whole or not at all; returns ``path``
    (:func:`~runwright.runs.write_atomically`)."""

    def write(temporary: Path) -> None:
        with temporary.open("w", newline="") as handle:
            csv.writer(handle).writerows(rows)

    return write_atomically(path, write)
