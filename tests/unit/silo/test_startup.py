"""silo.startup: logging configuration and run_silo's signal handling, in process."""

from __future__ import annotations

import asyncio
import io
import json
import os
import signal
import textwrap
import uuid
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
import structlog
from structlog.testing import capture_logs

from orleanspy import ConfigurationError, Silo, SiloOptions
from orleanspy.logging import get_logger
from silo.startup import configure_logging, run_silo

APP = """
import asyncio

from orleanspy import Grain

deactivating = asyncio.Event()


class Pinger(Grain):
    async def ping(self) -> str:
        return "pong"


class Stuck(Grain):
    async def ping(self) -> str:
        return "pong"

    async def on_deactivate(self, reason):
        deactivating.set()
        await asyncio.Event().wait()
"""


@pytest.fixture(autouse=True)
def _reset_structlog() -> Iterator[None]:
    yield
    structlog.reset_defaults()


@pytest.fixture
def app_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    name = f"silo_startup_app_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(APP), encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    import importlib

    return importlib.import_module(name)


def test_configure_logging_json_writes_one_object_per_line_with_logger_name() -> None:
    out = io.StringIO()
    configure_logging("json", "info", stream=out, cache_loggers=False)
    log = get_logger("orleanspy.test", silo="s1")
    log.info("thing_happened", count=3)
    log.debug("hidden_below_level")
    lines = out.getvalue().splitlines()
    assert len(lines) == 1
    event = json.loads(lines[0])
    assert event["event"] == "thing_happened"
    assert event["count"] == 3
    assert event["silo"] == "s1"
    assert event["level"] == "info"
    assert event["logger"] == "orleanspy.test"
    assert "timestamp" in event


def test_configure_logging_console_off_tty_is_key_value() -> None:
    out = io.StringIO()
    configure_logging("console", "warning", stream=out, cache_loggers=False)
    log = get_logger("orleanspy.test")
    log.info("hidden_below_level")
    log.warning("queue_read_failed", queue="q 1")
    (line,) = out.getvalue().splitlines()
    assert "level=warning logger=orleanspy.test event=queue_read_failed" in line
    assert 'queue="q 1"' in line


def test_configure_logging_rejects_unknown_format_and_level() -> None:
    with pytest.raises(ConfigurationError, match="log_format"):
        configure_logging("xml")
    with pytest.raises(ConfigurationError, match="log_level"):
        configure_logging("json", "trace")


async def test_run_silo_signal_stops_gracefully_with_code_0(app_module: ModuleType) -> None:
    silos: list[Silo] = []

    def on_ready(silo: Silo) -> None:
        silos.append(silo)
        os.kill(os.getpid(), signal.SIGUSR1)

    with capture_logs() as logs:
        async with asyncio.timeout(10):
            code = await run_silo(
                SiloOptions(gateway_port=0), [app_module.__name__], on_ready=on_ready,
                signals=(signal.SIGUSR1,),
            )
    assert code == 0
    assert silos[0].stopping
    events = [e["event"] for e in logs]
    assert events.index("silo_ready") < events.index("silo_signal_received")
    assert events[-1] == "silo_exited"
    ready = next(e for e in logs if e["event"] == "silo_ready")
    assert ready["gateway"] == silos[0].gateway.address
    assert ready["grain_types"] == ["Pinger", "Stuck"]


async def test_run_silo_returns_0_when_the_silo_is_stopped_directly(
    app_module: ModuleType,
) -> None:
    started: asyncio.Queue[Silo] = asyncio.Queue()
    run = asyncio.create_task(
        run_silo(SiloOptions(gateway_port=None), [app_module.__name__],
                 on_ready=started.put_nowait, signals=())
    )
    async with asyncio.timeout(10):
        silo = await started.get()
        assert await silo.get_grain("Pinger", 1).ping() == "pong"
        await silo.stop()
        assert await run == 0


async def test_run_silo_second_signal_forces_exit_code_1(app_module: ModuleType) -> None:
    started: asyncio.Queue[Silo] = asyncio.Queue()
    run = asyncio.create_task(
        run_silo(SiloOptions(gateway_port=None, shutdown_timeout=60), [app_module.__name__],
                 on_ready=started.put_nowait, signals=(signal.SIGUSR1,))
    )
    with capture_logs() as logs:
        async with asyncio.timeout(10):
            silo = await started.get()
            assert await silo.get_grain("Stuck", 1).ping() == "pong"
            os.kill(os.getpid(), signal.SIGUSR1)
            await app_module.deactivating.wait()  # the graceful stop hangs in on_deactivate
            os.kill(os.getpid(), signal.SIGUSR1)
            assert await run == 1
    assert "silo_forced_exit" in [e["event"] for e in logs]


async def test_run_silo_rejects_module_without_grains(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "silo_startup_empty.py").write_text("from orleanspy import Grain\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ConfigurationError, match="silo_startup_empty: the module defines no "
                       "Grain subclass"):
        await run_silo(SiloOptions(gateway_port=None), ["silo_startup_empty"], signals=())


async def test_run_silo_missing_module_is_a_configuration_error() -> None:
    with pytest.raises(ConfigurationError, match="no_such_module_xyz"):
        await run_silo(SiloOptions(gateway_port=None), ["no_such_module_xyz"], signals=())


class _StartsForever:
    """A stream provider whose start never ends (a back end that does not answer)."""

    def __init__(self) -> None:
        self.starting = asyncio.Event()
        self.stopped = False

    def bind(self, name: str, silo: Silo, **parts: object) -> None:
        pass

    async def start(self) -> None:
        self.starting.set()
        await asyncio.Event().wait()

    async def stop(self) -> None:  # pragma: no cover - a start that never ended is not stopped
        self.stopped = True

    def statistics(self) -> dict[str, int]:
        return {}


async def test_run_silo_a_signal_during_the_start_rolls_it_back(app_module: ModuleType) -> None:
    provider = _StartsForever()
    run = asyncio.create_task(
        run_silo(SiloOptions(gateway_port=0), [app_module.__name__],
                 stream_providers={"stuck": provider}, signals=(signal.SIGUSR1,))
    )
    with capture_logs() as logs:
        async with asyncio.timeout(10):
            await provider.starting.wait()
            os.kill(os.getpid(), signal.SIGUSR1)
            assert await run == 0
    events = [e["event"] for e in logs]
    assert "silo_start_interrupted" in events
    assert "silo_ready" not in events
    assert events[-1] == "silo_exited"
