"""The example's sweep config, ``configs/sweep/digits.yaml``, fits the default experiment: the sweep
command accepts it (its search_space keys are fit options of the default config, its distributions,
sampler and pruner build), and its enqueued first trial is the default config itself."""

from __future__ import annotations

import os
import warnings
from pathlib import Path
from unittest import mock

import optuna
from runwright.cli import ProjectCLI
from runwright.commands.sweep import SweepCLI
from support import PACKAGE, main

DIGITS_SWEEP = Path(__file__).resolve().parents[1] / "configs" / "sweep" / "digits.yaml"


def test_the_digits_sweep_is_valid_and_starts_from_the_default_config(workdir: Path) -> None:
    with warnings.catch_warnings():  # (the filters main sets for its process)
        main(["sweep", "--config", str(DIGITS_SWEEP), "--n_trials", "0"])  # checks everything, runs nothing
    storage = f"sqlite:///{workdir / 'logs' / 'digits_sweep' / 'optuna.db'}"
    (trial,) = optuna.load_study(study_name="digits", storage=storage).trials
    assert trial.state == optuna.trial.TrialState.WAITING, "the enqueued trial waits for the first worker"
    with mock.patch.dict(os.environ):  # (parsing seeds: PL_GLOBAL_SEED)
        (first,) = SweepCLI(["--config", str(DIGITS_SWEEP)], PACKAGE).config.enqueue_trials
        default = {
            key.replace(".init_args", ""): value
            for key, value in ProjectCLI(args=[], run=False, package=PACKAGE).config.items()
        }
    assert first == {key: default[key.replace(".init_args", "")] for key in first}
