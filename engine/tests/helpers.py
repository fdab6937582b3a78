"""Small callbacks, optimizers and modules that the engine tests select by ``class_path``
(``helpers.Recorder``) to look inside a run, or to break it on purpose."""

from __future__ import annotations

import math
import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from fixture_task import PlainClassifier, TinyClassifier, TinyImages
from lightning.pytorch import Callback, LightningDataModule, LightningModule, Trainer
from lightning.pytorch.demos.boring_classes import BoringModel, RandomDataset, RandomIterableDataset
from torch import Tensor
from torch.utils.data import DataLoader, TensorDataset
from torchmetrics import Metric

from runwright import BaseDataModule, Transformed


class RecordingSGD(torch.optim.SGD):
    """SGD that records the total gradient 2-norm it sees when it updates (after Lightning clipped)."""

    seen_norms: list[float] = []

    def step(self, closure: Any = None) -> Any:  # type: ignore[override]
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()  # forward, backward, then Lightning's gradient clipping
        grads = [p.grad for group in self.param_groups for p in group["params"] if p.grad is not None]
        RecordingSGD.seen_norms.append(
            torch.linalg.vector_norm(torch.stack([g.norm() for g in grads])).item()
        )
        super().step()
        return loss


class Recorder(Callback):
    """Records, per run: pre-clip grad norms, LR per optimizer step and per batch, training inputs,
    and the dtype of the head's output. Optionally makes every training image identical (so that any
    difference between samples comes from augmentation randomness alone)."""

    runs: list[Recorder] = []

    def __init__(self, identical_images: bool = False) -> None:
        self.identical_images = identical_images
        self.pre_clip_norms: list[float] = []
        self.step_lrs: list[tuple[int, float]] = []
        self.batch_lrs: list[float] = []
        self.inputs: list[Tensor] = []
        self.epochs_seen: list[int] = []
        self.head_dtypes: set[torch.dtype] = set()
        Recorder.runs.append(self)

    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        if self.identical_images and stage == "fit":
            images = trainer.datamodule.train_set.dataset.tensors[0]  # Transformed(TensorDataset)
            images[:] = images[0].clone()
        head = getattr(pl_module, "head", None)
        if head is not None:
            head.register_forward_hook(lambda module, args, out: self.head_dtypes.add(out.dtype))

    def on_before_optimizer_step(self, trainer: Trainer, pl_module: LightningModule, optimizer: Any) -> None:
        grads = [p.grad for p in pl_module.parameters() if p.grad is not None]
        self.pre_clip_norms.append(torch.linalg.vector_norm(torch.stack([g.norm() for g in grads])).item())
        self.step_lrs.append((trainer.global_step, optimizer.param_groups[0]["lr"]))

    def on_train_batch_end(
        self, trainer: Trainer, pl_module: LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        self.batch_lrs.append(trainer.optimizers[0].param_groups[0]["lr"])
        self.inputs.append(batch[0].detach().clone())
        self.epochs_seen.append(trainer.current_epoch)


class StopAfterEpoch(Callback):
    """Ask the trainer to stop at the end of epoch ``epoch`` (1-based), like an interrupted run."""

    def __init__(self, epoch: int = 1) -> None:
        self.epoch = epoch

    def on_train_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if trainer.current_epoch + 1 >= self.epoch:
            trainer.should_stop = True


class LeakyClassifier(TinyClassifier):
    """The classic leak from the seeds: a loss kept in a Python list as a tensor instead of ``.item()``.

    Here it is a running loss computed for monitoring (no backward ever runs through it), so the list
    keeps each step's whole graph, activations included, alive: memory grows linearly with steps.
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.kept: list[Tensor] = []

    def training_step(self, batch: Any, batch_idx: int) -> Tensor:
        loss = super().training_step(batch, batch_idx)
        inputs, target = batch
        self.kept.append(self.compute_loss(self(inputs), target))  # should be .item()
        return loss


# ---------------------------------------------------------------------------- broken cases for health checks
class HiddenListBackbone(torch.nn.Module):
    """Keeps its layers in a plain Python list: they are never registered, trained or saved."""

    def __init__(self, in_channels: int = 1) -> None:
        super().__init__()
        self.blocks = [torch.nn.Conv2d(1, 8, 3, padding=1), torch.nn.ReLU()]
        self.pool = torch.nn.AdaptiveAvgPool2d(1)
        self.proj = torch.nn.Conv2d(1, 8, 1)
        self.out_features = 8

    def forward(self, x: Tensor) -> Tensor:
        return self.pool(self.proj(x)).flatten(1)


class DetachedBackbone(torch.nn.Module):
    """Cuts the graph with ``detach()``: the stem never gets a gradient."""

    def __init__(self, in_channels: int = 1) -> None:
        super().__init__()
        self.stem = torch.nn.Conv2d(1, 8, 3, padding=1)
        self.body = torch.nn.Conv2d(8, 16, 3, padding=1)
        self.out_features = 16

    def forward(self, x: Tensor) -> Tensor:
        features = self.stem(x).detach()
        return self.body(features).mean(dim=(2, 3))


class NaNLossClassifier(TinyClassifier):
    """Returns a NaN loss from global step ``nan_at_step`` on."""

    def __init__(self, nan_at_step: int = 3, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.nan_at_step = nan_at_step

    def compute_loss(self, output: Tensor, target: Tensor) -> Tensor:
        loss = super().compute_loss(output, target)
        if self.training and self.trainer.global_step >= self.nan_at_step:
            return loss * float("nan")
        return loss


class GradInValidationClassifier(TinyClassifier):
    """Builds a graph in validation and returns it."""

    def validation_step(self, batch: Any, batch_idx: int) -> Any:
        super().validation_step(batch, batch_idx)
        with torch.enable_grad():
            return {"logits": self(batch[0])}


class CrashingClassifier(TinyClassifier):
    """Raises inside ``training_step`` at global step ``crash_at_step``."""

    def __init__(self, crash_at_step: int = 3, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.crash_at_step = crash_at_step

    def training_step(self, batch: Any, batch_idx: int) -> Tensor:
        if self.trainer.global_step == self.crash_at_step:
            raise RuntimeError("boom: a bug inside training_step")
        return super().training_step(batch, batch_idx)


class NaNInputImages(TinyImages):
    """Every second training image is all NaN."""

    def setup(self, stage: str | None = None) -> None:
        super().setup(stage)
        assert isinstance(self.train_set, Transformed)
        self.train_set.dataset.tensors[0][::2] = float("nan")  # type: ignore[attr-defined]


class ColumnLabelImages(TinyImages):
    """Training labels shaped ``[N, 1]`` instead of ``[N]``."""

    def setup(self, stage: str | None = None) -> None:
        super().setup(stage)
        assert isinstance(self.train_set, Transformed)
        images, labels = self.train_set.dataset.tensors  # type: ignore[attr-defined]
        self.train_set.dataset = TensorDataset(images, labels.unsqueeze(1))


class SlowDown(Callback):
    """Sleeps after every training batch so a test can signal the run mid-epoch."""

    def __init__(self, seconds: float = 0.1) -> None:
        self.seconds = seconds

    def on_train_batch_end(
        self, trainer: Trainer, pl_module: LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        time.sleep(self.seconds)


class ScriptedScore(Metric):
    """A metric whose value at each epoch's end is read from a script (``scores[epoch]``): a
    validation metric that gets worse as well as better, on cue."""

    def __init__(self, scores: list[float], epoch: Callable[[], int]) -> None:
        super().__init__()
        self.scores, self.epoch = scores, epoch
        self.add_state("seen", torch.tensor(0), dist_reduce_fx="sum")

    def update(self, preds: Tensor, target: Tensor) -> None:
        self.seen += len(target)

    def compute(self) -> Tensor:
        return torch.tensor(self.scores[min(self.epoch(), len(self.scores) - 1)])


class ScriptedClassifier(TinyClassifier):
    """An TinyClassifier whose ``val/acc`` at epoch ``e`` is ``scores[e]`` (training is real)."""

    def __init__(self, scores: list[float] = [0.5, 0.7, 0.6], **kwargs: Any) -> None:  # noqa: B006
        super().__init__(**kwargs)
        self.val_metrics["acc"] = ScriptedScore(scores, lambda: self.current_epoch)


class ManualClassifier(TinyClassifier):
    """Optimises by hand (``automatic_optimization = False``), as a GAN or RL module would."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.automatic_optimization = False

    def training_step(self, batch: Any, batch_idx: int) -> Tensor:
        optimizer = self.optimizers()
        loss = super().training_step(batch, batch_idx)
        optimizer.zero_grad()  # type: ignore[union-attr]
        self.manual_backward(loss)
        optimizer.step()  # type: ignore[union-attr]
        return loss


class FewerClassesImages(TinyImages):
    """Declares 3 classes (so the linked model has a 3-way head) but its training labels are 0..3."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**{**kwargs, "num_classes": 3})  # in its hparams too, as the linked model's

    def setup(self, stage: str | None = None) -> None:
        super().setup(stage)
        assert isinstance(self.train_set, Transformed)
        self.train_set.dataset.tensors[1][::4] = 3


class CountTestSamples(Callback):
    """Count the test samples of all ranks (summed over processes) and write the total to
    ``<run folder>/test_samples.txt`` on rank 0."""

    def __init__(self) -> None:
        self.count = 0

    def on_test_batch_end(
        self,
        trainer: Trainer,
        pl_module: LightningModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None:
        self.count += len(batch[1])

    def on_test_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        total = trainer.strategy.reduce(torch.tensor(float(self.count)), reduce_op="sum")
        folder = Path(trainer.log_dir or ".")  # log_dir broadcasts: every rank must ask for it
        if trainer.is_global_zero:
            (folder / "test_samples.txt").write_text(f"{int(total)}\n")


class ColorImages(TinyImages):
    """The tiny images with 3 channels, ``[3, 8, 8]`` (``dims[0]`` is 3): the gray image in each."""

    dims = (3, 8, 8)

    def setup(self, stage: str | None = None) -> None:
        super().setup(stage)
        for name in ("train_set", "val_set", "test_set"):
            split = getattr(self, name)
            inner = split.dataset if isinstance(split, Transformed) else split
            images, labels = inner.tensors
            colored = TensorDataset(images.expand(-1, 3, -1, -1).contiguous(), labels)
            if isinstance(split, Transformed):
                split.dataset = colored
            else:
                setattr(self, name, colored)


class SignalAt(Callback):
    """Send SIGINT (as Ctrl-C does) or ``signum`` (``"SIGTERM"``) ``times`` times at the end of training
    batch ``batch`` of ``epoch``, or with ``batch=-1`` at the end of the epoch (after its validation), or
    with ``epoch=-1`` at the end of the sanity check's first batch; rank 0 sends it, to itself (the main
    process) or, with ``group``, to its whole process group (as a scheduler or Ctrl-C does: every DDP
    process and DataLoader worker). A group must be the run's own: started in a new session, as
    :func:`support.start_module` does with ``new_session``."""

    def __init__(
        self, epoch: int = 0, batch: int = 0, signum: str = "SIGINT", group: bool = False, times: int = 1
    ) -> None:
        self.epoch, self.batch, self.times = epoch, batch, times
        self.signum, self.group = signal.Signals[signum], group

    def _send(self, trainer: Trainer) -> None:
        if not trainer.is_global_zero:
            return
        for _ in range(self.times):
            if not self.group:
                os.kill(os.getpid(), self.signum)
                continue
            assert os.getpgid(0) == os.getpid(), "the run must lead its own process group (a new session)"
            os.killpg(0, self.signum)

    def on_validation_batch_end(
        self, trainer: Trainer, pl_module: LightningModule, outputs: Any, batch: Any, batch_idx: int, *_: int
    ) -> None:
        if trainer.sanity_checking and (self.epoch, batch_idx) == (-1, 0):
            self._send(trainer)

    def on_train_batch_end(
        self, trainer: Trainer, pl_module: LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        if (trainer.current_epoch, batch_idx) == (self.epoch, self.batch):
            self._send(trainer)

    def on_train_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if (trainer.current_epoch, -1) == (self.epoch, self.batch):
            self._send(trainer)


class SlurmSignalAt(Callback):
    """In a SLURM job, rank 0 sends the job's batch script the preemption warning (``scancel
    --signal=USR1 --batch <job>``, as SLURM sends it before the time limit) at the end of global step
    ``steps[SLURM_RESTART_COUNT]`` (one step per attempt of the job; none after the last); with
    ``array_task``, only in that task of a job array. A run without it trains the same (it draws no
    random numbers)."""

    def __init__(self, steps: list[int], array_task: int | None = None) -> None:
        self.steps, self.array_task = steps, array_task

    def on_train_batch_end(
        self, trainer: Trainer, pl_module: LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        attempt = int(os.environ.get("SLURM_RESTART_COUNT", "0"))
        if self.array_task is not None and os.environ.get("SLURM_ARRAY_TASK_ID") != str(self.array_task):
            return
        if (
            trainer.is_global_zero
            and attempt < len(self.steps)
            and trainer.global_step == self.steps[attempt]
        ):
            subprocess.run(["scancel", "--signal=USR1", "--batch", os.environ["SLURM_JOB_ID"]], check=True)


class KillAt(SlurmSignalAt):
    """Every process SIGKILLs itself (a node failure: no warning, nothing saved) at the end of global step
    ``steps[SLURM_RESTART_COUNT]``, as :class:`SlurmSignalAt` picks it."""

    def on_train_batch_end(
        self, trainer: Trainer, pl_module: LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        attempt = int(os.environ.get("SLURM_RESTART_COUNT", "0"))
        if self.array_task is not None and os.environ.get("SLURM_ARRAY_TASK_ID") != str(self.array_task):
            return
        if attempt < len(self.steps) and trainer.global_step == self.steps[attempt]:
            os.kill(os.getpid(), signal.SIGKILL)


class OneCycleClassifier(TinyClassifier):
    """The usual OneCycleLR recipe: ``configure_optimizers`` sizes the schedule with
    ``self.trainer.estimated_stepping_batches``, which makes Lightning build the training loader before
    a checkpoint's loader state is restored (Lightning #20550)."""

    def configure_optimizers(self) -> Any:
        optimizer = torch.optim.SGD(self.parameters(), lr=0.05, momentum=0.9)
        total = int(self.trainer.estimated_stepping_batches)
        scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=0.1, total_steps=total)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}


