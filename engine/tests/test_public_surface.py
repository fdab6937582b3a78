"""The engine's public surface: the README's table "The public surface" lists exactly the names of
``runwright.__all__`` (with ``__version__`` and ``runwright.testing``), each with the module that defines
it, and the names of ``runwright.testing.__all__``."""

from __future__ import annotations

import re
from pathlib import Path

import runwright
import runwright.testing

README = Path(__file__).resolve().parents[1] / "README.md"


def surface_table() -> dict[str, tuple[str, str]]:
    """The table's rows: each name (without ``runwright.``) -> (what it is, its module)."""
    section = README.read_text().split("\n## The public surface\n", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        if line.startswith("| `runwright."):
            names, what, module = (cell.strip() for cell in line.strip().strip("|").split("|"))
            for name in re.findall(r"`(?:runwright\.)?(\w+)", names):
                rows[name] = (what, module.strip("`"))
    return rows


def test_the_readme_lists_the_public_surface_and_each_name_s_module() -> None:
    table = surface_table()
    assert set(table) == {*runwright.__all__, "__version__", "testing"}
    for name in runwright.__all__:
        assert getattr(runwright, name).__module__ == f"runwright.{table[name][1]}", name
    assert set(runwright.testing.__all__) <= set(re.findall(r"`(\w+)`", table["testing"][0]))
