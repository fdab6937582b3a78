"""``python -m project`` (and the command of that name): the engine, runwright, runs it."""

from runwright import main as run


def main() -> None:
    """Run the engine's command line for this package (``sys.argv[1:]``)."""
    run(package=__package__)


if __name__ == "__main__":
    main()
