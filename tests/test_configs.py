"""Every YAML file in configs/ (your experiment's and the presets) is used here, with the
package's own default experiment: CPU-runnable ones train a step, the rest are parsed and built with
the GPU-only settings swapped for CPU ones."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import yaml
from runwright.testing import RunMain
from support import CONFIGS, PACKAGE

# sweep and SLURM configs are not fit configs: the sweep's own test checks them, and
# test_slurm_presets_print_a_batch_script the SLURM presets.
ALL_CONFIGS = sorted(
    str(p.relative_to(CONFIGS)) for p in CONFIGS.rglob("*.yaml") if p.parent.name not in ("sweep", "slurm")
)

#: Settings that need a GPU or several processes, replaced so the rest of the file runs here.
CPU_SWAP = [
    "--trainer.accelerator=cpu",
    "--trainer.devices=1",
    "--trainer.strategy=auto",
    "--trainer.sync_batchnorm=false",
    "--trainer.precision=32-true",
]
GPU_ONLY = {"trainer/gpu.yaml", "trainer/fp16_mixed.yaml", "trainer/ddp_gpu.yaml", "trainer/ddp_cpu.yaml"}
#: Logger presets and the package each needs (the repo depends on its default logger's only).
LOGGER_PACKAGES = {"logger/tensorboard.yaml": "tensorboard", "logger/wandb.yaml": "wandb"}
#: Data-only presets need a model with a matching number of input channels.
COMPANION = {
    "data/cifar10.yaml": ["--config", str(CONFIGS / "model" / "resnet18.yaml")],
    "model/resnet18.yaml": ["--config", str(CONFIGS / "data" / "cifar10.yaml")],
}


@pytest.fixture
def tiny_datasets(workdir: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """MNIST, FashionMNIST and CIFAR-10 in ./data, in their real formats (CIFAR md5 checks relaxed).
    Only the torchvision configs ask for it (``examples=minimal`` repos have neither them nor the helper)."""
    import torchvision.datasets.cifar
    from fake_datasets import write_cifar10, write_mnist

    write_mnist(workdir / "data", "MNIST", n_train=40, n_test=10)
    write_mnist(workdir / "data", "FashionMNIST", n_train=40, n_test=10)
    write_cifar10(workdir / "data", n_per_batch=8, n_test=10)
    monkeypatch.setattr(
        torchvision.datasets.cifar, "check_integrity", lambda path, md5=None: os.path.isfile(path)
    )
    return workdir / "data"


def test_every_config_is_listed() -> None:
    assert {"trainer/cpu.yaml", "logger/csv.yaml"} <= set(ALL_CONFIGS), ALL_CONFIGS  # presets, any model
    assert not GPU_ONLY - set(ALL_CONFIGS)


@pytest.mark.parametrize("name", ALL_CONFIGS)
def test_config_runs_a_fast_fit(name: str, run_cli: Any, request: pytest.FixtureRequest) -> None:
    if name in LOGGER_PACKAGES:  # a logger preset whose package this repo does not depend on
        pytest.importorskip(
            LOGGER_PACKAGES[name], reason=f"{name} needs `pip install {LOGGER_PACKAGES[name]}`"
        )
    args = ["fit", *COMPANION.get(name, []), "--config", str(CONFIGS / name)]
    torchvision_data = any(key in name for key in ("mnist", "cifar", "resnet"))
    if torchvision_data:
        request.getfixturevalue("tiny_datasets")
        args += [
            "--data.init_args.num_workers=0",
            "--data.init_args.val_size=10",
            "--data.init_args.batch_size=4",
        ]
    if name in GPU_ONLY:
        args += CPU_SWAP
    # (after the file: an experiment's own max_epochs would otherwise replace FAST's one epoch)
    cli = run_cli(*args, "--trainer.fast_dev_run=false", "--trainer.max_epochs=1")
    assert cli.trainer.state.finished, name
    assert (cli.run_dir / "config.yaml").is_file()


@pytest.mark.parametrize("name", sorted(p.name for p in (CONFIGS / "slurm").glob("*.yaml")))
def test_slurm_presets_print_a_batch_script(name: str, workdir: Path, run_main: RunMain) -> None:
    """``submit fit --slurm configs/slurm/<preset> --dry_run``: the batch script of the default experiment
    with the preset's resources, one process per device and the warning signal to the batch shell;
    nothing is written (the engine's tests have a real SLURM accept each preset's script)."""
    preset = yaml.safe_load((CONFIGS / "slurm" / name).read_text())
    code, out, err = run_main("submit", "fit", "--slurm", str(CONFIGS / "slurm" / name), "--dry_run")
    assert code == 0, err
    tasks = preset.get("tasks_per_node") or preset.get("gpus_per_node") or 1
    assert f"#SBATCH --nodes={preset['nodes']}\n" in out and f"#SBATCH --ntasks-per-node={tasks}\n" in out
    assert f"#SBATCH --signal=B:USR1@{preset['warning']}\n" in out and "#SBATCH --requeue\n" in out
    srun = next(line for line in out.splitlines() if line.startswith("srun "))
    assert f" -m {PACKAGE} fit " in srun
    assert srun.endswith(f"--trainer.devices={tasks} --trainer.num_nodes={preset['nodes']} &")
    assert not list(workdir.iterdir()), "a dry run writes nothing"
