"""The CPU cost of the engine's fast tests against ``python -c "import lightning"``, measured in one
sitting: CPU-s (user + system) of ``import lightning``, of the fast suite (``pytest -n 2 -m "not
slow"``: the controller, its workers and every process they start), of ``import lightning`` again, and
the suite's ratio to the mean of the two imports. With ``--top N`` it also prints the N costliest
tests in CPU-s (set-up, call and teardown of each, in its worker and the processes it waited for; a
session fixture counts for the first test that asks for it) and how many in-process commands (a
``LightningCLI``: ``fit``, ``test``, ``export``'s rebuild, ...) each ran. Run from the template's root:

    OMP_NUM_THREADS=1 python engine/benchmarks/test_cost.py --top 10 [-- PYTEST ARGS]

The CPU-s of a process grow with the load of the machine (shared caches and cores): quote the load
average the script prints with each number.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

ENGINE = Path(__file__).resolve().parents[1]
#: Where a worker appends ``CPU-s<TAB>commands<TAB>test id`` lines (the plugin below is on when it is set).
LOG_ENV = "RUNWRIGHT_TEST_COST_LOG"
#: In-process commands started so far in this process.
commands = 0


def cpu_seconds(command: Sequence[str], cwd: Path) -> tuple[float, float]:
    """Run ``command`` in ``cwd``; returns its CPU-s (user + system, its waited-for children included)
    and its wall seconds. Fails when it fails."""
    before, start = resource.getrusage(resource.RUSAGE_CHILDREN), time.monotonic()
    subprocess.run(command, cwd=cwd, check=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    after, wall = resource.getrusage(resource.RUSAGE_CHILDREN), time.monotonic() - start
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), wall


def pytest_configure(config: pytest.Config) -> None:
    """In a worker with ``LOG_ENV`` set, count every ``LightningCLI`` built (each in-process command)."""
    if not (os.environ.get(LOG_ENV) and hasattr(config, "workerinput")):
        return
    from lightning.pytorch.cli import LightningCLI

    init = LightningCLI.__init__

    def counted(*args: Any, **kwargs: Any) -> None:
        global commands
        commands += 1
        init(*args, **kwargs)

    LightningCLI.__init__ = counted  # type: ignore[method-assign]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Iterator[None]:
    """Append the test's CPU-s (its worker's and its waited-for children's) to the file of ``LOG_ENV``."""
    log = os.environ.get(LOG_ENV)
    if not log:
        yield
        return
    start, started = (time.process_time(), resource.getrusage(resource.RUSAGE_CHILDREN)), commands
    yield
    end = time.process_time(), resource.getrusage(resource.RUSAGE_CHILDREN)
    children = (end[1].ru_utime - start[1].ru_utime) + (end[1].ru_stime - start[1].ru_stime)
    with open(log, "a") as handle:
        handle.write(f"{end[0] - start[0] + children:.2f}\t{commands - started}\t{item.nodeid}\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--top", type=int, default=0, help="print the N costliest tests")
    parser.add_argument("pytest_args", nargs="*", help='after "--": more pytest arguments')
    args = parser.parse_args()
    python = sys.executable
    import_lightning = [python, "-c", "import lightning"]
    log = Path(tempfile.mkdtemp()) / "tests.tsv"
    suite = [python, "-m", "pytest", "-q", "-n", "2", "-m", "not slow", "-p", "no:cacheprovider"]
    if args.top:
        suite += ["-p", "test_cost"]
        os.environ[LOG_ENV] = str(log)
        os.environ["PYTHONPATH"] = os.pathsep.join(
            filter(None, [str(Path(__file__).parent), os.environ.get("PYTHONPATH")])
        )
    print(f"load average at the start: {os.getloadavg()}")
    first, _ = cpu_seconds(import_lightning, ENGINE)
    tests, wall = cpu_seconds([*suite, *args.pytest_args], ENGINE)
    second, _ = cpu_seconds(import_lightning, ENGINE)
    print(f"load average at the end: {os.getloadavg()}")
    imports = (first + second) / 2
    print(f"import lightning: {first:.1f} and {second:.1f} CPU-s")
    print(f"fast suite: {tests:.1f} CPU-s ({wall:.0f} s wall) = {tests / imports:.1f} x import lightning")
    if args.top and log.exists():
        rows = [line.split("\t", 2) for line in log.read_text().splitlines()]
        rows.sort(key=lambda row: -float(row[0]))
        total, count = sum(float(row[0]) for row in rows), sum(int(row[1]) for row in rows)
        print(f"the tests themselves: {total:.1f} CPU-s in {len(rows)} tests, {count} in-process commands")
        print(f"the {args.top} costliest (CPU-s, commands, test):")
        for cpu, runs, name in rows[: args.top]:
            print(f"{float(cpu):7.1f} {runs:>3}  {name}")


if __name__ == "__main__":
    main()
