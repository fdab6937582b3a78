"""The image classifier and its backbones."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from lightning.pytorch import Trainer
from torch import Tensor, nn
from torch.utils.data import DataLoader, TensorDataset
from torchmetrics import MeanSquaredError, MetricCollection

from project.models import ImageClassifier, SimpleCNN, TorchvisionResNet


@pytest.mark.parametrize(
    "backbone, shape",
    [
        (SimpleCNN(in_channels=1), (4, 1, 8, 8)),
        (SimpleCNN(in_channels=3, channels=(8, 16)), (4, 3, 32, 32)),
        (TorchvisionResNet("resnet18", in_channels=3), (2, 3, 32, 32)),
    ],
)
def test_logits_shape(backbone: nn.Module, shape: tuple[int, ...]) -> None:
    model = ImageClassifier(backbone=backbone, num_classes=7)
    assert model(torch.randn(shape)).shape == (shape[0], 7)


def test_activation_checkpointing_gives_the_same_gradients() -> None:
    torch.manual_seed(0)
    plain = ImageClassifier(backbone=SimpleCNN(dropout=0.0), num_classes=10)
    checkpointed = ImageClassifier(
        backbone=SimpleCNN(dropout=0.0), num_classes=10, activation_checkpointing=True
    )
    checkpointed.load_state_dict(plain.state_dict())
    x, y = torch.randn(8, 1, 8, 8), torch.randint(0, 10, (8,))
    for model in (plain, checkpointed):
        model.train()
        model.compute_loss(model(x), y).backward()
    for (name, a), (_, b) in zip(plain.named_parameters(), checkpointed.named_parameters(), strict=True):
        assert a.grad is not None and b.grad is not None, name
        torch.testing.assert_close(a.grad, b.grad, rtol=1e-5, atol=1e-6)


def test_bad_arguments_are_named() -> None:
    with pytest.raises(TypeError, match="out_features"):
        ImageClassifier(backbone=nn.ReLU())
    with pytest.raises(ValueError, match="num_classes=1"):
        ImageClassifier(num_classes=1)
    with pytest.raises(ValueError, match="arch='vgg'"):
        TorchvisionResNet("vgg")


def test_predict_step_returns_class_probability_and_target() -> None:
    model = ImageClassifier().eval()
    with torch.no_grad():
        out = model.predict_step((torch.randn(5, 1, 8, 8), torch.arange(5)), 0)
    assert out["pred"].dtype == torch.int64 and out["pred"].shape == (5,)
    assert ((out["prob"] > 0) & (out["prob"] <= 1)).all()
    assert torch.equal(out["target"], torch.arange(5))


def test_label_minus_100_is_skipped_by_the_loss_and_the_metrics() -> None:
    model = ImageClassifier(num_classes=3)
    logits = torch.tensor([[5.0, 0.0, 0.0], [0.0, 5.0, 0.0], [0.0, 0.0, 5.0]])
    target = torch.tensor([0, 1, -100])
    expected = nn.functional.cross_entropy(logits[:2], target[:2])
    assert torch.allclose(model.compute_loss(logits, target), expected)
    metrics = model.build_metrics()
    metrics.update(logits, target)
    values = metrics.compute()
    assert values["acc"] == 1.0  # 2 of 2 counted samples right: the -100 row is not a third sample


def test_val_loss_is_the_mean_over_samples_with_an_uneven_last_batch(tmp_path: Path) -> None:
    torch.manual_seed(0)
    images, labels = torch.randn(5, 1, 8, 8), torch.tensor([0, 1, 2, 3, 4])
    loader = DataLoader(TensorDataset(images, labels), batch_size=2)  # batches of 2, 2, 1
    model = ImageClassifier()
    trainer = Trainer(
        default_root_dir=tmp_path, logger=False, enable_progress_bar=False, enable_model_summary=False
    )
    (result,) = trainer.validate(model, loader, verbose=False)
    with torch.no_grad():
        expected = nn.functional.cross_entropy(model.eval()(images), labels)  # mean over 5 samples
    assert result["val/loss"] == pytest.approx(expected.item(), rel=1e-5)


@pytest.mark.parametrize("batches_per_update", [3, 16])
def test_held_metric_inputs_give_the_same_results_as_per_batch_updates(
    tmp_path: Path, batches_per_update: int
) -> None:
    torch.manual_seed(0)
    images, labels = torch.randn(50, 1, 8, 8), torch.randint(0, 10, (50,))
    loader = DataLoader(TensorDataset(images, labels), batch_size=7)  # 8 batches, the last of 1
    results = {}
    for every in (1, batches_per_update):
        torch.manual_seed(1)
        model = ImageClassifier()
        model.metric_update_batches = every
        trainer = Trainer(
            default_root_dir=tmp_path, logger=False, enable_progress_bar=False, enable_model_summary=False
        )
        (results[every],) = trainer.validate(model, loader, verbose=False)
        assert not model._held["val"]  # everything reached the metrics by the epoch's end
    assert results[batches_per_update] == pytest.approx(results[1], rel=1e-6)


class SequenceRegressor(ImageClassifier):
    """Per-sample outputs whose length changes from batch to batch (as with padded sequences)."""

    def build_metrics(self) -> MetricCollection:
        return MetricCollection({"acc": MeanSquaredError(), "mse": MeanSquaredError()})

    def metric_inputs(self, output: Tensor, target: Tensor) -> tuple[Tensor, Tensor]:
        length = int(target[0]) + 1  # [B, length]
        return output[:, :length].contiguous(), torch.zeros(len(output), length)


def test_held_inputs_of_different_shapes_update_batch_by_batch_and_large_ones_at_once() -> None:
    model = SequenceRegressor()
    reference = model.build_metrics()
    for length in (2, 5, 3):
        output, target = torch.randn(4, 10), torch.full((4,), length - 1)
        model._held["val"].append((*model.metric_inputs(output, target), torch.ones(4)))
        reference.update(*model.metric_inputs(output, target))
    model.update_metrics("val")  # the shapes differ, so one update per held batch
    assert torch.allclose(model.val_metrics.compute()["val/mse"], reference.compute()["mse"])
    assert not model._held["val"]

    model.metric_update_max_elements = 8  # 4 preds + 4 targets + 4 losses per batch: over the limit
    model.validation_step((torch.randn(4, 1, 8, 8), torch.zeros(4, dtype=torch.long)), 0)
    assert not model._held["val"]  # passed on at once
