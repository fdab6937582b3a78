"""``submit`` on a real single-node SLURM cluster (``slurm_cluster.py``, started once per session): each
preset's script is accepted by ``sbatch --test-only``, a job SLURM refuses is one line, and the user
sequences a cluster puts a run through: a 2-task DDP fit preempted twice mid-epoch ends as the
uninterrupted run does, bit for bit, in one run folder and one W&B run, and a requeue after its end does
nothing; a job killed with no warning restarts from its last periodic checkpoint; a job array of sweep
workers ends with the asked trials although one worker is preempted and another killed. Without a
cluster: the run folder a job owns."""

from __future__ import annotations

import contextlib
import csv
import io
import os
import re
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path

import optuna
import pytest
import yaml
from slurm_cluster import SlurmCluster
from support import (
    ENGINE_ROOT,
    ENGINE_TESTS,
    FAST,
    assert_same_weights,
    ckpt_weights,
    hashes,
    main,
    run_main,
)

from runwright.errors import RunExistsError
from runwright.runs import RUN_DIR_ENV, create_run_dir

#: Every test here needs a SLURM cluster (the session fixture starts one: root, Debian's slurm-wlm and
#: munge): they run with the slow ones (`make test-all`, CI, which installs SLURM), not in `make test`.
pytestmark = pytest.mark.slow

#: The template's SLURM presets (its ``configs/slurm/``).
PRESETS = sorted((ENGINE_ROOT.parent / "configs" / "slurm").glob("*.yaml"))
#: The fit of the job tests: 2 epochs of 24 steps on each of 2 processes (DDP over gloo), a last.ckpt
#: every 5 steps, 0.1 s per step (so that a signal lands mid-epoch), CSV and offline W&B logs.
FIT = [
    "fit",
    "--trainer.accelerator=cpu",
    "--data.batch_size=4",
    "--trainer.log_every_n_steps=1",
    "--trainer.enable_model_summary=false",
    "--last_checkpoint.every_n_train_steps=5",
    "--trainer.logger+=lightning.pytorch.loggers.WandbLogger",
    "--trainer.callbacks+=helpers.SlowDown",
    "--trainer.callbacks.seconds=0.1",
    "--slurm.tasks_per_node=2",
    "--slurm.cpus_per_task=1",
    "--slurm.time=00:10:00",
]
STEPS_PER_EPOCH, STEPS = 24, 48


def job_env(cluster: SlurmCluster) -> dict[str, str]:
    """What a job's command needs from the submitting environment (sbatch exports it): the cluster, the
    fixture task on ``PYTHONPATH``, one torch thread, W&B offline."""
    path = os.pathsep.join(filter(None, [str(ENGINE_TESTS), os.environ.get("PYTHONPATH")]))
    conf = cluster.env["SLURM_CONF"]
    return {"SLURM_CONF": conf, "PYTHONPATH": path, "OMP_NUM_THREADS": "1", "WANDB_MODE": "offline"}


def submit(cluster: SlurmCluster, folder: Path, *args: str) -> str:
    """``python -m fixture_task submit ARGS`` in ``folder`` (in-process); the job's id."""
    out = io.StringIO()
    with pytest.MonkeyPatch.context() as patch, contextlib.redirect_stdout(out), warnings.catch_warnings():
        patch.chdir(folder)
        for key, value in job_env(cluster).items():
            patch.setenv(key, value)
        patch.delenv(RUN_DIR_ENV, raising=False)
        main(["submit", *args])
    found = re.search(r"Submitted job (\d+)", out.getvalue())
    assert found, out.getvalue()
    return found[1]


def finished(cluster: SlurmCluster, job_id: str, timeout: float = 300) -> dict[str, str]:
    """Wait for the job's end; its fields (``JobState``, ``Restarts``)."""
    return cluster.wait(job_id, "COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", timeout=timeout)


def logged_steps(run_dir: Path) -> list[int]:
    """The steps of the ``train/loss`` rows of a run's ``metrics.csv``, in file order."""
    with (run_dir / "metrics.csv").open(newline="") as handle:
        return [int(row["step"]) for row in csv.DictReader(handle) if row.get("train/loss")]


