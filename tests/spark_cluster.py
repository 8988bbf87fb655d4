"""A Spark standalone cluster on loopback: a master and workers, each a JVM of its own.

Started the way Spark's own scripts start them, from a pyspark installation (its
``bin/spark-class``): ``org.apache.spark.deploy.master.Master`` and one
``org.apache.spark.deploy.worker.Worker`` per worker, on free ports of 127.0.0.1, each with
its own work directory. A job whose ``spark.master`` is :attr:`SparkCluster.master_url` runs
its executors in the workers' JVMs (and their Python workers), not in the driver.

Each worker runs in a process group of its own, so :meth:`SparkCluster.kill_worker` takes its
executors and their Python workers with it (a host that dies). Everything is stopped by its
process id at the end.

Usage::

    with spark_cluster(tmp_dir, spark_home=pyspark_dir, workers=2) as cluster:
        ...  # spark.master = cluster.master_url
        cluster.kill_worker(0)
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lakehouse.errors import EnvironmentSetupError
from lakehouse.testing.broker import TEST_JVM_OPTIONS, free_port

START_TIMEOUT_S = 90.0
STOP_TIMEOUT_S = 20.0
#: Heap of the master and worker daemons (executors are sized by the job's own settings).
DAEMON_HEAP = "256m"


@dataclass
class _Daemon:
    name: str
    process: subprocess.Popen[bytes]
    log: Path
    work_dir: Path | None = None


class SparkCluster:
    """A master and ``workers`` workers in ``directory`` (see the module docstring).

    Args:
        directory: logs and work directories go here.
        spark_home: a Spark installation (a pyspark package folder has ``bin/spark-class``).
        workers: how many workers.
        cores: cores each worker offers.
        memory: memory each worker offers to executors (``1536m``, ``2g``).
    """

    def __init__(
        self,
        directory: Path,
        *,
        spark_home: Path,
        workers: int = 2,
        cores: int = 1,
        memory: str = "1536m",
    ) -> None:
        self.directory = Path(directory).resolve()
        self.spark_home = Path(spark_home)
        self.port = free_port()
        self.ui_port = free_port()
        self.n_workers = workers
        self.cores = cores
        self.memory = memory
        self.master: _Daemon | None = None
        self.workers: list[_Daemon] = []
        spark_class = self.spark_home / "bin" / "spark-class"
        if not spark_class.exists():
            raise EnvironmentSetupError(
                f"'{spark_class}' does not exist: spark_home must be a Spark installation "
                "(the pyspark package folder has bin/spark-class)"
            )

    @property
    def master_url(self) -> str:
        """``spark://127.0.0.1:PORT``: the ``spark.master`` of a job on this cluster."""
        return f"spark://127.0.0.1:{self.port}"

    def job_toml(self, executor_memory: str = "1g") -> str:
        """The ``[spark]`` section of a lakehouse configuration whose jobs run here: the
        master, one executor of one core per worker, and the driver on loopback (where the
        executors connect to it)."""
        return (
            f'[spark]\nmaster = "{self.master_url}"\n\n[spark.conf]\n'
            f'"spark.executor.memory" = "{executor_memory}"\n'
            '"spark.executor.cores" = "1"\n'
            f'"spark.cores.max" = "{self.n_workers}"\n'
            '"spark.driver.host" = "127.0.0.1"\n'
            '"spark.driver.bindAddress" = "127.0.0.1"\n'
            '"spark.sql.shuffle.partitions" = "4"\n'
        )

    def _spawn(self, name: str, main: str, *args: str, work_dir: Path | None = None) -> _Daemon:
        log = self.directory / f"{name}.log"
        env = {
            **os.environ,
            "SPARK_HOME": str(self.spark_home),
            "SPARK_DAEMON_MEMORY": DAEMON_HEAP,
            "SPARK_DAEMON_JAVA_OPTS": " ".join(TEST_JVM_OPTIONS),
            "SPARK_LOCAL_IP": "127.0.0.1",
            "SPARK_NO_DAEMONIZE": "1",
        }
        with open(log, "ab") as out:
            process = subprocess.Popen(
                [str(self.spark_home / "bin" / "spark-class"), main, *args],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                start_new_session=True,  # its own process group: executors die with it
            )
        return _Daemon(name, process, log, work_dir)

    def start(self) -> str:
        """Start the master, then the workers; wait until every worker is registered ALIVE.

        Returns:
            :attr:`master_url`.

        Raises:
            EnvironmentSetupError: a daemon exits, or the workers are not registered within
                ``START_TIMEOUT_S`` (the message quotes the logs).
        """
        self.directory.mkdir(parents=True, exist_ok=True)
        atexit.register(self.stop)
        self.master = self._spawn(
            "master",
            "org.apache.spark.deploy.master.Master",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--webui-port",
            str(self.ui_port),
        )
        self._wait(lambda state: state.get("status") == "ALIVE", "the master to serve")
        for i in range(self.n_workers):
            work_dir = self.directory / f"worker-{i}"
            work_dir.mkdir(exist_ok=True)
            self.workers.append(
                self._spawn(
                    f"worker-{i}",
                    "org.apache.spark.deploy.worker.Worker",
                    self.master_url,
                    "--host",
                    "127.0.0.1",
                    "--cores",
                    str(self.cores),
                    "--memory",
                    self.memory,
                    "--webui-port",
                    str(free_port()),
                    "--work-dir",
                    str(work_dir),
                    work_dir=work_dir,
                )
            )
        self._wait(
            lambda state: self.alive_workers(state) >= self.n_workers,
            f"{self.n_workers} workers to register",
        )
        return self.master_url

    def state(self) -> Mapping[str, Any]:
        """The master's JSON state (workers, applications), or ``{}`` while it does not answer."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.ui_port}/json/", timeout=2) as r:
                return json.loads(r.read())
        except (urllib.error.URLError, OSError, ValueError):
            return {}

    @staticmethod
    def alive_workers(state: Mapping[str, Any]) -> int:
        """Workers the master counts as ALIVE in ``state``."""
        return sum(1 for w in state.get("workers", ()) if w.get("state") == "ALIVE")

    def _wait(self, ready: Any, what: str) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while not ready(self.state()):
            for daemon in [self.master, *self.workers]:
                if daemon is not None and daemon.process.poll() is not None:
                    self.stop()
                    raise EnvironmentSetupError(
                        f"Spark's {daemon.name} exited with {daemon.process.returncode} while "
                        f"waiting for {what}; its log:\n{self._tail(daemon)}"
                    )
            if time.monotonic() > deadline:
                logs = "\n".join(self._tail(d) for d in [self.master, *self.workers] if d)
                self.stop()
                raise EnvironmentSetupError(
                    f"timed out after {START_TIMEOUT_S:.0f} s waiting for {what}; logs:\n{logs}"
                )
            time.sleep(0.3)

    @staticmethod
    def _tail(daemon: _Daemon) -> str:
        text = daemon.log.read_text(errors="replace") if daemon.log.exists() else ""
        return f"{daemon.log}:\n{text[-3000:]}"

    def executor_logs(self, worker: int) -> list[Path]:
        """The stderr files of the executors this worker ran (``work/app-*/<id>/stderr``),
        oldest application first."""
        work_dir = self.workers[worker].work_dir
        assert work_dir is not None
        return sorted(work_dir.glob("app-*/*/stderr"))

    def kill_worker(self, index: int) -> None:
        """SIGKILL a worker's process group: the worker, its executors and their Python
        workers die at once, as when its host goes away."""
        daemon = self.workers[index]
        if daemon.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(daemon.process.pid, signal.SIGKILL)
            daemon.process.wait(timeout=STOP_TIMEOUT_S)

    def stop(self) -> None:
        """Stop the workers, then the master, by their process groups (terminate, then kill)."""
        atexit.unregister(self.stop)
        for daemon in [*self.workers, self.master]:
            if daemon is None or daemon.process.poll() is not None:
                continue
            with contextlib.suppress(ProcessLookupError):
                os.killpg(daemon.process.pid, signal.SIGTERM)
            try:
                daemon.process.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(daemon.process.pid, signal.SIGKILL)
                daemon.process.wait(timeout=STOP_TIMEOUT_S)
            # executors the worker started belong to its group; make sure none is left
            with contextlib.suppress(ProcessLookupError):
                os.killpg(daemon.process.pid, signal.SIGKILL)


@contextlib.contextmanager
def spark_cluster(
    directory: Path,
    *,
    spark_home: Path,
    workers: int = 2,
    cores: int = 1,
    memory: str = "1536m",
) -> Iterator[SparkCluster]:
    """Run a :class:`SparkCluster` for the ``with`` block; stop it at exit."""
    cluster = SparkCluster(
        directory, spark_home=spark_home, workers=workers, cores=cores, memory=memory
    )
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()
