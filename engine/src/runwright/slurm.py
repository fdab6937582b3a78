"""A run inside a SLURM job: the run folder a job owns, found again when SLURM requeues the job (same job
id, ``SLURM_RESTART_COUNT`` > 0) or the same command runs again in it, and continued from its
``last.ckpt``; SIGUSR1 stops a task as SIGTERM does (:func:`stop_on_usr1`), which keeps Lightning's own
requeue (``SLURMEnvironment(auto_requeue=True)``) out: the batch script that ``submit`` writes requeues
the job itself (:mod:`runwright.commands.submit`)."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from pathlib import Path
from types import FrameType

from lightning.pytorch import Trainer

from .errors import RunExistsError

#: The file in a run folder that names the SLURM job writing into it (``<cluster>:<job id>``).
OWNER_FILE = "slurm-job"
#: The file a fit run under SLURM writes when it ends (not when stopped): a requeue then does nothing.
FINISHED_FILE = "slurm-finished"


def job() -> str | None:
    """This process's SLURM job as ``<SLURM_CLUSTER_NAME>:<SLURM_JOB_ID>`` when it is a task of one
    (started by ``srun``, or the batch script itself: ``SLURM_PROCID`` is set) and not started by
    torchrun; else ``None``. An array task has a job id of its own."""
    if "SLURM_JOB_ID" not in os.environ or "SLURM_PROCID" not in os.environ:
        return None
    if os.environ.get("TORCHELASTIC_RUN_ID", "none") != "none":
        return None
    return f"{os.environ.get('SLURM_CLUSTER_NAME', '')}:{os.environ['SLURM_JOB_ID']}"


def default_run_name() -> str:
    """The run folder name of a job's run without ``--run_name``: ``slurm-<SLURM_JOB_ID>``."""
    return f"slurm-{os.environ['SLURM_JOB_ID']}"


def owner_of(run_dir: Path) -> str | None:
    """The job that owns ``run_dir`` (its :data:`OWNER_FILE`), or ``None``."""
    owner = run_dir / OWNER_FILE
    return owner.read_text().strip() if owner.is_file() else None


def claim(run_dir: Path, job_name: str, named: bool) -> None:
    """Make ``job_name`` the owner of ``run_dir`` (an existing folder), unless another job is: its first
    process to get here writes :data:`OWNER_FILE` (whole, atomically: ``os.link`` of a written file,
    also on NFS); every process of the job may call it.

    Raises:
        RunExistsError: another job owns ``run_dir``, or (``named``: ``--run_name``) it holds an earlier
            run that no job owns; two jobs never write into one run folder.
    """
    owner = run_dir / OWNER_FILE
    earlier = [p for p in run_dir.iterdir() if not p.name.startswith((OWNER_FILE, "."))]  # (files of a run)
    if named and earlier and not owner.is_file():
        raise RunExistsError(f"run_name={run_dir.name!r}: {run_dir} exists; choose another name")
    temporary = run_dir / f".{OWNER_FILE}.tmp-{os.getpid()}"
    try:
        temporary.write_text(f"{job_name}\n")
        with contextlib.suppress(FileExistsError):
            os.link(temporary, owner)
    finally:
        temporary.unlink(missing_ok=True)
    if (other := owner_of(run_dir)) != job_name:
        raise RunExistsError(
            f"{run_dir} is the run folder of SLURM job {other}, not of this job ({job_name}): two jobs never "
            "write into one run folder; pass another --run_name (or none: slurm-<job id>)"
        )


def job_checkpoint(logs_dir: str | Path, run_name: str | None) -> Path | None:
    """The checkpoint that a ``fit`` without ``--ckpt_path`` continues from inside a SLURM job: the
    ``checkpoints/last.ckpt`` of the run folder this job owns (``--run_name``, or ``slurm-<job id>``), left
    by an earlier attempt of the job (requeued) or an earlier command in it; ``None`` outside a job, or
    when the job has no such checkpoint yet. When that run ended (:data:`FINISHED_FILE`), says so on the
    job's first process and exits with 0: a requeue after the end does nothing."""
    if (name := job()) is None:
        return None
    run_dir = Path(logs_dir).expanduser().resolve() / (run_name or default_run_name())
    if owner_of(run_dir) != name:
        return None
    if (finished := run_dir / FINISHED_FILE).is_file():
        if os.environ.get("SLURM_PROCID", "0") == "0":
            ended = finished.read_text().strip()
            print(f"The run of this job, {run_dir}, ended already ({ended}): nothing to do")
        raise SystemExit(0)
    last = run_dir / "checkpoints" / "last.ckpt"
    return last if last.is_file() else None


def mark_finished(run_dir: Path, trainer: Trainer) -> None:
    """Under a SLURM job, record in ``run_dir`` that its fit ended (on rank 0), so that a requeue of the
    job (a preemption warning that came as it ended) does nothing (:func:`job_checkpoint`)."""
    if job() is not None and trainer.is_global_zero:
        (run_dir / FINISHED_FILE).write_text(
            f"global_step={trainer.global_step}, epoch={trainer.current_epoch}\n"
        )


def stop_on_usr1() -> None:
    """In a SLURM job's task (main thread), make SIGUSR1 stop the run as SIGTERM does: the job's batch
    script passes its warning on to the tasks as SIGUSR1 (:mod:`runwright.commands.submit`), which,
    unlike SIGTERM, does not end the processes a task started (W&B's service ignores it; a DataLoader
    worker, which inherits this handler, ignores it too), so the run stops after its current step with
    its logger intact, rank 0 saving ``last.ckpt`` (:class:`~runwright.callbacks.Interruption`).

    With this handler in place Lightning installs no SIGUSR1 handler of its own
    (``SLURMEnvironment(auto_requeue=True)``: it would save ``hpc_ckpt_<n>.ckpt`` from inside the handler,
    in the middle of a step, run ``scontrol requeue`` from rank 0 while the other ranks still train, and
    the requeued job would resume from that file ahead of the run's own ``last.ckpt``)."""
    if job() is None or threading.current_thread() is not threading.main_thread():
        return
    main = os.getpid()

    def on_usr1(signum: int, frame: FrameType | None) -> None:
        if os.getpid() == main:
            os.kill(main, signal.SIGTERM)

    signal.signal(signal.SIGUSR1, on_usr1)
