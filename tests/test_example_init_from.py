"""Fine-tuning the example from another run's weights: a 10-class digits run initialises a 5-class run
(``fit --init_from``); the backbone's weights are the digits run's, the head is new."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch


def test_a_digits_run_initialises_a_five_class_run(run_cli: Any, workdir: Path) -> None:
    digits = run_cli("fit", "--trainer.logger=false", "--run_name=digits")
    best = torch.load(digits.run_dir / "checkpoints/best.ckpt", weights_only=True)["state_dict"]
    five = [
        "--data=project.data.SyntheticDataModule",
        "--data.num_classes=5",
        "--data.image_shape=[1,8,8]",
        "--data.num_samples=256", "--data.batch_size=64",
    ]  # fmt: skip
    # max_epochs=0: the new run's weights as it starts training
    new = run_cli("fit", "--trainer.logger=false", *five, "--init_from=best", "--trainer.max_epochs=0")
    weights = new.model.state_dict()
    loaded = [key for key in best if weights[key].shape == best[key].shape]
    assert [key for key in best if key not in loaded] == ["head.weight", "head.bias"]
    assert all(torch.equal(weights[key], best[key]) for key in loaded)  # the backbone: the digits run's
    assert weights["head.weight"].shape[0] == 5 and new.trainer.global_step == 0
