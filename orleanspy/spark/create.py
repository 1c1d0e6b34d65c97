"""create_session: build (or join) the process's SparkSession from ``SparkOptions``.

Apart from the session manager because it is the one place that knows how a session comes
up: the environment the embedded driver needs (Java, ``PYSPARK_PYTHON``, the bundled
``conf`` directory, a loopback address for a local master), classic versus Spark Connect,
joining a session another owner already runs, and turning each way a start fails into a
``SparkUnavailableError`` that names the fix. Every function here blocks: callers run them
on a worker thread.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path
from typing import Any

from orleanspy.spark.errors import SparkUnavailableError
from orleanspy.spark.options import SparkOptions

__all__ = ["create_session"]

_CONF_DIR = Path(__file__).with_name("conf")


def create_session(options: SparkOptions) -> tuple[Any, bool]:
    """Blocking: build (or join) the process's SparkSession. Returns (session, created)."""
    connect = options.connect_url
    try:
        from pyspark.sql import SparkSession
    except ImportError as exc:
        raise SparkUnavailableError(
            f"pyspark is not installed ({exc}); install the Spark extra: "
            "pip install 'orleanspy[spark]'"
        ) from None
    if connect is None and _java() is None:
        raise SparkUnavailableError(
            "Java was not found (no JAVA_HOME and no java on PATH); the embedded Spark driver "
            "needs a JDK 17 or 21: install one (e.g. apt-get install openjdk-17-jre-headless) "
            "or set JAVA_HOME, or point spark.remote at a Spark Connect server"
        )
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_CONF_DIR", str(_CONF_DIR))
    if options.is_local:
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    # Another owner's session (getActiveSession() is per thread: None on this worker
    # thread even when the process runs a session, so look at the process's SparkContext).
    existing = connect is None and _context_running()
    builder = SparkSession.builder.appName(options.app_name)
    builder = builder.remote(connect) if connect is not None else builder.master(options.master)
    for key, value in options.session_conf().items():
        builder = builder.config(key, value)
    try:
        session = builder.getOrCreate()
    except ImportError as exc:
        raise SparkUnavailableError(
            f"Spark Connect needs extra packages ({exc}); install them: "
            "pip install 'pyspark[connect]'"
        ) from None
    except Exception as exc:
        text = str(exc)
        hint = ("check that Java 17+ runs (java -version) and JAVA_HOME points at it"
                if "JAVA_GATEWAY" in text or "Java gateway" in text
                else "check the master URL and the spark.* settings")
        raise SparkUnavailableError(
            f"the SparkSession did not start ({type(exc).__name__}: "
            f"{text.strip().splitlines()[0] if text.strip() else ''}); {hint}"
        ) from None
    return session, not existing


def _context_running() -> bool:
    """Blocking-free: whether this process already has a classic SparkContext."""
    from pyspark import SparkContext

    return SparkContext._active_spark_context is not None


def _java() -> str | None:
    home = os.environ.get("JAVA_HOME")
    if home:
        candidate = Path(home) / "bin" / "java"
        if candidate.exists():
            return str(candidate)
    return shutil.which("java")
