"""``sweep``: Optuna studies whose trials are ordinary ``fit`` runs, on the fixture task. Each test is a
user sequence: sweep, read the results, re-run the best config, continue, share a study, survive a
fault (a trial failed from outside, a killed worker), run DDP trials."""

from __future__ import annotations

import csv
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Iterator
from glob import glob
from pathlib import Path
from typing import Any

import optuna
import pytest
import torch
import yaml
from lightning.pytorch import Callback, LightningModule, Trainer
from support import ENGINE_TESTS, main, metric_rows, project_cli, run_main, run_module

from runwright.runs import RUN_DIR_ENV

SWEEP = ENGINE_TESTS / "fixture_sweep.yaml"
LR, DROPOUT, BATCH = "model.optimizer.init_args.lr", "model.backbone.init_args.dropout", "data.batch_size"
#: Fit options of the test sweeps: 2 epochs of 3 batches.
TRIAL = ["--trainer.max_epochs=2", "--trainer.limit_train_batches=3", "--trainer.limit_val_batches=2"]


def write_sweep(path: Path, **settings: Any) -> Path:
    """The fixture sweep YAML (``fixture_sweep.yaml``) with ``settings`` replaced."""
    path.write_text(yaml.safe_dump({**yaml.safe_load(SWEEP.read_text()), **settings}))
    return path


def read_trials(logs: Path, study: str) -> list[dict[str, str]]:
    """The rows of ``<logs>/<study>_sweep/trials.csv``, keyed without Optuna's ``params_`` and
    ``user_attrs_`` prefixes."""
    with (logs / f"{study}_sweep" / "trials.csv").open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    return [
        {k.removeprefix("params_").removeprefix("user_attrs_"): v for k, v in row.items()} for row in rows
    ]


def stored_trials(logs: Path, study: str, storage: str | None = None) -> list[optuna.trial.FrozenTrial]:
    """The study's trials as its storage holds them (read independently of the sweep command)."""
    url = storage or f"sqlite:///{logs / f'{study}_sweep' / 'optuna.db'}"
    return sorted(optuna.load_study(study_name=study, storage=url).trials, key=lambda t: t.number)


def sweep(*args: str) -> None:
    """``python -m <package> sweep ARGS`` in this process (exits only on an error). The warning filters
    that ``main`` sets for its process are this call's only."""
    with warnings.catch_warnings():
        main(["sweep", *args])


def start_sweep(args: list[str], cwd: Path) -> subprocess.Popen[str]:
    """``sweep ARGS`` of the fixture CLI in a process of its own (as ``support.run_module`` runs it)."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ENGINE_TESTS), env.get("PYTHONPATH")]))
    env.pop(RUN_DIR_ENV, None)
    command = [sys.executable, "-m", "fixture_task", "sweep", *args]
    return subprocess.Popen(
        command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


class FailFromOutside(Callback):
    """Marks trial ``number`` of ``study`` failed in its storage after the trial's first training batch,
    through a connection of its own: what an operator or another worker's heartbeat check does."""

    def __init__(self, study: str, number: int = 0) -> None:
        self.study, self.number = study, number

    def on_train_batch_end(
        self, trainer: Trainer, pl_module: LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        run = Path(trainer.default_root_dir)
        if run.name == f"{self.study}_trial{self.number:03d}" and trainer.global_step == 1:
            url = f"sqlite:///{run.parent / f'{self.study}_sweep' / 'optuna.db'}"
            optuna.load_study(study_name=self.study, storage=url).tell(
                self.number, state=optuna.trial.TrialState.FAIL
            )


# --------------------------------------------------------------------------------- bad input, help
@pytest.mark.parametrize(
    "settings, named",
    [
        (
            {"search_spaces": {BATCH: {"name": "IntDistribution", "attributes": {"low": 8, "high": 16}}}},
            "search_spaces",
        ),  # not a setting
        (
            {
                "search_space": {
                    "model.optimizer.init_args.lrr": {
                        "name": "FloatDistribution",
                        "attributes": {"low": 0.1, "high": 1},
                    }
                }
            },
            "lrr",
        ),
        (
            {
                "search_space": {
                    "trainer.max_epochs": {"name": "IntDistribution", "attributes": {"low": 5, "high": 2}}
                }
            },
            "trainer.max_epochs",
        ),
        (
            {"search_space": {BATCH: {"name": "CategoricalDistribution", "attributes": {"choices": []}}}},
            BATCH,
        ),
        ({"search_space": {BATCH: {"name": "poisson", "attributes": {"low": 1, "high": 2}}}}, "poisson"),
        ({"search_space": {BATCH: {"name": "IntDistribution", "attributes": {"low": 1, "hihg": 2}}}}, "hihg"),
        ({"pruner": {"class_path": "MedainPruner"}}, "MedainPruner"),
        ({"sampler": {"class_path": "TPESampler", "init_args": {"sed": 0}}}, "sed"),
        (  # a class that rejects its arguments: the class and its own reason
            {"pruner": {"class_path": "ThresholdPruner"}},
            "pruner: ThresholdPruner rejects its init_args: TypeError: Either lower or upper must be "
            "specified",
        ),
        ({"enqueue_trials": [{"trainer.max_epochs": 3}]}, "trainer.max_epochs"),
    ],
)
def test_bad_sweep_yaml_stops_before_any_trial_with_one_error_line(
    workdir: Path, capsys: pytest.CaptureFixture[str], settings: dict[str, Any], named: str
) -> None:
    config = write_sweep(workdir / "sweep.yaml", **settings)
    with pytest.raises(SystemExit) as exit_info:
        sweep("--config", str(config), *TRIAL)
    assert exit_info.value.code == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if "error:" in line]
    assert len(errors) == 1 and named in errors[0], errors
    assert not (workdir / "logs").exists(), "nothing was created"


