"""Start-up time: ``python -m project --help`` and time to the first training step, against
``python -c "import lightning"``, each a fresh process, median of N alternating runs.

    python engine/benchmarks/startup.py --repeats 5

Runs in an empty temporary working directory with this checkout first on ``PYTHONPATH``. The first
training step is timed by ``python -m project fit`` (the default experiment, exactly as a user
types it, plus ``--trainer.callbacks+=<a callback that ends the process after the first
training batch>``), so it includes parsing, building model, data and trainer, the run folder,
the sanity-check validation and one step. Target: ``--help`` within 1.3x of ``import lightning``.
"""

from __future__ import annotations

import argparse
import datetime
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]  # (the template: engine/benchmarks/ is two below)

FIRST_STEP_CALLBACK = """
import os, sys
from lightning.pytorch import Callback

class ExitAfterFirstStep(Callback):
    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        sys.stdout.flush()
        os._exit(0)
"""

COMMANDS: dict[str, list[str]] = {
    "python -c 'import lightning'": ["-c", "import lightning"],
    "python -c 'import torch'": ["-c", "import torch"],
    "python -m project --help": ["-m", "project", "--help"],
    "python -m project fit --help": ["-m", "project", "fit", "--help"],
    "python -m project fit (to the first training step)": [
        "-m",
        "project",
        "fit",
        "--trainer.enable_progress_bar=false",
        "--trainer.callbacks+=firststep.ExitAfterFirstStep",
    ],
}


def time_command(args: list[str], cwd: Path) -> float:
    """Wall seconds of ``python ARGS`` in ``cwd``; raises ``RuntimeError`` with its output on failure."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), str(cwd)])}
    start = time.perf_counter()
    result = subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if result.returncode != 0:
        raise RuntimeError(f"{args} failed ({result.returncode}):\n{result.stdout}\n{result.stderr}")
    return seconds


def main(argv: list[str] | None = None) -> dict[str, float]:
    """Print a Markdown table of median wall seconds; return the medians."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    times: dict[str, list[float]] = {name: [] for name in COMMANDS}
    with tempfile.TemporaryDirectory(prefix="startup_") as tmp:
        cwd = Path(tmp)
        (cwd / "firststep.py").write_text(FIRST_STEP_CALLBACK)
        for command in COMMANDS.values():  # warm the file cache (not recorded)
            time_command(command, cwd)
        for _ in range(args.repeats):
            for name, command in COMMANDS.items():
                times[name].append(time_command(command, cwd))
    medians = {name: statistics.median(values) for name, values in times.items()}
    base = medians["python -c 'import lightning'"]
    print(
        f"Start-up, median of {args.repeats} alternating runs, {datetime.date.today()}, "
        f"load average {os.getloadavg()[0]:.1f}\n"
    )
    print("| command | seconds | / import lightning |")
    print("|---|---:|---:|")
    for name, value in medians.items():
        print(f"| `{name}` | {value:.2f} | {value / base:.2f} |")
    return medians


if __name__ == "__main__":
    main()
