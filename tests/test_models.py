"""The image classifier and its backbones."""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import partial

import pytest
import torch
from torch import nn

from project.models import ImageClassifier, SimpleCNN, TorchvisionResNet


@pytest.mark.parametrize(
    "backbone, shape",
    [
        (SimpleCNN, (4, 1, 8, 8)),
        (partial(SimpleCNN, channels=(8, 16)), (4, 3, 32, 32)),
        (partial(TorchvisionResNet, arch="resnet18"), (2, 3, 32, 32)),
    ],
)
def test_logits_shape(backbone: Callable[[int], nn.Module], shape: tuple[int, ...]) -> None:
    model = ImageClassifier(backbone=backbone, in_channels=shape[1], num_classes=7)
    assert model(torch.randn(shape)).shape == (shape[0], 7)


def test_activation_checkpointing_gives_the_same_gradients() -> None:
    torch.manual_seed(0)
    plain = ImageClassifier(backbone=partial(SimpleCNN, dropout=0.0), num_classes=10)
    checkpointed = ImageClassifier(
        backbone=partial(SimpleCNN, dropout=0.0), num_classes=10, activation_checkpointing=True
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
        ImageClassifier(backbone=lambda channels: nn.ReLU())
    with pytest.raises(ValueError, match="num_classes=1"):
        ImageClassifier(num_classes=1)
    with pytest.raises(ValueError, match="arch='vgg'"):
        TorchvisionResNet(3, arch="vgg")
    for channels in ([], [0], [32, -1]):
        with pytest.raises(ValueError, match=re.escape(f"channels={channels}: give one width of at least 1")):
            SimpleCNN(channels=channels)


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
    metrics = model.val_metrics
    metrics.update(*model.metric_inputs(logits, target))
    values = metrics.compute()
    assert values["val/acc"] == 1.0  # 2 of 2 counted samples right: the -100 row is not a third sample
