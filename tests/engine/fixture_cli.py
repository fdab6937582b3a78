"""``python tests/engine/fixture_cli.py SUBCOMMAND ...``: the package's command line with the engine
tests' config files (the fixture task) instead of the package's own; for tests that need a process of
their own (exit codes, signals, DDP, a fresh interpreter)."""

from fixture_task import CONFIG

from project.engine import cli

if __name__ == "__main__":
    cli.ProjectCLI.config_files = [cli.ENGINE_DIR / "defaults.yaml", CONFIG]
    cli.main()
