"""torch.compile and EMA weight averaging: what they cost and what they change.

Three parts, each the template's own ``fit`` (``ProjectCLI``, every default callback, no logger):

- ``speed``: eager against ``--compile.enabled=true`` (inductor): seconds per epoch after the first
  (process CPU time: steadier on a shared machine; the compiled kernels run in this process), their
  ratio (the median over repetitions of compiled/eager of the same repetition), and the compile time
  (wall seconds of the first compiled calls of ``forward``, training and evaluation mode, as the run
  prints it). The first repetition compiles with an empty inductor cache (``TORCHINDUCTOR_CACHE_DIR``
  set to a new folder for this process); later ones find its compiled kernels on disk (warm;
  ``torch.compiler.reset()`` before every run, so no run reuses another's graphs in memory).
- ``ema``: without and with ``configs/callbacks/ema.yaml``: CPU milliseconds per training step (from
  a step's first batch hook to its last, so the average's update after the optimizer step counts) and
  per epoch (the two swaps of the weights around validation count).
- ``quality``: does EMA change the results? The test accuracy of ``best.ckpt`` (and the best val
  accuracy) without EMA and with each ``--decays`` value, for ``--seeds`` seeds, on the digits (the
  default experiment, ``python -m project fit``, 30 epochs) and the CIFAR-shaped synthetic data.

Workloads (``--workload``): ``cifar`` is the example's ``ImageClassifier`` with ``SimpleCNN``
(channels 32/64/128) on ``SyntheticDataModule`` images ``[3, 32, 32]`` (``--num-samples``, 80% for
training), batch 128; ``digits`` is the default experiment (SimpleCNN on the 8x8 digits, batch 64).

    python engine/benchmarks/compile_ema.py --part speed --workload cifar --epochs 4 --repeats 3
    python engine/benchmarks/compile_ema.py --part ema --workload cifar --epochs 3 --repeats 3
    python engine/benchmarks/compile_ema.py --part quality --seeds 3
    python engine/benchmarks/compile_ema.py --smoke     # a few seconds: checks the script itself
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import itertools
import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", tempfile.mkdtemp(prefix="compile_ema_inductor_"))

import torch
from lightning.pytorch import Callback, LightningModule, Trainer
from lightning.pytorch.callbacks import WeightAveraging

REPO_ROOT = Path(__file__).resolve().parents[2]  # (the template: engine/benchmarks/ is two below)
if str(REPO_ROOT) not in sys.path:  # run from a checkout without installing the package
    sys.path.insert(0, str(REPO_ROOT))


from runwright.callbacks import CompileModel  # noqa: E402
from runwright.checkpointing import BestCheckpoint  # noqa: E402
from runwright.cli import ProjectCLI  # noqa: E402

PACKAGE = "project"  # the template's package whose workloads these are (ProjectCLI imports it by name)

EMA_PRESET = REPO_ROOT / "configs" / "callbacks" / "ema.yaml"
QUIET = [
    "--trainer.logger=false",
    "--trainer.enable_progress_bar=false",
    "--trainer.enable_model_summary=false",
]


def workload_args(name: str, num_samples: int, smoke: bool) -> list[str]:
    """The command-line arguments of a workload (the default experiment's, plus these)."""
    if name == "digits":
        return ["--data.batch_size=16"] if smoke else []
    if name == "cifar":
        return [
            f"--data={PACKAGE}.data.SyntheticDataModule",
            "--data.image_shape=[3,32,32]",
            f"--data.num_samples={64 if smoke else num_samples}",
            f"--data.batch_size={16 if smoke else 128}",
        ]
    raise SystemExit(f"--workload {name!r}: choose 'digits' or 'cifar'")


class Clock(Callback):
    """Process CPU seconds of each epoch (from one epoch's start to the next's, the last one to the end
    of training) and of each training step (first ``on_train_batch_start`` to last ``on_train_batch_end``:
    append it after the other callbacks)."""

    def __init__(self) -> None:
        self.epoch_starts: list[float] = []
        self.end = 0.0
        self.steps: list[list[float]] = []
        self._step = 0.0

    def on_train_epoch_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self.epoch_starts.append(time.process_time())
        self.steps.append([])

    def on_train_batch_start(self, trainer: Trainer, pl_module: LightningModule, *args: Any) -> None:
        self._step = time.process_time()

    def on_train_batch_end(self, trainer: Trainer, pl_module: LightningModule, *args: Any) -> None:
        self.steps[-1].append(time.process_time() - self._step)

    def on_train_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self.end = time.process_time()

    def epoch_seconds(self) -> list[float]:
        """Each epoch's seconds, the first (compilation, warm-up) left out."""
        bounds = [*self.epoch_starts, self.end]
        return [b - a for a, b in itertools.pairwise(bounds)][1:]

    def step_seconds(self) -> list[float]:
        """Every training step's seconds, the first epoch's left out."""
        return [s for epoch in self.steps[1:] for s in epoch]


@dataclass
class Run:
    epoch_seconds: list[float]
    step_seconds: list[float]
    compile_seconds: float
    metrics: dict[str, float] = field(default_factory=dict)
    #: CPU seconds of each call of the averaging callback's hooks: the update after a step
    #: (``on_train_batch_end``) and the swaps around validation (``on_validation_epoch_start``/``end``).
    averaging: dict[str, list[float]] = field(default_factory=dict)


AVERAGING_HOOKS = ("on_train_batch_end", "on_validation_epoch_start", "on_validation_epoch_end")


def time_hooks(callback: Callback, into: dict[str, list[float]]) -> None:
    """Wrap ``callback``'s :data:`AVERAGING_HOOKS` so that each call's CPU seconds go into ``into``."""
    for name in AVERAGING_HOOKS:
        hook = getattr(callback, name)

        def timed(*args: Any, _hook: Any = hook, _name: str = name) -> Any:
            start = time.process_time()
            result = _hook(*args)
            into.setdefault(_name, []).append(time.process_time() - start)
            return result

        setattr(callback, name, timed)


def fit(args: list[str], logs_dir: str, test: bool = False) -> Run:
    """One template fit with ``args`` (and, with ``test``, a test of its best checkpoint)."""
    torch.compiler.reset()  # no compiled graph of an earlier run is reused: only inductor's disk cache
    argv, sys.argv = sys.argv, sys.argv[:1]  # LightningCLI warns when sys.argv also holds arguments
    clock = Clock()
    averaging: dict[str, list[float]] = {}
    try:
        with contextlib.redirect_stdout(sys.stderr):  # stdout: the tables alone
            cli = ProjectCLI(args=[*args, *QUIET, f"--logs_dir={logs_dir}"], run=False, package=PACKAGE)
            with cli:
                callbacks: list[Callback] = cli.trainer.callbacks  # type: ignore[attr-defined]
                callbacks.append(clock)
                for callback in callbacks:
                    if isinstance(callback, WeightAveraging):
                        time_hooks(callback, averaging)
                cli.trainer.fit(cli.model, datamodule=cli.datamodule)
                compiler = next(cb for cb in callbacks if isinstance(cb, CompileModel))
                best = next(cb for cb in callbacks if isinstance(cb, BestCheckpoint))
                metrics = {
                    "best/val/acc": float("nan" if best.best_model_score is None else best.best_model_score),
                    "parameters": float(sum(p.numel() for p in cli.model.parameters())),
                }
            if test:  # a test command of its own, as a user runs it (see README, "Weight averaging (EMA)")
                tested = ProjectCLI(
                    args=["test", f"--ckpt_path={best.best_model_path}", *QUIET, f"--logs_dir={logs_dir}"],
                    package=PACKAGE,
                )
                metrics["test/acc"] = float(tested.trainer.callback_metrics["test/acc"])
    finally:
        sys.argv = argv
    compile_seconds = compiler.first_step_seconds
    return Run(clock.epoch_seconds(), clock.step_seconds(), compile_seconds, metrics, averaging)


def median_ratio(runs: dict[str, list[Run]], a: str, b: str, per: str) -> tuple[float, float, float]:
    """Median and range over repetitions of ``b``/``a`` (median epoch or step seconds of each run)."""
    values = [
        statistics.median(getattr(y, per)) / statistics.median(getattr(x, per))
        for x, y in zip(runs[a], runs[b], strict=True)
    ]
    return statistics.median(values), min(values), max(values)


def alternate(configs: dict[str, list[str]], repeats: int, logs_dir: str) -> dict[str, list[Run]]:
    """Run every configuration ``repeats`` times, alternating (the order rotates every repetition)."""
    runs: dict[str, list[Run]] = {name: [] for name in configs}
    names = list(configs)
    for repeat in range(repeats):
        order = names[repeat % len(names) :] + names[: repeat % len(names)]
        for name in order:
            runs[name].append(fit(configs[name], logs_dir))
            print(f"  repetition {repeat + 1}/{repeats}: {name} done", file=sys.stderr, flush=True)
    return runs


def speed(args: argparse.Namespace, base: list[str], logs_dir: str) -> None:
    backend = "eager" if args.smoke else "inductor"
    configs = {"eager": base, "compiled": [*base, "--compile.enabled=true", f"--compile.backend={backend}"]}
    runs = alternate(configs, args.repeats, logs_dir)
    print("| run | s/epoch (median) | compile s, cold cache (first repetition) | compile s, warm |")
    print("|---|---:|---:|---:|")
    for name, results in runs.items():
        epochs = statistics.median(s for run in results for s in run.epoch_seconds)
        cold = results[0].compile_seconds
        warm = (
            statistics.median(run.compile_seconds for run in results[1:])
            if len(results) > 1
            else float("nan")
        )
        compile_cells = f"{cold:.1f} | {warm:.1f}" if name == "compiled" else "- | -"
        print(f"| {name} | {epochs:.3f} | {compile_cells} |")
    ratio, low, high = median_ratio(runs, "eager", "compiled", "epoch_seconds")
    print(
        f"\ncompiled/eager s/epoch: **{ratio:.3f}** "
        f"(range over {args.repeats} repetitions {low:.3f}-{high:.3f})"
    )


def ema(args: argparse.Namespace, base: list[str], logs_dir: str) -> None:
    runs = alternate(
        {"EMA off": base, "EMA on": [*base, "--config", str(EMA_PRESET)]}, args.repeats, logs_dir
    )
    print("| run | ms/step (median) | s/epoch (median) |")
    print("|---|---:|---:|")
    for name, results in runs.items():
        step = statistics.median(s for run in results for s in run.step_seconds) * 1000
        epoch = statistics.median(s for run in results for s in run.epoch_seconds)
        print(f"| {name} | {step:.2f} | {epoch:.3f} |")
    own = {
        hook: statistics.median(t for run in runs["EMA on"] for t in run.averaging[hook]) * 1000
        for hook in AVERAGING_HOOKS
    }
    swaps = own["on_validation_epoch_start"] + own["on_validation_epoch_end"]
    print(
        f"\nEMAWeightAveraging's own work, timed inside its hooks (CPU ms, median): the update after each "
        f"step {own['on_train_batch_end']:.3f}, the two swaps around each validation {swaps:.3f} "
        f"({runs['EMA on'][0].metrics['parameters']:,.0f} parameters)"
    )
    step_ratio, low, high = median_ratio(runs, "EMA off", "EMA on", "step_seconds")
    epoch_ratio, _, _ = median_ratio(runs, "EMA off", "EMA on", "epoch_seconds")
    print(
        f"\nEMA on/off per step: **{step_ratio:.3f}** (range {low:.3f}-{high:.3f}); "
        f"per epoch: {epoch_ratio:.3f}"
    )


def quality(args: argparse.Namespace, logs_dir: str) -> None:
    settings: dict[str, list[str]] = {"EMA off": []} | {
        f"EMA decay {decay}": ["--config", str(EMA_PRESET), f"--trainer.callbacks.decay={decay}"]
        for decay in args.decays
    }
    workloads = ["digits", "cifar"] if args.workload == "both" else [args.workload]
    for workload in workloads:
        base = workload_args(workload, args.num_samples, args.smoke)
        epochs = args.epochs or (30 if workload == "digits" else 15)
        base += [f"--trainer.max_epochs={2 if args.smoke else epochs}"]
        print(f"\n#### {workload}: {epochs} epochs, seeds {list(range(args.seeds))}\n")
        print(
            "| setting | test/acc of best.ckpt (mean ± sd) | best val/acc (mean ± sd) "
            "| each seed's test/acc |"
        )
        print("|---|---:|---:|---|")
        for name, extra in settings.items():
            results = [
                fit([*base, *extra, f"--seed_everything={seed}"], logs_dir, test=True).metrics
                for seed in range(args.seeds)
            ]
            test, val = ([r[key] for r in results] for key in ("test/acc", "best/val/acc"))
            print(
                f"| {name} | {statistics.mean(test):.4f} ± {spread(test):.4f} | {statistics.mean(val):.4f} ± "
                f"{spread(val):.4f} | {', '.join(f'{t:.4f}' for t in test)} |",
                flush=True,
            )


def spread(values: list[float]) -> float:
    """The sample standard deviation (0 for one value)."""
    return statistics.stdev(values) if len(values) > 1 else 0.0


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--part", choices=["speed", "ema", "quality", "all"], default="all")
    parser.add_argument("--workload", choices=["cifar", "digits", "both"], default="cifar")
    parser.add_argument("--epochs", type=int, default=None, help="speed/ema: 4; quality: 30 digits, 15 cifar")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--num-samples", type=int, default=2560, help="cifar: images (80%% train)")
    parser.add_argument("--seeds", type=int, default=3, help="quality: seeds per setting")
    parser.add_argument("--decays", type=float, nargs="+", default=[0.99, 0.999], help="quality: EMA decays")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    parser.add_argument("--smoke", action="store_true", help="tiny runs (eager backend) to check the script")
    args = parser.parse_args(argv)
    if args.smoke:
        args.repeats, args.seeds, args.decays = 2, 1, args.decays[:1]
    torch.set_num_threads(args.threads)
    print(
        f"### compile_ema.py --part {args.part} --workload {args.workload}: torch {torch.__version__}, "
        f"{args.threads} thread(s), {datetime.date.today()}\n"
    )
    with tempfile.TemporaryDirectory(prefix="compile_ema_") as logs_dir:
        if args.part in ("speed", "ema", "all"):
            workload = "cifar" if args.workload == "both" else args.workload
            epochs = 2 if args.smoke else (args.epochs or 4)
            base = [*workload_args(workload, args.num_samples, args.smoke), f"--trainer.max_epochs={epochs}"]
            if args.part in ("speed", "all"):
                speed(args, base, logs_dir)
            if args.part in ("ema", "all"):
                print()
                ema(args, base, logs_dir)
        if args.part in ("quality", "all"):
            quality(args, logs_dir)


if __name__ == "__main__":
    main()