def losses(run_dir: Path) -> list[str]:
    """The logged ``train/loss`` values, as text, in file order."""
    with (run_dir / "metrics.csv").open(newline="") as handle:
        return [row["train/loss"] for row in csv.DictReader(handle) if row.get("train/loss")]


@pytest.fixture(scope="module")
def uninterrupted(
    slurm_cluster: SlurmCluster, tmp_path_factory: pytest.TempPathFactory
) -> Callable[[], Path]:
    """:data:`FIT` submitted once and never interrupted, when a test first asks for it (so that it runs
    beside that test's own job: the test cluster's node has room for both); calling it waits for the
    job's end and returns its run folder."""
    folder = tmp_path_factory.mktemp("uninterrupted")
    job_id = submit(slurm_cluster, folder, *FIT)

    def run_folder() -> Path:
        assert finished(slurm_cluster, job_id)["JobState"] == "COMPLETED"
        return folder / "logs" / f"slurm-{job_id}"

    return run_folder


# ------------------------------------------------------------------------------------ the scripts
@pytest.mark.parametrize("preset", PRESETS, ids=[p.stem for p in PRESETS])
def test_each_presets_script_is_accepted_by_sbatch_test_only(
    preset: Path, slurm_cluster: SlurmCluster, workdir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The test cluster has a CPU partition and a ``gpu`` one of two 8-GPU nodes (which never run a job),
    so ``--test-only`` checks the GPU and multi-node scripts too."""
    code, script, err = run_main(["submit", "fit", "--slurm", str(preset), "--dry_run"], capsys)
    assert code == 0, err
    assert not list(workdir.iterdir()), "a dry run writes nothing"
    result = slurm_cluster.run("sbatch", "--test-only", check=False, stdin=script)
    assert result.returncode == 0, result.stderr
    settings = yaml.safe_load(preset.read_text())
    partition, nodes = settings.get("partition") or "cpu", settings["nodes"]
    assert re.search(rf"on nodes \S+ in partition {partition}$", result.stderr.strip()), result.stderr
    assert nodes == 1 or "gpu[1-2]" in result.stderr


def test_a_job_slurm_refuses_is_one_error_line_and_leaves_no_folder(
    slurm_cluster: SlurmCluster,
    workdir: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SLURM_CONF", slurm_cluster.env["SLURM_CONF"])
    refused = {
        ("--slurm.partition=nope",): "invalid partition specified: nope",
        ("--slurm.partition=gpu", "--slurm.gpus_per_node=9"): "Requested node configuration is not available",
    }
    for options, reason in refused.items():
        code, _, err = run_main(["submit", "fit", *options], capsys)
        assert code == 2 and len(err.splitlines()) == 1 and err.startswith("error: sbatch refused the job: ")
        assert reason in err, err
    code, _, err = run_main(["submit", "fit", "--trainer.max_epoch=2"], capsys)  # the command's own check
    assert code == 2 and "trainer.max_epochs" in err, err
    code, _, err = run_main(["submit", "fit", "--slurm.nodes=0"], capsys)
    assert code == 2 and len(err.splitlines()) == 1 and "slurm.nodes" in err, err
    monkeypatch.setenv("PATH", str(workdir / "no-slurm-here"))
    code, _, err = run_main(["submit", "fit"], capsys)
    assert code == 2 and len(err.splitlines()) == 1 and "submit needs SLURM's sbatch on the PATH" in err
    assert not (workdir / "logs").exists(), "no run folder"
    assert slurm_cluster.run("squeue", "-h").stdout == "", "no job left behind"


def test_submit_sweep_is_a_job_array_of_one_process_workers_on_a_journal_file(
    workdir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--dry_run`` (no cluster needed): the script, and nothing created; SQLite and several processes
    per worker are refused with one line."""
    sweep = workdir / "arr.yaml"
    sweep.write_text((ENGINE_TESTS / "fixture_sweep.yaml").read_text())
    args = ["submit", "sweep", "--config", str(sweep), "--workers=3", "--slurm.gpus_per_node=1", "--dry_run"]
    code, script, err = run_main(args, capsys)
    assert code == 0, err
    journal = workdir / "logs" / "arr_sweep" / "optuna.journal"
    assert "#SBATCH --array=0-2\n" in script and "#SBATCH --ntasks-per-node=1\n" in script
    assert f"#SBATCH --output={workdir / 'logs' / 'arr_sweep'}/slurm-%A_%a.out\n" in script
    srun = next(line for line in script.splitlines() if line.startswith("srun "))
    assert f" sweep --config {sweep} --workers=3 " in srun and srun.endswith(
        f"--storage=journal:{journal} --workers=1 &"
    )
    assert not (workdir / "logs").exists()
    for bad, reason in {
        "--storage=sqlite:///x.db": "SQLite is not safe on a shared (network) file system",
        "--slurm.tasks_per_node=2": "each worker is one process on one node",
    }.items():
        code, _, err = run_main([*args, bad], capsys)
        assert code == 2 and len(err.splitlines()) == 1 and reason in err, err
    assert not (workdir / "logs").exists()


def test_the_same_command_again_in_a_job_continues_its_run_and_after_its_end_does_nothing(
    workdir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """What a requeued job (or a second ``srun`` line of the same command) does, in this process as task 0
    of job 5: the first run is stopped at its first step (Ctrl-C, as a preemption stops it), the same
    command continues it from its last.ckpt in the job's folder, and a third one does nothing."""
    import signal

    for key, value in {"SLURM_JOB_ID": "5", "SLURM_PROCID": "0", "SLURM_CLUSTER_NAME": "c"}.items():
        monkeypatch.setenv(key, value)
    previous = signal.getsignal(signal.SIGUSR1)
    command = ["fit", *FAST, "--trainer.max_epochs=2", "--trainer.limit_val_batches=1"]
    stop = [
        "--trainer.callbacks+=helpers.SignalAt",
        "--trainer.callbacks.epoch=0",
        "--trainer.callbacks.batch=0",
    ]
    try:
        code, _, err = run_main([*command, *stop], capsys)
        run = workdir / "logs" / "slurm-5"
        assert code == 130 and (run / "checkpoints" / "last.ckpt").is_file(), err
        code, out, err = run_main(command, capsys)
        assert code == 0 and f"--ckpt_path: {run / 'checkpoints' / 'last.ckpt'}" in out, err
        assert load_step(run / "checkpoints" / "last.ckpt") == 4 and (run / "slurm-finished").is_file()
        assert [p.name for p in (workdir / "logs").iterdir()] == ["slurm-5"]
        before = hashes(run)
        code, out, err = run_main(command, capsys)
        assert (code, out) == (
            0,
            f"The run of this job, {run}, ended already (global_step=4, epoch=2): nothing to do\n",
        )
        assert hashes(run) == before
    finally:
        signal.signal(signal.SIGUSR1, previous)


# ---------------------------------------------------------------------------- preemption and requeue
@pytest.mark.slow
def test_a_ddp_fit_preempted_twice_mid_epoch_ends_as_the_uninterrupted_run(
    slurm_cluster: SlurmCluster, uninterrupted: Callable[[], Path], workdir: Path
) -> None:
    """The warning signal (``scancel --signal=USR1 --batch``, as SLURM sends it before the time limit)
    at steps 10 and 30: each time every task stops after its current step, rank 0 saves last.ckpt, the
    job is requeued (same id) and continues its run folder from it. The end is the uninterrupted run's,
    bit for bit; one folder, one W&B run, each step once in metrics.csv. A requeue after the end does
    nothing and says so."""
    signals = ["--trainer.callbacks+=helpers.SlurmSignalAt", "--trainer.callbacks.steps=[10,30]"]
    job_id = submit(slurm_cluster, workdir, *FIT, *signals)
    job = finished(slurm_cluster, job_id)
    run = workdir / "logs" / f"slurm-{job_id}"
    out = (run / f"slurm-{job_id}.out").read_text()
    assert (job["JobState"], job["Restarts"]) == ("COMPLETED", "2"), out[-5000:]
    stops = [int(step) for step in re.findall(r"interrupted by SIGTERM in epoch \d/2 \(step (\d+)\)", out)]
    assert len(stops) == 2 and 10 <= stops[0] < 30 <= stops[1], out[-5000:]
    assert all(step % STEPS_PER_EPOCH for step in stops), f"mid-epoch: {stops}"
    assert out.count(f"--ckpt_path: {run / 'checkpoints' / 'last.ckpt'}") == 2
    assert [p.name for p in (workdir / "logs").iterdir()] == [run.name], "one run folder"
    parts = sorted((run / "wandb").glob("offline-run-*"))
    assert len(parts) == 3 and len({part.name.rsplit("-", 1)[1] for part in parts}) == 1, parts
    reference_run = uninterrupted()
    assert logged_steps(run) == logged_steps(reference_run) == list(range(STEPS))
    last, reference = run / "checkpoints" / "last.ckpt", reference_run / "checkpoints" / "last.ckpt"
    assert load_step(last) == load_step(reference)
    assert_same_weights(ckpt_weights(last), ckpt_weights(reference))
    assert losses(run) == losses(reference_run)

    before = hashes(run)
    slurm_cluster.run("scontrol", "requeue", job_id)  # e.g. a warning that came as the run ended
    job = finished(slurm_cluster, job_id)
    assert (job["JobState"], job["Restarts"]) == ("COMPLETED", "3")
    out = (run / f"slurm-{job_id}.out").read_text()
    assert f"The run of this job, {run}, ended already (global_step={STEPS}" in out.splitlines()[-1]
    after = hashes(run)
    assert {key for key in {*before, *after} if before.get(key) != after.get(key)} == {f"slurm-{job_id}.out"}


@pytest.mark.slow
def test_a_job_killed_without_warning_restarts_from_its_last_periodic_checkpoint(
    slurm_cluster: SlurmCluster, uninterrupted: Callable[[], Path], workdir: Path
) -> None:
    """Every task SIGKILLed at step 12 (a node failure: no warning, no checkpoint of its own); requeued
    as SLURM requeues a job after a node failure, it continues from the last.ckpt of step 10
    (``--last_checkpoint.every_n_train_steps=5``) and ends as the uninterrupted run."""
    kill = ["--trainer.callbacks+=helpers.KillAt", "--trainer.callbacks.steps=[12]"]
    job_id = submit(slurm_cluster, workdir, *FIT, *kill)
    job = finished(slurm_cluster, job_id)
    run = workdir / "logs" / f"slurm-{job_id}"
    assert job["JobState"] != "COMPLETED"
    last = run / "checkpoints" / "last.ckpt"
    assert load_step(last) == 10, "the last periodic checkpoint"
    slurm_cluster.run("scontrol", "requeue", job_id)
    job = finished(slurm_cluster, job_id)
    out = (run / f"slurm-{job_id}.out").read_text()
    assert (job["JobState"], job["Restarts"]) == ("COMPLETED", "1"), out[-5000:]
    assert out.count(f"--ckpt_path: {last}") == 1
    assert logged_steps(run) == list(range(STEPS))
    assert_same_weights(ckpt_weights(last), ckpt_weights(uninterrupted() / "checkpoints" / "last.ckpt"))


def load_step(path: Path) -> int:
    """The ``global_step`` of a checkpoint."""
    import torch

    return int(torch.load(path, map_location="cpu", weights_only=True, mmap=True)["global_step"])


# -------------------------------------------------------------------------------------- sweeps
@pytest.mark.slow
def test_a_sweep_array_with_a_preempted_and_a_killed_worker_ends_with_the_asked_trials(
    slurm_cluster: SlurmCluster, workdir: Path
) -> None:
    """``submit sweep --workers 2``: a job array of 2 workers on one study (a journal file). At step 3 of
    its first trial worker 0 is preempted (warning signal: it gives its trial back, and is requeued),
    worker 1 killed (SIGKILL, not requeued: its trial's heartbeat goes stale). Both trials are retried,
    the preempted one from its own last.ckpt, and the study ends with the 4 complete trials it asked for."""
    sweep = yaml.safe_load((ENGINE_TESTS / "fixture_sweep.yaml").read_text())
    (workdir / "array.yaml").write_text(yaml.safe_dump({**sweep, "pruner": None}))
    trial = ["--trainer.max_epochs=2", "--trainer.limit_train_batches=3", "--trainer.limit_val_batches=2"]
    trial += ["--trainer.callbacks+=helpers.SlowDown", "--trainer.callbacks.seconds=0.3"]
    for task, callback in enumerate(["SlurmSignalAt", "KillAt"]):
        trial += [f"--trainer.callbacks+=helpers.{callback}", "--trainer.callbacks.steps=[3]"]
        trial += [f"--trainer.callbacks.array_task={task}"]
    options = ["--n_trials=4", "--workers=2", "--heartbeat_interval=2", "--slurm.time=00:10:00"]
    job_id = submit(
        slurm_cluster, workdir, "sweep", "--config", str(workdir / "array.yaml"), *options, *trial
    )
    tasks = slurm_cluster.array(job_id)
    folder = workdir / "logs" / "array_sweep"
    outs = {task: (folder / f"slurm-{job_id}_{task}.out").read_text() for task in ("0", "1")}
    assert tasks["0"]["JobState"] == "COMPLETED" and tasks["0"]["Restarts"] == "1", outs["0"][-5000:]
    assert tasks["1"]["JobState"] != "COMPLETED" and tasks["1"]["Restarts"] == "0", outs["1"][-5000:]
    assert "sweep interrupted by SIGTERM (its trial given back to the study)" in outs["0"]
    storage = optuna.storages.JournalStorage(
        optuna.storages.journal.JournalFileBackend(str(folder / "optuna.journal"))
    )
    trials = optuna.load_study(study_name="array", storage=storage).trials
    states = [t.state.name for t in trials]
    assert states.count("COMPLETE") == 4 and states.count("FAIL") == 2 and len(states) == 6, states
    failed = [t.number for t in trials if t.state.name == "FAIL"]
    retried = [t.system_attrs.get("failed_trial") for t in trials if t.state.name == "COMPLETE"]
    assert sorted(n for n in retried if n is not None) == failed, "each failed trial was retried once"
    stopped = re.search(r"interrupted by SIGTERM .* (\S+/array_trial(\d+)/checkpoints/last.ckpt)", outs["0"])
    assert stopped, outs["0"][-3000:]  # the preempted trial's retry goes on from its last.ckpt
    assert f"retries trial {stopped[2].lstrip('0') or 0} from {stopped[1]}" in outs["0"], outs["0"][-3000:]
    assert "4 finished trial(s) in study 'array'" in outs["0"]


# ------------------------------------------------------------------------ the run folder a job owns
@pytest.fixture
def in_job(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """This process as task 0 of SLURM job 5 of cluster ``c`` (its environment variables only)."""
    for key, value in {"SLURM_JOB_ID": "5", "SLURM_PROCID": "0", "SLURM_CLUSTER_NAME": "c"}.items():
        monkeypatch.setenv(key, value)
    yield


def test_two_jobs_never_write_into_one_run_folder(
    in_job: None, workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A job's run folder (named or not) is the job's: its other tasks and its requeued self get it
    back, another job is refused it, and so is a folder of an earlier run that no job owns."""
    logs = workdir / "logs"

    def run_dir(name: str | None = None) -> Path:
        try:
            return create_run_dir(logs, "fit", name)
        finally:
            os.environ.pop(RUN_DIR_ENV, None)

    run = run_dir()
    assert run == logs.resolve() / "slurm-5" and (run / "slurm-job").read_text() == "c:5\n"
    assert run_dir() == run, "another task of the job, or the job requeued"
    named = run_dir("mine")
    assert run_dir("mine") == named, "a named run of the job, requeued"
    monkeypatch.setenv("SLURM_JOB_ID", "6")
    with pytest.raises(RunExistsError, match=r"SLURM job c:5, not of this job \(c:6\)"):
        run_dir("mine")
    (logs / "laptop").mkdir()
    (logs / "laptop" / "config.yaml").write_text("{}")
    with pytest.raises(RunExistsError, match="run_name='laptop'"):
        run_dir("laptop")
    assert sorted(p.name for p in logs.iterdir()) == ["laptop", "mine", "slurm-5"]
