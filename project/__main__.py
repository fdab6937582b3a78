"""Entry point for ``python -m project``."""

from .engine.cli import main

if __name__ == "__main__":
    main()