class LinearBackbone(torch.nn.Module):
    """Flatten, one linear layer and ReLU: no BatchNorm and no dropout, so a sample's gradient does not
    depend on the other samples of its batch (``[B, C, 8, 8]`` -> ``[B, 16]``)."""

    def __init__(self, in_channels: int = 1) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(in_channels * 64, 16)
        self.out_features = 16

    def forward(self, x: Tensor) -> Tensor:
        return torch.relu(self.linear(x.flatten(1)))


class NoPredictImages(TinyImages):
    """The tiny images without a reader for new inputs (BaseDataModule's default ``read_predict_inputs``)."""

    read_predict_inputs = BaseDataModule.read_predict_inputs


class SyncDistClassifier(TinyClassifier):
    """Also logs ``test/synced_loss`` with ``self.log(..., sync_dist=True)`` in every test step, as
    Lightning's docs suggest for DDP (``on_step`` too when ``on_step`` is true)."""

    def __init__(self, on_step: bool = False, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.on_step = on_step

    def test_step(self, batch: Any, batch_idx: int) -> None:
        super().test_step(batch, batch_idx)
        loss = self.compute_loss(self(batch[0]), batch[1])
        self.log("test/synced_loss", loss, on_step=self.on_step, on_epoch=True, sync_dist=True)


class ScriptedLossClassifier(TinyClassifier):
    """Its training loss at global step ``t`` is ``2 + 0.1 * sin(t)`` whatever the LR (the parameters
    enter with weight 0, so there is a gradient): the curve an LR finder must record step by step."""

    def training_step(self, batch: Any, batch_idx: int) -> Tensor:
        return 2.0 + 0.1 * math.sin(self.trainer.global_step) + 0.0 * self.head.weight.sum()


class FixedLRClassifier(PlainClassifier):
    """A plain module whose optimizer's LR is written in ``configure_optimizers``: no LR argument."""

    def __init__(self, num_classes: int = 4) -> None:
        super().__init__(num_classes)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


class FiveClassesByDefault(PlainClassifier):
    """``PlainClassifier`` whose own ``num_classes`` default (5) differs from the fixture's (4)."""

    def __init__(self, num_classes: int = 5, lr: float = 0.01) -> None:
        super().__init__(num_classes, lr)


class NoPredictStep(PlainClassifier):
    """``PlainClassifier`` with Lightning's own ``predict_step`` (``self(batch)``)."""

    predict_step = LightningModule.predict_step


class NoHparamsClassifier(PlainClassifier):
    """:class:`~fixture_task.PlainClassifier` that saves no hyperparameters (Lightning's docs' modules
    often do not): its checkpoints name no class; ``num_classes`` comes from the data link."""

    def __init__(self, num_classes: int = 10, lr: float = 0.01) -> None:
        LightningModule.__init__(self)
        self.lr = lr
        self.net = torch.nn.Sequential(
            torch.nn.Flatten(), torch.nn.Linear(64, 32), torch.nn.ReLU(), torch.nn.Linear(32, num_classes)
        )
        self.example_input_array = torch.zeros(2, 1, 8, 8)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.parameters(), lr=self.lr)


