"""``python -m <package> submit COMMAND [its options] [--slurm PRESET] [--slurm.KEY=VALUE] [--dry_run]``:
any command as a SLURM job, from the same config as on a laptop. The batch script (:func:`batch_script`)
goes into the run's folder and is submitted with ``sbatch``; ``--dry_run`` prints it and submits nothing.

Why plain ``sbatch`` and not submitit: the job must come back after a preemption as *the same command*
on the same run folder, and requeue only once every task has stopped with a whole ``last.ckpt``. A batch
script does that in a few readable lines (the warning signal goes to the batch shell, which asks the
tasks to stop, waits for them, then ``scontrol requeue``), can be read and re-run from the
run folder, and needs no pickled function: submitit re-runs a pickled callable, requeues from a signal
handler inside the Python process (while the other ranks may still be training) and would be one more
dependency."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from jsonargparse import ArgumentParser, Namespace
from jsonargparse.typing import NonNegativeInt, PositiveInt

from ..cli import ALL_SUBCOMMANDS, EXTRA_COMMANDS, ProjectCLI, check_extra
from ..errors import ConfigError, first_line
from ..slurm import OWNER_FILE

#: The commands that run as one task per process under ``srun`` (Lightning's ``SLURMEnvironment``):
#: ``--trainer.devices`` and ``--trainer.num_nodes`` are set from the job's size.
TRAINER_COMMANDS = tuple(ALL_SUBCOMMANDS)


@dataclass
class SlurmOptions:
    """The job's resources (``--slurm.KEY=VALUE``, or a preset: ``--slurm configs/slurm/gpu.yaml``).

    Args:
        nodes: Nodes (machines) of the job.
        gpus_per_node: GPUs per node (``--gpus-per-node``); 0: a CPU job.
        tasks_per_node: Processes per node, one per device (default: gpus_per_node, or 1).
        cpus_per_task: CPU cores per process (``--cpus-per-task``; data loader workers use them).
        mem: Memory per node (``--mem``, e.g. 64G); default: the partition's.
        time: Time limit (``--time``, e.g. 04:00:00 or 1-00:00:00).
        partition: Partition (``--partition``); default: the cluster's default partition.
        account: Account to charge (``--account``).
        qos: Quality of service (``--qos``).
        warning: Seconds before the time limit (or a preemption, where the cluster sends it) at which
            SLURM warns the job (SIGUSR1 to the batch script): the tasks stop at their next training
            step, rank 0 saves last.ckpt, and the job is requeued; 0: no warning.
        sbatch: More sbatch options, e.g. [--constraint=a100, --exclusive].
        setup: Shell lines run before the command (module load ..., source .venv/bin/activate).
    """

    nodes: PositiveInt = 1
    gpus_per_node: NonNegativeInt = 0
    tasks_per_node: PositiveInt | None = None
    cpus_per_task: PositiveInt | None = None
    mem: str | None = None
    time: str = "01:00:00"
    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    warning: NonNegativeInt = 120
    sbatch: list[str] = field(default_factory=list)
    setup: list[str] = field(default_factory=list)


def split_args(words: list[str]) -> tuple[list[str], list[str]]:
    """``submit``'s own arguments (``--slurm...``, ``--dry_run``, ``-h``) apart from the command's."""
    own: list[str] = []
    command: list[str] = []
    value = False  # whether the word is the value of a --slurm... option before it
    for word in words:
        mine = (
            value or word.startswith(("--slurm", "--dry_run")) or (word in ("-h", "--help") and not command)
        )
        (own if mine else command).append(word)
        value = mine and not value and word.startswith("--slurm") and "=" not in word
    return own, command


def parse_options(own: list[str], package: str) -> Namespace:
    """``submit``'s options parsed (a preset first, then ``--slurm.KEY=VALUE``); bad ones raise
    :class:`ConfigError` in one line. ``-h`` prints the help and exits."""
    commands = ", ".join(c for c in [*ALL_SUBCOMMANDS, *EXTRA_COMMANDS] if c != "submit")
    parser = ArgumentParser(
        prog=f"python -m {package} submit",
        usage=f"python -m {package} submit COMMAND [options] [--slurm PRESET] [--slurm.KEY=V] [--dry_run]",
        description=f"Run COMMAND ({commands}) as a SLURM job: the batch script goes into the run's folder "
        "and is submitted with sbatch. Presets: configs/slurm/*.yaml.",
        exit_on_error=False,
        allow_abbrev=False,
    )
    parser.add_class_arguments(SlurmOptions, "slurm")
    parser.add_argument("--dry_run", action="store_true", help="Print the batch script; submit nothing.")
    try:
        return parser.parse_args(own)
    except Exception as error:
        raise ConfigError(f"submit: {' '.join(str(error).split())}") from None


class CheckedCommand(ProjectCLI):
    """A Trainer command's config parsed and checked as the job will parse it; nothing built or run."""

    def instantiate_classes(self) -> None:
        """Nothing: the job builds the run."""

    def after_instantiate_classes(self) -> None:
        """Nothing."""

    def _run_subcommand(self, subcommand: str | None) -> None:
        """Nothing: the job runs it."""


