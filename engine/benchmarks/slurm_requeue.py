"""Preemption and requeue on SLURM: seconds from the warning signal to the job's tasks having stopped
(``last.ckpt`` saved, loggers closed), and from a requeued job's start to its first training step,
median over N preemptions of one job.

    python engine/benchmarks/slurm_requeue.py --preemptions 5                 # on a test cluster it starts
    python engine/benchmarks/slurm_requeue.py --preemptions 5 --cluster here  # on the cluster of SLURM_CONF

The job is ``python -m project submit fit --slurm configs/slurm/cpu.yaml``
(2 CPU processes, DDP over gloo; the default experiment and logger, W&B offline) with a callback
(``Clock`` below) that prints the time of each attempt's first training step and, on rank 0, sends
the batch script the warning signal (``scancel --signal=USR1 --batch``, as SLURM does before the
time limit) at a later step of each attempt but the last. The batch script prints the times of its
start, of the warning and of the tasks' stop. The test cluster is ``engine/tests/slurm_cluster.py``
(template repo): one node, and a requeued job waits its ``cred_expire`` of 5 s (SLURM's minimum;
120 s by default) before it starts again, which is reported apart.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from lightning.pytorch import Callback, LightningModule, Trainer

REPO_ROOT = Path(__file__).resolve().parents[2]  # (the template: engine/benchmarks/ is two below)


class Clock(Callback):
    """Rank 0 prints ``first step at <time>`` after each attempt's first training step, and sends the
    warning signal at global step ``steps[SLURM_RESTART_COUNT]``."""

    def __init__(self, steps: list[int]) -> None:
        self.steps, self.first = steps, True

    def on_train_batch_end(self, trainer: Trainer, pl_module: LightningModule, *args: Any) -> None:
        if not trainer.is_global_zero:
            return
        if self.first:
            print(f"first step at {time.time():.3f}", flush=True)
            self.first = False
        attempt = int(os.environ.get("SLURM_RESTART_COUNT", "0"))
        if attempt < len(self.steps) and trainer.global_step == self.steps[attempt]:
            subprocess.run(["scancel", "--signal=USR1", "--batch", os.environ["SLURM_JOB_ID"]], check=True)


def measure(preemptions: int, env: dict[str, str], logs: Path) -> dict[str, list[float]]:
    """Submit the job, wait for its end, and read the times its output recorded."""
    steps = [15 * (index + 1) for index in range(preemptions)]
    command = [sys.executable, "-m", "project", "submit", "fit"]
    command += ["--slurm", "configs/slurm/cpu.yaml"]
    command += [f"--logs_dir={logs}", "--trainer.max_epochs=20", "--trainer.enable_progress_bar=false"]
    command += ["--trainer.callbacks+=benchmarks.slurm_requeue.Clock", f"--trainer.callbacks.steps={steps}"]
    out = subprocess.run(command, cwd=REPO_ROOT, env=env, capture_output=True, text=True, check=True).stdout
    job = re.search(r"Submitted job (\d+)", out)[1]  # type: ignore[index]
    while subprocess.run(["squeue", "-h", "-j", job], env=env, capture_output=True, text=True).stdout.strip():
        time.sleep(2)
    text = (logs / f"slurm-{job}" / f"slurm-{job}.out").read_text()
    starts = [float(t) for t in re.findall(r"^job \d+ start \d+ on \S+ at (\S+)$", text, re.M)]
    firsts = [float(t) for t in re.findall(r"^first step at (\S+)$", text, re.M)]
    warnings = [float(t) for t in re.findall(r"^warning signal at (\S+):", text, re.M)]
    stopped = [float(t) for t in re.findall(r"^tasks stopped \(exit \d+\) at (\S+):", text, re.M)]
    assert len(starts) == len(firsts) == preemptions + 1 == len(warnings) + 1 == len(stopped) + 1, text
    return {
        "warning signal -> tasks stopped (s)": [b - a for a, b in zip(warnings, stopped, strict=True)],
        "tasks stopped -> requeued job starts (s)": [b - a for a, b in zip(stopped, starts[1:], strict=True)],
        "requeued job starts -> first training step (s)": [
            b - a for a, b in zip(starts[1:], firsts[1:], strict=True)
        ],
        "first job start -> first training step (s)": [firsts[0] - starts[0]],
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--preemptions", type=int, default=5)
    parser.add_argument("--cluster", choices=["test", "here"], default="test")
    options = parser.parse_args()
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO_ROOT)}
    cluster = None
    if options.cluster == "test":
        sys.path.insert(0, str(REPO_ROOT / "engine" / "tests"))
        from slurm_cluster import SlurmCluster

        cluster = SlurmCluster(Path(tempfile.mkdtemp(prefix="slurm-"))).start()
        env["SLURM_CONF"] = cluster.env["SLURM_CONF"]
    try:
        with tempfile.TemporaryDirectory() as folder:
            results = measure(options.preemptions, env, Path(folder) / "logs")
    finally:
        if cluster is not None:
            cluster.stop()
    print("| | median | min | max | n |\n|---|---|---|---|---|")
    for name, values in results.items():
        median, low, high = statistics.median(values), min(values), max(values)
        print(f"| {name} | {median:.1f} | {low:.1f} | {high:.1f} | {len(values)} |")


if __name__ == "__main__":
    main()
