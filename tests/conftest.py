"""The fixtures of this project's tests come from the engine's pytest plugin, ``runwright.testing``
(``package``, ``workdir``, ``run_cli``, ``run_main``, ``trained_logs``, ``logs``), for the package that
``runwright_package`` names in ``pyproject.toml``; this project's own helpers are in ``support.py``."""

pytest_plugins = ["runwright.testing"]