def batch_script(
    slurm: Namespace, package: str, command: list[str], output: str, array: int | None = None
) -> str:
    """The batch script that runs ``python -m <package> COMMAND`` (``command``: its words) under ``srun``,
    one task per process, its output appended to ``output`` (``%j``: the job id, ``%A_%a``: an array's).

    On the warning signal (SIGUSR1 to the batch shell only, ``--signal=B:USR1@<warning>``) the script
    passes it on to the job's steps (``scancel --signal=USR1``: every task stops after its current
    training batch and rank 0 saves ``last.ckpt``: :func:`runwright.slurm.stop_on_usr1`), waits for
    them, then requeues the job (``scontrol requeue``: same job id, ``SLURM_RESTART_COUNT`` + 1), whose
    command continues the run from that checkpoint."""
    tasks = slurm.tasks_per_node or slurm.gpus_per_node or 1
    words = [*command]
    if command[0] in TRAINER_COMMANDS:  # Lightning checks both against SLURM's
        words += [f"--trainer.devices={tasks}", f"--trainer.num_nodes={slurm.nodes}"]
    options = {
        "job-name": f"{package}-{command[0]}",
        "nodes": slurm.nodes,
        "ntasks-per-node": tasks,
        "gpus-per-node": slurm.gpus_per_node or None,
        "cpus-per-task": slurm.cpus_per_task,
        "mem": slurm.mem,
        "time": slurm.time,
        "partition": slurm.partition,
        "account": slurm.account,
        "qos": slurm.qos,
        "array": f"0-{array - 1}" if array else None,
        "signal": f"B:USR1@{slurm.warning}" if slurm.warning else None,
        "requeue": "",
        "open-mode": "append",
        "output": output,
        "chdir": os.getcwd(),
    }
    lines = [
        "#!/bin/bash",
        f"# python -m {package} submit {shlex.join(command)}  ({datetime.now():%Y-%m-%d %H:%M:%S})",
        *(
            f"#SBATCH --{key}" + (f"={value}" if value != "" else "")
            for key, value in options.items()
            if value is not None
        ),
        *(f"#SBATCH {option}" for option in slurm.sbatch),
        'echo "job $SLURM_JOB_ID start ${SLURM_RESTART_COUNT:-0} on $SLURM_JOB_NODELIST at $(date +%s.%N)"',
        "export PYTHONUNBUFFERED=1",
        *slurm.setup,
        "preempted=0",
        "# the warning: every task stops after its current step, rank 0 saves last.ckpt; then requeue",
        'trap \'preempted=1; echo "warning signal at $(date +%s.%N): stopping the tasks"; '
        'scancel --signal=USR1 "$SLURM_JOB_ID"\' USR1',
        f"srun --kill-on-bad-exit=1 {shlex.quote(sys.executable)} -m {package} {shlex.join(words)} &",
        "pid=$!",
        'while kill -0 "$pid" 2>/dev/null; do wait "$pid"; done',
        'wait "$pid"; status=$?',
        'if [ "$preempted" = 1 ]; then',
        '  echo "tasks stopped (exit $status) at $(date +%s.%N): requeueing job $SLURM_JOB_ID"',
        '  scontrol requeue "$SLURM_JOB_ID" && exit 0',
        "fi",
        'exit "$status"',
    ]
    return "\n".join(lines) + "\n"


def sbatch(*args: str, script: str) -> str:
    """Run ``sbatch ARGS`` with ``script`` on its standard input; its standard output.

    Raises:
        ConfigError: sbatch is not on the PATH, or refused the job (naming SLURM's reason).
    """
    if shutil.which("sbatch") is None:
        raise ConfigError(
            "submit needs SLURM's sbatch on the PATH (run it on the cluster's login node); "
            "--dry_run prints the batch script without it"
        )
    result = subprocess.run(["sbatch", *args], input=script, capture_output=True, text=True)
    if result.returncode != 0:
        reasons = [
            line.removeprefix("sbatch: error: ").removeprefix("allocation failure: ")
            for line in result.stderr.splitlines()
            if line.strip()
        ]
        raise ConfigError(f"sbatch refused the job: {'; '.join(reasons) or f'exit {result.returncode}'}")
    return result.stdout


