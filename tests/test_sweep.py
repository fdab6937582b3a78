"""``python -m project sweep``: Optuna studies whose trials are ordinary ``fit`` runs.
Each test is a
user sequence: sweep, read the results, re-run the best config, resume, share a study."""

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
from collections.abc import Iterator
from glob import glob
from pathlib import Path

import pytest
import yaml
from conftest import CONFIGS, FAST, REPO_ROOT, RunCLI

from project.cli import ProjectCLI, main
from project.report import read_metrics

TESTS = str(REPO_ROOT / "tests")
SUBPROCESS_ENV = {
    **os.environ,
    "PYTHONUNBUFFERED": "1",
    "PYTHONPATH": os.pathsep.join(filter(None, [TESTS, str(REPO_ROOT), os.environ.get("PYTHONPATH")])),
}
#: Fit options of the test sweeps: 2 epochs of 3 batches.
TRIAL = [*FAST, "--trainer.max_epochs=2", "--trainer.limit_train_batches=3", "--trainer.limit_val_batches=2"]
SPACE = {
    "model.optimizer.init_args.lr": {"type": "float", "low": 1e-3, "high": 1e-2, "log": True},
    "model.backbone.init_args.dropout": {"type": "float", "low": 0.0, "high": 0.3},
    "data.batch_size": {"type": "categorical", "choices": [32, 64]},
}


def write_sweep(path: Path, **changes: object) -> Path:
    """A sweep YAML: SPACE, val/acc_best maximised, seeded TPE, median pruner, plus ``changes``."""
    sweep: dict[str, object] = {
        "search_space": SPACE,
        "objective": {"metric": "val/acc_best", "direction": "maximize"},
        "sampler": {"name": "tpe", "seed": 0},
        "pruner": {"name": "median"},
        **changes,
    }
    path.write_text(yaml.safe_dump(sweep))
    return path


def read_trials(logs: Path, study: str) -> list[dict[str, str]]:
    with (logs / f"{study}_sweep" / "trials.csv").open(newline="") as handle:
        return list(csv.DictReader(handle))


def sweep(*args: str) -> None:
    """``python -m project sweep ARGS`` in this process (exits only on an error)."""
    main(["sweep", *args])


# ------------------------------------------------------------------------------------ bad sweep YAML
@pytest.mark.parametrize(
    "change, named",
    [
        ({"search_spaces": SPACE}, "search_spaces"),  # unknown top-level key
        ({"search_space": {**SPACE, "model.optimizer.init_args.lrr": SPACE["data.batch_size"]}}, "lrr"),
        (
            {"search_space": {"trainer.max_epochs": {"type": "int", "low": 5, "high": 2}}},
            "trainer.max_epochs",
        ),
        ({"search_space": {"data.batch_size": {"type": "categorical", "choices": []}}}, "data.batch_size"),
        ({"search_space": {"data.batch_size": {"type": "poisson", "low": 1, "high": 2}}}, "poisson"),
        ({"search_space": {"data.batch_size": {"type": "int", "low": 1, "hihg": 2}}}, "hihg"),
        ({"pruner": {"name": "medain"}}, "medain"),
        ({"enqueue_trials": [{"trainer.max_epochs": 3}]}, "trainer.max_epochs"),
    ],
)
def test_bad_sweep_yaml_stops_before_any_trial_with_one_error_line(
    workdir: Path, capsys: pytest.CaptureFixture[str], change: dict[str, object], named: str
) -> None:
    config = write_sweep(workdir / "sweep.yaml", **change)
    with pytest.raises(SystemExit) as exit_info:
        sweep("--config", str(config), *TRIAL)
    assert exit_info.value.code == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if "error:" in line]
    assert len(errors) == 1 and named in errors[0], errors
    assert not (workdir / "logs").exists() or not list((workdir / "logs").iterdir())


