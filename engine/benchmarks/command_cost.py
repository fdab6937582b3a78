"""The CPU cost of one command, warm (the libraries imported, in one process), on the engine tests'
fixture task: ``fit`` with the tests' ``FAST`` settings (one epoch of two batches), ``test --ckpt_path`` of
that fit's ``last.ckpt`` (the checkpoint's run read and parsed with the command's arguments), and ``fit
--help``.
The median CPU-s (``time.process_time``, this process, one torch thread) over ``--repeats`` runs after
one unrecorded run of each.

    OMP_NUM_THREADS=1 python engine/benchmarks/command_cost.py --repeats 12
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import statistics
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path

ENGINE = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ENGINE / "tests"), str(ENGINE / "src")]


def cpu_seconds(run: Callable[[], object]) -> float:
    """The CPU time of ``run()`` in this process."""
    start = time.process_time()
    with (
        contextlib.suppress(SystemExit),
        contextlib.redirect_stdout(io.StringIO()),
        warnings.catch_warnings(),
    ):
        warnings.simplefilter("ignore")
        run()
    return time.process_time() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=12)
    args = parser.parse_args()
    import torch
    from support import FAST, project_cli

    from runwright import cli

    torch.set_num_threads(1)
    os.environ["WANDB_MODE"] = "disabled"
    os.chdir(tempfile.mkdtemp())
    ckpt = project_cli(["fit", *FAST, "--trainer.logger=false"]).run_dir / "checkpoints" / "last.ckpt"
    commands: dict[str, Callable[[], object]] = {
        "fit (FAST)": lambda: project_cli(["fit", *FAST, "--trainer.logger=false"]),
        "test --ckpt_path (FAST)": lambda: project_cli(
            ["test", *FAST, "--trainer.logger=false", f"--ckpt_path={ckpt}"]
        ),
        "fit --help": lambda: cli.main(["fit", "--help"], package="fixture_task"),
    }
    times: dict[str, list[float]] = {name: [] for name in commands}
    for repeat in range(args.repeats + 1):
        for name, run in commands.items():
            seconds = cpu_seconds(run)
            if repeat:  # (the first of each: imports, caches)
                times[name].append(seconds)
    for name, values in times.items():
        median, least = statistics.median(values), min(values)
        print(f"{name}: median {median:.3f} CPU-s (min {least:.3f}, {len(values)} runs)")


if __name__ == "__main__":
    main()