def run_folder(command: list[str], package: str) -> tuple[str, bool]:
    """The folder of the job's output and script, ``%j`` for the job id, and whether it is the job's run
    folder: for a Trainer command (its options checked as the job will parse them) ``<logs_dir>/<run_name>``
    or, without ``--run_name``, ``<logs_dir>/slurm-%j``; for another command ``logs``.

    Raises:
        ConfigError: a bad option (the command's own message), or ``--run_name`` names a folder that exists.
    """
    if command[0] not in TRAINER_COMMANDS:
        return str(Path("logs").resolve()), False
    config = CheckedCommand(args=command, package=package).config[command[0]]
    logs = Path(config.logs_dir).expanduser().resolve()
    if config.run_name and (logs / config.run_name).exists():
        raise ConfigError(
            f"run_name={config.run_name!r}: {logs / config.run_name} exists; choose another name"
        )
    return str(logs / (config.run_name or "slurm-%j")), True


def main(args: list[str], package: str) -> None:
    """Run ``python -m <package> submit ARGS``: check the command, write its batch script and submit it
    (or print it: ``--dry_run``). Bad input (a bad option of the command or of ``--slurm``, no ``sbatch``,
    a job that SLURM refuses, with its reason) is one ``error:`` line, exit 2, and no run folder left."""
    own, command = split_args(args[1:])
    options = parse_options(own, package)
    if not command or command[0].startswith("-"):
        raise ConfigError(f"submit: name the command to run: python -m {package} submit fit --config ...")
    if command[0] == "submit" or command[0] not in (*ALL_SUBCOMMANDS, *EXTRA_COMMANDS):
        raise ConfigError(f"submit: no command `{command[0]}` to submit (e.g. fit, test, sweep)")
    check_extra(command[0])
    if command[0] == "sweep":
        from .sweep import submit_sweep

        submit_sweep(command, options, package)
        return
    folder, owned = run_folder(command, package)
    script = batch_script(options.slurm, package, command, f"{folder}/slurm-%j.out")
    if options.dry_run:
        print(script, end="")
        return
    submit(script, folder, owned)


def submit(script: str, folder: str, owned: bool) -> str:
    """Check ``script`` (``sbatch --test-only``: a held job is not checked), submit it held (``sbatch
    --hold``), make ``folder`` (``%j``: the job id) with the script in it (and, ``owned``, the job as its
    owner: :func:`runwright.slurm.claim`), then release the job; say how to watch and cancel it; return
    the job id. No folder is made unless SLURM accepts the job.

    Raises:
        ConfigError: no sbatch, or SLURM refused the job (:func:`sbatch`); the folder could not be made
            (the job is cancelled).
    """
    sbatch("--test-only", script=script)  # (a held job is not checked against the cluster)
    job_id = sbatch("--parsable", "--hold", script=script).strip().split(";")[0]
    run_dir = Path(folder.replace("%j", job_id))
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / f"slurm-{job_id}.sh").write_text(script)
        if owned:
            (run_dir / OWNER_FILE).write_text(f"{cluster_name()}:{job_id}\n")
        subprocess.run(["scontrol", "release", job_id], check=True, capture_output=True, text=True)
    except (OSError, subprocess.CalledProcessError) as error:
        subprocess.run(["scancel", job_id], capture_output=True)
        raise ConfigError(f"submit: job {job_id} cancelled: {first_line(error)}") from error
    output = next(line for line in script.splitlines() if line.startswith("#SBATCH --output="))
    output = output.split("=", 1)[1].replace("%j", job_id).replace("%A", job_id).replace("%a", "*")
    print(f"Submitted job {job_id}; its folder: {run_dir}")
    print(f"Watch it: squeue -j {job_id}; tail -f {output}. Stop it: scancel {job_id}")
    return job_id


def cluster_name() -> str:
    """The cluster's name (``ClusterName`` of ``scontrol show config``), as ``SLURM_CLUSTER_NAME`` in its
    jobs."""
    config = subprocess.run(["scontrol", "show", "config"], capture_output=True, text=True).stdout
    lines = (line.split("=", 1) for line in config.splitlines() if "=" in line)
    return next((value.strip() for key, value in lines if key.strip() == "ClusterName"), "")