def test_help_lists_the_sweep_options(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        sweep("--help")
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    for option in ("--n_trials", "--study_name", "--storage", "--timeout", "search_space"):
        assert option in out
    with pytest.raises(SystemExit):
        main(["--help"])
    assert "sweep: hyperparameter search" in " ".join(capsys.readouterr().out.split())


def test_shipped_sweep_configs_are_valid_for_their_experiment(workdir: Path) -> None:
    """Every file in configs/sweep/ loads, and its keys are fit options (checked as the command does)."""
    from project.sweep import load_sweep_spec, parse_fit_options, resolve_key

    configs = sorted((CONFIGS / "sweep").glob("*.yaml"))
    assert configs
    config, _ = parse_fit_options([])
    for path in configs:
        spec = load_sweep_spec(path)
        assert all(resolve_key(config, key) for key in spec.search_space), path
        assert spec.enqueue_trials, "the digits sweep starts from the default config"


def test_a_list_choice_reaches_fit_as_the_list(workdir: Path) -> None:
    """Optuna stores plain choices only: a list is kept as its JSON text, which fit reads back as the list."""
    from project.sweep import load_sweep_spec, override, parse_fit_options

    channels = "model.backbone.init_args.channels"
    config = write_sweep(
        workdir / "lists.yaml",
        search_space={channels: {"type": "categorical", "choices": [[16, 32], [32, 64, 128]]}},
        enqueue_trials=[{channels: [16, 32]}],
    )
    spec = load_sweep_spec(config)
    assert spec.search_space[channels].choices == ("[16, 32]", "[32, 64, 128]")
    assert spec.enqueue_trials == [{channels: "[16, 32]"}]
    parsed, _ = parse_fit_options([override(channels, spec.search_space[channels].choices[1])])
    assert parsed.model.init_args.backbone.init_args.channels == [32, 64, 128]


# ------------------------------------------------------------------------- pruning and failed trials
@pytest.mark.slow
def test_a_bad_trial_is_pruned_a_failing_one_recorded_and_trials_are_ordinary_runs(
    workdir: Path, run_cli: RunCLI, capsys: pytest.CaptureFixture[str]
) -> None:
    lr = "model.optimizer.init_args.lr"
    config = write_sweep(
        workdir / "prune.yaml",
        search_space={
            lr: {"type": "float", "low": 1e-8, "high": 1e-2, "log": True},
            "data.batch_size": {"type": "categorical", "choices": [32, -1]},
        },
        pruner={"name": "median", "n_startup_trials": 1, "n_warmup_steps": 0},
        enqueue_trials=[
            {lr: 1e-2, "data.batch_size": 32},  # a good trial
            {lr: 1e-2, "data.batch_size": -1},  # the DataModule rejects it: failed, the sweep goes on
            {lr: 1e-8, "data.batch_size": 32},  # forced to be bad: pruned after its first epoch
        ],
    )
    sweep("--config", str(config), "--n_trials", "2", *TRIAL, "--trainer.max_epochs=3")
    out = capsys.readouterr().out
    trials = read_trials(workdir / "logs", "prune")
    assert [t["state"] for t in trials] == ["COMPLETE", "FAIL", "PRUNED"]
    assert "batch_size" in trials[1]["error"] and "-1" in trials[1]["error"]
    assert "trial 1 failed: " in out and "trial 2 pruned: at epoch " in out
    good, pruned = Path(trials[0]["run_dir"]), Path(trials[2]["run_dir"])
    assert good.name == "prune_trial000" and pruned.name == "prune_trial002"
    assert [row["epoch"] for row in read_metrics(good / "metrics.csv") if "val/acc" in row] == [0, 1, 2]
    pruned_epochs = [row["epoch"] for row in read_metrics(pruned / "metrics.csv") if "val/acc" in row]
    assert len(pruned_epochs) == int(trials[2]["epochs"]) < 3, "stopped before its last epoch"
    assert float(trials[0]["value"]) > 0.3
    assert not (good / "wandb").exists(), "trials log to CSV unless a logger is given"
    # a trial's folder is an ordinary run: `test --ckpt_path` works on it
    cli = run_cli("test", "--ckpt_path", str(good / "checkpoints" / "best.ckpt"))
    assert cli.trainer.callback_metrics["test/acc"] > 0.2


# ---------------------------------------------------------------------- two workers share one study
@pytest.mark.slow
def test_two_workers_share_a_4_trial_study_and_the_best_config_reruns(workdir: Path) -> None:
    config = write_sweep(workdir / "pair.yaml")
    command = [sys.executable, "-m", "project", "sweep", "--config", str(config)]
    command += ["--n_trials", "4", *TRIAL]
    workers = [
        subprocess.Popen(
            command,
            cwd=workdir,
            env=SUBPROCESS_ENV,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    outputs = [worker.communicate(timeout=300) for worker in workers]
    for worker, (_, err) in zip(workers, outputs, strict=True):
        assert worker.returncode == 0, err[-3000:]
    trials = read_trials(workdir / "logs", "pair")
    assert [t["number"] for t in trials] == ["0", "1", "2", "3"]
    assert {t["state"] for t in trials} <= {"COMPLETE", "PRUNED"}
    folders = {t["run_dir"] for t in trials}
    assert len(folders) == 4 and all((Path(f) / "config.yaml").is_file() for f in folders)
    for out, _ in outputs:  # both workers ran trials
        assert "complete: val/acc_best=" in out or " pruned: " in out
    params = {tuple(t[key] for key in SPACE) for t in trials}
    assert len(params) == 4, "the two workers' seeded samplers drew different trials"
    best = max((t for t in trials if t["state"] == "COMPLETE"), key=lambda t: float(t["value"]))
    best_yaml = workdir / "logs" / "pair_sweep" / "best.yaml"
    for plot in ("optimization_history", "param_importances", "parallel_coordinate"):
        assert (best_yaml.parent / f"{plot}.png").stat().st_size > 10_000
    # the best config re-runs as is and gives the best trial's value again
    rerun = ProjectCLI(args=["fit", "--config", str(best_yaml)])
    assert float(rerun.trainer.callback_metrics["val/acc_best"]) == pytest.approx(
        float(best["value"]), abs=1e-6
    )
    saved = yaml.safe_load((rerun.run_dir / "config.yaml").read_text())
    assert saved["data"]["init_args"]["batch_size"] == int(best["data.batch_size"])


# --------------------------------------------------------------------------------------- resume
@pytest.mark.slow
def test_ctrl_c_keeps_finished_trials_and_rerunning_continues_the_study(workdir: Path) -> None:
    config = write_sweep(workdir / "resume.yaml")
    args = ["--config", str(config), "--n_trials", "2", *TRIAL, "--trainer.limit_train_batches=4"]
    args += ["--trainer.callbacks+=training_helpers.SlowDown", "--trainer.callbacks.seconds=0.2"]
    process = subprocess.Popen(
        [sys.executable, "-m", "project", "sweep", *args],
        cwd=workdir,
        env=SUBPROCESS_ENV,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    second = workdir / "logs" / "resume_trial001" / "checkpoints" / "last.ckpt"  # epoch 0 of trial 1
    deadline = time.monotonic() + 180
    while not second.exists() and time.monotonic() < deadline and process.poll() is None:
        time.sleep(0.05)
    assert second.exists(), process.communicate()
    process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=120)
    assert process.returncode == 130, err[-3000:]
    assert "error: sweep interrupted by Ctrl-C; 1 finished trial(s) are kept" in err
    assert "Traceback" not in err
    trials = read_trials(workdir / "logs", "resume")
    assert [(t["state"], t["error"]) for t in trials] == [("COMPLETE", ""), ("FAIL", "interrupted (Ctrl-C)")]
    first_ckpt = Path(trials[0]["run_dir"]) / "checkpoints" / "best.ckpt"
    kept = first_ckpt.stat().st_mtime_ns
    # the same command again continues the study: one more trial, the finished one untouched
    sweep(*args)
    trials = read_trials(workdir / "logs", "resume")
    assert [t["state"] for t in trials] == ["COMPLETE", "FAIL", "COMPLETE"]
    assert first_ckpt.stat().st_mtime_ns == kept
    assert (workdir / "logs" / "resume_trial002" / "checkpoints" / "best.ckpt").is_file()


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
    import optuna

    config = write_sweep(workdir / "pg.yaml")
    sweep("--config", str(config), "--storage", postgres_url, "--n_trials", "1", *TRIAL)
    sweep("--config", str(config), "--storage", postgres_url, "--n_trials", "2", *TRIAL)  # continues
    # read the study back from the server, independently of the sweep command
    driver_url = postgres_url.replace("postgresql://", "postgresql+psycopg2://")
    study = optuna.load_study(study_name="pg", storage=driver_url)
    values = [t.value for t in sorted(study.trials, key=lambda t: t.number)]
    trials = read_trials(workdir / "logs", "pg")
    assert len(values) == 2 and [float(t["value"]) for t in trials] == values
    assert [Path(t["run_dir"]).name for t in trials] == ["pg_trial000", "pg_trial001"]
    assert not list((workdir / "logs").rglob("*.db")), "no SQLite file when --storage is given"


@pytest.mark.slow
def test_a_worker_stops_after_five_failed_trials_in_a_row(
    workdir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_sweep(
        workdir / "broken.yaml",
        search_space={"data.batch_size": {"type": "categorical", "choices": [-1, -2]}},
    )
    with pytest.raises(SystemExit) as exit_info:
        sweep("--config", str(config), "--n_trials", "3", *TRIAL)
    assert exit_info.value.code == 1
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "5 trials in a row failed" in errors[0] and "batch_size" in errors[0]
    trials = read_trials(workdir / "logs", "broken")
    assert [t["state"] for t in trials] == ["FAIL"] * 5


def test_a_value_the_parser_rejects_fails_its_trial_with_the_parsers_reason(
    workdir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A trial's parser raises (jsonargparse's exit_on_error=False): its message is the trial's error."""
    config = write_sweep(
        workdir / "floats.yaml",
        search_space={"data.batch_size": {"type": "categorical", "choices": [1.5, 2.5]}},
    )
    with pytest.raises(SystemExit) as exit_info:
        sweep("--config", str(config), "--n_trials", "1", *TRIAL)
    assert exit_info.value.code == 1
    trials = read_trials(workdir / "logs", "floats")
    assert [t["state"] for t in trials] == ["FAIL"] * 5
    for trial in trials:
        assert "batch_size" in trial["error"] and f"Got value: {trial['data.batch_size']}" in trial["error"]
        assert not Path(trial["run_dir"]).exists(), "nothing was built"
