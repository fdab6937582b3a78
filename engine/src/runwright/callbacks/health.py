"""Health checks for the classic silent training bugs (PRACTICES.md rows 2, 3 and 6)."""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterator, Sequence
from typing import Any

import torch
from lightning.pytorch import Callback, LightningModule, Trainer
from torch import Tensor, nn

from ..errors import ConfigError, HealthCheckError

#: The checks, by the name used to switch one off (``--health.disable=[name, ...]``).
CHECKS = {
    "hidden_modules": "nn.Modules/Parameters kept in plain Python lists, tuples or dicts (at fit start)",
    "missing_grads": "trainable parameters with no gradient after the first backward",
    "input_finite": "NaN/Inf in the floating-point inputs of the first batches (outside padding masks)",
    "label_range": "integer labels outside [0, num_classes) in the first batches",
    "label_shape": "integer labels shaped [B, 1] where [B] is meant, in the first batches",
    "loss_finite": "a NaN/Inf training loss (every loss_check_every_n_steps steps)",
    "eval_no_grad": "validation/predict outputs that still require grad (first batches)",
}


def _tensors(obj: Any, prefix: str) -> Iterator[tuple[str, Tensor]]:
    """Yield ``(path, tensor)`` for every tensor in a nested batch/output structure."""
    if isinstance(obj, Tensor):
        yield prefix, obj
    elif isinstance(obj, (dict, list, tuple)):
        for key, value in obj.items() if isinstance(obj, dict) else enumerate(obj):
            yield from _tensors(value, f"{prefix}[{key!r}]")


def hidden_modules(model: nn.Module) -> list[str]:
    """Names of modules/parameters stored in plain ``list``/``tuple``/``dict`` attributes of ``model``
    or its submodules: PyTorch does not register them, so ``.parameters()`` (and the optimizer,
    ``.to(device)``, ``state_dict``) never see them."""
    return [
        f"{module_name}.{attribute}[{key!r}] ({type(item).__name__})".removeprefix(".")
        for module_name, module in model.named_modules()
        for attribute, value in vars(module).items()
        if not attribute.startswith("_") and isinstance(value, (list, tuple, dict))
        for key, item in (value.items() if isinstance(value, dict) else enumerate(value))
        if isinstance(item, (nn.Module, nn.Parameter))
    ]