class EpochEndScore(PlainClassifier):
    """Logs ``val/score`` in its own ``on_validation_epoch_end`` (after every callback's)."""

    def on_validation_epoch_end(self) -> None:
        self.log("val/score", float(self.current_epoch))


class KeywordsClassifier(PlainClassifier):
    """:class:`~fixture_task.PlainClassifier` with its own arguments and ``**kwargs`` (as Lightning's GAN
    example), none of them a linked argument: the DataModule's ``num_classes`` and ``dims`` must not be
    written into its hyperparameters."""

    def __init__(self, lr: float = 0.01, **kwargs: Any) -> None:
        LightningModule.__init__(self)
        self.save_hyperparameters()
        self.net = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 4))

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.parameters(), lr=self.hparams.lr)


class NoValidation(BoringModel):
    """Lightning's ``BoringModel`` (its loaders on the model, bare tensor batches) without a
    ``validation_step``."""

    validation_step = LightningModule.validation_step


class KeywordInputs(LightningModule):
    """A model of dict batches (``input_ids``, ``attention_mask``, ``labels``), as Lightning's text
    tutorials write one: ``forward(input_ids, attention_mask)`` returns a dict; with ``example`` it sets
    ``example_input_array`` to the keyword inputs (the engine cannot tell them from a dict batch)."""

    def __init__(self, example: bool = False) -> None:
        super().__init__()
        self.embedding, self.out = torch.nn.Embedding(10, 4), torch.nn.Linear(4, 2)
        if example:
            ids, mask = torch.zeros(2, 6, dtype=torch.long), torch.ones(2, 6)
            self.example_input_array = {"input_ids": ids, "attention_mask": mask}

    def forward(self, input_ids: Tensor, attention_mask: Tensor) -> dict[str, Tensor]:
        return {"logits": self.out((self.embedding(input_ids) * attention_mask[..., None]).sum(1))}

    def step(self, batch: dict[str, Tensor], name: str) -> Tensor:
        loss = torch.nn.functional.cross_entropy(
            self(batch["input_ids"], batch["attention_mask"])["logits"], batch["labels"]
        )
        self.log(name, loss)
        return loss

    def training_step(self, batch: dict[str, Tensor], batch_idx: int) -> Tensor:
        return self.step(batch, "train_loss")

    def validation_step(self, batch: dict[str, Tensor], batch_idx: int) -> None:
        self.step(batch, "val_loss")

    def test_step(self, batch: dict[str, Tensor], batch_idx: int) -> None:
        self.step(batch, "test_loss")

    def loader(self) -> DataLoader[Any]:
        generator = torch.Generator().manual_seed(0)
        ids = torch.randint(0, 10, (20, 6), generator=generator)
        items = [
            {"input_ids": i, "attention_mask": torch.ones(6), "labels": n % 2} for n, i in enumerate(ids)
        ]
        return DataLoader(items, batch_size=5)  # type: ignore[arg-type]

    train_dataloader = val_dataloader = test_dataloader = loader

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


