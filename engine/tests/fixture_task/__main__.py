"""``python -m fixture_task SUBCOMMAND ...``: the engine's command line for the fixture task, for the
tests that need a process of their own (exit codes, signals, DDP, a fresh interpreter)."""

from runwright.cli import main

if __name__ == "__main__":
    main(package=__package__)
