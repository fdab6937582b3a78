"""The package a project hands to the engine: its config files, the extras a command needs, and renamed
options (the old spelling works for one minor version, with one warning line)."""

from __future__ import annotations

import sys
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from support import ENGINE_ROOT, main

from runwright.errors import ConfigError
from runwright.project import EXTRAS, config_files, missing_modules


def test_the_package_s_configs_follow_the_engine_s_and_a_missing_one_is_skipped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert [path.name for path in config_files("fixture_task")] == ["defaults.yaml", "default.yaml"]
    (tmp_path / "bare").mkdir()
    (tmp_path / "bare" / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert [path.name for path in config_files("bare")] == ["defaults.yaml"]
    with pytest.raises(ConfigError, match="package 'no_such_package' is not importable"):
        config_files("no_such_package")


def test_a_command_whose_extra_is_missing_names_the_extra(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], workdir: Path
) -> None:
    monkeypatch.setattr("runwright.cli.missing_modules", lambda extra: ["optuna"] if extra == "sweep" else [])
    with pytest.raises(SystemExit) as exit_info:
        main(["sweep", "--n_trials", "0"])
    assert exit_info.value.code == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    fix = "pip install 'runwright[sweep]'"
    assert line == f"error: sweep needs the engine's 'sweep' extra (optuna not installed): {fix}"
    assert missing_modules("plots") == []  # (installed here)


def test_a_missing_pandas_stops_sweep_with_one_line_naming_the_extra(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], workdir: Path
) -> None:
    """pandas (Optuna's ``trials_dataframe``, the sweep's ``trials.csv``) made unimportable, as if it were
    not installed: ``sweep`` stops before any trial with the line that names the extra."""
    monkeypatch.setitem(sys.modules, "pandas", None)
    with pytest.raises(SystemExit) as exit_info:
        main(["sweep", "--n_trials", "0"])
    assert exit_info.value.code == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    fix = "pip install 'runwright[sweep]'"
    assert line == f"error: sweep needs the engine's 'sweep' extra (pandas not installed): {fix}"
    assert not (workdir / "logs").exists()


def test_each_extra_installs_the_modules_its_commands_check() -> None:
    """``pip install 'runwright[<extra>]'`` (engine/pyproject.toml) installs the distributions of the
    modules that :data:`EXTRAS` checks (those installed here), pandas in ``sweep`` among them."""
    tomllib = pytest.importorskip("tomllib")
    extras = tomllib.loads((ENGINE_ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    distributions = metadata.packages_distributions()
    assert "pandas" in EXTRAS["sweep"]
    for extra, modules in EXTRAS.items():
        required = {canonicalize_name(Requirement(text).name) for text in extras[extra]}
        for module in modules:
            installed_by = {canonicalize_name(name) for name in distributions.get(module, [])}
            assert not installed_by or installed_by & required, f"{extra}: {module} comes from {installed_by}"