class HealthCheck(Callback):
    """Catch silent training bugs early and stop with a message that names the culprit and the fix.

    The checks and when they run: :data:`CHECKS`. The batch checks look at the first batches only; the
    loss check is one ``isfinite`` (a host-device sync on GPU) per interval.

    Args:
        disable: Names of checks to switch off, e.g. ``[missing_grads]``.
        check_batches: How many first batches (per stage) the batch checks inspect.
        loss_check_every_n_steps: Interval of the non-finite-loss check in training steps (0: off).
        enabled: Switch every check off.

    Raises:
        HealthCheckError: a check failed (a bad loss stops training before its optimizer step, so the
            last saved checkpoint stays the last good one).
        ConfigError: an unknown check name in ``disable``.
    """

    def __init__(
        self,
        disable: Sequence[str] = (),
        check_batches: int = 2,
        loss_check_every_n_steps: int = 1,
        enabled: bool = True,
    ) -> None:
        unknown = sorted(set(disable) - set(CHECKS))
        if unknown:
            raise ConfigError(f"health.disable: unknown check(s) {unknown}; the checks are {sorted(CHECKS)}")
        self.active = set(CHECKS) - set(disable) if enabled else set()
        self.check_batches = check_batches
        self.loss_check_every_n_steps = loss_check_every_n_steps
        self._seen: Counter[str] = Counter()  # batches inspected per stage ("grads": backward passes)

    @staticmethod
    def _fail(check: str, message: str) -> None:
        raise HealthCheckError(
            f"health check {check!r} failed: {message} (if intended: --health.disable=[{check}])"
        )

    def on_fit_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        """Look for modules hidden in plain containers."""
        self._seen.clear()
        hidden = hidden_modules(pl_module) if "hidden_modules" in self.active else []
        if hidden:
            self._fail(
                "hidden_modules",
                f"{', '.join(hidden)} in plain Python containers are never trained, moved to the device or "
                "saved; use nn.ModuleList / nn.ModuleDict / nn.ParameterList.",
            )

    def _check_batch(self, batch: Any, stage: str, pl_module: LightningModule) -> None:
        index = self._seen[stage]
        if index >= self.check_batches:
            return
        self._seen[stage] += 1
        tensors = list(_tensors(batch, "batch")) if "input_finite" in self.active else []
        masks = [t for _, t in tensors if t.dtype == torch.bool and t.ndim >= 1]
        for path, tensor in [(path, t) for path, t in tensors if t.is_floating_point()]:
            # padding is not data: with a padding mask in the batch (True = real, as from
            # runwright.collate.pad_sequences) only the real positions must be finite
            mask = next((m for m in masks if m.shape == tensor.shape[: m.ndim]), None)
            real = tensor if mask is None else tensor[mask]
            if not bool(torch.isfinite(real).all()):
                where = "" if mask is None else " outside the padding mask"
                self._fail(
                    "input_finite",
                    f"{stage} batch {index}: {path} has {int(real.isnan().sum())} NaN and "
                    f"{int(real.isinf().sum())} Inf values{where}; clean the data (or its normalisation).",
                )
        labels = batch[1] if isinstance(batch, (list, tuple)) and len(batch) >= 2 else None
        if not isinstance(labels, Tensor) or labels.is_floating_point() or labels.dtype == torch.bool:
            return
        if "label_shape" in self.active and labels.ndim == 2 and labels.shape[1] == 1:
            self._fail(
                "label_shape",
                f"{stage} batch {index}: labels have shape {list(labels.shape)}, class labels must be [B]; "
                "squeeze them (labels.squeeze(1)) in the dataset or collate_fn.",
            )
        num_classes = getattr(pl_module, "num_classes", None)
        if "label_range" in self.active and isinstance(num_classes, int):
            bad = labels[(labels < 0) | (labels >= num_classes)].unique()  # sorted
            if bad.numel():
                self._fail(
                    "label_range",
                    f"{stage} batch {index}: labels {bad[:10].tolist()} are outside [0, {num_classes}); fix "
                    "the labels or the DataModule's num_classes (the model's is linked to it).",
                )

    def on_train_batch_start(
        self, trainer: Trainer, pl_module: LightningModule, batch: Any, *args: Any, **kwargs: Any
    ) -> None:
        """Inspect the first training and the first validation batches (``on_validation_batch_start``
        too: the sanity check's included, data is seen there first)."""
        self._check_batch(batch, "train" if trainer.training else "val", pl_module)

    on_validation_batch_start = on_train_batch_start

    def on_before_backward(self, trainer: Trainer, pl_module: LightningModule, loss: Tensor) -> None:
        """Stop on a non-finite loss before it reaches the weights."""
        every = self.loss_check_every_n_steps
        if "loss_finite" not in self.active or every <= 0 or trainer.global_step % every:
            return
        if not bool(torch.isfinite(loss.detach()).all()):
            lrs = ", ".join(f"{group['lr']:.3g}" for opt in trainer.optimizers for group in opt.param_groups)
            # the newest file a ModelCheckpoint wrote (the one writing last.ckpt has it as best_model_path)
            paths = ("best_model_path", "last_model_path")
            saved = [getattr(cb, path, "") for cb in trainer.checkpoint_callbacks for path in paths]
            last = max(filter(os.path.isfile, saved), key=os.path.getmtime, default="none saved yet")
            self._fail(
                "loss_finite",
                f"the training loss is {loss.item()} at global step {trainer.global_step}; LR then: {lrs}. "
                f"Stopped before this step changed the weights; the last good checkpoint is {last}. Lower "
                "--model.optimizer.init_args.lr or lengthen --model.lr_scheduler.init_args.warmup_steps, "
                "check the data (NaN/Inf, labels out of range), or clip (--trainer.gradient_clip_val).",
            )

    def on_after_backward(self, trainer: Trainer, pl_module: LightningModule) -> None:
        """After the first backward, name every trainable parameter that got no gradient."""
        self._seen["backward"] += 1
        if self._seen["backward"] > 1 or "missing_grads" not in self.active:
            return
        missing = [name for name, p in pl_module.named_parameters() if p.requires_grad and p.grad is None]
        if missing:
            self._fail(
                "missing_grads",
                f"{', '.join(missing)} got no gradient from the first backward: unused in the loss or cut "
                "off (detach(), .data, .item()). Use them, or freeze them with requires_grad_(False).",
            )

    def on_validation_batch_end(
        self, trainer: Trainer, pl_module: LightningModule, outputs: Any, *args: Any, **kwargs: Any
    ) -> None:
        """Check that the first validation (and, ``on_predict_batch_end``, predict) outputs carry no graph."""
        stage = "predict" if trainer.predicting else "val"
        self._seen[f"{stage} outputs"] += 1
        if "eval_no_grad" not in self.active or self._seen[f"{stage} outputs"] > self.check_batches:
            return
        with_grad = [path for path, t in _tensors(outputs, "output") if t.requires_grad]
        if with_grad:
            self._fail(
                "eval_no_grad",
                f"{stage} step returned {', '.join(with_grad)} that require grad: a graph was built in "
                "evaluation (torch.enable_grad(), a tensor kept from training); detach what you return.",
            )

    on_predict_batch_end = on_validation_batch_end