def test_help_lists_the_sweep_settings(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        sweep("--help")
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: python -m fixture_task sweep --config SWEEP_YAML")
    for option in ("--search_space", "--objective.metric", "--sampler", "--pruner", "--enqueue_trials"):
        assert option in out
    for option in (
        "--n_trials",
        "--study_name",
        "--storage",
        "--timeout",
        "--heartbeat_interval",
        "--trainer.max_epochs",
    ):
        assert option in out
    with pytest.raises(SystemExit), warnings.catch_warnings():
        main(["--help"])
    assert "sweep: hyperparameter search" in " ".join(capsys.readouterr().out.split())


def test_a_sampler_that_wraps_another_is_built_from_short_names(workdir: Path) -> None:
    """Short class names at every level of the sweep YAML, as in the README: a PartialFixedSampler that
    fixes the batch size around a RandomSampler, a PatientPruner around a MedianPruner; the trial it
    samples has the fixed value."""
    config = write_sweep(
        workdir / "fixed.yaml",
        sampler={
            "class_path": "PartialFixedSampler",
            "init_args": {
                "fixed_params": {BATCH: 32},
                "base_sampler": {"class_path": "RandomSampler", "init_args": {"seed": 0}},
            },
        },
        pruner={
            "class_path": "PatientPruner",
            "init_args": {"wrapped_pruner": {"class_path": "MedianPruner"}, "patience": 1},
        },
    )
    sweep(
        "--config",
        str(config),
        "--n_trials",
        "1",
        "--trainer.max_epochs=1",
        "--trainer.limit_train_batches=1",
    )
    (trial,) = stored_trials(workdir / "logs", "fixed")
    assert trial.state == optuna.trial.TrialState.COMPLETE and trial.params[BATCH] == 32, trial


def test_a_list_choice_reaches_fit_as_the_list(workdir: Path) -> None:
    """A list is one choice: the trial stores it and fit gets it as the list (as JSON on its command line)."""
    betas = "model.optimizer.init_args.betas"
    config = write_sweep(
        workdir / "lists.yaml",
        search_space={
            betas: {"name": "CategoricalDistribution", "attributes": {"choices": [[0.9, 0.999], [0.8, 0.99]]}}
        },
        enqueue_trials=[{betas: [0.8, 0.99]}],
    )
    sweep(
        "--config",
        str(config),
        "--n_trials",
        "1",
        "--trainer.max_epochs=1",
        "--trainer.limit_train_batches=1",
    )
    (trial,) = stored_trials(workdir / "logs", "lists")
    assert trial.state == optuna.trial.TrialState.COMPLETE and trial.params == {betas: [0.8, 0.99]}
    saved = yaml.safe_load((workdir / "logs" / "lists_trial000" / "config.yaml").read_text())
    assert saved["model"]["init_args"]["optimizer"]["init_args"]["betas"] == [0.8, 0.99]


def test_a_value_the_parser_rejects_fails_its_trial_with_the_parsers_reason(
    workdir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A trial's parser raises (jsonargparse's exit_on_error=False): its message is the trial's error;
    five such failures in a row stop the worker with one error line (exit code 1), results written."""
    config = write_sweep(
        workdir / "floats.yaml",
        search_space={BATCH: {"name": "CategoricalDistribution", "attributes": {"choices": [1.5, 2.5]}}},
    )
    with pytest.raises(SystemExit) as exit_info:
        sweep("--config", str(config), "--n_trials", "1", *TRIAL)
    assert exit_info.value.code == 1
    errors = [line for line in capsys.readouterr().err.splitlines() if "error:" in line]
    assert len(errors) == 1 and "5 trials in a row failed" in errors[0] and "batch_size" in errors[0], errors
    trials = read_trials(workdir / "logs", "floats")
    assert [t["state"] for t in trials] == ["FAIL"] * 5
    for trial in trials:
        assert "batch_size" in trial["error"] and f"Got value: {trial[BATCH]}" in trial["error"]
        assert not Path(trial["run_dir"]).exists(), "nothing was built"


# ------------------------------------------------------------------------- pruning and failed trials
@pytest.mark.slow
def test_a_bad_trial_is_pruned_a_failing_one_recorded_and_trials_are_ordinary_runs(
    workdir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_sweep(
        workdir / "prune.yaml",
        search_space={
            LR: {"name": "FloatDistribution", "attributes": {"low": 1e-8, "high": 3e-2, "log": True}},
            BATCH: {"name": "CategoricalDistribution", "attributes": {"choices": [16, -1]}},
        },
        pruner={"class_path": "MedianPruner", "init_args": {"n_startup_trials": 1, "n_warmup_steps": 0}},
        enqueue_trials=[
            {LR: 3e-2, BATCH: 16},  # a good trial
            {LR: 3e-2, BATCH: -1},  # the DataModule rejects it: failed, the sweep goes on
            {LR: 1e-8, BATCH: 16},  # forced to be bad: pruned after its first epoch
        ],
    )
    sweep("--config", str(config), "--n_trials", "2", *TRIAL, "--trainer.max_epochs=3")
    out = capsys.readouterr().out
    trials = read_trials(workdir / "logs", "prune")
    assert [t["state"] for t in trials] == ["COMPLETE", "FAIL", "PRUNED"]
    assert "batch_size" in trials[1]["error"] and "-1" in trials[1]["error"]
    assert "trial 1 failed: ConfigError: building the run failed: ValueError: batch_size=-1" in out
    assert "trial 2 pruned: at epoch " in out
    good, pruned = Path(trials[0]["run_dir"]), Path(trials[2]["run_dir"])
    assert good.name == "prune_trial000" and pruned.name == "prune_trial002"
    assert [epoch for epoch, _, _ in metric_rows(good, "val/acc")] == [0, 1, 2]
    pruned_epochs = [epoch for epoch, _, _ in metric_rows(pruned, "val/acc")]
    reported = stored_trials(workdir / "logs", "prune")[2].intermediate_values
    assert len(pruned_epochs) == len(reported) < 3, "stopped before its last epoch"
    assert (pruned / "checkpoints" / "last.ckpt").is_file(), "the pruned epoch was saved"
    # the default objective is the best checkpoint.s score, best/<checkpoint.monitor>
    assert float(trials[0]["value"]) == pytest.approx(metric_rows(good, "best/val/acc")[-1][2])
    assert not (good / "wandb").exists(), "trials log to CSV unless a logger is given"
    # a trial's folder is an ordinary run: `test --ckpt_path` works on it
    best_ckpt = good / "checkpoints" / "best.ckpt"
    cli = project_cli(["test", "--ckpt_path", str(best_ckpt), "--trainer.logger=false"])
    assert Path(str(cli.trainer.ckpt_path)) == best_ckpt and "test/acc" in cli.trainer.callback_metrics


# ---------------------------------------------------------------------- two workers share one study
@pytest.mark.slow
def test_two_workers_share_a_4_trial_study_and_the_best_config_reruns(workdir: Path) -> None:
    config = write_sweep(workdir / "pair.yaml")
    workers = [start_sweep(["--config", str(config), "--n_trials", "4", *TRIAL], workdir) for _ in range(2)]
    outputs = [worker.communicate(timeout=300) for worker in workers]
    for worker, (_, err) in zip(workers, outputs, strict=True):
        assert worker.returncode == 0, err[-3000:]
    trials = read_trials(workdir / "logs", "pair")
    assert [t["number"] for t in trials] == ["0", "1", "2", "3"]
    assert {t["state"] for t in trials} <= {"COMPLETE", "PRUNED"}
    folders = {t["run_dir"] for t in trials}
    assert len(folders) == 4 and all((Path(f) / "config.yaml").is_file() for f in folders)
    for out, _ in outputs:  # both workers ran trials
        assert "complete: best/val/acc=" in out or " pruned: " in out
    params = {(t[LR], t[DROPOUT], t[BATCH]) for t in trials}
    assert len(params) == 4, "the two workers' seeded samplers drew different trials"
    best = max((t for t in trials if t["state"] == "COMPLETE"), key=lambda t: float(t["value"]))
    best_yaml = workdir / "logs" / "pair_sweep" / "best.yaml"
    for plot in ("optimization_history", "param_importances", "parallel_coordinate"):
        assert (best_yaml.parent / f"{plot}.png").stat().st_size > 10_000
    # the best config re-runs as is and gives the best trial's value again
    rerun = project_cli(["fit", "--config", str(best_yaml)])
    best_score = rerun.trainer.checkpoint_callback.best_model_score  # type: ignore[union-attr]
    assert float(best_score) == pytest.approx(float(best["value"]), abs=1e-6)
    assert metric_rows(rerun.run_dir, "best/val/acc")[-1][2] == pytest.approx(float(best["value"]), abs=1e-6)
    saved = yaml.safe_load((rerun.run_dir / "config.yaml").read_text())
    assert saved["data"]["init_args"]["batch_size"] == int(best[BATCH])


# --------------------------------------------------------------------------------- Ctrl-C, resume
@pytest.mark.slow
def test_ctrl_c_keeps_finished_trials_and_rerunning_continues_the_study(workdir: Path) -> None:
    config = write_sweep(workdir / "resume.yaml")
    args = ["--config", str(config), "--n_trials", "2", *TRIAL, "--trainer.limit_train_batches=4"]
    args += ["--trainer.callbacks+=helpers.SlowDown", "--trainer.callbacks.seconds=0.2"]
    process = start_sweep(args, workdir)
    second = workdir / "logs" / "resume_trial001" / "checkpoints" / "last.ckpt"  # epoch 0 of trial 1
    deadline = time.monotonic() + 180
    while not second.exists() and time.monotonic() < deadline and process.poll() is None:
        time.sleep(0.05)
    assert second.exists(), process.communicate()
    process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=120)
    assert process.returncode == 130, err[-3000:]
    assert "error: sweep interrupted by Ctrl-C; 1 finished trial(s) kept" in err
    assert "Traceback" not in err
    trials = read_trials(workdir / "logs", "resume")
    assert [(t["state"], t["error"]) for t in trials] == [("COMPLETE", ""), ("FAIL", "interrupted")]
    assert (workdir / "logs" / "resume_sweep" / "best.yaml").is_file(), "the results were written"
    first_ckpt = Path(trials[0]["run_dir"]) / "checkpoints" / "best.ckpt"
    kept = first_ckpt.stat().st_mtime_ns
    # the same command again continues the study: one more trial, the finished one untouched
    sweep(*args)
    trials = read_trials(workdir / "logs", "resume")
    assert [t["state"] for t in trials] == ["COMPLETE", "FAIL", "COMPLETE"]
    assert first_ckpt.stat().st_mtime_ns == kept
    assert (workdir / "logs" / "resume_trial002" / "checkpoints" / "best.ckpt").is_file()


# ------------------------------------------------------------------------------------------ faults
@pytest.mark.slow
def test_a_trial_failed_from_outside_stops_and_the_worker_goes_on(
    workdir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An operator (or another worker's heartbeat check) marks the running trial 0 failed: it stops at
    its next validation, counts as failed, and the worker finishes the study and writes its results."""
    config = write_sweep(workdir / "outside.yaml")
    callback = ["--trainer.callbacks+=test_sweep.FailFromOutside", "--trainer.callbacks.study=outside"]
    sweep("--config", str(config), "--n_trials", "2", *TRIAL, *callback)
    assert "trial 0 failed: marked failed outside its run" in capsys.readouterr().out
    trials = stored_trials(workdir / "logs", "outside")
    assert [t.state.name for t in trials] == ["FAIL", "COMPLETE", "COMPLETE"]
    assert trials[0].intermediate_values == {} and "error" not in trials[0].user_attrs
    epochs = [epoch for epoch, _, _ in metric_rows(workdir / "logs" / "outside_trial000", "val/acc")]
    assert epochs == [0], "it stopped at its first validation (of 2)"
    assert [t["state"] for t in read_trials(workdir / "logs", "outside")] == ["FAIL", "COMPLETE", "COMPLETE"]
    assert (workdir / "logs" / "outside_sweep" / "best.yaml").is_file()


@pytest.mark.slow
def test_a_killed_workers_trial_fails_and_the_survivor_finishes_the_study(workdir: Path) -> None:
    """Worker A is SIGKILLed during its (long) trial 0 while worker B shares the study: B fails that trial
    once its heartbeat is stale (2 x --heartbeat_interval), runs a trial in its place, finishes all
    --n_trials and writes the results."""
    config = write_sweep(workdir / "kill.yaml")
    args = ["--config", str(config), "--n_trials", "3", "--heartbeat_interval", "1", *TRIAL]
    slow = [
        "--trainer.max_epochs=30",
        "--trainer.callbacks+=helpers.SlowDown",
        "--trainer.callbacks.seconds=0.3",
    ]
    first = start_sweep([*args, *slow], workdir)
    logs, deadline = workdir / "logs", time.monotonic() + 180
    while not (logs / "kill_trial000").exists() and time.monotonic() < deadline and first.poll() is None:
        time.sleep(0.05)
    survivor = start_sweep(args, workdir)
    while not (logs / "kill_trial001").exists() and time.monotonic() < deadline and survivor.poll() is None:
        time.sleep(0.05)
    first.kill()  # SIGKILL: no cleanup, its trial 0 stays RUNNING in the storage
    first.communicate()
    out, err = survivor.communicate(timeout=300)
    assert survivor.returncode == 0, err[-3000:]
    trials = stored_trials(logs, "kill")
    assert trials[0].state.name == "FAIL", "the killed trial was failed by its stale heartbeat"
    assert [t.state.name in ("COMPLETE", "PRUNED") for t in trials[1:]] == [True, True, True]
    assert "3 finished trial(s) in study 'kill'" in out
    assert [t["state"] for t in read_trials(logs, "kill")] == [t.state.name for t in trials]
    assert (logs / "kill_sweep" / "best.yaml").is_file()


# ------------------------------------------------------------------------------------- DDP trials
@pytest.mark.slow
def test_ddp_trials_are_one_trial_per_job_each_with_its_own_value(workdir: Path) -> None:
    """With 2-process DDP (gloo) every trial is one DDP job: rank 1 follows rank 0's trial instead of
    asking Optuna for one of its own, so each trial's stored value is its own run's; every enqueued
    trial runs, pruning works across the ranks, and no trial is left WAITING or RUNNING."""
    config = write_sweep(
        workdir / "ddp.yaml",
        search_space={
            LR: {"name": "FloatDistribution", "attributes": {"low": 1e-8, "high": 5e-2, "log": True}}
        },
        pruner={"class_path": "MedianPruner", "init_args": {"n_startup_trials": 2, "n_warmup_steps": 0}},
        enqueue_trials=[{LR: 1e-2}, {LR: 1e-6}, {LR: 1e-8}],
    )
    ddp = ["--trainer.strategy=ddp", "--trainer.devices=2", "--trainer.accelerator=cpu"]
    result = run_module(
        ["sweep", "--config", str(config), "--n_trials", "3", *TRIAL, *ddp], workdir, timeout=500
    )
    trials = stored_trials(workdir / "logs", "ddp")
    assert [t.params[LR] for t in trials] == [1e-2, 1e-6, 1e-8], result.stdout
    assert [t.state.name for t in trials[:2]] == ["COMPLETE", "COMPLETE"]
    for trial in trials:  # the stored value is the one its own run logged (rank 0's metrics.csv)
        run = Path(trial.user_attrs["run_dir"])
        assert trial.value == pytest.approx(metric_rows(run, "best/val/acc")[-1][2])
    assert trials[0].value > trials[1].value, "a good and a hopeless LR give different values"
    assert (
        trials[2].state.name == "PRUNED"
        and len(metric_rows(Path(trials[2].user_attrs["run_dir"]), "val/acc")) == 1
    )


# ------------------------------------------------------------------------------ the journal file
@pytest.mark.filterwarnings("ignore::optuna.exceptions.ExperimentalWarning", "ignore:Heartbeat of storage")
def test_a_journal_trial_without_heartbeats_is_failed_and_queued_again(workdir: Path) -> None:
    """``--storage journal:FILE`` has Optuna's heartbeats too (``private.journal_storage``): a running
    trial whose last heartbeat is older than 2 x ``heartbeat_interval`` (its worker killed) is failed by
    the next worker that looks and queued again with its values; one with a fresh heartbeat is not."""
    from runwright.commands.sweep import open_storage

    storage = open_storage(f"journal:{workdir / 'study.journal'}", heartbeat_interval=5)
    study = optuna.create_study(storage=storage, study_name="s")
    stale, alive = study.ask({"x": optuna.distributions.FloatDistribution(0, 1)}), study.ask()
    for trial, age in ((stale, 11), (alive, 1)):
        storage.set_trial_system_attr(trial._trial_id, f"heartbeat:{trial._trial_id}", time.time() - age)
    optuna.storages.fail_stale_trials(study)
    states = [(t.number, t.state.name, t.system_attrs.get("failed_trial")) for t in study.trials]
    assert states == [(0, "FAIL", None), (1, "RUNNING", None), (2, "WAITING", 0)]
    assert study.trials[2].params == stale.params
    with pytest.raises(SystemExit) as stop, pytest.MonkeyPatch.context() as patch:  # SQLite in a SLURM job
        patch.setenv("SLURM_JOB_ID", "1")
        patch.setenv("SLURM_PROCID", "0")
        sweep("--config", str(write_sweep(workdir / "s.yaml")), "--storage=sqlite:///x.db", *TRIAL)
    assert stop.value.code == 2 and not (workdir / "logs").exists()


# ------------------------------------------------------------------------- workers on one machine
def test_workers_share_out_the_gpus_and_a_trial_asking_more_stops_with_one_line(
    workdir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from runwright.commands.sweep import worker_devices
    from runwright.errors import ConfigError

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,2,3,5")
    assert worker_devices(4) == ["0", "1", "2", "3"] and worker_devices(2) == ["0,1", "2,3"]
    with pytest.raises(ConfigError, match=r"--workers=6: this machine has 5 GPU\(s\) \(0,1,2,3,5\)"):
        worker_devices(6)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert worker_devices(3) == [None, None, None], "no GPU: the workers share the CPUs"
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)  # a worker of one GPU
    config = write_sweep(workdir / "gpus.yaml")
    code, _, err = run_main(["sweep", "--config", str(config), "--trainer.devices=2", *TRIAL], capsys)
    assert code == 2 and err.splitlines() == [
        "error: --trainer.devices=2: a trial asks for 2 GPUs, but this worker has 1 "
        "(CUDA_VISIBLE_DEVICES=3); ask for at most 1, or run fewer --workers"
    ]
    assert not (workdir / "logs").exists()


@pytest.mark.slow
def test_two_workers_on_one_machine_run_trials_at_once(workdir: Path) -> None:
    config = write_sweep(workdir / "local.yaml", pruner=None)
    slow = ["--trainer.callbacks+=helpers.SlowDown", "--trainer.callbacks.seconds=0.5"]
    result = run_module(
        ["sweep", "--config", str(config), "--n_trials=2", "--workers=2", *TRIAL, *slow], workdir
    )
    first, second = stored_trials(workdir / "logs", "local")
    assert [first.state.name, second.state.name] == ["COMPLETE", "COMPLETE"], result.stdout
    assert first.datetime_start < second.datetime_complete and second.datetime_start < first.datetime_complete
    assert "2 finished trial(s) in study 'local'" in result.stdout


# ------------------------------------------------------------------------------------- PostgreSQL
def _postgres_binary(name: str) -> str | None:
    return shutil.which(name) or next(iter(sorted(glob(f"/usr/lib/postgresql/*/bin/{name}"))), None)


@pytest.fixture
def postgres_url() -> Iterator[str]:
    """A throwaway PostgreSQL server in a temporary folder (trust auth, 127.0.0.1, a free port)."""
    binaries = {name: _postgres_binary(name) for name in ("initdb", "pg_ctl", "postgres")}
    missing = [name for name, path in binaries.items() if path is None]
    if missing:
        pytest.skip(f"PostgreSQL binaries not installed: {missing} (apt install postgresql)")
    pytest.importorskip("psycopg2", reason="the PostgreSQL driver psycopg2 is not installed (dev extra)")
    uid: int | None = None
    gid: int | None = None
    if os.geteuid() == 0:  # initdb and postgres refuse to run as root
        try:
            entry = pwd.getpwnam("postgres")
        except KeyError:
            pytest.skip("running as root and there is no 'postgres' user to run the server as")
        uid, gid = entry.pw_uid, entry.pw_gid
    folder = Path(tempfile.mkdtemp(prefix="sweep-pg-"))
    if uid is not None:
        os.chown(folder, uid, gid if gid is not None else -1)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    data = folder / "data"
    initdb = [str(binaries["initdb"]), "-D", str(data), "-U", "postgres", "--auth=trust"]
    subprocess.run(initdb, check=True, capture_output=True, user=uid, group=gid)
    options = f"-p {port} -k {folder} -c listen_addresses=127.0.0.1"
    pg_ctl = [str(binaries["pg_ctl"]), "-D", str(data), "-l", str(folder / "log")]
    subprocess.run(
        [*pg_ctl, "-o", options, "-w", "start"], check=True, capture_output=True, user=uid, group=gid
    )
    try:
        yield f"postgresql://postgres@127.0.0.1:{port}/postgres"
    finally:
        subprocess.run([*pg_ctl, "-m", "immediate", "stop"], capture_output=True, user=uid, group=gid)
        shutil.rmtree(folder, ignore_errors=True)


@pytest.mark.slow
def test_postgresql_storage_holds_the_study(workdir: Path, postgres_url: str) -> None:
    config = write_sweep(workdir / "pg.yaml")
    sweep("--config", str(config), "--storage", postgres_url, "--n_trials", "1", *TRIAL)
    sweep("--config", str(config), "--storage", postgres_url, "--n_trials", "2", *TRIAL)  # continues
    # read the study back from the server, independently of the sweep command
    driver_url = postgres_url.replace("postgresql://", "postgresql+psycopg2://")
    values = [t.value for t in stored_trials(workdir / "logs", "pg", driver_url)]
    trials = read_trials(workdir / "logs", "pg")
    assert len(values) == 2 and [float(t["value"]) for t in trials] == values
    assert [Path(t["run_dir"]).name for t in trials] == ["pg_trial000", "pg_trial001"]
    assert not list((workdir / "logs").rglob("*.db")), "no SQLite file when --storage is given"


@pytest.mark.slow
def test_a_worker_stops_after_five_failed_trials_in_a_row(
    workdir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Trials that the DataModule rejects (batch_size < 1): five failures in a row stop the worker."""
    config = write_sweep(
        workdir / "broken.yaml",
        search_space={BATCH: {"name": "CategoricalDistribution", "attributes": {"choices": [-1, -2]}}},
    )
    with pytest.raises(SystemExit) as exit_info:
        sweep("--config", str(config), "--n_trials", "3", *TRIAL)
    assert exit_info.value.code == 1
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "5 trials in a row failed" in errors[0] and "batch_size" in errors[0]
    assert [t["state"] for t in read_trials(workdir / "logs", "broken")] == ["FAIL"] * 5
