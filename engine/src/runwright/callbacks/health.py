"""Health checks for the classic silent training bugs: each stops the run with a
:class:`~runwright.errors.HealthCheckError` that names the culprit and the fix."""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterator, Sequence
from typing import Any

import torch
from lightning.pytorch import Callback, LightningModule, Trainer
from torch import Tensor, nn

from ..errors import ConfigError, HealthCheckError

#: The checks, by the name that switches one off (``--health.disable=[name, ...]``): the message of each.
CHECKS = {
    "hidden_modules": "{} in plain lists/dicts are never trained or saved: use nn.ModuleList / nn.ModuleDict",
    "missing_grads": "{} got no gradient: not in the loss or cut off (detach(), .data); use or freeze them",
    "input_finite": "{} has {} NaN and {} Inf values{}: clean the data (or its normalisation)",
    "label_range": "labels {} are outside [0, {}): fix them or the DataModule's num_classes",
    "label_shape": "labels have shape {}, class labels must be [B]: squeeze them in the dataset",
    "loss_finite": "the loss is {} at global step {}, LR then: {}; stopped before that step changed weights"
    ", the last good checkpoint is {}. Lower the LR or lengthen --model.lr_scheduler.init_args.warmup_steps",
    "eval_no_grad": "evaluation returned {} that require grad (a graph built in evaluation): detach them",
}


def _find(obj: Any, prefix: str, kind: type | tuple[type, ...] = Tensor) -> Iterator[tuple[str, Any]]:
    """``(path, item)`` for every ``kind`` instance in a nested structure of dicts, lists and tuples."""
    if isinstance(obj, kind):
        yield prefix, obj
    elif isinstance(obj, (dict, list, tuple)):
        for key, value in obj.items() if isinstance(obj, dict) else enumerate(obj):
            yield from _find(value, f"{prefix}[{key!r}]", kind)


class HealthCheck(Callback):
    """Catch silent training bugs early and stop with a message that names the culprit and the fix.

    At fit start ``hidden_modules`` (modules/parameters in plain Python lists, tuples or dicts); after
    each backward of global step 0 ``missing_grads`` (trainable parameters without a gradient); on the
    first ``check_batches`` training and validation batches of the run ``input_finite`` (NaN/Inf in a
    floating-point tensor, outside a bool padding mask of the batch, True at real data, whose shape
    starts its shape), ``label_range`` (integer labels ``batch[1]`` outside ``[0, model.num_classes)``)
    and ``label_shape`` (labels ``[B, 1]``); on the first ``check_batches`` outputs of every validation
    and predict loop ``eval_no_grad`` (tensors that require grad); every ``loss_check_every_n_steps``
    steps (0: never) ``loss_finite`` (a NaN/Inf training loss, before it reaches the weights: one
    host-device sync). ``enabled=False`` switches every check off.

    Raises:
        HealthCheckError: a check failed.
        ConfigError: an unknown check name in ``disable``.
    """

    def __init__(
        self,
        disable: Sequence[str] = (),
        check_batches: int = 2,
        loss_check_every_n_steps: int = 1,
        enabled: bool = True,
    ) -> None:
        if unknown := sorted(set(disable) - set(CHECKS)):
            raise ConfigError(f"health.disable: unknown check(s) {unknown}; the checks are {sorted(CHECKS)}")
        self.active = set(CHECKS) - set(disable) if enabled else set()
        self.check_batches, self.loss_check_every_n_steps = check_batches, loss_check_every_n_steps
        self._seen: Counter[bool] = Counter()  # training and validation batches seen

    def _fail(self, check: str, found: Any, *values: Any) -> None:
        """Raise the :data:`CHECKS` message of ``check`` (if active) for ``found`` unless it is empty."""
        if found and check in self.active:
            message = f"health check {check!r} failed: " + CHECKS[check].format(found, *values)
            raise HealthCheckError(f"{message} (if intended: --health.disable=[{check}])")

    def on_fit_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        """Look for modules and parameters hidden in plain containers."""
        hidden = [
            f"{path} ({type(item).__name__})".removeprefix(".")
            for name, module in pl_module.named_modules()
            for attribute, value in vars(module).items()
            if not attribute.startswith("_") and isinstance(value, (list, tuple, dict))
            for path, item in _find(value, f"{name}.{attribute}", (nn.Module, nn.Parameter))
        ]
        self._fail("hidden_modules", ", ".join(hidden))

    def on_train_batch_start(self, trainer: Trainer, pl_module: LightningModule, batch: Any, *_: Any) -> None:
        """Inspect the first training and validation batches (the sanity check's included)."""
        self._seen[trainer.training] += 1
        if self._seen[trainer.training] > self.check_batches:
            return
        tensors = dict(_find(batch, "train batch" if trainer.training else "val batch"))
        masks = [t for t in tensors.values() if t.dtype == torch.bool and t.ndim]
        for path, tensor in ((p, t) for p, t in tensors.items() if t.is_floating_point()):
            mask = next((m for m in masks if m.shape == tensor.shape[: m.ndim]), None)
            if not (real := tensor if mask is None else tensor[mask]).isfinite().all():
                where = "" if mask is None else " outside the padding mask"
                self._fail("input_finite", path, int(real.isnan().sum()), int(real.isinf().sum()), where)
        labels = batch[1] if isinstance(batch, (list, tuple)) and len(batch) > 1 else None
        if isinstance(labels, Tensor) and not labels.is_floating_point() and labels.dtype != torch.bool:
            self._fail("label_shape", list(labels.shape) if labels.ndim == 2 and labels.shape[1] == 1 else [])
            if isinstance(num := getattr(pl_module, "num_classes", None), int):  # the bad labels, sorted:
                self._fail("label_range", labels[(labels < 0) | (labels >= num)].unique()[:10].tolist(), num)

    on_validation_batch_start = on_train_batch_start  # type: ignore[assignment]

    def on_before_backward(self, trainer: Trainer, pl_module: LightningModule, loss: Tensor) -> None:
        """Stop on a non-finite loss before it reaches the weights."""
        every, step = self.loss_check_every_n_steps, trainer.global_step
        if "loss_finite" in self.active and every > 0 and step % every == 0 and not loss.isfinite().all():
            lrs = ", ".join(f"{group['lr']:.3g}" for opt in trainer.optimizers for group in opt.param_groups)
            saved = [getattr(cb, "best_model_path", "") for cb in trainer.checkpoint_callbacks]
            last = max(filter(os.path.isfile, saved), key=os.path.getmtime, default="none saved yet")
            self._fail("loss_finite", loss.item(), step, lrs, last)

    def on_after_backward(self, trainer: Trainer, pl_module: LightningModule) -> None:
        """After the first backward of training, name every trainable parameter that got no gradient."""
        if trainer.global_step == 0:
            missing = [name for name, p in pl_module.named_parameters() if p.requires_grad and p.grad is None]
            self._fail("missing_grads", ", ".join(missing))

    def on_validation_batch_end(
        self, trainer: Trainer, pl_module: LightningModule, outputs: Any, batch: Any, batch_idx: int, *_: Any
    ) -> None:
        """Check that the first validation (and predict) outputs of a run carry no graph."""
        if batch_idx < self.check_batches:
            self._fail("eval_no_grad", ", ".join(p for p, t in _find(outputs, "output") if t.requires_grad))

    on_predict_batch_end = on_validation_batch_end  # type: ignore[assignment]
