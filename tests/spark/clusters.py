"""Spark cluster managers for the tests, started from the installed pyspark package.

``StandaloneCluster``: a standalone master and one worker (``bin/spark-class``
``org.apache.spark.deploy.master.Master`` / ``...worker.Worker``) on loopback ports picked
here, REST submission off, the worker's work dir in the test's folder. Ready once the
master's JSON view lists an alive worker.

``ConnectServer``: a Spark Connect server (``bin/spark-submit --class
org.apache.spark.sql.connect.service.SparkConnectServer``, in the foreground so that the
process we hold is the JVM) on a loopback port; its own driver runs ``local[2]``. Ready once
its gRPC port accepts a connection.

Both stop with SIGTERM, waited for (SIGKILL after a bound), and keep their logs in the
test's folder for a failing test to show.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from tests.integration.silo_process import free_port

START_TIMEOUT = 90.0  # a JVM on 2 busy cores


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def _env(run_dir: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        SPARK_HOME=str(spark_home()),
        SPARK_LOCAL_IP="127.0.0.1",
        SPARK_LOCAL_DIRS=str(run_dir / "local"),
        SPARK_LOG_DIR=str(run_dir / "logs"),
        SPARK_PID_DIR=str(run_dir),
        SPARK_MASTER_OPTS="-Dspark.master.rest.enabled=false",
        PYSPARK_PYTHON=sys.executable,
    )
    return env


class _Jvm:
    def __init__(self, name: str, args: list[str], run_dir: Path) -> None:
        self.name = name
        self.log_path = run_dir / f"{name}.log"
        self._log = self.log_path.open("wb")
        self.proc = subprocess.Popen(args, env=_env(run_dir), stdout=self._log,
                                     stderr=subprocess.STDOUT, start_new_session=True)

    def log_text(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")[-4000:]

    def check_alive(self) -> None:
        if self.proc.poll() is not None:
            raise RuntimeError(f"{self.name} exited with {self.proc.returncode}:\n"
                               f"{self.log_text()}")

    def stop(self, timeout: float = 20.0) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout)
        self._log.close()


def _until(what: str, ready: object, jvms: list[_Jvm], timeout: float = START_TIMEOUT) -> None:
    deadline = time.monotonic() + timeout
    while True:
        for jvm in jvms:
            jvm.check_alive()
        if ready():  # type: ignore[operator]
            return
        if time.monotonic() > deadline:
            logs = "\n".join(f"--- {j.name}\n{j.log_text()}" for j in jvms)
            raise TimeoutError(f"{what} not ready within {timeout:g} s\n{logs}")
        time.sleep(0.2)  # polls another process: there is no event to wait on


def _accepts(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


class StandaloneCluster:
    """A standalone master with one worker (1 core, 1 GiB)."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        run_dir.mkdir(parents=True, exist_ok=True)
        self.port, self.web_port = free_port(), free_port()
        self.url = f"spark://127.0.0.1:{self.port}"
        self.jvms: list[_Jvm] = []

    def conf(self) -> dict[str, str]:
        """Settings a driver on this host needs to use the cluster."""
        return {
            "spark.driver.host": "127.0.0.1",
            "spark.driver.bindAddress": "127.0.0.1",
            "spark.executor.memory": "512m",
            "spark.executor.cores": "1",
            "spark.cores.max": "1",
            "spark.ui.enabled": "false",
            "spark.sql.shuffle.partitions": "2",
            "spark.pyspark.python": sys.executable,
        }

    def start(self) -> StandaloneCluster:
        cls = str(spark_home() / "bin" / "spark-class")
        self.jvms.append(_Jvm("master", [
            cls, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
            "--port", str(self.port), "--webui-port", str(self.web_port),
        ], self.run_dir))
        _until("spark master", lambda: _accepts(self.port), self.jvms)
        work = self.run_dir / "work"
        work.mkdir(exist_ok=True)
        self.jvms.append(_Jvm("worker", [
            cls, "org.apache.spark.deploy.worker.Worker", self.url, "--host", "127.0.0.1",
            "--port", str(free_port()), "--webui-port", str(free_port()), "--cores", "1",
            "--memory", "1g", "--work-dir", str(work),
        ], self.run_dir))
        _until("spark worker", self._worker_alive, self.jvms)
        return self

    def _worker_alive(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.web_port}/json/",
                                        timeout=2) as r:
                return int(json.load(r).get("aliveworkers", 0)) >= 1
        except (OSError, ValueError):  # not up yet, or its UI still answers with a page
            return False

    def stop(self) -> None:
        for jvm in reversed(self.jvms):
            jvm.stop()


class ConnectServer:
    """A Spark Connect server whose driver runs ``local[2]``."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        run_dir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.url = f"sc://127.0.0.1:{self.port}"
        self.jvm: _Jvm | None = None

    def conf(self) -> dict[str, str]:
        return {}  # the server holds the Spark settings; a client sets SQL options only

    def start(self) -> ConnectServer:
        submit = str(spark_home() / "bin" / "spark-submit")
        settings = {
            "spark.connect.grpc.binding.address": "127.0.0.1",
            "spark.connect.grpc.binding.port": str(self.port),
            "spark.driver.host": "127.0.0.1",
            "spark.driver.bindAddress": "127.0.0.1",
            "spark.ui.enabled": "false",
            "spark.sql.shuffle.partitions": "2",
            "spark.sql.session.timeZone": "UTC",
        }
        args = [submit, "--class", "org.apache.spark.sql.connect.service.SparkConnectServer",
                "--master", "local[2]", "--name", "orleanspy-connect-tests"]
        for key, value in settings.items():
            args += ["--conf", f"{key}={value}"]
        self.jvm = _Jvm("connect", args, self.run_dir)
        _until("spark connect server", lambda: _accepts(self.port), [self.jvm])
        return self

    def stop(self) -> None:
        if self.jvm is not None:
            self.jvm.stop()