class IterableTrainData(LightningDataModule):
    """``BoringModel``'s data (32 features) with the training samples in Lightning's demo
    ``RandomIterableDataset`` (no ``__len__``, no state): 8 batches of 8 an epoch."""

    def train_dataloader(self) -> DataLoader[Tensor]:
        return DataLoader(RandomIterableDataset(32, 64), batch_size=8)

    def val_dataloader(self) -> DataLoader[Tensor]:
        return DataLoader(RandomDataset(32, 8), batch_size=8)


class SignalInEvaluation(Callback):
    """Send SIGINT (Ctrl-C) after the first batch of ``validate``, ``test`` or ``predict``."""

    def _send(self, trainer: Trainer) -> None:
        if not trainer.sanity_checking:
            os.kill(os.getpid(), signal.SIGINT)

    def on_validation_batch_end(self, trainer: Trainer, *args: Any, **kwargs: Any) -> None:
        self._send(trainer)

    def on_test_batch_end(self, trainer: Trainer, *args: Any, **kwargs: Any) -> None:
        self._send(trainer)

    def on_predict_batch_end(self, trainer: Trainer, *args: Any, **kwargs: Any) -> None:
        self._send(trainer)


class SignalDuringSave(Callback):
    """Send SIGINT (a second Ctrl-C) while the checkpoint of an interruption is being written, as an
    impatient user does while a large model's ``last.ckpt`` is saved."""

    def __init__(self) -> None:
        self.interrupted = False

    def on_exception(self, trainer: Trainer, pl_module: LightningModule, exception: BaseException) -> None:
        self.interrupted = True

    def on_save_checkpoint(self, trainer: Trainer, pl_module: LightningModule, checkpoint: Any) -> None:
        if self.interrupted:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.5)  # (the rest of a slow save)
