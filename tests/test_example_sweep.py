"""The example's sweep config, ``configs/sweep/digits.yaml``, fits the default experiment: the sweep
command accepts it (its search_space keys are fit options of the default config, its distributions,
sampler and pruner build), and its enqueued first trial is the default config itself."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import optuna
import yaml
from runwright.testing import RunMain
from support import CONFIGS

DIGITS_SWEEP = CONFIGS / "sweep" / "digits.yaml"


def flat(config: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """A nested config as ``{dotted key: value}`` without its ``init_args`` levels (a sweep's keys may
    leave them out)."""
    items: dict[str, Any] = {}
    for key, value in config.items():
        dotted = prefix if key == "init_args" else f"{prefix}{key}."
        items.update(flat(value, dotted) if isinstance(value, dict) else {dotted.rstrip("."): value})
    return items


def test_the_digits_sweep_is_valid_and_starts_from_the_default_config(
    workdir: Path, run_main: RunMain
) -> None:
    code, _, err = run_main("sweep", "--config", str(DIGITS_SWEEP), "--n_trials", "0")  # checks, runs nothing
    assert code == 0, err
    storage = f"sqlite:///{workdir / 'logs' / 'digits_sweep' / 'optuna.db'}"
    (trial,) = optuna.load_study(study_name="digits", storage=storage).trials
    assert trial.state == optuna.trial.TrialState.WAITING, "the enqueued trial waits for the first worker"
    code, printed, err = run_main("fit", "--print_config")
    assert code == 0, err
    default = flat(yaml.safe_load(printed))
    (first,) = yaml.safe_load(DIGITS_SWEEP.read_text())["enqueue_trials"]
    first = {key.replace(".init_args", ""): value for key, value in first.items()}
    assert first == {key: default[key] for key in first}
