"""A real single-node SLURM cluster in a temporary folder, for the tests of ``submit`` (a pytest plugin:
the session fixture :func:`slurm_cluster`; ``python slurm_cluster.py`` starts one and prints its
``SLURM_CONF`` until Ctrl-C, for trying commands by hand).

Debian's ``slurm-wlm`` and ``munge`` packages (``apt-get install -y slurm-wlm munge``; ``.ci/run``
installs them when missing), run as root: ``munged`` on a socket of its own, ``slurmctld`` and
``slurmd`` on free ports with a generated ``slurm.conf``: one node ``<hostname>`` with twice the
machine's CPUs (``config_overrides``: two of the tests' 2-task jobs on a 2-core machine run at once,
each one's waits beside the other's work) in partition ``cpu`` (the default; ``JobRequeue=1``), and
partition ``gpu`` of two CLOUD nodes
with 8 GPUs each, which never run a job but let ``sbatch --test-only`` check a GPU or multi-node script.
A requeued job waits ``cred_expire`` (5 s, SLURM's minimum) before it starts again. Without the packages
or root the fixture fails, naming what is missing: a test never skips for it."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

#: The daemons and client commands the cluster needs (the package that brings them).
BINARIES = {
    "munged": "munge",
    "slurmctld": "slurm-wlm",
    "slurmd": "slurm-wlm",
    "sbatch": "slurm-wlm",
    "srun": "slurm-wlm",
    "scontrol": "slurm-wlm",
}
CONF = """\
ClusterName={name}
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={folder}/munge/socket,cred_expire=5
StateSaveLocation={folder}/state
SlurmdSpoolDir={folder}/spool
SlurmctldPidFile={folder}/slurmctld.pid
SlurmdPidFile={folder}/slurmd.pid
SlurmctldLogFile={folder}/slurmctld.log
SlurmdLogFile={folder}/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/backfill
SchedulerParameters=bf_interval=1,sched_interval=2
MpiDefault=none
ReturnToService=2
JobRequeue=1
KillWait=30
MinJobAge=3600
SlurmdTimeout=300
InactiveLimit=0
Waittime=0
GresTypes=gpu
SlurmdParameters=config_overrides
NodeName={host} NodeAddr=127.0.0.1 CPUs={cpus} State=UNKNOWN
NodeName=gpu[1-2] NodeAddr=127.0.0.1 Port={cloud_port} CPUs=64 RealMemory=500000 Gres=gpu:8 State=CLOUD
PartitionName=cpu Nodes={host} Default=YES MaxTime=INFINITE State=UP
PartitionName=gpu Nodes=gpu[1-2] MaxTime=INFINITE State=UP
"""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class SlurmCluster:
    """The cluster of :func:`start`: ``env`` (this process's environment with ``SLURM_CONF``) for its
    client commands, and :meth:`run` to call one."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.conf = folder / "slurm.conf"
        self.env = {**os.environ, "SLURM_CONF": str(self.conf)}
        self.processes: list[str] = []

    def run(
        self, *command: str, check: bool = True, stdin: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        """Run a SLURM client command (``squeue``, ``scontrol``...) on this cluster; ``stdin``: its input."""
        result = subprocess.run(
            command, env=self.env, input=stdin, capture_output=True, text=True, timeout=60
        )
        if check and result.returncode != 0:
            raise AssertionError(f"{' '.join(command)}: exit {result.returncode}: {result.stderr.strip()}")
        return result

    def job(self, job_id: str) -> dict[str, str]:
        """``scontrol show job JOB_ID`` as ``{key: value}`` (``JobState``, ``Restarts``, ``ExitCode``...)."""
        fields = self.run("scontrol", "show", "job", "--oneliner", job_id).stdout.split()
        return dict(field.split("=", 1) for field in fields if "=" in field)

    def array(self, job_id: str, timeout: float = 300) -> dict[str, dict[str, str]]:
        """Wait until every task of job array ``job_id`` has ended; each task's fields by its index."""
        end = time.monotonic() + timeout
        while self.run("squeue", "-h", "-j", job_id, check=False).stdout.strip():
            if time.monotonic() > end:
                raise AssertionError(f"job array {job_id} still running after {timeout} s")
            time.sleep(1)
        lines = self.run("scontrol", "show", "job", "--oneliner", job_id).stdout.splitlines()
        tasks = [dict(field.split("=", 1) for field in line.split() if "=" in field) for line in lines]
        return {task["ArrayTaskId"]: task for task in tasks}

    def wait(self, job_id: str, *states: str, timeout: float = 300) -> dict[str, str]:
        """Wait until job ``job_id`` is in one of ``states`` (``RUNNING``, ``COMPLETED``...); its fields."""
        end = time.monotonic() + timeout
        while (job := self.job(job_id))["JobState"] not in states:
            if time.monotonic() > end:
                raise AssertionError(f"job {job_id} not {'/'.join(states)} after {timeout} s: {job}")
            time.sleep(0.5)
        return job

    def start(self) -> SlurmCluster:
        """Start munged, slurmctld and slurmd; wait until the node takes jobs."""
        missing = [f"{name} ({package})" for name, package in BINARIES.items() if not shutil.which(name)]
        if missing:
            pytest.fail(f"SLURM is not installed: {', '.join(missing)}: apt-get install -y slurm-wlm munge")
        if os.geteuid() != 0:
            pytest.fail("the test SLURM cluster runs slurmd as root: run the tests as root")
        for name in ("munge", "state", "spool"):
            (self.folder / name).mkdir(mode=0o700)
        key = self.folder / "munge" / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o600)
        host = socket.gethostname().split(".")[0]
        self.conf.write_text(
            CONF.format(
                name=f"t{os.getpid()}",
                host=host,
                folder=self.folder,
                ctld_port=free_port(),
                slurmd_port=free_port(),
                cloud_port=free_port(),
                cpus=2 * (os.cpu_count() or 1),
            )
        )
        munge = self.folder / "munge"
        self._daemon(
            "munged",
            "--force",
            f"--socket={munge / 'socket'}",
            f"--key-file={key}",
            f"--pid-file={munge / 'munged.pid'}",
            f"--log-file={munge / 'munged.log'}",
            f"--seed-file={munge / 'munged.seed'}",
        )
        self._daemon("slurmctld", "-f", str(self.conf))
        self._daemon("slurmd", "-f", str(self.conf))
        end = time.monotonic() + 60
        while "idle" not in self.run("sinfo", "-h", "-p", "cpu", "-o", "%t", check=False).stdout:
            if time.monotonic() > end:
                logs = "\n".join(p.read_text()[-2000:] for p in self.folder.glob("*.log"))
                self.stop()
                pytest.fail(f"the test SLURM cluster did not start in 60 s:\n{logs}")
            time.sleep(0.2)
        return self

    def _daemon(self, name: str, *args: str) -> None:
        result = subprocess.run([name, *args], env=self.env, capture_output=True, text=True, timeout=60)
        if result.returncode != 0:
            self.stop()
            pytest.fail(f"{name} did not start: {result.stderr.strip()}")
        self.processes.append(name)

    def stop(self) -> None:
        """Cancel every job, stop the daemons (SIGTERM to all three at once, by their pid files: each
        takes about 2 s to end) and wait up to 10 s for them."""
        if "slurmd" in self.processes:  # (its job steps end with it)
            self.run("scancel", "--user=root", check=False)
            end = time.monotonic() + 40
            while self.run("squeue", "-h", check=False).stdout.strip() and time.monotonic() < end:
                time.sleep(0.5)
        pids = []
        for pid_file in ("slurmd.pid", "slurmctld.pid", "munge/munged.pid"):
            try:
                pid = int((self.folder / pid_file).read_text())
                os.kill(pid, signal.SIGTERM)
            except (OSError, ValueError):
                continue
            pids.append(pid)
        end = time.monotonic() + 10
        for pid in pids:
            while time.monotonic() < end:
                try:
                    os.kill(pid, 0)
                except OSError:
                    break
                time.sleep(0.1)
        self.processes = []


@pytest.fixture(scope="session")
def slurm_cluster() -> Iterator[SlurmCluster]:
    """A running single-node SLURM cluster for the session (:class:`SlurmCluster`); stopped at the end."""
    folder = Path(tempfile.mkdtemp(prefix="slurm-"))
    cluster = SlurmCluster(folder).start()
    try:
        yield cluster
    finally:
        cluster.stop()
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    cluster = SlurmCluster(Path(tempfile.mkdtemp(prefix="slurm-"))).start()
    print(f"export SLURM_CONF={cluster.conf}", flush=True)
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # (a background job ignores SIGINT)
    try:
        signal.pause()
    except KeyboardInterrupt:
        pass
    finally:
        cluster.stop()
